"""HTTP endpoints. `/metrics` hands out the collector's pre-rendered bytes and nothing else."""

import contextlib
import errno
import html
import logging
import socket
from typing import TYPE_CHECKING, Any, Final

from aiohttp import web
from aiohttp.http_exceptions import HttpProcessingError
from aiohttp.log import server_logger
from aiohttp.typedefs import Handler, Middleware

from .. import __version__
from ..collector.loop import Collector
from ..exposition.negotiation import wants_gzip, wants_openmetrics
from ..exposition.ownmetrics import HTTP
from ..exposition.query import encode, filtered
from ..exposition.render import OPENMETRICS_CONTENT_TYPE, TEXT_CONTENT_TYPE

if TYPE_CHECKING:
    from .live_security import LiveWebSecurity

log = logging.getLogger(__name__)

COLLECTOR_KEY: Final = web.AppKey("collector", Collector)
REQUIRE_GPUS_KEY: Final = web.AppKey("require_gpus", bool)
"""--health-require-gpus: /health fails while the last pass found no GPU."""


class ScrapeLimit:
    """--max-concurrent-scrapes (dcgm-exporter's): /metrics answers still being sent. Every
    scrape shares the bytes the last pass rendered, so only answers a client is slow to take
    stay in flight; past the limit a scrape is answered 503, as dcgm-exporter answers one."""

    __slots__ = ("in_flight", "limit")

    def __init__(self, limit: int) -> None:
        self.limit = limit
        self.in_flight = 0


SCRAPE_LIMIT_KEY: Final = web.AppKey("scrape_limit", ScrapeLimit)

# Explicit request limits (a request over one is answered 400 and counted as a bad request).
# Every endpoint is a GET with a short path and query, so these are far above any real request.
MAX_LINE_SIZE: Final = 4096
"""The request line (aiohttp's default is 8190)."""
MAX_FIELD_SIZE: Final = 8192
"""One header line (bearer tokens fit)."""
MAX_HEADERS: Final = 64
"""Header lines per request (aiohttp's default is 128)."""
MAX_BODY_SIZE: Final = 4096
"""What a handler could read of a body. None reads one: a body is discarded unread by aiohttp
(within its lingering time), so this only bounds a future handler that would."""

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


class _RequestLog(logging.LoggerAdapter[logging.Logger]):
    """aiohttp's logger for its connection handlers, with a request it cannot parse (garbage,
    TLS on the HTTP port, a request over a limit) turned into one DEBUG line and a count in
    `gpu_enricher_http_bad_requests_total`; every other record, an exception in one of our
    handlers above all, passes unchanged (ERROR, with its traceback).

    aiohttp reports such a request through `RequestHandler.handle_error`, at ERROR with a
    traceback (at DEBUG, still with one, for a bad method in a connection's first request),
    so one bad client could fill a node's log. Why a logger: the `logger` handler argument
    (`handler_args`) is the one public hook that sees that exception and belongs to this app.
    aiohttp has no setting for its RequestHandler class (`Server` builds it), and a
    logging.Filter on `aiohttp.server` would act on every app in the process.
    """

    def log(self, level: int, msg: object, *args: object, **kwargs: Any) -> None:
        # aiohttp passes the exception itself; a parse error is its HttpProcessingError.
        exc = kwargs.get("exc_info")
        if not isinstance(exc, HttpProcessingError):
            super().log(level, msg, *args, **kwargs)
            return
        HTTP.bad_requests += 1
        detail = " ".join(exc.message.split())  # aiohttp's spans lines
        # aiohttp's own words first ("Error handling request from <address>"), formatted by
        # logging, which never raises into the handler.
        log.debug(f"{msg}: bad request, answered %s (%s: %.200s)", *args, exc.code,
                  type(exc).__name__, detail)


def _header(request: web.Request, name: str) -> str:
    """A list header's lines as one value (RFC 9110 §5.3)."""
    return ",".join(request.headers.getall(name, ()))


