"""The real aiohttp server on a real socket: negotiation, gzip, readiness, no I/O per scrape,
methods, request limits and malformed requests."""

import asyncio
import dataclasses
import gzip
import logging
import threading
from collections.abc import AsyncIterator, Sequence

import aiohttp
import pytest
from aiohttp import web
from aiohttp.test_utils import TestServer
from prometheus_client.openmetrics.parser import text_string_to_metric_families as parse_om
from prometheus_client.parser import text_string_to_metric_families as parse_text

from gpu_enricher.app import make_app
from gpu_enricher.assembly import make_collector
from gpu_enricher.backend import BackendUnavailable
from gpu_enricher.config import Config
from gpu_enricher.fields.collection import default_counters_path
from gpu_enricher.fields.counters import load_counters
from gpu_enricher.model import NodeSnapshot
from gpu_enricher.sim.backend import SimulatedBackend
from gpu_enricher.sim.scenario import builtin_scenario
from tests.samples import value


class GatedBackend(SimulatedBackend):
    """The simulated node, whose passes wait for the test to open a gate; counts passes."""

    def __init__(self) -> None:
        super().__init__(builtin_scenario())
        self.gate = threading.Event()
        self.passes = 0

    def sample(self, fields: frozenset[str]) -> NodeSnapshot:
        self.gate.wait(10)
        self.passes += 1
        return super().sample(fields)


class UnavailableBackend(SimulatedBackend):
    def __init__(self) -> None:
        super().__init__(builtin_scenario())
        self.name = "nvml"

    def open(self) -> None:
        raise BackendUnavailable("LibraryNotFound", "NVML Shared Library Not Found")


class BrokenPassBackend(SimulatedBackend):
    """Opens fine; its passes fail with an unexpected error (a bug, not a driver state)."""

    def sample(self, fields: frozenset[str]) -> NodeSnapshot:
        raise RuntimeError("bad field table")


def config(interval_ms: int = 60_000) -> Config:
    return Config(host="127.0.0.1", port=0, collectors=default_counters_path(),
                  collect_interval_ms=interval_ms, hostname="node-a", simulate="builtin")


async def serve(backend: SimulatedBackend, interval_ms: int = 60_000,
                stall_seconds: float | None = None,
                routes: Sequence[web.RouteDef] = ()) -> TestServer:
    collector = make_collector(config(interval_ms), load_counters(default_counters_path()),
                               backend)
    collector.options = dataclasses.replace(collector.options, stall_seconds=stall_seconds)
    app = make_app(collector)
    app.add_routes(routes)
    server = TestServer(app, host="127.0.0.1")
    await server.start_server()
    return server


@pytest.fixture
async def http() -> AsyncIterator[aiohttp.ClientSession]:
    async with aiohttp.ClientSession(auto_decompress=False,
                                     headers={"Accept-Encoding": "identity"}) as session:
        yield session


async def wait_ready(session: aiohttp.ClientSession, server: TestServer) -> None:
    for _ in range(200):
        async with session.get(server.make_url("/ready")) as resp:
            if resp.status == 200:
                return
        await asyncio.sleep(0.01)
    raise AssertionError("never ready")


async def test_ready_only_after_first_pass_and_metrics_before(http: aiohttp.ClientSession) -> None:
    backend = GatedBackend()
    server = await serve(backend)
    try:
        async with http.get(server.make_url("/ready")) as resp:
            assert resp.status == 503
            assert "first collection pass" in await resp.text()
        async with http.get(server.make_url("/health")) as resp:
            assert resp.status == 200
        async with http.get(server.make_url("/metrics")) as resp:
            body = await resp.text()
            assert resp.status == 200
            assert "gpu_enricher_build_info" in body
            assert "DCGM_FI_DEV_GPU_TEMP" not in body
        backend.gate.set()
        await wait_ready(http, server)
        async with http.get(server.make_url("/metrics")) as resp:
            body = await resp.text()
        families = {f.name: f for f in parse_text(body)}
        temps = families["DCGM_FI_DEV_GPU_TEMP"].samples
        # 1 H100 + 1 A100 + 3 MIG instances + 1 L4
        assert len(temps) == 6
        assert {s.labels["Hostname"] for s in temps} == {"node-a"}
        assert families["gpu_enricher_gpu_up"].samples[0].value == 1
    finally:
        await server.close()


