"""Issue 12's NVML fields through real pynvml over the fake libnvidia-ml: throttling (violation
times, clock-event reasons), retired pages, NVLink errors and bandwidth, vGPU licence, power
limits, fan, P-state and the brand/inforom labels. Values, units and formats as dcgm-exporter;
NOT_SUPPORTED removes only its own series; the costly counters on the slow cadence."""

import re
import time
from collections.abc import Iterator
from pathlib import Path

import pynvml
import pytest

from gpu_enricher.collector.loop import Collector, CollectorOptions
from gpu_enricher.exposition.render import format_value
from gpu_enricher.fields.convert import nvlink_bytes_per_second, nvlink_classic
from gpu_enricher.fields.counters import load_counters, parse_counters, plan_counters
from gpu_enricher.fields.spec import (
    DeviceCall,
    GpmMetric,
    MemoryInfo,
    NvlinkThroughput,
    NvmlFieldValue,
    SystemCall,
    ValueFormat,
)
from gpu_enricher.fields.table import IMPLEMENTED
from gpu_enricher.model import FieldValue, NodeSnapshot
from gpu_enricher.nvml.backend import NvmlBackend
from gpu_enricher.nvml.fields import NvlinkRates
from tests.fake_nvml.build import FakeNvml
from tests.reference import COUNTER_LINE, dcgm_counters_csv

ALL = frozenset(IMPLEMENTED)
VIOLATIONS = ("DCGM_FI_DEV_POWER_VIOLATION", "DCGM_FI_DEV_THERMAL_VIOLATION",
              "DCGM_FI_DEV_SYNC_BOOST_VIOLATION", "DCGM_FI_DEV_BOARD_LIMIT_VIOLATION",
              "DCGM_FI_DEV_LOW_UTIL_VIOLATION", "DCGM_FI_DEV_RELIABILITY_VIOLATION")
NVLINK_ERRORS = ("DCGM_FI_DEV_NVLINK_CRC_FLIT_ERROR_COUNT_TOTAL",
                 "DCGM_FI_DEV_NVLINK_CRC_DATA_ERROR_COUNT_TOTAL",
                 "DCGM_FI_DEV_NVLINK_REPLAY_ERROR_COUNT_TOTAL",
                 "DCGM_FI_DEV_NVLINK_RECOVERY_ERROR_COUNT_TOTAL")
BANDWIDTH = ("DCGM_FI_DEV_NVLINK_BANDWIDTH_TOTAL",
             *(f"DCGM_FI_DEV_NVLINK_BANDWIDTH_L{link}" for link in range(18)))
POWER_LIMITS = ("DCGM_FI_DEV_POWER_MGMT_LIMIT", "DCGM_FI_DEV_POWER_MGMT_LIMIT_MIN",
                "DCGM_FI_DEV_POWER_MGMT_LIMIT_MAX", "DCGM_FI_DEV_POWER_MGMT_LIMIT_DEF",
                "DCGM_FI_DEV_ENFORCED_POWER_LIMIT")
INFOROM = ("DCGM_FI_DEV_OEM_INFOROM_VER", "DCGM_FI_DEV_ECC_INFOROM_VER",
           "DCGM_FI_DEV_POWER_INFOROM_VER", "DCGM_FI_DEV_INFOROM_IMAGE_VER")
CLOCK_EVENTS = ("DCGM_FI_DEV_CLOCKS_EVENT_REASONS", "DCGM_FI_DEV_CLOCK_THROTTLE_REASONS")
RETIRED = ("DCGM_FI_DEV_RETIRED_SBE", "DCGM_FI_DEV_RETIRED_DBE", "DCGM_FI_DEV_RETIRED_PENDING")
# The fake's FAKE_NVML_NOT_SUPPORTED key → the series it removes (a classic field's DCGM 4.7
# twin in a base unit, read from the same answer, goes with it).
BY_KEY: dict[str, tuple[str, ...]] = {
    "violation": (*VIOLATIONS, "DCGM_FI_DEV_GPU_POWER_THROTTLE_SECONDS_TOTAL"),
    "clock_events": CLOCK_EVENTS,
    "retired": RETIRED,
    "nvlink": (*NVLINK_ERRORS, *BANDWIDTH, "DCGM_FI_DEV_NVLINK_THROUGHPUT_BYTES_PER_SECOND",
               *(f"DCGM_FI_DEV_NVLINK_THROUGHPUT_L{link}_BYTES_PER_SECOND"
                 for link in range(18))),
    "license": ("DCGM_FI_DEV_VGPU_LICENSE_STATUS",),
    "power_limit": POWER_LIMITS,
    "fan": ("DCGM_FI_DEV_FAN_SPEED", "DCGM_FI_DEV_FAN_SPEED_RATIO"),
    "pstate": ("DCGM_FI_DEV_PSTATE",),
    "inforom": INFOROM,
    "brand": ("DCGM_FI_DEV_BRAND",),
}
# Polled every pass or on the slow cadence: a GPU that supports it has a value every pass.
POLLED = (DeviceCall, MemoryInfo, NvmlFieldValue, NvlinkThroughput, SystemCall, GpmMetric)
# dcgm-exporter's default counters that no NVML reading here delivers: none left.
NOT_YET: frozenset[str] = frozenset()


