"""The simulated node: deterministic, moving values; scenario files and their errors."""

from pathlib import Path

import pytest

from gpu_enricher.fields import IMPLEMENTED
from gpu_enricher.scenario import ScenarioError, builtin_scenario, load_scenario
from gpu_enricher.simulated import SimulatedBackend

ALL = frozenset(IMPLEMENTED)


class FakeClock:
    def __init__(self) -> None:
        self.now = 1000.0

    def __call__(self) -> float:
        return self.now


def backend() -> tuple[SimulatedBackend, FakeClock]:
    clock = FakeClock()
    sim = SimulatedBackend(builtin_scenario(), clock)
    sim.open()
    return sim, clock


def test_builtin_node_shape() -> None:
    sim, _ = backend()
    snap = sim.sample(ALL)
    models = [g.identity.model_name for g in snap.gpus]
    assert models == ["NVIDIA H100 80GB HBM3", "NVIDIA A100-SXM4-80GB", "NVIDIA A100-SXM4-80GB",
                      "NVIDIA L4"]
    mig = snap.gpus[2]
    assert mig.mig_enabled and [i.profile for i in mig.instances] == ["3g.40gb", "2g.20gb",
                                                                       "1g.10gb"]
    # The L4 is held through a DRA claim (vision/detector-0), and a pod that holds no GPU
    # runs a process on it too.
    taken = snap.gpus[3]
    assert [p.pid for p in taken.processes] == [5120, 5301]
    assert 0.3 <= (taken.processes[0].sm_utilization or 0) <= 0.7
    assert all(g.healthy for g in snap.gpus)
    # Profiling (NVML GPM) only where real hardware has it: the Hopper GPU, not the A100s,
    # their MIG instances or the L4.
    h100 = snap.gpus[0]
    assert 0 < float(h100.values["DCGM_FI_PROF_GR_ENGINE_ACTIVE"]) <= 1
    assert 0 <= float(h100.values["DCGM_FI_PROF_PIPE_TENSOR_ACTIVE"]) <= 1
    for gpu in snap.gpus[1:]:
        assert not any(f.startswith("DCGM_FI_PROF_") for f in gpu.values), gpu.identity
        for inst in gpu.instances:
            assert not any(f.startswith("DCGM_FI_PROF_") for f in inst.values)
            assert inst.values["DCGM_FI_DEV_FB_TOTAL"] > 0


def test_gpm_follows_the_model_unless_the_scenario_says(tmp_path: Path) -> None:
    path = tmp_path / "node.yaml"
    path.write_text("gpus:\n"
                    "  - {model: NVIDIA H200, mig: [{gi: 1, profile: 1g.18gb}]}\n"
                    "  - {model: NVIDIA B200}\n"
                    "  - {model: NVIDIA A100-SXM4-40GB}\n"
                    "  - {model: NVIDIA A100-SXM4-40GB, gpm: true}\n"
                    "  - {model: NVIDIA H100 PCIe, gpm: false}\n")
    scenario = load_scenario(path)
    assert [g.gpm for g in scenario.gpus] == [True, True, False, True, False]
    sim = SimulatedBackend(scenario, FakeClock())
    snap = sim.sample(ALL)
    assert "DCGM_FI_PROF_SM_ACTIVE" in snap.gpus[0].instances[0].values, "GPM on Hopper MIG"
    assert ["DCGM_FI_PROF_SM_ACTIVE" in g.values for g in snap.gpus] == [
        True, True, False, True, False]
    assert "DCGM_FI_PROF_SM_ACTIVE" in sim.deliverable_fields()
    path.write_text("gpus: [{model: NVIDIA A100-SXM4-80GB}, {model: NVIDIA L4}]\n")
    no_gpm = SimulatedBackend(load_scenario(path), FakeClock())
    assert "DCGM_FI_DEV_GPU_UTIL" in no_gpm.deliverable_fields()
    assert not any(f.startswith("DCGM_FI_PROF_") for f in no_gpm.deliverable_fields()), \
        "an A100/L4-only node warns about profiling lines, as the NVML backend does"
    path.write_text("gpus: [{gpm: maybe}]\n")
    with pytest.raises(ScenarioError, match=r"gpus\[0\]\.gpm: expected true or false"):
        load_scenario(path)