async def test_content_negotiation_and_gzip(http: aiohttp.ClientSession) -> None:
    backend = GatedBackend()
    backend.gate.set()
    server = await serve(backend)
    try:
        await wait_ready(http, server)
        url = server.make_url("/metrics")
        async with http.get(url, headers={"Accept-Encoding": "identity"}) as resp:
            plain = await resp.read()
            assert resp.headers["Content-Type"] == "text/plain; version=0.0.4; charset=utf-8"
            assert "Content-Encoding" not in resp.headers
        async with http.get(url, headers={"Accept-Encoding": "gzip, deflate"}) as resp:
            assert resp.headers["Content-Encoding"] == "gzip"
            assert gzip.decompress(await resp.read()) == plain
        async with http.get(url, headers={"Accept-Encoding": "gzip;q=0"}) as resp:
            assert "Content-Encoding" not in resp.headers
        prometheus_accept = ("application/openmetrics-text;version=1.0.0,"
                             "application/openmetrics-text;version=0.0.1;q=0.75,"
                             "text/plain;version=0.0.4;q=0.5,*/*;q=0.1")
        async with http.get(url, headers={"Accept": prometheus_accept,
                                          "Accept-Encoding": "gzip"}) as resp:
            assert resp.headers["Content-Type"].startswith("application/openmetrics-text")
            om = gzip.decompress(await resp.read()).decode()
        assert om.endswith("# EOF\n")
        parsed = {f.name: f for f in parse_om(om)}
        assert parsed["DCGM_FI_DEV_TOTAL_ENERGY_CONSUMPTION"].type == "unknown"
        assert parsed["DCGM_FI_DEV_POWER_USAGE"].type == "gauge"
        async with http.get(server.make_url("/")) as resp:
            assert resp.status == 200
            assert 'href="metrics"' in await resp.text()
    finally:
        await server.close()


async def test_scrapes_never_touch_the_backend(http: aiohttp.ClientSession) -> None:
    backend = GatedBackend()
    backend.gate.set()
    server = await serve(backend)
    try:
        await wait_ready(http, server)
        passes = backend.passes
        bodies = set()
        for _ in range(100):
            async with http.get(server.make_url("/metrics")) as resp:
                bodies.add(await resp.read())
        assert backend.passes == passes
        assert len(bodies) == 1, "every scrape between passes serves the same bytes"
    finally:
        await server.close()


async def test_unusable_backend_keeps_serving_and_says_why(http: aiohttp.ClientSession) -> None:
    server = await serve(UnavailableBackend())
    try:
        await asyncio.sleep(0.2)
        async with http.get(server.make_url("/ready")) as resp:
            assert resp.status == 503
            assert "nvml backend unavailable" in await resp.text()
        async with http.get(server.make_url("/health")) as resp:
            assert resp.status == 200
        async with http.get(server.make_url("/metrics")) as resp:
            body = await resp.text()
        assert value(body, "gpu_enricher_source_up", source="nvml") == 0
        errors = value(body, "gpu_enricher_collection_errors_total", source="nvml",
                       reason="LibraryNotFound")
        assert errors is not None and errors >= 1, body
    finally:
        await server.close()


async def test_health_fails_when_a_backend_call_hangs(http: aiohttp.ClientSession) -> None:
    backend = GatedBackend()  # the first pass blocks: a hung driver
    server = await serve(backend, stall_seconds=1.0)
    try:
        async with http.get(server.make_url("/health")) as resp:
            assert resp.status == 200
        await asyncio.sleep(1.3)
        async with http.get(server.make_url("/health")) as resp:
            assert resp.status == 503
            assert "hung driver" in await resp.text()
        async with http.get(server.make_url("/metrics")) as resp:
            assert resp.status == 200, "scrapes are still answered"
        backend.gate.set()
        await wait_ready(http, server)
        async with http.get(server.make_url("/health")) as resp:
            assert resp.status == 200
    finally:
        backend.gate.set()
        await server.close()