def open_backend(fake: FakeNvml, monkeypatch: pytest.MonkeyPatch, backends: list[NvmlBackend],
                 slow_interval: float = 30.0, **env: str) -> NvmlBackend:
    for key, value in env.items():
        monkeypatch.setenv(f"FAKE_NVML_{key.upper()}", value)
    fake.reset()
    backend = NvmlBackend(slow_interval_seconds=slow_interval)
    backend.open()
    backends.append(backend)
    return backend


@pytest.fixture
def backends() -> Iterator[list[NvmlBackend]]:
    opened: list[NvmlBackend] = []
    yield opened
    for backend in opened:
        backend.close()


def sample(backend: NvmlBackend, fields: frozenset[str] = ALL) -> NodeSnapshot:
    return backend.sample(fields)


def test_values_units_and_formats(fake: FakeNvml, monkeypatch: pytest.MonkeyPatch,
                                  backends: list[NvmlBackend]) -> None:
    snap = sample(open_backend(fake, monkeypatch, backends, gpu_count="3"))
    assert snap.errors == ()
    for i, gpu in enumerate(snap.gpus):
        v = gpu.values
        # Violations: nvmlDeviceGetViolationStatus(policy).violationTime, ns, integers.
        assert [v[name] for name in VIOLATIONS] == [
            1_000_000 * (policy + 1) + 1000 * i for policy in range(6)]
        assert v["DCGM_FI_DEV_CLOCKS_EVENT_REASONS"] == v["DCGM_FI_DEV_CLOCK_THROTTLE_REASONS"] \
            == (0x4 if i % 2 else 0x1)
        assert (v["DCGM_FI_DEV_RETIRED_SBE"], v["DCGM_FI_DEV_RETIRED_DBE"],
                v["DCGM_FI_DEV_RETIRED_PENDING"]) == (i + 1, i, i % 2)
        assert [v[name] for name in NVLINK_ERRORS] == [10 + i, 20 + i, 30 + i, 40 + i]
        assert v["DCGM_FI_DEV_FAN_SPEED"] == 30 + i
        assert v["DCGM_FI_DEV_PSTATE"] == (8 if i % 2 else 0)
        # Power limits as DCGM computes them: mW // 1000 as a double (699500 mW → 699 W).
        assert [v[name] for name in POWER_LIMITS] == [
            699.0 - 100 * i, 200.0, 700.0, 700.0, 699.0 - 100 * i]
        assert all(isinstance(v[name], float) for name in POWER_LIMITS)
        assert v["DCGM_FI_DEV_BRAND"] == ("Tesla" if i % 2 else "NVIDIA")
        assert [v[name] for name in INFOROM] == ["2.1", "7.16", "1.1", "G520.0200.00.05"]
        # The first reading of an NVLink counter gives 0, as DCGM.
        assert all(v[name] == 0 for name in BANDWIDTH)
    # vGPU licence: 1 licensed, 0 not licensed, 0 no vGPU licensing on that GPU.
    assert [g.values["DCGM_FI_DEV_VGPU_LICENSE_STATUS"] for g in snap.gpus] == [1, 0, 0]
    v0 = snap.gpus[0].values
    assert [format_value(v0[n]) for n in ("DCGM_FI_DEV_POWER_MGMT_LIMIT",
                                          "DCGM_FI_DEV_POWER_VIOLATION",
                                          "DCGM_FI_DEV_FAN_SPEED")] == [
        "699.000000", "1000000", "30"]
    for name in (*VIOLATIONS, *CLOCK_EVENTS, *RETIRED, *NVLINK_ERRORS, *BANDWIDTH, *POWER_LIMITS,
                 *INFOROM, "DCGM_FI_DEV_BRAND", "DCGM_FI_DEV_FAN_SPEED", "DCGM_FI_DEV_PSTATE",
                 "DCGM_FI_DEV_VGPU_LICENSE_STATUS"):
        spec = IMPLEMENTED[name]
        assert isinstance(v0[name], str) == (spec.fmt is ValueFormat.TEXT), name
        assert isinstance(v0[name], float) == (spec.fmt is ValueFormat.FLOAT), name
    # The field values of a pass (memory temperature, every NVLink counter) in one batch, the
    # slow counters (ECC, remapped rows, NVLink errors) in another: two calls per GPU.
    assert fake.calls("nvmlDeviceGetFieldValues") == 2 * 3


