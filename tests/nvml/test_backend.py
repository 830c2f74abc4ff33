"""The real pynvml code path against the fake libnvidia-ml.so.1 built by the suite.

The library is loaded once into this process (a soname can be loaded only once), configured
per test through its environment variables and control functions.
"""

import time
from collections.abc import Iterator

import pytest

from gpu_enricher.collector.loop import Collector, CollectorOptions
from gpu_enricher.fields.counters import parse_counters
from gpu_enricher.fields.namings import BY_CLASSIC
from gpu_enricher.fields.table import IMPLEMENTED
from gpu_enricher.model import NodeSnapshot
from gpu_enricher.nvml.backend import NvmlBackend
from tests.fake_nvml.build import FakeNvml
from tests.samples import value as metric_value

ALL = frozenset(IMPLEMENTED)
MIB = 1 << 20
UUID0 = "GPU-fa4e0000-7953-256e-8f33-1343419b1a1c"
UUID1 = "GPU-fa4e0001-7953-256e-8f33-1343419b1a1c"
def open_backend(fake: FakeNvml, monkeypatch: pytest.MonkeyPatch, slow_interval: float = 30.0,
                 **env: str) -> NvmlBackend:
    for key, value in env.items():
        monkeypatch.setenv(f"FAKE_NVML_{key.upper()}", value)
    fake.reset()
    backend = NvmlBackend(slow_interval_seconds=slow_interval)
    backend.open()
    return backend


@pytest.fixture
def backends() -> Iterator[list[NvmlBackend]]:
    opened: list[NvmlBackend] = []
    yield opened
    for backend in opened:
        backend.close()


def sample(backend: NvmlBackend) -> NodeSnapshot:
    return backend.sample(ALL)


def test_identity_values_and_units(fake: FakeNvml, monkeypatch: pytest.MonkeyPatch,
                                   backends: list[NvmlBackend]) -> None:
    backend = open_backend(fake, monkeypatch, gpu_count="2")
    backends.append(backend)
    snap = sample(backend)
    assert snap.driver_version == "580.105.08"
    g0, g1 = snap.gpus
    assert (g0.identity.index, g0.identity.uuid, g0.identity.pci_bus_id,
            g0.identity.model_name, g0.identity.minor_number) == (
        0, UUID0, "00000000:18:00.0", "NVIDIA H100 80GB HBM3", 0)
    assert g1.identity.uuid == UUID1 and g1.identity.pci_bus_id == "00000000:28:00.0"
    v = g0.values
    assert v["DCGM_FI_DEV_GPU_UTIL"] == 10 and g1.values["DCGM_FI_DEV_GPU_UTIL"] == 20
    assert v["DCGM_FI_DEV_MEM_COPY_UTIL"] == 5
    assert (v["DCGM_FI_DEV_ENC_UTIL"], v["DCGM_FI_DEV_DEC_UTIL"]) == (1, 2)
    # One v2 memory call: used excludes reserved.
    assert (v["DCGM_FI_DEV_FB_TOTAL"], v["DCGM_FI_DEV_FB_RESERVED"], v["DCGM_FI_DEV_FB_USED"],
            v["DCGM_FI_DEV_FB_FREE"]) == (81920, 512, 1024, 81920 - 512 - 1024)
    assert v["DCGM_FI_DEV_POWER_USAGE"] == pytest.approx(16.365)
    assert isinstance(v["DCGM_FI_DEV_POWER_USAGE"], float)
    assert int(v["DCGM_FI_DEV_TOTAL_ENERGY_CONSUMPTION"]) >= 1_000_000
    assert (v["DCGM_FI_DEV_SM_CLOCK"], v["DCGM_FI_DEV_MEM_CLOCK"]) == (1410, 1593)
    assert (v["DCGM_FI_DEV_GPU_TEMP"], v["DCGM_FI_DEV_MEMORY_TEMP"]) == (30, 40)
    assert (v["DCGM_FI_DEV_PCIE_REPLAY_COUNTER"], g1.values["DCGM_FI_DEV_PCIE_REPLAY_COUNTER"]) \
        == (0, 1)
    assert v["DCGM_FI_DRIVER_VERSION"] == "580.105.08"
    ecc = "DCGM_FI_DEV_ECC_DBE_VOL_TOTAL"
    assert (v[ecc], g1.values[ecc]) == (0, 1)
    assert "DCGM_FI_PROF_GR_ENGINE_ACTIVE" not in v
    assert [(p.pid, p.used_memory_bytes) for p in g0.processes] == [(4000, 256 * MIB)]
    assert g1.processes == ()
    assert fake.calls("nvmlDeviceGetMemoryInfo_v2") == 2
    assert fake.calls("nvmlDeviceGetMemoryInfo") == 0
    assert fake.calls("nvmlDeviceGetUtilizationRates") == 2, "GPU_UTIL and MEM_COPY share it"
    # Per GPU one batched call for the fields read every pass and, when due, one for the
    # slow counters (ECC, remapped rows).
    assert fake.calls("nvmlDeviceGetFieldValues") == 4, "two batched calls per GPU"
    energy = fake.calls("nvmlDeviceGetTotalEnergyConsumption")
    sample(backend)
    assert fake.calls("nvmlDeviceGetFieldValues") == 6, "the slow batch is not due again"
    assert fake.calls("nvmlDeviceGetTotalEnergyConsumption") == energy
    assert sample(backend).gpus[1].values[ecc] == 1, "repeated until refreshed"
    assert snap.errors == ()


