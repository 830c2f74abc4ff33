"""The scrape baseline: an aiohttp app whose one handler returns fixed bytes.

`--dir` holds what bench/scrape.py fetched from the exporter's /metrics: `plain.bin`,
`gzip.bin` and `headers.json` ({"plain": {...}, "gzip": {...}}: the response headers to
repeat, Content-Type and Content-Encoding, plus Vary). The variant is chosen with a plain
`"gzip" in Accept-Encoding` check, the cheapest thing an aiohttp handler can do.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import ssl
from pathlib import Path

from aiohttp import web


def build_app(directory: Path) -> web.Application:
    plain = (directory / "plain.bin").read_bytes()
    gz = (directory / "gzip.bin").read_bytes()
    headers = json.loads((directory / "headers.json").read_text())
    plain_headers: dict[str, str] = headers["plain"]
    gzip_headers: dict[str, str] = headers["gzip"]

    async def handle_metrics(request: web.Request) -> web.Response:
        if "gzip" in request.headers.get("Accept-Encoding", ""):
            return web.Response(body=gz, headers=gzip_headers)
        return web.Response(body=plain, headers=plain_headers)

    async def handle_ready(request: web.Request) -> web.Response:
        return web.Response(text="ready\n")

    app = web.Application()
    app.router.add_get("/metrics", handle_metrics)
    app.router.add_get("/ready", handle_ready)
    return app


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--port", type=int, required=True)
    parser.add_argument("--dir", type=Path, required=True)
    parser.add_argument("--uvloop", action="store_true", help="run on uvloop's event loop")
    parser.add_argument("--tls-cert", type=Path, help="serve HTTPS with this certificate …")
    parser.add_argument("--tls-key", type=Path, help="… and key (bench/load.py's TLS runs)")
    args = parser.parse_args()
    context = None
    if args.tls_cert:
        context = ssl.create_default_context(ssl.Purpose.CLIENT_AUTH)
        context.load_cert_chain(args.tls_cert, args.tls_key)
    if args.uvloop:
        import uvloop  # type: ignore[import-not-found, unused-ignore]

        asyncio.set_event_loop_policy(uvloop.EventLoopPolicy())
    web.run_app(build_app(args.dir), host="127.0.0.1", port=args.port, access_log=None,
                print=None, ssl_context=context)


if __name__ == "__main__":
    main()