async def test_ready_names_a_failing_first_pass(http: aiohttp.ClientSession,
                                                caplog: pytest.LogCaptureFixture) -> None:
    server = await serve(BrokenPassBackend(builtin_scenario()), interval_ms=100)
    try:
        for _ in range(100):
            async with http.get(server.make_url("/ready")) as resp:
                text = await resp.text()
            if "collection pass failed" in text:
                break
            await asyncio.sleep(0.02)
        assert resp.status == 503
        assert text == "not ready: collection pass failed: RuntimeError('bad field table')\n"
        assert "collection pass failed" in caplog.text
    finally:
        await server.close()


async def ready_server(http: aiohttp.ClientSession,
                       routes: Sequence[web.RouteDef] = ()) -> TestServer:
    """A ready server whose passes run every 50 ms, so /metrics soon shows new counts."""
    backend = GatedBackend()
    backend.gate.set()
    server = await serve(backend, interval_ms=50, routes=routes)
    await wait_ready(http, server)
    return server


async def raw_answer(host: str, port: int, data: bytes) -> bytes:
    """The whole answer to `data` sent on a fresh connection: a socket, not a client, so the
    request can be malformed (or not HTTP at all)."""
    reader, writer = await asyncio.open_connection(host, port)
    answer = b""
    try:
        writer.write(data)
        await writer.drain()
        while chunk := await asyncio.wait_for(reader.read(65536), 5):
            answer += chunk
    except ConnectionError:  # closed on the rest of a request it refused
        pass
    finally:
        writer.close()
    return answer


async def raw_request(server: TestServer, data: bytes) -> bytes:
    return await raw_answer(server.host, server.port, data)


def statuses(answer: bytes) -> list[int]:
    return [int(line.split(b" ")[1]) for line in answer.split(b"\r\n")
            if line.startswith(b"HTTP/1.")]


async def bad_requests(http: aiohttp.ClientSession, server: TestServer) -> float:
    async with http.get(server.make_url("/metrics")) as resp:
        counted = value(await resp.text(), "gpu_enricher_http_bad_requests_total")
    assert counted is not None, "gpu_enricher_http_bad_requests_total is missing"
    return counted


async def wait_bad_requests(http: aiohttp.ClientSession, server: TestServer,
                            expected: float) -> None:
    """/metrics is rendered once per pass: wait for a pass to carry the count."""
    for _ in range(200):
        counted = await bad_requests(http, server)
        if counted >= expected:
            assert counted == expected
            return
        await asyncio.sleep(0.01)
    raise AssertionError(f"gpu_enricher_http_bad_requests_total stayed at {counted}, "
                         f"expected {expected}")


HOST = b"Host: localhost\r\n"
MALFORMED = {
    "garbage": b"GARBAGE\r\n\r\n",
    # A TLS ClientHello's first bytes (and a line end: aiohttp's pure-Python parser waits
    # for one).
    "tls on the http port": b"\x16\x03\x01\x02\x00\x01\x00\x01\xfc\x03\x03\r\n\r\n",
    "bad header": b"GET /metrics HTTP/1.1\r\n" + HOST + b"Bad Header: x\r\n\r\n",
    "garbage after a good request": (b"GET /health HTTP/1.1\r\n" + HOST + b"\r\n"
                                     b"GARBAGE\r\n\r\n"),
    "request line over 4 KiB": b"GET /" + b"a" * 5000 + b" HTTP/1.1\r\n" + HOST + b"\r\n",
    "header over 8 KiB": b"GET /metrics HTTP/1.1\r\n" + HOST + b"X-Big: " + b"a" * 9000
                         + b"\r\n\r\n",
    "more than 64 headers": (b"GET /metrics HTTP/1.1\r\n" + HOST
                             + b"".join(b"X-H%d: 1\r\n" % i for i in range(70)) + b"\r\n"),
}


@pytest.mark.parametrize("request_bytes", MALFORMED.values(), ids=MALFORMED.keys())
async def test_a_malformed_request_is_one_debug_line_and_a_count(
        http: aiohttp.ClientSession, caplog: pytest.LogCaptureFixture,
        request_bytes: bytes) -> None:
    server = await ready_server(http)
    try:
        before = await bad_requests(http, server)
        caplog.clear()
        caplog.set_level(logging.DEBUG)
        answer = await raw_request(server, request_bytes)
        assert statuses(answer)[-1] == 400, answer[:200]
        await wait_bad_requests(http, server, before + 1)
        # Not aiohttp.access: the access log, off in the exporter, on in TestServer.
        records = [r for r in caplog.records
                   if r.name in ("aiohttp.server", "aiohttp.web", "gpu_enricher.web.server")]
        assert [r for r in records if r.levelno > logging.DEBUG] == []
        assert [r for r in records if r.exc_info or r.exc_text] == [], "no traceback"
        lines = [r.getMessage() for r in records if "bad request" in r.getMessage()]
        assert len(lines) == 1, lines
        assert "\n" not in lines[0]
    finally:
        await server.close()