@pytest.mark.parametrize("key", sorted(BY_KEY))
def test_not_supported_removes_only_its_series(
        key: str, fake: FakeNvml, monkeypatch: pytest.MonkeyPatch,
        backends: list[NvmlBackend]) -> None:
    full = sample(open_backend(fake, monkeypatch, backends)).gpus[0].values
    backend = open_backend(fake, monkeypatch, backends, not_supported=f"0:{key}")
    snap = sample(backend)
    g0, g1 = snap.gpus
    assert set(full) - set(g0.values) == set(BY_KEY[key])
    assert all(name in g1.values for name in BY_KEY[key]), "the other GPU keeps them"
    assert snap.errors == (), "NOT_SUPPORTED is not an error"
    assert g0.healthy


def test_not_supported_is_remembered(fake: FakeNvml, monkeypatch: pytest.MonkeyPatch,
                                     backends: list[NvmlBackend]) -> None:
    backend = open_backend(fake, monkeypatch, backends, slow_interval=0, gpu_count="1",
                           not_supported="0:fan,0:violation")
    sample(backend)
    sample(backend)
    assert fake.calls("nvmlDeviceGetFanSpeed") == 1, "a NOT_SUPPORTED call is not repeated"
    assert fake.calls("nvmlDeviceGetViolationStatus") == 6


def test_violations_and_costly_readings_on_the_slow_cadence(
        fake: FakeNvml, monkeypatch: pytest.MonkeyPatch, backends: list[NvmlBackend]) -> None:
    """Violation times (~0.7 ms per policy on an H100), retired pages, the requested power
    limit and the vGPU licence (~0.18 ms each) are read once per slow interval and repeated
    exactly in between; the cheap readings stay per pass."""
    backend = open_backend(fake, monkeypatch, backends, slow_interval=0.3, gpu_count="1")
    slow_calls = ("nvmlDeviceGetViolationStatus", "nvmlDeviceGetRetiredPages",
                  "nvmlDeviceGetRetiredPagesPendingStatus", "nvmlDeviceGetPowerManagementLimit",
                  "nvmlDeviceGetGridLicensableFeatures_v4")
    first = sample(backend).gpus[0].values
    once = {name: fake.calls(name) for name in slow_calls}
    assert once == {"nvmlDeviceGetViolationStatus": 6, "nvmlDeviceGetRetiredPages": 2 * 2,
                    "nvmlDeviceGetRetiredPagesPendingStatus": 1,
                    "nvmlDeviceGetPowerManagementLimit": 1,
                    "nvmlDeviceGetGridLicensableFeatures_v4": 1}  # pynvml: 2 calls per cause
    for _ in range(3):
        again = sample(backend).gpus[0].values
        assert {n: again[n] for n in (*VIOLATIONS, *RETIRED)} == {
            n: first[n] for n in (*VIOLATIONS, *RETIRED)}
    assert {name: fake.calls(name) for name in slow_calls} == once
    assert fake.calls("nvmlDeviceGetFanSpeed") == 4, "fan speed every pass"
    assert fake.calls("nvmlDeviceGetEnforcedPowerLimit") == 4
    time.sleep(0.35)
    refreshed = sample(backend).gpus[0].values
    assert fake.calls("nvmlDeviceGetViolationStatus") == 12, "refreshed within its cadence"
    assert refreshed["DCGM_FI_DEV_POWER_VIOLATION"] == first["DCGM_FI_DEV_POWER_VIOLATION"]


