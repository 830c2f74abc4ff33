"""GPU processes through the real pynvml over the fake libnvidia-ml.so.1: the compute and
graphics lists, MIG attribution and per-process utilisation."""

import time
from collections.abc import Callable, Iterator
from types import SimpleNamespace
from typing import Any

import pynvml
import pytest

from gpu_enricher.fields.table import IMPLEMENTED
from gpu_enricher.model import NodeSnapshot, ProcessSample
from gpu_enricher.nvml import processes as nvml_processes
from gpu_enricher.nvml.backend import NvmlBackend
from gpu_enricher.nvml.processes import attribute, newest_per_pid, ratio
from tests.fake_nvml.build import FakeNvml, FakeProcess

MIB = 1 << 20
UUID0 = "GPU-fa4e0000-7953-256e-8f33-1343419b1a1c"
UTIL = "nvmlDeviceGetProcessUtilization"


def wrap_symbol(monkeypatch: pytest.MonkeyPatch, symbol: str,
                stand_in: Callable[[Any], Any]) -> None:
    """Replace one NVML symbol where pynvml looks it up: `stand_in(real)` gives the function
    called instead (the C function's arguments, an nvmlReturn_t back), or raises as pynvml
    does for a symbol the driver lacks."""
    lookup = pynvml._nvmlGetFunctionPointer

    def patched(name: str) -> Any:
        return stand_in(lookup(name)) if name == symbol else lookup(name)

    monkeypatch.setattr(pynvml, "_nvmlGetFunctionPointer", patched)


@pytest.fixture
def nvml(fake: FakeNvml, monkeypatch: pytest.MonkeyPatch) -> Iterator[Any]:
    """`nvml(**env)` opens a backend over the fake configured by FAKE_NVML_<KEY>=value."""
    opened: list[NvmlBackend] = []

    def open_backend(**env: str) -> NvmlBackend:
        for key, value in env.items():
            monkeypatch.setenv(f"FAKE_NVML_{key.upper()}", value)
        fake.reset()
        backend = NvmlBackend()
        backend.open()
        opened.append(backend)
        return backend

    monkeypatch.delenv("FAKE_NVML_PROCESSES", raising=False)
    yield open_backend
    for backend in opened:
        backend.close()


def sample(backend: NvmlBackend) -> NodeSnapshot:
    return backend.sample(frozenset(IMPLEMENTED))


def summary(procs: tuple[ProcessSample, ...]) -> list[tuple[object, ...]]:
    return [(p.pid, p.used_memory_bytes, p.gpu_instance_id, p.sm_utilization,
             p.memory_utilization, p.kind) for p in procs]


def test_two_processes_with_their_utilisation(nvml: Any) -> None:
    backend = nvml(processes="0=100:512::90:30,101:64::45:100")
    snap = sample(backend)
    g0, g1 = snap.gpus
    assert summary(g0.processes) == [
        (100, 512 * MIB, None, pytest.approx(0.90), pytest.approx(0.30), "compute"),
        (101, 64 * MIB, None, pytest.approx(0.45), pytest.approx(1.0), "compute"),
    ]
    assert g1.processes == (), "GPU 1 (odd, not configured) runs nothing"
    assert snap.errors == ()
    assert g0.values["DCGM_FI_DEV_GPU_TEMP"] == 30, "other values unaffected"


def test_graphics_processes_and_one_entry_per_pid(fake: FakeNvml, nvml: Any) -> None:
    backend = nvml(gpu_count="1")
    fake.set_processes(0, [
        FakeProcess(100, 512, kind="c"),
        FakeProcess(101, 64, sm_percent=20, kind="g"),
        FakeProcess(102, 32, kind="b"),  # in both lists: reported once, as compute
        FakeProcess(103, None),  # NVML_VALUE_NOT_AVAILABLE
    ])
    (g0,) = sample(backend).gpus
    assert summary(g0.processes) == [
        (100, 512 * MIB, None, None, None, "compute"),
        (102, 32 * MIB, None, None, None, "compute"),
        (103, None, None, None, None, "compute"),
        (101, 64 * MIB, None, pytest.approx(0.20), 0.0, "graphics"),
    ]