async def test_requests_within_the_limits_are_served(http: aiohttp.ClientSession) -> None:
    server = await ready_server(http)
    try:
        before = await bad_requests(http, server)
        long_query = b"GET /api/v1/gpus?pod=" + b"p" * 3900 + b" HTTP/1.1\r\n"
        answer = await raw_request(server, long_query + HOST + b"Connection: close\r\n\r\n")
        assert statuses(answer) == [200]
        big_header = b"X-Big: " + b"a" * 7000 + b"\r\n"
        many = b"".join(b"X-H%d: 1\r\n" % i for i in range(50))
        answer = await raw_request(server, b"GET /metrics HTTP/1.1\r\n" + HOST + big_header
                                   + many + b"Connection: close\r\n\r\n")
        assert statuses(answer) == [200]
        await asyncio.sleep(0.2)  # a few passes
        assert await bad_requests(http, server) == before
    finally:
        await server.close()


async def test_an_error_of_ours_is_logged_once_at_error(
        http: aiohttp.ClientSession, caplog: pytest.LogCaptureFixture) -> None:
    async def broken(request: web.Request) -> web.Response:
        raise RuntimeError("a bug in a handler")

    server = await ready_server(http, [web.get("/broken", broken)])
    try:
        before = await bad_requests(http, server)
        caplog.clear()
        async with http.get(server.make_url("/broken")) as resp:
            assert resp.status == 500
        errors = [r for r in caplog.records if r.levelno >= logging.ERROR]
        assert len(errors) == 1, errors
        assert errors[0].exc_info is not None
        assert isinstance(errors[0].exc_info[1], RuntimeError)
        await asyncio.sleep(0.2)  # a few passes
        assert await bad_requests(http, server) == before, "not the client's fault"
    finally:
        await server.close()


KNOWN_PATHS = ("/metrics", "/health", "/healthz", "/ready", "/api/v1/gpus", "/")


async def test_only_get_and_head_on_known_paths(http: aiohttp.ClientSession) -> None:
    server = await ready_server(http)
    try:
        for path in KNOWN_PATHS:
            url = server.make_url(path)
            async with http.head(url) as resp:
                assert resp.status == 200, path
                assert await resp.read() == b""
            for method in ("POST", "PUT", "DELETE", "PATCH", "OPTIONS", "TRACE"):
                async with http.request(method, url, data=b"x" * 100) as resp:
                    assert resp.status == 405, (method, path)
                    assert resp.headers["Allow"] == "GET,HEAD", (method, path)
        async with http.post(server.make_url("/nope")) as resp:
            assert resp.status == 404
    finally:
        await server.close()


async def test_q_zero_refuses_a_variant(http: aiohttp.ClientSession) -> None:
    server = await ready_server(http)
    url = server.make_url("/metrics")
    text = "text/plain; version=0.0.4; charset=utf-8"
    try:
        for accept, content_type in [
            ("application/openmetrics-text;q=0", text),
            ("application/openmetrics-text; Q=0.000, */*;q=0.1", text),
            ("text/plain;q=0.9, application/openmetrics-text;q=0.5", text),
            ("text/plain;q=0.5, application/openmetrics-text;q=0.9",
             "application/openmetrics-text; version=1.0.0; charset=utf-8"),
        ]:
            async with http.get(url, headers={"Accept": accept}) as resp:
                assert resp.headers["Content-Type"] == content_type, accept
        for accept_encoding, gzipped in [("gzip;q=0", False), ("GZIP;Q=0", False),
                                         ("gzip; q=0.0", False),
                                         ("gzip;q=0.5, identity", False),
                                         ("identity;q=0.5, x-gzip", True)]:
            async with http.get(url, headers={"Accept-Encoding": accept_encoding}) as resp:
                assert (resp.headers.get("Content-Encoding") == "gzip") is gzipped, \
                    accept_encoding
    finally:
        await server.close()
