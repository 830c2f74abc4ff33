"""DCGM_EXP_GPU_HEALTH_STATUS and DCGM_EXP_P2P_STATUS through the running collector, over
pynvml and the fake libnvidia-ml (XIDs from its event sets, P2P from nvmlDeviceGetP2PStatus)."""

import asyncio
import re
import time
from collections.abc import AsyncIterator, Callable

import pytest

from gpu_enricher.collector.loop import Collector, CollectorOptions
from gpu_enricher.fields.counters import parse_counters
from gpu_enricher.nvml.backend import NvmlBackend
from gpu_enricher.nvml.events import XidSource
from tests.fake_nvml.build import FakeNvml

CSV = """DCGM_FI_DEV_GPU_TEMP, gauge, GPU temperature (in C).
DCGM_EXP_GPU_HEALTH_STATUS, counter, DCGM reported health status
DCGM_EXP_P2P_STATUS, counter, P2P NvLink status
DCGM_FI_DRIVER_VERSION, label, Driver Version
"""
DEADLINE = 5.0


def series(text: str, family: str) -> dict[tuple[str, ...], str]:
    """(gpu, GPU_I_ID or '', then the family's own labels) → value."""
    found: dict[tuple[str, ...], str] = {}
    for line in text.splitlines():
        if line.startswith(family + "{"):
            labels = dict(re.findall(r'(\w+)="([^"]*)"', line))
            own = (labels.get("health_watch") or labels.get("peer_gpu", ""),
                   labels.get("health_error_code") or labels.get("link_status", ""))
            found[(labels["gpu"], labels.get("GPU_I_ID", ""), *own)] = line.rsplit(" ", 1)[1]
    return found


@pytest.fixture
async def running(fake: FakeNvml, monkeypatch: pytest.MonkeyPatch
                  ) -> AsyncIterator[Callable[[], str]]:
    monkeypatch.setenv("FAKE_NVML_GPU_COUNT", "3")
    monkeypatch.setenv("FAKE_NVML_MIG", "2=1:9")
    monkeypatch.setenv("FAKE_NVML_NOT_SUPPORTED", "2:nvlink")
    monkeypatch.setenv("FAKE_NVML_XIDS", "0:48,1:13")
    fake.reset()
    collector = Collector(
        NvmlBackend(slow_interval_seconds=30),
        CollectorOptions(interval_seconds=0.1, hostname="node-a",
                         counters=parse_counters(CSV, "t.csv")),
        xids=XidSource(window_seconds=300.0, wait_ms=100, retry_seconds=0.3))
    task = asyncio.create_task(collector.run())
    try:
        yield lambda: collector.exposition.text.decode()
    finally:
        task.cancel()
        with pytest.raises(asyncio.CancelledError):
            await task


async def until(what: str, exposition: Callable[[], str], check: Callable[[str], bool]) -> str:
    deadline = time.monotonic() + DEADLINE
    while not check(text := exposition()):
        if time.monotonic() > deadline:
            pytest.fail(f"timed out waiting for {what}:\n{text}")
        await asyncio.sleep(0.02)
    return text


async def test_health_watches_from_readings_and_xids(running: Callable[[], str],
                                                     fake: FakeNvml) -> None:
    text = await until("XID 48 in the MEM watch", running, lambda t: series(
        t, "DCGM_EXP_GPU_HEALTH_STATUS").get(("0", "", "MEM", "DCGM_FR_XID_ERROR")) == "20")
    health = series(text, "DCGM_EXP_GPU_HEALTH_STATUS")
    # Ten watches per physical GPU, the MIG-enabled one included, never per instance.
    assert len(health) == 30
    assert {k[0] for k in health} == {"0", "1", "2"} and {k[1] for k in health} == {""}
    # The fake's GPU i has i volatile double-bit ECC errors (a FAIL, which wins over GPU 1's
    # pending page retirement, a WARN); XID 13 on GPU 1 is an application's fault.
    assert health[("1", "", "MEM", "DCGM_FR_VOLATILE_DBE_DETECTED")] == "20"
    assert health[("2", "", "MEM", "DCGM_FR_VOLATILE_DBE_DETECTED")] == "20"
    assert health[("1", "", "SM", "DCGM_FR_OK")] == "0"
    assert {k[2:]: v for k, v in health.items() if k[0] == "1" and k[2] != "MEM"} == {
        (watch, "DCGM_FR_OK"): "0" for watch in (
            "PCIE", "NVLINK", "PMU", "MCU", "SM", "INFOROM", "THERMAL", "POWER", "DRIVER")}
    assert "# TYPE DCGM_EXP_GPU_HEALTH_STATUS counter" in text  # as the counters line says
    # A hardware thermal slowdown on GPU 2 shows in its THERMAL watch within a pass.
    fake.set_clock_events(2, 0x40)
    await until("THERMAL warning", running, lambda t: series(
        t, "DCGM_EXP_GPU_HEALTH_STATUS").get(
            ("2", "", "THERMAL", "DCGM_FR_CLOCK_THROTTLE_THERMAL")) == "10")
    # A lost GPU keeps no health series (gpu_enricher_gpu_up says it is down); the others do.
    fake.set_lost(1)
    text = await until("GPU 1 gone", running, lambda t: not any(
        k[0] == "1" for k in series(t, "DCGM_EXP_GPU_HEALTH_STATUS")))
    assert len(series(text, "DCGM_EXP_GPU_HEALTH_STATUS")) == 20


async def test_p2p_status_per_pair(running: Callable[[], str], fake: FakeNvml) -> None:
    text = await until("P2P series", running,
                       lambda t: len(series(t, "DCGM_EXP_P2P_STATUS")) == 6)
    p2p = series(text, "DCGM_EXP_P2P_STATUS")
    # GPU 2 has no NVLink: NotSupported (5) in both directions; 0 and 1 are linked.
    assert p2p == {
        ("0", "", "1", "OK"): "0", ("0", "", "2", "NotSupported"): "5",
        ("1", "", "0", "OK"): "0", ("1", "", "2", "NotSupported"): "5",
        ("2", "", "0", "NotSupported"): "5", ("2", "", "1", "NotSupported"): "5"}
    head = ('DCGM_EXP_P2P_STATUS{gpu="0",UUID="GPU-fa4e0000-7953-256e-8f33-1343419b1a1c",'
            'pci_bus_id="00000000:18:00.0",device="nvidia0",modelName="NVIDIA H100 80GB HBM3",'
            'Hostname="node-a",DCGM_FI_DRIVER_VERSION="580.105.08",link_status="OK",'
            'peer_gpu="1"} 0\n')
    assert head in text
    # Read on the slow cadence: one matrix (6 calls), not one per pass.
    passes = fake.calls("nvmlDeviceGetCount_v2")
    await until("more passes", running, lambda t: fake.calls("nvmlDeviceGetCount_v2")
                >= passes + 3)
    assert fake.calls("nvmlDeviceGetP2PStatus") == 6
    # A GPU whose P2P call is NOT_SUPPORTED: its pairs are absent, nothing else changes.
    fake.set_lost(2)
    text = await until("GPU 2 lost", running,
                       lambda t: len(series(t, "DCGM_EXP_P2P_STATUS")) == 2)
    assert set(series(text, "DCGM_EXP_P2P_STATUS")) == {("0", "", "1", "OK"),
                                                          ("1", "", "0", "OK")}