def test_slow_refreshes_of_the_gpus_are_spread_over_the_interval(
        fake: FakeNvml, monkeypatch: pytest.MonkeyPatch, backends: list[NvmlBackend]) -> None:
    """After the first pass (every GPU read in full) GPU i is next due i/n of an interval
    early, so 4 GPUs refresh their costly readings in different passes, not all in one."""
    backend = open_backend(fake, monkeypatch, backends, slow_interval=0.4, gpu_count="4")
    sample(backend)
    assert fake.calls("nvmlDeviceGetTotalEnergyConsumption") == 4
    refreshed_per_pass = []
    for _ in range(8):
        before = fake.calls("nvmlDeviceGetTotalEnergyConsumption")
        sample(backend, frozenset({"DCGM_FI_DEV_TOTAL_ENERGY_CONSUMPTION"}))
        refreshed_per_pass.append(fake.calls("nvmlDeviceGetTotalEnergyConsumption") - before)
        time.sleep(0.1)
    assert max(refreshed_per_pass) <= 2, refreshed_per_pass  # spread, not 4 at once
    assert sum(refreshed_per_pass) >= 4, refreshed_per_pass  # each GPU within ~one interval


def test_a_new_nvml_session_asks_again_what_is_supported(
        fake: FakeNvml, monkeypatch: pytest.MonkeyPatch, backends: list[NvmlBackend]) -> None:
    """NOT_SUPPORTED is remembered within a session only: a driver reload (close, open) may
    bring a driver that supports more."""
    backend = open_backend(fake, monkeypatch, backends, gpu_count="1", not_supported="0:fan")
    assert "DCGM_FI_DEV_FAN_SPEED" not in sample(backend).gpus[0].values
    monkeypatch.delenv("FAKE_NVML_NOT_SUPPORTED")
    fake.reset()
    assert "DCGM_FI_DEV_FAN_SPEED" not in sample(backend).gpus[0].values, "remembered"
    backend.close()
    backend.open()
    assert sample(backend).gpus[0].values["DCGM_FI_DEV_FAN_SPEED"] == 30


def test_slow_cadence_off_reads_violations_every_pass(
        fake: FakeNvml, monkeypatch: pytest.MonkeyPatch, backends: list[NvmlBackend]) -> None:
    backend = open_backend(fake, monkeypatch, backends, slow_interval=0, gpu_count="2")
    for passes in (1, 2, 3):
        sample(backend)
        assert fake.calls("nvmlDeviceGetViolationStatus") == passes * 6 * 2


def test_nvlink_bandwidth_is_a_rate_between_two_passes(
        fake: FakeNvml, monkeypatch: pytest.MonkeyPatch, backends: list[NvmlBackend]) -> None:
    """DCGM's int(ΔKiB / Δs / 1000) of the RX + TX counters. The fake's link l of GPU g moves
    RX 1+g+l and TX 2(1+g+l) KiB per microsecond: 3000·(1+g+l) per link, exactly."""
    backend = open_backend(fake, monkeypatch, backends)
    first = sample(backend)
    assert all(g.values[name] == 0 for g in first.gpus for name in BANDWIDTH)
    time.sleep(0.01)
    calls = fake.calls("nvmlDeviceGetFieldValues")
    second = sample(backend)
    assert fake.calls("nvmlDeviceGetFieldValues") == calls + 2, "one batch per GPU"
    for g, gpu in enumerate(second.gpus):
        v = gpu.values
        assert [v[f"DCGM_FI_DEV_NVLINK_BANDWIDTH_L{link}"] for link in range(18)] == [
            3000 * (1 + g + link) for link in range(18)]
        assert v["DCGM_FI_DEV_NVLINK_BANDWIDTH_TOTAL"] == 3000 * (18 * (1 + g) + 153)
        assert format_value(v["DCGM_FI_DEV_NVLINK_BANDWIDTH_TOTAL"]) == str(
            3000 * (18 * (1 + g) + 153))
    only_total = frozenset({"DCGM_FI_DEV_NVLINK_BANDWIDTH_TOTAL"})
    time.sleep(0.01)
    gpu1 = sample(backend, only_total).gpus[1].values
    assert gpu1["DCGM_FI_DEV_NVLINK_BANDWIDTH_TOTAL"] == 3000 * 189
    assert "DCGM_FI_DEV_NVLINK_BANDWIDTH_L0" not in gpu1, "a link not asked for is not read"