def test_mig_processes_carry_their_gpu_instance(fake: FakeNvml, nvml: Any) -> None:
    # 200: the parent names its GI; 201: the parent hides it, MIG handle 2 lists it;
    # 202: in no GPU instance (the parent and every MIG handle say so).
    backend = nvml(gpu_count="2", mig="1=1:9,2:19",
                   processes="1=200:10:1:50,201:20:~2:60,202:30")
    snap = sample(backend)
    g1 = snap.gpus[1]
    assert [(p.pid, p.gpu_instance_id, p.used_memory_bytes) for p in g1.processes] == [
        (200, 1, 10 * MIB), (201, 2, 20 * MIB), (202, None, 30 * MIB)]
    assert all(p.sm_utilization is None for p in g1.processes), "no per-process util in MIG mode"
    assert snap.errors == ()
    assert fake.calls(UTIL) == 2, "one call per GPU (GPU 0: its default process)"
    sample(backend)
    assert fake.calls(UTIL) == 3, "GPU 1's NOT_SUPPORTED (MIG mode) was remembered"


def test_mig_handles_supply_processes_the_parent_does_not_list(
        fake: FakeNvml, nvml: Any, monkeypatch: pytest.MonkeyPatch) -> None:
    backend = nvml(gpu_count="1", mig="0=1:9,2:19", processes="0=200:10:1,201:20:2")
    parent = pynvml.nvmlDeviceGetHandleByIndex(0)

    def refused_on_parent(real: Any) -> Any:
        def call(handle: Any, count: Any, entries: Any) -> int:
            # As NVML answers an unprivileged caller on a MIG-mode parent.
            if pynvml.nvmlDeviceIsMigDeviceHandle(handle).value == 0 and \
                    pynvml.nvmlDeviceGetUUID(handle) == pynvml.nvmlDeviceGetUUID(parent):
                return int(pynvml.NVML_ERROR_NO_PERMISSION)
            return int(real(handle, count, entries))
        return call

    wrap_symbol(monkeypatch, "nvmlDeviceGetComputeRunningProcesses_v3", refused_on_parent)
    snap = sample(backend)
    assert [(p.pid, p.gpu_instance_id, p.kind) for p in snap.gpus[0].processes] == [
        (200, 1, "compute"), (201, 2, "compute")]
    assert snap.errors == (), "NO_PERMISSION is remembered like NOT_SUPPORTED, not counted"


def test_no_new_samples_is_not_an_error(fake: FakeNvml, nvml: Any) -> None:
    backend = nvml(gpu_count="1", processes="0=100:512,101:64")  # no SM%: NOT_FOUND
    for passes in (1, 2):
        snap = sample(backend)
        assert [(p.pid, p.sm_utilization, p.memory_utilization) for p in snap.gpus[0].processes] \
            == [(100, None, None), (101, None, None)]
        assert snap.errors == ()
        assert fake.calls(UTIL) == passes, "asked again every pass: NOT_FOUND is not sticky"


def test_not_supported_utilisation_is_remembered(fake: FakeNvml, nvml: Any) -> None:
    backend = nvml(gpu_count="1", processes="0=100:512::90", not_supported="0:proc_util")
    snap = sample(backend)
    assert [(p.pid, p.sm_utilization) for p in snap.gpus[0].processes] == [(100, None)]
    sample(backend)
    assert fake.calls(UTIL) == 1, "not asked again"
    assert snap.errors == ()


def test_no_processes_no_utilisation_call(fake: FakeNvml, nvml: Any) -> None:
    backend = nvml(gpu_count="2", processes="0=;1=")
    assert all(g.processes == () for g in sample(backend).gpus)
    assert fake.calls(UTIL) == 0


def test_each_pass_passes_the_newest_timestamp_it_saw(fake: FakeNvml, nvml: Any) -> None:
    backend = nvml(gpu_count="1", processes="0=100:512::90:30,101:64::10")
    sample(backend)
    seen, newest = fake.proc_util_stamps(0)
    assert seen == 0 and newest > 0, "the first pass asks for everything"
    second = sample(backend)
    seen2, newest2 = fake.proc_util_stamps(0)
    assert seen2 == newest and newest2 > newest
    assert [p.sm_utilization for p in second.gpus[0].processes] == [pytest.approx(0.9),
                                                                     pytest.approx(0.1)]
    fake.set_processes(0, "100:512,101:64")  # the samples stop: nothing newer than newest2
    sample(backend)
    assert fake.proc_util_stamps(0)[0] == newest2, "kept across a pass without samples"


def utilisation(snap: NodeSnapshot) -> list[tuple[int, float | None, float | None]]:
    return [(p.pid, p.sm_utilization, p.memory_utilization) for p in snap.gpus[0].processes]


def test_a_pass_without_new_samples_keeps_the_last_ones(fake: FakeNvml, nvml: Any) -> None:
    backend = nvml(gpu_count="1", processes="0=100:512::90:30,101:64::10")
    first = utilisation(sample(backend))
    assert first == [(100, pytest.approx(0.9), pytest.approx(0.3)),
                     (101, pytest.approx(0.1), 0.0)]
    fake.set_processes(0, "100:512,101:64")  # still running, no sample since (NOT_FOUND)
    assert utilisation(sample(backend)) == first
    fake.set_processes(0, "100:512::50,101:64")  # a sample for 100 only
    assert utilisation(sample(backend)) == [(100, pytest.approx(0.5), 0.0),
                                            (101, pytest.approx(0.1), 0.0)]
    assert sample(backend).errors == ()