def test_memory_v1_fallback_on_old_drivers(fake: FakeNvml, monkeypatch: pytest.MonkeyPatch,
                                           backends: list[NvmlBackend]) -> None:
    backend = open_backend(fake, monkeypatch, not_supported="0:memory_v2")
    backends.append(backend)
    g0, g1 = sample(backend).gpus
    # v1's used includes reserved; reserved itself is unknown.
    assert g0.values["DCGM_FI_DEV_FB_USED"] == 1024 + 512
    assert "DCGM_FI_DEV_FB_RESERVED" not in g0.values
    assert g0.values["DCGM_FI_DEV_FB_FREE"] == 81920 - 512 - 1024
    assert g1.values["DCGM_FI_DEV_FB_RESERVED"] == 512
    sample(backend)
    assert fake.calls("nvmlDeviceGetMemoryInfo_v2") == 1 + 2, "v2 not retried on GPU 0"


def test_not_supported_removes_one_series_only(fake: FakeNvml, monkeypatch: pytest.MonkeyPatch,
                                               backends: list[NvmlBackend]) -> None:
    backend = open_backend(fake, monkeypatch, not_supported="0:power,1:memtemp")
    backends.append(backend)
    g0, g1 = sample(backend).gpus
    assert "DCGM_FI_DEV_POWER_USAGE" not in g0.values
    assert g1.values["DCGM_FI_DEV_POWER_USAGE"] == pytest.approx(17.365)
    assert "DCGM_FI_DEV_MEMORY_TEMP" not in g1.values and g1.values["DCGM_FI_DEV_GPU_TEMP"] == 31
    assert g0.healthy and g1.healthy
    assert len(g0.values) == len(g1.values)
    calls = fake.calls("nvmlDeviceGetPowerUsage")
    snap = sample(backend)
    assert fake.calls("nvmlDeviceGetPowerUsage") == calls + 1, "unsupported call not repeated"
    assert snap.errors == (), "NOT_SUPPORTED is not an error"