async def handle_metrics(request: web.Request) -> web.Response:
    om = wants_openmetrics(_header(request, "Accept"))
    gz = wants_gzip(_header(request, "Accept-Encoding"))
    body = request.app[COLLECTOR_KEY].exposition.body(openmetrics=om, gzipped=gz)
    response = web.Response(body=body, headers=_HEADERS[om, gz])
    scrapes = request.app.get(SCRAPE_LIMIT_KEY)
    if scrapes is None:
        return response
    if scrapes.in_flight >= scrapes.limit:
        log.debug("%d scrapes in flight: answered 503 (--max-concurrent-scrapes)",
                  scrapes.in_flight)
        return web.Response(status=503, text="too many concurrent scrapes "
                            "(--max-concurrent-scrapes)\n")
    scrapes.in_flight += 1
    try:  # sent here, so that the count holds until the client has taken it
        # A client gone mid-answer: aiohttp's own write after the handler meets the same
        # error and closes quietly, as for an answer it sends itself.
        with contextlib.suppress(ConnectionError):
            await response.prepare(request)
            await response.write_eof()
    finally:
        scrapes.in_flight -= 1
    return response


async def handle_health(request: web.Request) -> web.Response:
    collector = request.app[COLLECTOR_KEY]
    if not collector.running:
        return web.Response(status=503, text="collection loop is not running\n")
    stalled = collector.stalled_for()
    if stalled > collector.stall_limit_seconds:
        return web.Response(status=503, text=f"a {collector.backend.name} call has been "
                            f"running for {stalled:.0f}s (hung driver?)\n")
    if request.app.get(REQUIRE_GPUS_KEY, False) and not (collector.snapshot
                                                         and collector.snapshot.gpus):
        # dcgm-exporter's --health-require-gpus: a liveness probe restarts an exporter that
        # came up while the driver showed no GPU.
        found = "no pass yet" if collector.snapshot is None else "the last pass found none"
        return web.Response(status=503, text=f"no GPU ({found}; --health-require-gpus)\n")
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
    """Only GET (and HEAD) on the known paths: another method is answered 405 with `Allow`,
    an unknown path 404, by aiohttp's router."""
    # handler_args reach every connection handler, whichever runner serves the app.
    app = web.Application(client_max_size=MAX_BODY_SIZE, handler_args={
        "max_line_size": MAX_LINE_SIZE, "max_field_size": MAX_FIELD_SIZE,
        "max_headers": MAX_HEADERS, "logger": _RequestLog(server_logger)})
    app[COLLECTOR_KEY] = collector
    app.router.add_get("/metrics", handle_metrics)
    app.router.add_get("/health", handle_health)
    app.router.add_get("/healthz", handle_health)
    app.router.add_get("/ready", handle_ready)
    app.router.add_get("/api/v1/gpus", handle_gpus)
    app.router.add_get("/", handle_index)
    return app


def count_requests(app: web.Application) -> None:
    """--enable-exporter-metrics (dcgm-exporter's HTTP handler metrics): every answer counted
    by its route and status code, as it is sent; a path with no route counts as `other`, so
    a client cannot add series."""

    async def count(request: web.Request, response: web.StreamResponse) -> None:
        resource = request.match_info.route.resource
        HTTP.requests[resource.canonical if resource else "other", str(response.status)] += 1

    app.on_response_prepare.append(count)


def _basic_auth(live: "LiveWebSecurity") -> Middleware:
    @web.middleware
    async def basic_auth(request: web.Request, handler: Handler) -> web.StreamResponse:
        if live.before_request is not None:
            await live.before_request()  # a changed web config in force first (issue 26)
        auth = live.current.auth  # the users in force when the request arrives
        if auth is None:
            return await handler(request)
        refused = await auth.check(request.headers.get("Authorization"))
        if refused is None:
            return await handler(request)
        HTTP.auth_failures[refused] += 1
        log.debug("basic auth refused %s %s from %s: %s credentials", request.method,
                  request.path[:200], request.remote, refused)
        # exporter-toolkit's answer: `WWW-Authenticate: Basic`, no realm.
        return web.Response(status=401, text="Unauthorized\n",
                            headers={"WWW-Authenticate": "Basic"})

    return basic_auth


def install_web_security(app: web.Application, live: "LiveWebSecurity") -> None:
    """--web-config-file on every path, as exporter-toolkit wraps every handler: its extra
    headers on every response (401 and 404 included), and basic auth before any handler runs,
    both as the configuration in force says (a reload may change them). TLS is the listening
    sockets' (app.serve)."""

    async def add_headers(request: web.Request, response: web.StreamResponse) -> None:
        for name, value in live.current.headers:
            response.headers[name] = value

    async def close_auth(app: web.Application) -> None:
        live.close()

    app.on_response_prepare.append(add_headers)
    app.middlewares.append(_basic_auth(live))
    app.on_cleanup.append(close_auth)


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
