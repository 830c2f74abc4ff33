"""The real aiohttp server on a real socket: negotiation, gzip, readiness, no I/O per scrape."""

import asyncio
import dataclasses
import gzip
import threading
from collections.abc import AsyncIterator

import aiohttp
import pytest
from aiohttp.test_utils import TestServer
from prometheus_client.openmetrics.parser import text_string_to_metric_families as parse_om
from prometheus_client.parser import text_string_to_metric_families as parse_text

from gpu_enricher.app import make_app, make_collector
from gpu_enricher.backend import BackendUnavailable
from gpu_enricher.cli import default_counters_path
from gpu_enricher.config import Config
from gpu_enricher.counters import load_counters
from gpu_enricher.model import NodeSnapshot
from gpu_enricher.scenario import builtin_scenario
from gpu_enricher.simulated import SimulatedBackend
from tests.exposition import value


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
                stall_seconds: float | None = None) -> TestServer:
    collector = make_collector(config(interval_ms), load_counters(default_counters_path()),
                               backend)
    collector.options = dataclasses.replace(collector.options, stall_seconds=stall_seconds)
    app = make_app(collector)
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
