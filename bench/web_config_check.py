"""The web config's check per request (issue 26): what a `stat` of `--web-config-file` before
each request costs, beside the same request without it.

Two exporters on the simulated node, the same web config (basic auth; `--tls`: and TLS), one
checking the file per request (`--config-check-interval 5000`, the default) and one not (`0`:
SIGHUP only, which also turns the per-request check off). One client thread sends keep-alive
GET /metrics with remembered credentials (no bcrypt), `--requests` per round to each server in
turn, `--rounds` rounds; per-request latency by time.perf_counter_ns around the request and its
whole answer. Reported: the median of the round medians per server, and the paired difference
and ratio within each round (their medians). Then, in-process, the check alone:
`ConfigReloader.web_config_in_force` awaited back to back on an unchanged file (median ns).

    .venv/bin/python bench/web_config_check.py [--rounds 9] [--requests 2000] [--tls]
        [--no-check-first] [--same]
"""

from __future__ import annotations

import argparse
import asyncio
import base64
import http.client
import os
import ssl
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import bcrypt
from _common import PYTHON, Server, clean_env, free_port, median

PASSWORD = "bench-s3cret"
AUTH = {"Authorization": "Basic " + base64.b64encode(f"prometheus:{PASSWORD}".encode()).decode()}


def make_tls(folder: Path) -> tuple[Path, Path]:
    cert, key = folder / "tls.crt", folder / "tls.key"
    subprocess.run(["openssl", "req", "-x509", "-newkey", "ec", "-pkeyopt",
                    "ec_paramgen_curve:prime256v1", "-nodes", "-days", "2", "-subj",
                    "/CN=127.0.0.1", "-addext", "subjectAltName=IP:127.0.0.1", "-keyout",
                    str(key), "-out", str(cert)], check=True, capture_output=True)
    return cert, key


def web_config(folder: Path, tls: bool) -> tuple[Path, ssl.SSLContext | None]:
    """The web config, and the client's TLS context trusting its certificate (TLS only)."""
    hashed = bcrypt.hashpw(PASSWORD.encode(), bcrypt.gensalt(10)).decode()
    text = f"basic_auth_users:\n  prometheus: {hashed}\n"
    context = None
    if tls:
        cert, key = make_tls(folder)
        text = f"tls_server_config:\n  cert_file: {cert}\n  key_file: {key}\n" + text
        context = ssl.create_default_context(cafile=cert)
    path = folder / "web.yml"
    path.write_text(text)
    return path, context


class Client:
    def __init__(self, port: int, context: ssl.SSLContext | None) -> None:
        self.connection = (http.client.HTTPSConnection("127.0.0.1", port, context=context,
                                                       timeout=10)
                           if context else http.client.HTTPConnection("127.0.0.1", port,
                                                                      timeout=10))

    def request_ns(self) -> int:
        started = time.perf_counter_ns()
        self.connection.request("GET", "/metrics", headers=AUTH)
        answer = self.connection.getresponse()
        answer.read()
        took = time.perf_counter_ns() - started
        if answer.status != 200:
            raise RuntimeError(f"answered {answer.status}")
        return took


def start(name: str, web: Path, check_ms: int, context: ssl.SSLContext | None) -> Server:
    port = free_port()
    server = Server(name, [PYTHON, "-m", "gpu_enricher", "-a", f"127.0.0.1:{port}", "--simulate",
                           "-c", "5000", "--web-config-file", str(web),
                           "--config-check-interval", str(check_ms)], clean_env(), port)
    server.start()
    deadline = time.monotonic() + 30
    while True:
        try:
            Client(port, context).request_ns()
            return server
        except (OSError, RuntimeError, http.client.HTTPException):
            if time.monotonic() > deadline:
                server.stop()
                raise
            time.sleep(0.1)


async def check_alone(web: Path, batches: int = 21, calls: int = 2000) -> tuple[float, float]:
    """Median ns per call, over batches of back-to-back calls in-process: the check
    (`web_config_in_force` on an unchanged file), and the `os.stat` inside it alone."""
    from gpu_enricher.fields.collection import CountersSources, load_collection
    from gpu_enricher.reload import ConfigReloader
    from gpu_enricher.web.live_security import LiveWebSecurity
    from gpu_enricher.web.security import load_web_security

    sources = CountersSources(image_dir=web.parent)
    live = LiveWebSecurity(load_web_security(web))
    reloader = ConfigReloader(None, sources, load_collection(sources),  # type: ignore[arg-type]
                              live, 5.0)
    check: list[float] = []
    stat: list[float] = []
    for _ in range(batches):
        started = time.perf_counter_ns()
        for _ in range(calls):
            await reloader.web_config_in_force()
        check.append((time.perf_counter_ns() - started) / calls)
        started = time.perf_counter_ns()
        for _ in range(calls):
            os.stat(web)
        stat.append((time.perf_counter_ns() - started) / calls)
    live.close()
    return median(check), median(stat)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rounds", type=int, default=9)
    parser.add_argument("--requests", type=int, default=2000)
    parser.add_argument("--tls", action="store_true")
    parser.add_argument("--no-check-first", action="store_true")
    parser.add_argument("--same", action="store_true",
                        help="both servers without the check: the harness's own difference")
    args = parser.parse_args()
    with tempfile.TemporaryDirectory() as folder:
        web, context = web_config(Path(folder), args.tls)
        # Started in turn, the first in the pair alternating with --no-check-first: what the
        # start order alone does shows as the difference between the two runs.
        pair = [("check", 0 if args.same else 5000), ("no check", 0)]
        servers = {name: start(name, web, check_ms, context)
                   for name, check_ms in (pair[::-1] if args.no_check_first else pair)}
        try:
            clients = {name: Client(s.port, context) for name, s in servers.items()}
            for client in clients.values():  # warm: the bcrypt, the first answers
                for _ in range(200):
                    client.request_ns()
            rounds: dict[str, list[float]] = {name: [] for name in servers}
            for n in range(args.rounds):
                order = list(clients) if n % 2 == 0 else list(reversed(clients))
                for name in order:
                    rounds[name].append(median([clients[name].request_ns()
                                                for _ in range(args.requests)]))
                print(f"round {n + 1}: " + ", ".join(f"{k} {v[-1] / 1000:.1f} µs"
                                                    for k, v in rounds.items()), file=sys.stderr)
        finally:
            for server in servers.values():
                server.stop()
        alone, stat = asyncio.run(check_alone(web))
    rounds = {name: rounds[name] for name in ("check", "no check")}
    diffs = [a - b for a, b in zip(rounds["check"], rounds["no check"], strict=True)]
    ratios = [a / b for a, b in zip(rounds["check"], rounds["no check"], strict=True)]
    scheme = "HTTPS" if args.tls else "HTTP"
    print(f"| {scheme} keep-alive GET /metrics, basic auth | median per request (µs) |")
    print("|---|---|")
    first = "without it too (`--same`)" if args.same else "with the web config check"
    print(f"| {first} (`--config-check-interval {0 if args.same else 5000}`) | "
          f"{median(rounds['check']) / 1000:.1f} |")
    print(f"| without (`--config-check-interval 0`) | {median(rounds['no check']) / 1000:.1f} |")
    print(f"| paired difference, median of {args.rounds} rounds | "
          f"{median(diffs) / 1000:+.1f} (ratio {median(ratios):.3f}) |")
    print(f"| the check alone, in-process, unchanged file (of which `os.stat`) | "
          f"{alone / 1000:.2f} ({stat / 1000:.2f}) |")


if __name__ == "__main__":
    main()