def test_lost_gpu_is_isolated_counted_and_retried(
        fake: FakeNvml, monkeypatch: pytest.MonkeyPatch, backends: list[NvmlBackend]) -> None:
    backend = open_backend(fake, monkeypatch, gpu_count="3")
    backends.append(backend)
    healthy = sample(backend)
    fake.set_lost(1, True)
    snap = sample(backend)
    g0, g1, g2 = snap.gpus
    assert not g1.healthy and g1.values == {}
    assert g1.identity == healthy.gpus[1].identity, "a lost GPU keeps its last known labels"
    moving = {"DCGM_FI_DEV_TOTAL_ENERGY_CONSUMPTION"} | {  # NVLink bandwidth: 0, then a rate
        name for name in g0.values if name.startswith("DCGM_FI_DEV_NVLINK_BANDWIDTH_")}
    moving |= {BY_CLASSIC[name].current for name in moving}  # their DCGM 4.7 twins
    assert g0.values == healthy.gpus[0].values | {name: g0.values[name] for name in moving}
    assert g2.healthy and g2.values["DCGM_FI_DEV_GPU_TEMP"] == 32
    assert [(e.reason, e.gpu_index) for e in snap.errors] == [("GpuIsLost", 1)]
    fake.set_lost(1, False)
    assert sample(backend).gpus[1].healthy, "retried on the next pass"


def test_gpu_lost_from_the_start(fake: FakeNvml, monkeypatch: pytest.MonkeyPatch,
                                 backends: list[NvmlBackend]) -> None:
    backend = open_backend(fake, monkeypatch, gpu_count="2", lost="1")
    backends.append(backend)
    g0, g1 = sample(backend).gpus
    assert g0.healthy and not g1.healthy
    assert g1.identity.index == 1 and g1.identity.uuid == ""


def test_mig_instances_profiles_memory_and_reconfiguration(
        fake: FakeNvml, monkeypatch: pytest.MonkeyPatch, backends: list[NvmlBackend]) -> None:
    backend = open_backend(fake, monkeypatch, gpu_count="2", mig="1=1:9,2:19")
    backends.append(backend)
    g0, g1 = sample(backend).gpus
    assert not g0.mig_enabled and g0.instances == ()
    assert g1.mig_enabled and g1.identity.model_name == "NVIDIA A100-SXM4-80GB"
    assert [(i.gpu_instance_id, i.profile) for i in g1.instances] == [(1, "3g.40gb"),
                                                                      (2, "1g.10gb")]
    inst1, inst2 = g1.instances
    assert inst1.uuid.startswith("MIG-")
    assert (inst1.values["DCGM_FI_DEV_FB_TOTAL"], inst1.values["DCGM_FI_DEV_FB_USED"]) == \
        (40192, 100)
    assert (inst2.values["DCGM_FI_DEV_FB_TOTAL"], inst2.values["DCGM_FI_DEV_FB_USED"]) == \
        (9984, 200)
    assert "DCGM_FI_DEV_GPU_TEMP" not in inst1.values, "device-level fields come from the parent"
    # Compute slices from the profiles' sliceCount, over the largest profile's (7g): the
    # share of the GPU each instance is (GPU time per pod).
    assert [(i.slices, i.gpu_slices) for i in g1.instances] == [(3, 7), (1, 7)]
    fake.set_mig(1, "3:0")  # mig-parted at run time
    g1 = sample(backend).gpus[1]
    assert [(i.gpu_instance_id, i.profile) for i in g1.instances] == [(3, "7g.80gb")]
    assert [(i.slices, i.gpu_slices) for i in g1.instances] == [(7, 7)]