def test_nvlink_rate_arithmetic() -> None:
    """The counters' delta, in DCGM's classic "MB/s" (ΔKiB / Δs / 1000, integers) and in
    DCGM 4.7's bytes/s (ΔKiB * 1024 / Δs) from the same delta."""
    rates = NvlinkRates()

    def rate(uuid: str, scope: int, total: int, stamp: int) -> tuple[FieldValue, FieldValue]:
        delta = rates.rate(uuid, scope, total, stamp)
        return nvlink_classic(delta), nvlink_bytes_per_second(delta)

    assert rate("GPU-a", 0, 1_000, 1_000_000) == (0, 0), "first reading"
    assert rate("GPU-a", 0, 3_000, 2_000_000) == (2, 2_048_000), "2000 KiB in 1 s"
    assert rate("GPU-b", 0, 5_000, 2_000_000) == (0, 0), "per GPU"
    assert rate("GPU-a", 1, 5_000, 2_000_000) == (0, 0), "per link"
    assert rate("GPU-a", 0, 3_000, 2_000_000) == (0, 0), "same timestamp: 0"
    assert rate("GPU-a", 0, 10, 3_000_000) == (0, 0), "counters reset: start over"
    assert rate("GPU-a", 0, 1_000_010, 3_500_000) == (2000, 2_048_000_000)
    assert rate("GPU-a", 0, 0, 4_000_000) == (0, 0), "a zero total: 0, as DCGM"
    assert rate("GPU-a", 0, 1_999, 4_500_000) == (3, 4_093_952), "from the zero: 1999 KiB in 0.5 s"
    assert rate("GPU-a", 0, 2_998, 5_500_000) == (0, 1_022_976), "999 KiB/s: 0 MB/s, exact B/s"


async def test_exposition_and_labels_through_the_collector(
        fake: FakeNvml, monkeypatch: pytest.MonkeyPatch) -> None:
    csv = """DCGM_FI_DEV_POWER_VIOLATION, counter, Throttling duration due to power constraints.
DCGM_FI_DEV_POWER_MGMT_LIMIT, gauge, Power management limit (in W).
DCGM_FI_DEV_CLOCKS_EVENT_REASONS, gauge, Clock event reasons.
DCGM_FI_DEV_VGPU_LICENSE_STATUS, gauge, vGPU License status
DCGM_FI_DRIVER_VERSION, label, Driver Version
DCGM_FI_DEV_BRAND, label, Device Brand
DCGM_FI_DEV_INFOROM_IMAGE_VER, label, Inforom image version
DCGM_FI_DEV_OEM_INFOROM_VER, label, OEM inforom version
"""
    monkeypatch.setenv("FAKE_NVML_GPU_COUNT", "2")
    monkeypatch.setenv("FAKE_NVML_NOT_SUPPORTED", "1:brand,1:license")
    fake.reset()
    collector = Collector(NvmlBackend(), CollectorOptions(
        interval_seconds=1, hostname="node-a", counters=parse_counters(csv, "t.csv")))
    await collector.open_backend()
    try:
        await collector.collect_once()
        text = collector.exposition.text.decode()
    finally:
        collector.backend.close()
    head0 = ('gpu="0",UUID="GPU-fa4e0000-7953-256e-8f33-1343419b1a1c",'
             'pci_bus_id="00000000:18:00.0",device="nvidia0",modelName="NVIDIA H100 80GB HBM3",'
             'Hostname="node-a",DCGM_FI_DEV_BRAND="NVIDIA",'
             'DCGM_FI_DEV_INFOROM_IMAGE_VER="G520.0200.00.05",DCGM_FI_DEV_OEM_INFOROM_VER="2.1",'
             'DCGM_FI_DRIVER_VERSION="580.105.08"')
    assert f"DCGM_FI_DEV_POWER_VIOLATION{{{head0}}} 1000000\n" in text
    assert f"DCGM_FI_DEV_POWER_MGMT_LIMIT{{{head0}}} 699.000000\n" in text
    assert f"DCGM_FI_DEV_CLOCKS_EVENT_REASONS{{{head0}}} 1\n" in text
    assert f"DCGM_FI_DEV_VGPU_LICENSE_STATUS{{{head0}}} 1\n" in text
    assert "# TYPE DCGM_FI_DEV_POWER_VIOLATION counter\n" in text
    # GPU 1 has no brand (NOT_SUPPORTED): that label is absent, not empty; nor a licence.
    gpu1 = [line for line in text.splitlines() if line.startswith("DCGM_FI_DEV_") and
            'gpu="1"' in line]
    assert gpu1 and all("DCGM_FI_DEV_BRAND=" not in line for line in gpu1)
    assert all('DCGM_FI_DEV_OEM_INFOROM_VER="2.1"' in line for line in gpu1)
    assert not any(line.startswith("DCGM_FI_DEV_VGPU_LICENSE_STATUS{") for line in gpu1)
    assert any(line.startswith("DCGM_FI_DEV_POWER_MGMT_LIMIT{") and line.endswith(" 599.000000")
               for line in gpu1)