def test_a_departed_pid_is_forgotten(fake: FakeNvml, nvml: Any) -> None:
    backend = nvml(gpu_count="1", processes="0=100:512::90,101:64::10")
    sample(backend)
    fake.set_processes(0, "100:512")  # 101 left the GPU
    assert utilisation(sample(backend)) == [(100, pytest.approx(0.9), 0.0)]
    fake.set_processes(0, "100:512,101:64")  # a new 101 (PID reused): no sample of its own
    assert utilisation(sample(backend)) == [(100, pytest.approx(0.9), 0.0), (101, None, None)]
    fake.set_processes(0, [])  # nothing runs: nothing remembered
    sample(backend)
    fake.set_processes(0, "100:512")
    assert utilisation(sample(backend)) == [(100, None, None)]


def test_a_carried_sample_expires(fake: FakeNvml, nvml: Any,
                                  monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(nvml_processes, "SAMPLE_VALID_SECONDS", 0.5)
    backend = nvml(gpu_count="1", processes="0=100:512::90")
    sample(backend)
    fake.set_processes(0, "100:512")
    assert utilisation(sample(backend)) == [(100, pytest.approx(0.9), 0.0)]
    time.sleep(0.6)  # the sample's NVML timestamp is now older than the bound
    assert utilisation(sample(backend)) == [(100, None, None)]
    fake.set_processes(0, "100:512::40")
    assert utilisation(sample(backend)) == [(100, pytest.approx(0.4), 0.0)]


def test_a_failing_utilisation_call_costs_only_itself(
        fake: FakeNvml, nvml: Any, monkeypatch: pytest.MonkeyPatch) -> None:
    backend = nvml(gpu_count="1", processes="0=100:512::90")
    healthy = sample(backend).gpus[0]

    def timeout(handle: Any, last_seen: int) -> Any:
        raise pynvml.NVMLError(pynvml.NVML_ERROR_TIMEOUT)

    monkeypatch.setattr(pynvml, UTIL, timeout)
    snap = sample(backend)
    g0 = snap.gpus[0]
    assert g0.healthy and [(p.pid, p.sm_utilization) for p in g0.processes] == [(100, None)]
    assert set(g0.values) == set(healthy.values)
    assert [(e.reason, e.gpu_index) for e in snap.errors] == [("Timeout", 0)]


def test_a_sample_arriving_mid_read_is_read_again(
        fake: FakeNvml, nvml: Any, monkeypatch: pytest.MonkeyPatch) -> None:
    backend = nvml(gpu_count="1", processes="0=100:512::90")
    real = pynvml.nvmlDeviceGetProcessUtilization
    answers = iter([pynvml.NVMLError(pynvml.NVML_ERROR_INSUFFICIENT_SIZE)])

    def racing(handle: Any, last_seen: int) -> Any:
        error = next(answers, None)
        if error is not None:
            raise error
        return real(handle, last_seen)

    monkeypatch.setattr(pynvml, UTIL, racing)
    snap = sample(backend)
    assert [p.sm_utilization for p in snap.gpus[0].processes] == [pytest.approx(0.9)]
    assert snap.errors == ()


def test_lost_gpu_during_the_process_read_fails_the_gpu(
        fake: FakeNvml, nvml: Any, monkeypatch: pytest.MonkeyPatch) -> None:
    backend = nvml(gpu_count="2", processes="0=100:512::90;1=101:1::5")

    def lost(handle: Any, last_seen: int) -> Any:
        raise pynvml.NVMLError(pynvml.NVML_ERROR_GPU_IS_LOST)

    monkeypatch.setattr(pynvml, UTIL, lost)
    snap = sample(backend)
    assert [g.healthy for g in snap.gpus] == [False, False]
    assert [(e.reason, e.gpu_index) for e in snap.errors] == [("GpuIsLost", 0), ("GpuIsLost", 1)]


def test_newest_sample_per_pid_and_ratios() -> None:
    samples = [SimpleNamespace(pid=7, timeStamp=t, smUtil=s, memUtil=0)
               for t, s in [(10, 1), (30, 3), (20, 2)]]
    samples.append(SimpleNamespace(pid=8, timeStamp=5, smUtil=50, memUtil=0))
    newest = newest_per_pid(samples)
    assert {pid: s.smUtil for pid, s in newest.items()} == {7: 3, 8: 50}
    assert (ratio(0), ratio(55), ratio(100), ratio(140)) == (0.0, 0.55, 1.0, 1.0)
    assert ratio(0xFFFFFFFF) is None


def test_attribution_keeps_known_instances() -> None:
    procs = {1: ProcessSample(1, 10, 3), 2: ProcessSample(2, 20, None, kind="graphics")}
    attribute(procs, {4: {1: ProcessSample(1, 10, 4), 2: ProcessSample(2, 20, 4)},
                      5: {9: ProcessSample(9, None, 5)}})
    assert [(p.pid, p.gpu_instance_id, p.kind) for p in procs.values()] == [
        (1, 3, "compute"), (2, 4, "graphics"), (9, 5, "compute")]


MPS_V3 = "nvmlDeviceGetMPSComputeRunningProcesses_v3"
MPS_V2 = "nvmlDeviceGetMPSComputeRunningProcesses_v2"


def test_mps_clients_are_read_with_their_type(fake: FakeNvml, nvml: Any) -> None:
    # 300: the MPS server (compute list); 301: a client only the MPS list shows; 302: a client
    # in the MPS and compute lists (nvidia-smi's M+C), reported once, as mps.
    backend = nvml(gpu_count="1", processes="0=300:40,301:1024::::m,302:2048::35::M")
    snap = sample(backend)
    assert summary(snap.gpus[0].processes) == [
        (301, 1024 * MIB, None, None, None, "mps"),
        (302, 2048 * MIB, None, pytest.approx(0.35), 0.0, "mps"),
        (300, 40 * MIB, None, None, None, "compute"),
    ]
    assert snap.errors == ()
    # pynvml's size query and its read: two library calls per read.
    assert (fake.calls(MPS_V3), fake.calls(MPS_V2)) == (2, 0)


def test_mps_clients_of_mig_instances(fake: FakeNvml, nvml: Any) -> None:
    backend = nvml(gpu_count="1", mig="0=1:9,2:19", processes="0=400:10:1:::m,401:20:~2:::m")
    snap = sample(backend)
    assert [(p.pid, p.gpu_instance_id, p.kind) for p in snap.gpus[0].processes] == [
        (400, 1, "mps"), (401, 2, "mps")]
    assert fake.calls(MPS_V3) == 3 * 2, "the GPU and each of its two MIG devices"


def test_mps_not_supported_is_remembered_per_device(fake: FakeNvml, nvml: Any) -> None:
    backend = nvml(gpu_count="2", processes="0=100:512;1=200:64::::m", not_supported="0:mps")
    for _ in range(3):
        snap = sample(backend)
        assert [(p.pid, p.kind) for g in snap.gpus for p in g.processes] == [
            (100, "compute"), (200, "mps")]
        assert snap.errors == ()
    assert fake.calls(MPS_V3) == 1 + 3 * 2, "GPU 0 asked once, GPU 1 every pass (size, read)"


def test_mps_falls_back_to_v2_without_the_v3_symbol(
        fake: FakeNvml, nvml: Any, monkeypatch: pytest.MonkeyPatch) -> None:
    backend = nvml(gpu_count="1", processes="0=500:128::::m")

    def missing(real: Any) -> Any:  # what pynvml raises for a symbol the driver lacks
        raise pynvml.NVMLError(pynvml.NVML_ERROR_FUNCTION_NOT_FOUND)

    wrap_symbol(monkeypatch, MPS_V3, missing)
    for passes in (1, 2):
        snap = sample(backend)
        assert [(p.pid, p.used_memory_bytes, p.kind) for p in snap.gpus[0].processes] == [
            (500, 128 * MIB, "mps")]
        assert fake.calls(MPS_V2) == 2 * passes
    assert snap.errors == ()


def test_mps_read_failure_costs_only_that_list(fake: FakeNvml, nvml: Any,
                                               monkeypatch: pytest.MonkeyPatch) -> None:
    backend = nvml(gpu_count="1", processes="0=100:512,101:64::::m")

    failures = [pynvml.NVML_ERROR_TIMEOUT]

    def failing_once(real: Any) -> Any:
        def call(handle: Any, count: Any, entries: Any) -> int:
            return int(failures.pop()) if failures else int(real(handle, count, entries))
        return call

    wrap_symbol(monkeypatch, MPS_V3, failing_once)
    snap = sample(backend)
    assert [p.pid for p in snap.gpus[0].processes] == [100]
    assert [e.reason for e in snap.errors] == ["Timeout"]
    assert [p.pid for p in sample(backend).gpus[0].processes] == [101, 100], "asked again"