def test_profiling_fields_through_gpm(fake: FakeNvml, monkeypatch: pytest.MonkeyPatch,
                                      backends: list[NvmlBackend]) -> None:
    backend = open_backend(fake, monkeypatch, gpu_count="3", gpm="0,1", mig="1=1:9,2:19")
    backends.append(backend)
    assert "DCGM_FI_PROF_GR_ENGINE_ACTIVE" in backend.deliverable_fields()
    first = sample(backend)
    assert "DCGM_FI_PROF_GR_ENGINE_ACTIVE" not in first.gpus[0].values, "a rate needs 2 samples"
    g0, g1, g2 = sample(backend).gpus
    # GPM percentages become DCGM's ratios; PCIe MiB/s becomes bytes/s.
    assert g0.values["DCGM_FI_PROF_GR_ENGINE_ACTIVE"] == pytest.approx(0.60)
    assert g0.values["DCGM_FI_PROF_PIPE_TENSOR_ACTIVE"] == pytest.approx(0.25)
    assert g0.values["DCGM_FI_PROF_DRAM_ACTIVE"] == pytest.approx(0.20)
    assert g0.values["DCGM_FI_PROF_PCIE_TX_BYTES"] == pytest.approx(100 * MIB)
    inst1, inst2 = g1.instances
    assert inst1.values["DCGM_FI_PROF_GR_ENGINE_ACTIVE"] == pytest.approx(0.615)
    assert inst2.values["DCGM_FI_PROF_GR_ENGINE_ACTIVE"] == pytest.approx(0.62)
    assert "DCGM_FI_PROF_GR_ENGINE_ACTIVE" not in g2.values, "GPU 2 has no GPM: series absent"
    assert g2.healthy and not sample(backend).errors
    fake.set_mig(1, "1:9")
    freed = fake.calls("nvmlGpmSampleFree")
    sample(backend)
    assert fake.calls("nvmlGpmSampleFree") == freed + 2, "the removed instance's samples freed"


def test_no_gpm_means_no_profiling_fields(fake: FakeNvml, monkeypatch: pytest.MonkeyPatch,
                                          backends: list[NvmlBackend]) -> None:
    backend = open_backend(fake, monkeypatch)
    backends.append(backend)
    assert "DCGM_FI_PROF_GR_ENGINE_ACTIVE" not in backend.deliverable_fields()
    assert "DCGM_FI_DEV_GPU_UTIL" in backend.deliverable_fields()


CSV = """DCGM_FI_DEV_GPU_UTIL, gauge, GPU utilization (in %).
DCGM_FI_DEV_POWER_USAGE, gauge, Power draw (in W).
DCGM_FI_DEV_FB_USED, gauge, Framebuffer memory used (in MiB).
DCGM_FI_DRIVER_VERSION, label, Driver Version
"""