def _uncommented(source: Path, dest: Path) -> Path:
    """The counters file with every `FIELD, type, help` line active (prose stays a comment)."""
    lines = []
    for raw in source.read_text(encoding="utf-8").splitlines():
        body = raw.lstrip("#").strip()
        lines.append(body if raw.startswith("#") and COUNTER_LINE.match(body) else raw)
    dest.write_text("\n".join(lines) + "\n", encoding="utf-8")
    return dest


async def test_dcgm_default_counters_every_line_uncommented(
        fake: FakeNvml, monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    """Every line of dcgm-exporter's default counters file, commented ones included, yields
    series on a fake GPU that supports it (GPU 0: GPM, NVLink, vGPU licensing): none is
    skipped."""
    lines = load_counters(_uncommented(dcgm_counters_csv(), tmp_path / "all.csv"))
    assert len(lines) > 50
    monkeypatch.setenv("FAKE_NVML_GPU_COUNT", "2")
    monkeypatch.setenv("FAKE_NVML_GPM", "0")
    fake.reset()
    backend = NvmlBackend()
    collector = Collector(backend, CollectorOptions(interval_seconds=1, hostname="node-a",
                                                    counters=lines))
    await collector.open_backend()
    try:
        await collector.collect_once()
        await collector.collect_once()  # GPM: a window between two samples
        text = collector.exposition.text.decode()
        deliverable = backend.deliverable_fields()
    finally:
        collector.backend.close()
    _, warnings = plan_counters(lines, deliverable, "nvml")
    # The file lists PCIE_TX/RX_BYTES twice (a commented counter, an active gauge): uncommented,
    # the second line is a duplicate, skipped with its own warning.
    skipped = {w.split(": ")[1].split()[0] for w in warnings if "already listed" not in w}
    assert skipped == NOT_YET, skipped
    labels_gpu0 = next(line for line in text.splitlines()
                       if line.startswith('DCGM_FI_DEV_GPU_TEMP{gpu="0",'))
    for line in lines:
        spec = IMPLEMENTED.get(line.field)
        if line.field in skipped or spec is None:
            continue
        if line.prom_type == "label":
            assert re.search(rf'[{{,]{line.field}="[^"]+"', labels_gpu0), line.field
        elif isinstance(spec.source, POLLED) or not line.field.endswith("_TOTAL"):
            # Event counts and statuses too; the *_TOTAL counters start at the first event.
            assert f'\n{line.field}{{gpu="0",' in text, line.field


def test_brand_and_licence_conversions() -> None:
    """DCGM's texts for nvmlBrandType_t (unnamed ids are "Unknown"), and its licence rule."""
    brand = IMPLEMENTED["DCGM_FI_DEV_BRAND"].convert
    assert [brand(b) for b in (0, 2, 11, 14, 16, 17, 19, 99)] == [
        "Unknown", "Tesla", "NVIDIA vGaming", "NVIDIA", "Titan RTX", "Unknown", "Unknown",
        "Unknown"]
    licence = IMPLEMENTED["DCGM_FI_DEV_VGPU_LICENSE_STATUS"].convert
    features = pynvml.c_nvmlGridLicensableFeatures_v4_t()
    assert licence(features) == 0, "no vGPU licensing on this GPU: 0"
    features.isGridLicenseSupported = 1
    features.licensableFeaturesCount = 2
    features.gridLicensableFeatures[0].featureCode = 2  # NVIDIA RTX, not vGPU
    features.gridLicensableFeatures[0].featureState = 1
    assert licence(features) is None, "no vGPU feature listed: no value"
    features.gridLicensableFeatures[1].featureCode = 1
    assert licence(features) == 0
    features.gridLicensableFeatures[1].featureState = 3
    assert licence(features) == 1
    limit = IMPLEMENTED["DCGM_FI_DEV_POWER_MGMT_LIMIT"].convert
    assert (limit(699999), limit(700000)) == (699.0, 700.0), "mW // 1000, as DCGM"
