"""dcgm-exporter's --max-concurrent-scrapes (DCGM_EXPORTER_MAX_CONCURRENT_SCRAPES): while N
/metrics answers are still being sent (clients that do not take them), another scrape is
answered 503; once they go, scrapes are answered again. Other paths are not scrapes. The real
process on real sockets."""

import asyncio
import socket
import time

from tests.app.test_process import Exporter
from tests.app.test_process import exporters as exporters  # the fixture
from tests.web.test_http_limits import start

Stalled = tuple[asyncio.StreamReader, asyncio.StreamWriter]


async def stalled_scrape(port: int) -> Stalled:
    """A connection that asks for /metrics many times over and reads nothing: its answer
    stays in flight."""
    sock = socket.socket()
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, 4096)
    sock.connect(("127.0.0.1", port))
    reader, writer = await asyncio.open_connection(sock=sock, limit=1 << 16)
    writer.write(b"GET /metrics HTTP/1.1\r\nHost: test\r\n\r\n" * 400)
    await writer.drain()
    return reader, writer


async def status(port: int, path: str = "/metrics") -> int:
    reader, writer = await asyncio.open_connection("127.0.0.1", port)
    try:
        writer.write(f"GET {path} HTTP/1.1\r\nHost: test\r\nConnection: close\r\n\r\n".encode())
        head = await asyncio.wait_for(reader.readuntil(b"\r\n"), 5.0)
        return int(head.split()[1])
    finally:
        writer.close()


async def until_status(port: int, expected: int, within: float = 10.0) -> None:
    deadline = time.monotonic() + within
    while (got := await status(port)) != expected:
        assert time.monotonic() < deadline, f"/metrics answered {got}, not {expected}"
        await asyncio.sleep(0.05)


async def test_scrapes_past_the_limit_are_answered_503_until_some_end(
        exporters: list[Exporter]) -> None:
    exp = start(exporters, "--max-concurrent-scrapes", "2")
    assert await status(exp.port) == 200
    stalled = [await stalled_scrape(exp.port) for _ in range(2)]
    try:
        await until_status(exp.port, 503)
        assert await status(exp.port, "/health") == 200  # not a scrape
    finally:
        for _, writer in stalled:
            writer.transport.abort()
    await until_status(exp.port, 200)
    code, err = exp.stop()
    assert code == 0 and " ERROR " not in err and "Traceback" not in err, err


async def test_the_default_sixteen_leaves_one_slow_client_harmless(
        exporters: list[Exporter]) -> None:
    exp = start(exporters)
    stalled = await stalled_scrape(exp.port)
    try:
        await asyncio.sleep(0.3)
        assert [await status(exp.port) for _ in range(5)] == [200] * 5
    finally:
        stalled[1].transport.abort()