async def test_exposition_through_the_collector(
        fake: FakeNvml, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("FAKE_NVML_GPU_COUNT", "3")
    monkeypatch.setenv("FAKE_NVML_MIG", "1=1:9")
    monkeypatch.setenv("FAKE_NVML_LOST", "2")
    fake.reset()
    collector = Collector(NvmlBackend(), CollectorOptions(
        interval_seconds=1, hostname="node-a", counters=parse_counters(CSV, "t.csv")))
    await collector.open_backend()
    try:
        await collector.collect_once()
        text = collector.exposition.text.decode()
    finally:
        collector.backend.close()
    base0 = (f'gpu="0",UUID="{UUID0}",pci_bus_id="00000000:18:00.0",device="nvidia0",'
             'modelName="NVIDIA H100 80GB HBM3",Hostname="node-a",'
             'DCGM_FI_DRIVER_VERSION="580.105.08"')
    mig = (f'gpu="1",UUID="{UUID1}",pci_bus_id="00000000:28:00.0",device="nvidia1",'
           'modelName="NVIDIA A100-SXM4-80GB",GPU_I_PROFILE="3g.40gb",GPU_I_ID="1",'
           'Hostname="node-a",DCGM_FI_DRIVER_VERSION="580.105.08"')
    assert f"DCGM_FI_DEV_POWER_USAGE{{{base0}}} 16.365000\n" in text
    assert f"DCGM_FI_DEV_POWER_USAGE{{{mig}}} 17.365000\n" in text
    assert f"DCGM_FI_DEV_FB_USED{{{mig}}} 100\n" in text
    assert f"DCGM_FI_DEV_GPU_UTIL{{{base0}}} 10\n" in text
    assert 'GPU_I_ID="1",Hostname="node-a",DCGM_FI_DRIVER_VERSION="580.105.08"} 0' not in text
    assert text.count("DCGM_FI_DEV_GPU_UTIL{") == 1, "no GPU_UTIL per MIG instance"
    assert 'gpu="2"' not in text.split("# HELP gpu_enricher")[0], "lost GPU: no DCGM series"
    assert metric_value(text, "gpu_enricher_gpu_up", gpu="2", UUID="", Hostname="node-a") == 0
    assert metric_value(text, "gpu_enricher_gpu_up", gpu="0", UUID=UUID0) == 1
    assert metric_value(text, "gpu_enricher_collection_errors_total", source="nvml",
                        reason="GpuIsLost") == 1


def test_gpm_support_survives_a_gpu_lost_at_start(
        fake: FakeNvml, monkeypatch: pytest.MonkeyPatch, backends: list[NvmlBackend]) -> None:
    backend = open_backend(fake, monkeypatch, gpu_count="3", gpm="0,1,2", lost="0")
    backends.append(backend)
    assert "DCGM_FI_PROF_GR_ENGINE_ACTIVE" in backend.deliverable_fields()


def test_mig_mode_change_asks_again_what_was_not_supported(
        fake: FakeNvml, monkeypatch: pytest.MonkeyPatch, backends: list[NvmlBackend]) -> None:
    # The MIG mode read every pass (the default reads it on the slow cadence).
    backend = open_backend(fake, monkeypatch, slow_interval=0, gpu_count="2", mig="1=1:9")
    backends.append(backend)
    fake.set_not_supported(1, "util", True)  # as NVML answers for a GPU in MIG mode
    assert "DCGM_FI_DEV_GPU_UTIL" not in sample(backend).gpus[1].values
    fake.set_mig(1, None)  # mig-parted turns MIG off
    fake.set_not_supported(1, "util", False)
    sample(backend)  # this pass sees the mode change
    gpu1 = sample(backend).gpus[1]
    assert not gpu1.mig_enabled and gpu1.values["DCGM_FI_DEV_GPU_UTIL"] == 20


def test_slow_counters_refresh_on_their_cadence_and_never_go_backwards(
        fake: FakeNvml, monkeypatch: pytest.MonkeyPatch, backends: list[NvmlBackend]) -> None:
    """Energy, PCIe replay, ECC, remapped rows and the MIG mode: read once per slow interval,
    repeated exactly in between, refreshed within the interval (issue 12)."""
    backend = open_backend(fake, monkeypatch, slow_interval=0.3, gpu_count="1")
    backends.append(backend)
    energy = "DCGM_FI_DEV_TOTAL_ENERGY_CONSUMPTION"
    seen = [sample(backend).gpus[0].values[energy]]
    calls = fake.calls("nvmlDeviceGetTotalEnergyConsumption")
    mig_calls = fake.calls("nvmlDeviceGetMigMode")
    for _ in range(3):
        seen.append(sample(backend).gpus[0].values[energy])
    assert seen == [seen[0]] * 4, "repeated exactly between refreshes"
    assert fake.calls("nvmlDeviceGetTotalEnergyConsumption") == calls
    assert fake.calls("nvmlDeviceGetMigMode") == mig_calls
    time.sleep(0.35)
    refreshed = sample(backend).gpus[0].values[energy]
    assert refreshed > seen[0], "refreshed once the interval passed, and monotonic"
    assert fake.calls("nvmlDeviceGetTotalEnergyConsumption") == calls + 1
    fake.set_lost(0)
    assert not sample(backend).gpus[0].healthy
    fake.set_lost(0, False)
    before = fake.calls("nvmlDeviceGetTotalEnergyConsumption")
    assert sample(backend).gpus[0].values[energy] >= refreshed
    assert fake.calls("nvmlDeviceGetTotalEnergyConsumption") == before + 1, \
        "a GPU that returns is read in full at once"


async def test_driver_reload_reinitialises_nvml(fake: FakeNvml,
                                                monkeypatch: pytest.MonkeyPatch) -> None:
    import asyncio

    import pynvml

    monkeypatch.setenv("FAKE_NVML_GPU_COUNT", "2")
    fake.reset()
    collector = Collector(NvmlBackend(), CollectorOptions(
        interval_seconds=0.05, hostname=None, counters=parse_counters(CSV, "t.csv"),
        retry_initial_seconds=0.05))
    task = asyncio.create_task(collector.run())
    try:
        for _ in range(100):
            if collector.ready:
                break
            await asyncio.sleep(0.02)
        opened = fake.calls("nvmlInitWithFlags")
        pynvml.nvmlShutdown()  # the driver goes away under NVML: calls answer UNINITIALIZED
        # What a scrape is served, not the snapshot: since issue 33 the snapshot is taken
        # before the /proc refresh and the painter thread turns it into bytes.
        for _ in range(200):
            text = collector.exposition.text.decode()
            if fake.calls("nvmlInitWithFlags") > opened and "DCGM_FI_DEV_POWER_USAGE{" in text:
                break
            await asyncio.sleep(0.02)
        assert fake.calls("nvmlInitWithFlags") > opened, "NVML was initialised again"
        assert metric_value(text, "gpu_enricher_collection_errors_total", source="nvml",
                            reason="Uninitialized")
        assert "DCGM_FI_DEV_POWER_USAGE{" in text
        assert metric_value(text, "gpu_enricher_source_up", source="nvml") == 1
    finally:
        task.cancel()
        await asyncio.gather(task, return_exceptions=True)


async def test_a_driver_that_keeps_failing_is_reopened_with_backoff_and_logged_once(
        fake: FakeNvml, monkeypatch: pytest.MonkeyPatch,
        caplog: pytest.LogCaptureFixture) -> None:
    """nvmlInit works but every pass's nvmlDeviceGetCount answers UNINITIALIZED (issue 13,
    defect 7): reopened with backoff doubling from one interval to 32, one ERROR line, NVML
    reported down meanwhile, one line when it answers again."""
    import asyncio
    import logging

    monkeypatch.setenv("FAKE_NVML_GPU_COUNT", "2")
    monkeypatch.setenv("FAKE_NVML_COUNT_ERROR", "1")
    fake.reset()
    collector = Collector(NvmlBackend(), CollectorOptions(
        interval_seconds=0.05, hostname=None, counters=parse_counters(CSV, "t.csv"),
        retry_initial_seconds=0.05))
    caplog.set_level(logging.DEBUG, logger="gpu_enricher")
    task = asyncio.create_task(collector.run())
    try:
        await asyncio.sleep(2.0)
        inits = fake.calls("nvmlInitWithFlags")
        # Without backoff: one reopen per 50 ms pass, ~40. With it: 50, 100, … 1600 ms.
        assert 3 <= inits <= 8, inits
        text = collector.exposition.text.decode()
        assert metric_value(text, "gpu_enricher_source_up", source="nvml") == 0
        lost = [r for r in caplog.records if "backend lost" in r.getMessage()]
        assert [r.levelname for r in lost if r.levelno >= logging.INFO] == ["ERROR"]
        plans = [r for r in caplog.records if r.getMessage().startswith("collecting ")]
        assert len(plans) == 1, "the counters plan is logged once, not on every reopen"
        monkeypatch.delenv("FAKE_NVML_COUNT_ERROR")
        fake.reset()
        for _ in range(200):  # the next reopen is at most 1.6 s away
            if metric_value(collector.exposition.text.decode(), "gpu_enricher_source_up",
                            source="nvml") == 1:
                break
            await asyncio.sleep(0.02)
        text = collector.exposition.text.decode()
        assert metric_value(text, "gpu_enricher_source_up", source="nvml") == 1
        assert "DCGM_FI_DEV_POWER_USAGE{" in text
        again = [r for r in caplog.records if "answers again after" in r.getMessage()]
        assert len(again) == 1 and again[0].levelname == "WARNING"
    finally:
        task.cancel()
        await asyncio.gather(task, return_exceptions=True)
