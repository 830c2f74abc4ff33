"""dcgm-exporter's --web-read-timeout and --web-write-timeout (Go's ReadTimeout and
WriteTimeout), against the real process on real sockets: a request sent too slowly, head or
body, is cut at the read timeout; a response read too slowly at the write timeout; with the
values dcgm-exporter's chart always renders, scrapes are unaffected and nothing is logged."""

import asyncio
import contextlib
import socket
import ssl
import time

import aiohttp

from tests.app.test_process import Exporter
from tests.app.test_process import exporters as exporters  # the fixture
from tests.samples import value
from tests.web.test_http_limits import (
    answer,
    assert_quiet,
    one_connection,
    session_fetch,
    stalled_handshake,
    start,
    trickle,
    trickling,
    until_closed,
    wait_value,
)
from tests.web.test_security import Pki, client_context, tls_config, write_web_config
from tests.web.test_security import pki as pki  # the fixture

TIMEOUT = 0.5  # seconds: the timeout under test, where a test sets one


def assert_cut_at_the_timeout(took: float) -> None:
    # 20 % early is timer slack; 2 s over is a loaded machine, never "open for good".
    assert 0.8 * TIMEOUT <= took < TIMEOUT + 2.0, took


async def slow_body(port: int) -> float:
    """A whole head at once, then its announced body a byte every 50 ms: seconds until closed,
    from connecting. The GET is answered meanwhile; the body is still part of the request."""
    started = time.monotonic()
    reader, writer = await asyncio.open_connection("127.0.0.1", port)
    writer.write(b"GET /health HTTP/1.1\r\nHost: test\r\nContent-Length: 400\r\n\r\n")
    sending = asyncio.create_task(trickle(writer, b"b" * 400))
    try:
        assert await answer(reader) == "ok\n"
        return await until_closed(reader, started)
    finally:
        sending.cancel()
        writer.close()


async def test_a_request_sent_too_slowly_is_cut_at_the_read_timeout(
        exporters: list[Exporter]) -> None:
    exp = start(exporters, "--web-read-timeout", f"{TIMEOUT * 1000:g}ms")
    for took in await asyncio.gather(trickling(exp.port), slow_body(exp.port)):
        assert_cut_at_the_timeout(took)
    async with one_connection() as http:
        body = await wait_value(session_fetch(http, exp.base + "/metrics"),
                                "gpu_enricher_http_timeouts_total", 2, phase="read")
    assert value(body, "gpu_enricher_http_timeouts_total", phase="header") == 0
    assert value(body, "gpu_enricher_http_timeouts_total", phase="write") == 0
    assert_quiet(exp)


PIPELINED = 400  # /metrics answers of 40-60 KB each: several times what the kernel buffers


async def test_a_response_read_too_slowly_is_cut_at_the_write_timeout(
        exporters: list[Exporter]) -> None:
    exp = start(exporters, "--web-write-timeout", f"{TIMEOUT:g}s")
    await cut_at_the_write_timeout(exp, exp.base, None)


async def test_a_tls_response_read_too_slowly_is_cut_at_the_write_timeout(
        exporters: list[Exporter], pki: Pki) -> None:
    """With TLS the unsent bytes wait in the TLS layer's buffer: the same cut."""
    exp = Exporter(["--simulate", "-c", "100", "--web-write-timeout", f"{TIMEOUT:g}s",
                    "--web-config-file", str(write_web_config(pki, tls_config(pki)))], {})
    exporters.append(exp)
    await cut_at_the_write_timeout(exp, f"https://127.0.0.1:{exp.port}", client_context(pki))


async def ready(http: aiohttp.ClientSession, exp: Exporter, base: str,
                context: ssl.SSLContext | None) -> None:
    """Until /ready answers 200 (with TLS: Exporter.wait_ready speaks plain HTTP)."""
    deadline = time.monotonic() + 20
    while True:
        assert exp.proc.poll() is None, exp.proc.communicate()
        with contextlib.suppress(aiohttp.ClientConnectionError):
            async with http.get(base + "/ready", ssl=context or True) as resp:
                if resp.status == 200:
                    return
        assert time.monotonic() < deadline, "never ready"
        await asyncio.sleep(0.05)


async def test_a_tls_handshake_gets_the_least_timeout_set(
        exporters: list[Exporter], pki: Pki) -> None:
    """As Go's tlsHandshakeTimeout: a read timeout below the header timeout bounds it."""
    exp = Exporter(["--simulate", "-c", "100", "--web-read-timeout", f"{TIMEOUT:g}s",
                    "--web-config-file", str(write_web_config(pki, tls_config(pki)))], {})
    exporters.append(exp)
    async with one_connection() as http:
        await ready(http, exp, f"https://127.0.0.1:{exp.port}", client_context(pki))
    assert_cut_at_the_timeout(await stalled_handshake(exp.port))
    assert_quiet(exp)


async def cut_at_the_write_timeout(exp: Exporter, base: str,
                                   context: ssl.SSLContext | None) -> None:
    async with one_connection() as http:
        fetch = session_fetch(http, base + "/metrics", context)
        await ready(http, exp, base, context)
        size = len((await fetch()).encode())
        sock = socket.socket()
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, 4096)  # a small window
        sock.connect(("127.0.0.1", exp.port))
        reader, writer = await asyncio.open_connection(
            sock=sock, limit=1 << 16, ssl=context,  # reads pause past 128 KiB buffered
            server_hostname="127.0.0.1" if context else None)
        try:
            writer.write(b"GET /metrics HTTP/1.1\r\nHost: test\r\n\r\n" * PIPELINED)
            await writer.drain()
            sent = time.monotonic()
            # Reading nothing, the client is cut: counted once the server gives up.
            await wait_value(fetch, "gpu_enricher_http_timeouts_total", 1, phase="write")
            assert_cut_at_the_timeout(time.monotonic() - sent)
            received = 0
            with contextlib.suppress(ConnectionError, ssl.SSLError):
                while chunk := await asyncio.wait_for(reader.read(1 << 16), 5.0):
                    received += len(chunk)
            assert received < PIPELINED * size / 2, (received, size)
        finally:
            writer.close()
        # An ordinary scrape of the same size, read at once, is whole.
        assert value(await fetch(), "gpu_enricher_http_timeouts_total", phase="read") == 0
    assert_quiet(exp)


CHART_ENV = {"DCGM_EXPORTER_WEB_READ_TIMEOUT": "10s", "DCGM_EXPORTER_WEB_WRITE_TIMEOUT": "30s"}
"""What dcgm-exporter's chart 4.8.3 always renders into the DaemonSet."""


async def test_with_the_charts_timeouts_scrapes_work_and_nothing_is_logged(
        exporters: list[Exporter]) -> None:
    exp = Exporter(["--simulate", "-c", "100"], CHART_ENV)
    exporters.append(exp)
    exp.wait_ready()
    async with one_connection() as http:  # one keep-alive connection, as Prometheus scrapes
        fetch = session_fetch(http, exp.base + "/metrics")
        for _ in range(20):
            body = await fetch()
            assert value(body, "DCGM_FI_DEV_GPU_TEMP", gpu="0") is not None
    for phase in ("header", "read", "write"):
        assert value(body, "gpu_enricher_http_timeouts_total", phase=phase) == 0
    # Before these flags were implemented, the chart's values logged a warning each.
    assert_quiet(exp)