def test_values_are_deterministic_and_move_over_time() -> None:
    a, clock_a = backend()
    b, clock_b = backend()
    assert a.sample(ALL) == b.sample(ALL)
    first = a.sample(ALL).gpus[0].values
    clock_a.now += 30
    later = a.sample(ALL).gpus[0].values
    assert first["DCGM_FI_DEV_POWER_USAGE"] != later["DCGM_FI_DEV_POWER_USAGE"]
    assert later["DCGM_FI_DEV_TOTAL_ENERGY_CONSUMPTION"] > first[
        "DCGM_FI_DEV_TOTAL_ENERGY_CONSUMPTION"]
    clock_b.now += 30
    assert b.sample(ALL).gpus[0].values == later


def test_only_requested_fields_are_returned() -> None:
    sim, _ = backend()
    gpu = sim.sample(frozenset({"DCGM_FI_DEV_GPU_TEMP"})).gpus[0]
    assert set(gpu.values) == {"DCGM_FI_DEV_GPU_TEMP"}


def test_scenario_file_with_lost_gpu(tmp_path: Path) -> None:
    path = tmp_path / "node.yaml"
    path.write_text(
        "seed: 3\n"
        "gpus:\n"
        "  - {model: NVIDIA H200, utilization: [10, 20], memory_mib: 143771,\n"
        "     processes: [{pid: 7, used_memory_mib: 100}]}\n"
        "  - {model: NVIDIA H200, lost: true}\n"
    )
    sim = SimulatedBackend(load_scenario(path), FakeClock())
    snap = sim.sample(ALL)
    assert snap.gpus[0].values["DCGM_FI_DEV_FB_TOTAL"] == 143771
    assert 10 <= int(snap.gpus[0].values["DCGM_FI_DEV_GPU_UTIL"]) <= 20
    assert snap.gpus[0].processes[0].used_memory_bytes == 100 << 20
    assert not snap.gpus[1].healthy
    assert [(e.reason, e.gpu_index) for e in snap.errors] == [("GpuIsLost", 1)]


@pytest.mark.parametrize(
    ("text", "message"),
    [
        ("gpus: []", "gpus: expected a non-empty list"),
        ("gpus: [{utilization: [90, 10]}]", "gpus[0].utilization: expected a number or"),
        ("gpus: [{colour: red}]", "gpus[0]: unknown key 'colour'; known: gpm, lost, mem_clock_mhz"),
        ("gpus: [{utilisation: 5}]",
         "gpus[0]: unknown key 'utilisation' (did you mean 'utilization'?)"),
        ("gpu: [{}]", "unknown key 'gpu' (did you mean 'gpus'?); known: driver_version, gpus"),
        ("gpus: [{}]\npods: [{namespace: a, pod: b, container: c, gpu: [0]}]",
         "pods[0]: unknown key 'gpu' (did you mean 'gpus'?)"),
        ("gpus: [{}]\n  bad: indent", ":2:3: invalid YAML: expected <block end>, but found"),
        ("gpus: [{mig: [{gi: 1}]}]", "gpus[0].mig[0].profile: required"),
        ("gpus: [{mig: [{gi: 1, profile: 1g.10gb, activty: 1}]}]",
         "gpus[0].mig[0]: unknown key 'activty' (did you mean 'activity'?)"),
        ("gpus: [{processes: [{pid: 1, used_memory: 5}]}]",
         "gpus[0].processes[0]: unknown key 'used_memory' (did you mean 'used_memory_mib'?)"),
        ("gpus: [{processes: [{pid: -1}]}]", "gpus[0].processes[0].pid: expected a non-negative"),
        ("gpus: [oops", "invalid YAML"),
        ("gpus: [{}]\npodz: []\nseeed: 1", "unknown keys 'podz' (did you mean 'pods'?), "
                                            "'seeed' (did you mean 'seed'?)"),
    ],
)
def test_scenario_errors_name_file_and_key(tmp_path: Path, text: str, message: str) -> None:
    path = tmp_path / "bad.yaml"
    path.write_text(text)
    with pytest.raises(ScenarioError) as err:
        load_scenario(path)
    assert str(err.value).startswith(str(path))
    assert message in str(err.value)
