"""HTTP endpoints. `/metrics` hands out the collector's pre-rendered bytes and nothing else."""

import errno
import html
import socket
from typing import Final

from aiohttp import web

from . import __version__
from .collector import Collector
from .query import encode, filtered
from .render import OPENMETRICS_CONTENT_TYPE, TEXT_CONTENT_TYPE

COLLECTOR_KEY: Final = web.AppKey("collector", Collector)

# One prepared header set per (openmetrics, gzip) variant: nothing is built per scrape.
_HEADERS: Final = {
    (om, gz): {
        "Content-Type": OPENMETRICS_CONTENT_TYPE if om else TEXT_CONTENT_TYPE,
        "Vary": "Accept, Accept-Encoding",
        **({"Content-Encoding": "gzip"} if gz else {}),
    }
    for om in (False, True)
    for gz in (False, True)
}


def wants_openmetrics(accept: str) -> bool:
    return "application/openmetrics-text" in accept


def wants_gzip(accept_encoding: str) -> bool:
    """True when gzip is acceptable; `gzip;q=0` refuses it."""
    if "gzip" not in accept_encoding:
        return False
    for part in accept_encoding.split(","):
        coding, _, params = part.strip().partition(";")
        if coding.strip().lower() == "gzip":
            q = params.strip().replace(" ", "")
            return q not in ("q=0", "q=0.0", "q=0.00", "q=0.000")
    return False


async def handle_metrics(request: web.Request) -> web.Response:
    headers = request.headers
    om = wants_openmetrics(headers.get("Accept", ""))
    gz = wants_gzip(headers.get("Accept-Encoding", ""))
    body = request.app[COLLECTOR_KEY].exposition.body(openmetrics=om, gzipped=gz)
    return web.Response(body=body, headers=_HEADERS[om, gz])


async def handle_health(request: web.Request) -> web.Response:
    collector = request.app[COLLECTOR_KEY]
    if not collector.running:
        return web.Response(status=503, text="collection loop is not running\n")
    stalled = collector.stalled_for()
    if stalled > collector.stall_limit_seconds:
        return web.Response(status=503, text=f"a {collector.backend.name} call has been "
                            f"running for {stalled:.0f}s (hung driver?)\n")
    return web.Response(text="ok\n")


async def handle_ready(request: web.Request) -> web.Response:
    collector = request.app[COLLECTOR_KEY]
    if collector.ready:
        return web.Response(text="ready\n")
    return web.Response(status=503, text=f"not ready: {collector.not_ready_reason}\n")


async def handle_gpus(request: web.Request) -> web.Response:
    """Every GPU and MIG instance with its holders and processes, from the last pass;
    `?namespace=&pod=` keeps the pod's GPUs. Never touches a source."""
    collector = request.app[COLLECTOR_KEY]
    if not collector.ready:
        return web.json_response({"error": f"not ready: {collector.not_ready_reason}"},
                                 status=503)
    query = request.query
    namespace, pod = query.get("namespace") or None, query.get("pod") or None
    body = (collector.document_body if namespace is None and pod is None
            else encode(filtered(collector.document, namespace, pod)))
    return web.Response(body=body, content_type="application/json")


async def handle_index(request: web.Request) -> web.Response:
    collector = request.app[COLLECTOR_KEY]
    state = "ready" if collector.ready else "not ready"
    page = f"""<!doctype html>
<html><head><title>gpu-enricher</title></head>
<body>
<h1>gpu-enricher {html.escape(__version__)}</h1>
<p>Backend: {html.escape(collector.backend.name)} ({state}).</p>
<ul>
<li><a href="metrics">/metrics</a>: GPU metrics in dcgm-exporter's format</li>
<li><a href="health">/health</a>: liveness</li>
<li><a href="ready">/ready</a>: readiness (first collection pass done)</li>
<li><a href="api/v1/gpus">/api/v1/gpus</a>: who holds and who uses each GPU (JSON)</li>
</ul>
</body></html>
"""
    return web.Response(text=page, content_type="text/html")


def build_app(collector: Collector) -> web.Application:
    app = web.Application()
    app[COLLECTOR_KEY] = collector
    app.router.add_get("/metrics", handle_metrics)
    app.router.add_get("/health", handle_health)
    app.router.add_get("/healthz", handle_health)
    app.router.add_get("/ready", handle_ready)
    app.router.add_get("/api/v1/gpus", handle_gpus)
    app.router.add_get("/", handle_index)
    return app


def listen_address(host: str | None, port: int) -> str:
    if host is None:
        return f"*:{port}"  # every interface, IPv4 and IPv6
    return f"[{host}]:{port}" if ":" in host else f"{host}:{port}"


def bind_sockets(host: str | None, port: int) -> list[socket.socket]:
    """Listening sockets for every address of `host` (every interface when None), bound
    before anything else starts, so a taken port is reported before NVML is touched."""
    sockets: list[socket.socket] = []
    try:
        infos = socket.getaddrinfo(host, port, type=socket.SOCK_STREAM, flags=socket.AI_PASSIVE)
        for family, kind, proto, _, address in dict.fromkeys(infos):
            try:
                sock = socket.socket(family, kind, proto)
            except OSError:  # e.g. IPv6 switched off in the container: as asyncio does
                continue
            sockets.append(sock)
            sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
            if family == socket.AF_INET6:
                sock.setsockopt(socket.IPPROTO_IPV6, socket.IPV6_V6ONLY, 1)
            sock.bind(address)
            sock.listen(128)
            sock.setblocking(False)
    except OSError:
        for sock in sockets:
            sock.close()
        raise
    return sockets


def listen_error(exc: OSError, where: str) -> str:
    """One line for a failed bind: what, where, and how to choose another address."""
    hint = "choose another with -a/--address or DCGM_EXPORTER_LISTEN"
    if isinstance(exc, socket.gaierror):
        return f"cannot listen on {where}: the host name does not resolve ({exc.strerror}); {hint}"
    reasons = {
        errno.EADDRINUSE: "the address is already in use (another exporter on this node?)",
        errno.EADDRNOTAVAIL: "the address is not one of this host's",
        errno.EACCES: "permission denied (ports below 1024 need privileges)",
    }
    reason = reasons.get(exc.errno or 0, exc.strerror or str(exc))
    return f"cannot listen on {where}: {reason}; {hint}"
