"""The simulated node: deterministic, moving values; scenario files and their errors."""

import os
import re
import threading
import time
from importlib import resources
from pathlib import Path

import pytest

from gpu_enricher.collector.loop import Collector, CollectorOptions
from gpu_enricher.fields.counters import parse_counters
from gpu_enricher.fields.namings import RENAMES, Scale, to_classic
from gpu_enricher.fields.table import IMPLEMENTED
from gpu_enricher.sim.backend import SimulatedBackend
from gpu_enricher.sim.scenario import ScenarioError, builtin_scenario, load_scenario

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
    # DCGM's entity ids (`-d i:IDS`): GPU 2 * 7 slots + the rank by profile (1g, 2g, 3g).
    assert [i.entity_id for i in mig.instances] == [16, 15, 14]
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


def test_the_energy_counter_integrates_the_power_shown() -> None:
    sim, clock = backend()
    energy, power = "DCGM_FI_DEV_TOTAL_ENERGY_CONSUMPTION", "DCGM_FI_DEV_POWER_USAGE"
    before = sim.sample(ALL).gpus[0].values
    clock.now += 7
    after = sim.sample(ALL).gpus[0].values
    rise = float(after[energy]) - float(before[energy])
    assert abs(rise - 7 * 1000 * float(after[power])) <= 1, "mJ: the power times the step"


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


THERMAL = 0x40  # NVML's clocks-event reason bit: HW thermal slowdown


def test_thermal_slowdown_sets_the_clock_event_bit_and_the_violation_grows(
        tmp_path: Path) -> None:
    path = tmp_path / "node.yaml"
    path.write_text("gpus:\n"
                    "  - {model: NVIDIA L4, thermal_slowdown: true}\n"
                    "  - {model: NVIDIA L4, thermal_slowdown: false}\n"
                    "  - {model: NVIDIA L4, thermal_slowdown:}\n"  # no value: absent
                    "  - {model: NVIDIA L4, utilization: 100, power_watts: 500,\n"
                    "     thermal_slowdown: true}\n")
    scenario = load_scenario(path)
    assert [g.thermal_slowdown for g in scenario.gpus] == [True, False, False, True]
    clock = FakeClock()
    sim = SimulatedBackend(scenario, clock)
    sim.open()
    clock.now += 10
    first = [g.values for g in sim.sample(ALL).gpus]
    clock.now += 20
    later = [g.values for g in sim.sample(ALL).gpus]
    reasons = [int(v["DCGM_FI_DEV_CLOCKS_EVENT_REASONS"]) for v in first + later]
    assert [bool(r & THERMAL) for r in reasons] == [True, False, False, True] * 2
    # The other reasons stay: the fully loaded one is also at its power cap (0x4).
    assert reasons[3] == THERMAL | 0x4
    violation = [int(v["DCGM_FI_DEV_THERMAL_VIOLATION"]) for v in first + later]
    assert violation[0] == 10 * 10**9 and violation[4] == 30 * 10**9  # ns, monotonic
    assert violation[1] == violation[2] == violation[5] == violation[6] == 0
    # The built-in node's L4 sits in a badly cooled slot; the others are fine.
    assert [g.thermal_slowdown for g in builtin_scenario().gpus] == [False, False, False, True]


HEALTH_AND_P2P = """DCGM_FI_DEV_GPU_TEMP, gauge, GPU temperature (in C).
DCGM_EXP_GPU_HEALTH_STATUS, counter, DCGM reported health status
DCGM_EXP_P2P_STATUS, counter, P2P NvLink status
"""


async def test_builtin_node_health_and_p2p_through_the_collector() -> None:
    """The built-in node through the real collector: the L4's thermal slowdown is a THERMAL
    WARN (every other watch PASS), and its two A100-SXM4s are NVLink peers."""
    collector = Collector(SimulatedBackend(builtin_scenario(), FakeClock()), CollectorOptions(
        interval_seconds=1, hostname="node-a",
        counters=parse_counters(HEALTH_AND_P2P, "counters.csv")))
    await collector.open_backend()
    await collector.collect_once()
    text = collector.exposition.text.decode()
    health: dict[tuple[str, str], tuple[str, str]] = {}
    p2p: dict[tuple[str, str], tuple[str, str]] = {}
    for line in text.splitlines():
        labels = dict(re.findall(r'(\w+)="([^"]*)"', line))
        if line.startswith("DCGM_EXP_GPU_HEALTH_STATUS{"):
            health[(labels["gpu"], labels["health_watch"])] = (
                labels["health_error_code"], line.rsplit(" ", 1)[1])
        elif line.startswith("DCGM_EXP_P2P_STATUS{"):
            p2p[(labels["gpu"], labels["peer_gpu"])] = (labels["link_status"],
                                                        line.rsplit(" ", 1)[1])
    assert len(health) == 4 * 10
    assert health[("3", "THERMAL")] == ("DCGM_FR_CLOCK_THROTTLE_THERMAL", "10")
    assert {k: v for k, v in health.items() if k != ("3", "THERMAL")} == {
        k: ("DCGM_FR_OK", "0") for k in health if k != ("3", "THERMAL")}
    assert p2p[("1", "2")] == p2p[("2", "1")] == ("OK", "0")
    assert len(p2p) == 4 * 3


@pytest.mark.parametrize(
    ("text", "message"),
    [
        ("gpus: []", "gpus: expected a non-empty list"),
        ("gpus: [{utilization: [90, 10]}]", "gpus[0].utilization: expected a number or"),
        ("gpus: [{colour: red}]", "gpus[0]: unknown key 'colour'; known: gpm, hpc_jobs, lost"),
        ("gpus: [{utilisation: 5}]",
         "gpus[0]: unknown key 'utilisation' (did you mean 'utilization'?)"),
        ("gpu: [{}]",
         "unknown key 'gpu' (did you mean 'gpus'?); known: churn, containers, driver_version"),
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


# Issue 13, defect 6: strict types, no duplicates, positions, a safe loader.


@pytest.mark.parametrize(
    ("text", "message"),
    [
        # Strings are not numbers, booleans are not numbers, floats are not integers.
        ('gpus: [{utilization: "50"}]', ":1: gpus[0].utilization: expected a number or"),
        ("gpus: [{utilization: true}]", ":1: gpus[0].utilization: expected a number or"),
        ("gpus: [{utilization: .inf}]", ":1: gpus[0].utilization: expected a number or"),
        ("gpus: [{memory_mib: 81559.0}]", ":1: gpus[0].memory_mib: expected a non-negative"),
        ("gpus: [{memory_mib: true}]", ":1: gpus[0].memory_mib: expected a non-negative"),
        ("period_seconds: [10, 20]\ngpus: [{}]", ":1: period_seconds: expected a number"),
        ("gpus: [{lost: 'no'}]", ":1: gpus[0].lost: expected true or false, got 'no'"),
        ("gpus: [{lost: 1}]", ":1: gpus[0].lost: expected true or false, got 1"),
        ("gpus: [{thermal_slowdown: 'yes'}]",
         ":1: gpus[0].thermal_slowdown: expected true or false, got 'yes'"),
        ("gpus: [{thermal_slowdown: 1}]",
         ":1: gpus[0].thermal_slowdown: expected true or false, got 1"),
        # Numbers are not strings: quoting says what is meant (550.120 would read as 550.12).
        ("driver_version: 550.120\ngpus: [{}]", ":1: driver_version: expected a string"),
        ("gpus: [{model: 100}]", ":1: gpus[0].model: expected a string, got 100"),
        ("gpus: [{pci_bus_id: 00000000:18:00.0}]", ":1: gpus[0].pci_bus_id: expected a string"),
        ("gpus: [{processes: [{pid: 1, name: 7}]}]", "gpus[0].processes[0].name: expected a str"),
        ("gpus: [{processes: [{pid: 1, pid: 2}]}]",
         ":1:30: invalid YAML: duplicate key 'pid' (first on line 1)"),
        ("gpus: [{xids: 13}]", ":1: gpus[0].xids: expected a list"),
        ("gpus: [{mig: {gi: 1, profile: 1g.10gb}}]", ":1: gpus[0].mig: expected a list"),
        ("gpus: {model: x}", ":1: gpus: expected a non-empty list"),
        ("gpus: [{}]\npods: {a: 1}", ":2: pods: expected a list"),
        ("gpus: [{}, {}]\npods: [{namespace: a, pod: b, container: c, gpus: [true]}]",
         ":2: pods[0].gpus[0]: no GPU True in this scenario"),
        ("gpus: [{mig: [{gi: 1, profile: 1g.10gb}]}]\n"
         "pods: [{namespace: a, pod: b, container: c, mig: [[0, true]]}]",
         ":2: pods[0].mig[0]: no GPU instance [0, True] in this scenario"),
        ("gpus: [{}]\npods: [{namespace: a, pod: b, container: c, labels: {team: 1}}]",
         ":2: pods[0].labels['team']: expected a string, got 1"),
        ("gpus: [{}]\npods: [{namespace: a, pod: b, container: c, device_ids: [3]}]",
         ":2: pods[0].device_ids[0]: expected a string, got 3"),
        ("gpus: [{}]\npods: [{namespace: a, pod: b, container: c, claim: x, gpus: 0}]",
         ":2: pods[0].gpus: expected a list"),
        # No duplicate series: one GPU instance per id, within what a GPU holds.
        ("gpus:\n  - mig:\n    - {gi: 1, profile: 1g.10gb}\n    - {gi: 1, profile: 2g.20gb}",
         ":4: gpus[0].mig[1].gi: GPU instance 1 is already gpus[0].mig[0]"),
        ("gpus: [{mig: [{gi: 1, profile: 4g.40gb}, {gi: 2, profile: 4g.40gb}]}]",
         ":1: gpus[0].mig: the GPU instances take 8 compute slices; a GPU has 7"),
        ("gpus: [{memory_mib: 20000, mig: [{gi: 1, profile: 1g.10gb, memory_mib: 10000},"
         " {gi: 2, profile: 1g.10gb, memory_mib: 10001}]}]",
         ":1: gpus[0].mig: the GPU instances hold 20001 MiB; the GPU has 20000"),
        ("gpus: [{mig: [{gi: 1, profile: big}]}]",
         ":1: gpus[0].mig[0].profile: expected a MIG profile such as 1g.10gb, got 'big'"),
        ("gpus: [{uuid: GPU-1}, {uuid: GPU-1}]", ":1: gpus[1].uuid: 'GPU-1' is already gpus[0]"),
        ("gpus: [{}, {pci_bus_id: '00000000:18:00.0'}]",
         ":1: gpus[1].pci_bus_id: '00000000:18:00.0' is already gpus[0]"),
        ("gpus: [{processes: [{pid: 5}, {pid: 5}]}]",
         ":1: gpus[0].processes[1].pid: pid 5 is already gpus[0].processes[0]"),
        ("gpus: [{processes: [{pid: 5, name: a}]}, {processes: [{pid: 5, name: b}]}]",
         ":1: gpus[1].processes[0]: pid 5 is gpus[0].processes[0] with another name or pod"),
        ("gpus: [{mig: [{gi: 1, profile: 1g.10gb}], processes: [{pid: 5, gi: 2}]}]",
         ":1: gpus[0].processes[0].gi: no GPU instance 2 on this GPU"),
        ("gpus: [{processes: [{pid: 5, gi: 1}]}]",
         ":1: gpus[0].processes[0].gi: no GPU instance 1 on this GPU (it is not in MIG mode)"),
        ("gpus: [{mig: [{gi: 1, profile: 1g.10gb}], processes: [{pid: 5}]}]",
         ":1: gpus[0].processes[0].gi: required on a GPU in MIG mode"),
        # Positions: the line of the value, of the unknown key, or of the mapping lacking one.
        ("seed: 1\ngpus:\n  - model: x\n    utilization: [90, 10]\n",
         ":4: gpus[0].utilization: expected a number or [low, high] with low <= high"),
        ("seed: 1\ngpus:\n  - model: x\n    colour: red\n", ":4: gpus[0]: unknown key 'colour'"),
        ("gpus:\n  - mig:\n      - gi: 1\n        memory_mib: 5\n",
         ":3: gpus[0].mig[0].profile: required"),
        ("gpus: [{}]\npodz: []\n", ":2: unknown key 'podz' (did you mean 'pods'?)"),
        # The loader: no aliases (no billion laughs), no tags, no deep nesting, UTF-8 text.
        ("gpus: &g [{}]\npods: *g\n", ":1:7: invalid YAML: anchors and aliases are not allowed"),
        ("gpus: [!!python/object:os.system {}]", ":1:8: invalid YAML: tag"),
        ("gpus: [{model: !!binary aGk=}]", ":1:16: invalid YAML: tag"),
        ("gpus: " + "[" * 200 + "]" * 200, ":1:22: invalid YAML: nested more than 16 levels deep"),
        # A date is text (the format has no dates): not a number, and no crash on 02-30.
        ("seed: 2001-02-30\ngpus: [{}]",
         ":1: seed: expected a non-negative integer, got '2001-02-30'"),
        ("seed: 1" + "0" * 5000 + "\ngpus: [{}]", ":1:7: invalid YAML:"),
        ("gpus: [{model: a\x00b}]", ":1:17: invalid YAML: unacceptable character #x0000"),
        ("", ": expected a mapping, got nothing"),
        ("---\ngpus: [{}]\n---\ngpus: [{}]\n", ":3:1: invalid YAML: expected a single document"),
    ],
)
def test_scenario_is_strict_and_says_where(tmp_path: Path, text: str, message: str) -> None:
    path = tmp_path / "node.yaml"
    path.write_text(text)
    with pytest.raises(ScenarioError) as err:
        load_scenario(path)
    assert str(err.value).startswith(f"{path}:"), str(err.value)
    assert message in str(err.value), str(err.value)
    assert "\n" not in str(err.value)


def test_a_billion_laughs_is_refused_at_once(tmp_path: Path) -> None:
    lines = ['a0: &a0 ["lol", "lol", "lol", "lol", "lol", "lol", "lol", "lol", "lol"]']
    lines += [f"a{n}: &a{n} [{', '.join([f'*a{n - 1}'] * 9)}]" for n in range(1, 10)]
    path = tmp_path / "laughs.yaml"
    path.write_text("\n".join([*lines, "gpus: [{model: *a9}]"]) + "\n")
    started = time.monotonic()
    with pytest.raises(ScenarioError, match="anchors and aliases are not allowed"):
        load_scenario(path)
    assert time.monotonic() - started < 1


def test_a_scenario_over_1_mib_is_refused(tmp_path: Path) -> None:
    path = tmp_path / "big.yaml"
    path.write_text("gpus: [{}]\n" + "#" * (1 << 20) + "\n")
    with pytest.raises(ScenarioError, match=r"big\.yaml: scenario larger than the 1 MiB limit"):
        load_scenario(path)
    path.write_text("gpus: [{}]\n" + "#" * ((1 << 20) - 20) + "\n")
    assert len(load_scenario(path).gpus) == 1, "1 MiB itself is fine"


def test_only_a_regular_file_is_read(tmp_path: Path) -> None:
    fifo = tmp_path / "node.yaml"
    os.mkfifo(fifo)
    outcome: list[BaseException | None] = []

    def load() -> None:
        try:
            load_scenario(fifo)
            outcome.append(None)
        except BaseException as exc:  # whatever it is, the test reports it
            outcome.append(exc)

    thread = threading.Thread(target=load, daemon=True)
    thread.start()
    thread.join(5)
    if thread.is_alive():  # blocked in open(): a writer lets it go, then the test fails
        with open(fifo, "w"):
            pass
        thread.join(5)
        pytest.fail("opening a FIFO blocked")
    assert isinstance(outcome[0], ScenarioError), outcome
    assert str(outcome[0]) == f"{fifo}: not a regular file but a FIFO (named pipe)"
    with pytest.raises(ScenarioError, match=": not a regular file"):
        load_scenario(tmp_path)
    with pytest.raises(ScenarioError, match=": cannot read scenario: No such file"):
        load_scenario(tmp_path / "missing.yaml")


def test_non_utf8_bytes_are_one_line(tmp_path: Path) -> None:
    path = tmp_path / "node.yaml"
    path.write_bytes(b"seed: 1\ngpus: [{model: \xff}]\n")
    with pytest.raises(ScenarioError) as err:
        load_scenario(path)
    assert str(err.value) == f"{path}:2:16: invalid YAML: not UTF-8 text (byte 0xff)"


def test_the_builtin_scenario_passes_the_file_checks(tmp_path: Path) -> None:
    path = tmp_path / "builtin.yaml"
    path.write_text(resources.files("gpu_enricher.sim").joinpath("builtin-scenario.yaml")
                    .read_text("utf-8"))
    assert load_scenario(path) == builtin_scenario()


# Issue 26: YAML's null (`key:`, `key: null`, `key: ~`) is not text. Every text key of the
# format, where it is written: refused at its line, as a number would be.
_NULL_TEXT = [
    ("driver_version: {}\ngpus: [{{}}]", 1, "driver_version"),
    ("gpus:\n  - model: {}", 2, "gpus[0].model"),
    ("gpus:\n  - uuid: {}", 2, "gpus[0].uuid"),
    ("gpus:\n  - pci_bus_id: {}", 2, "gpus[0].pci_bus_id"),
    ("gpus:\n  - processes:\n      - {{pid: 5, name: {}}}", 3, "gpus[0].processes[0].name"),
    ("gpus:\n  - processes:\n      - {{pid: 5, type: {}}}", 3, "gpus[0].processes[0].type"),
    ("gpus:\n  - processes:\n      - {{pid: 5, pod: {}}}", 3, "gpus[0].processes[0].pod"),
    ("gpus:\n  - processes:\n      - {{pid: 5, container: {}}}", 3,
     "gpus[0].processes[0].container"),
    ("gpus:\n  - hpc_jobs:\n      - {}", 3, "gpus[0].hpc_jobs[0]"),
    *(("gpus: [{{}}]\npods:\n  - {{namespace: a, pod: b, container: c, gpus: [0], "
       + key + ": {}}}", 3, f"pods[0].{key}") for key in ("resource", "uid", "claim")),
    ("gpus: [{{}}]\npods:\n  - {{namespace: {}, pod: b, container: c}}", 3, "pods[0].namespace"),
    ("gpus: [{{}}]\npods:\n  - {{namespace: a, pod: {}, container: c}}", 3, "pods[0].pod"),
    ("gpus: [{{}}]\npods:\n  - {{namespace: a, pod: b, container: {}}}", 3, "pods[0].container"),
    ("gpus: [{{}}]\npods:\n  - namespace: a\n    pod: b\n    container: c\n    device_ids:\n"
     "      - {}", 7, "pods[0].device_ids[0]"),
    ("gpus: [{{}}]\npods:\n  - {{namespace: a, pod: b, container: c, labels: {{team: {}}}}}", 3,
     "pods[0].labels['team']"),
]


@pytest.mark.parametrize("null", ["null", "~", "Null", ""])
@pytest.mark.parametrize(("template", "line", "key"), _NULL_TEXT)
def test_a_null_text_value_is_refused_at_its_line(tmp_path: Path, template: str, line: int,
                                                  key: str, null: str) -> None:
    path = tmp_path / "node.yaml"
    text = template.format(null)
    path.write_text(text + "\n")
    with pytest.raises(ScenarioError) as err:
        load_scenario(path)
    assert str(err.value) == (f"{path}:{line}: {key}: expected a string, got nothing "
                              "(null, ~ or no value)"), text


def test_the_base_unit_fields_are_the_simulated_readings_in_their_units() -> None:
    """`--simulate --naming 4.9`: every DCGM 4.7 field in a base unit has a value wherever its
    classic reading has one (GPUs and MIG instances), in the relation of the units."""
    sim, _ = backend()
    snap = sim.sample(ALL)
    for gpu in snap.gpus:
        for values in (gpu.values, *(inst.values for inst in gpu.instances)):
            for rename in (r for r in RENAMES if r.new_field):
                assert (rename.current in values) == (rename.classic in values), rename.current
                if rename.current in values:
                    assert to_classic(rename.scale, values[rename.current]) == (
                        values[rename.classic] // 1000 * 1000
                        if rename.scale is Scale.JOULES else values[rename.classic])
    h100 = snap.gpus[0].values
    assert h100["DCGM_FI_DEV_GPU_UTIL_RATIO"] == int(h100["DCGM_FI_DEV_GPU_UTIL"]) / 100
    assert h100["DCGM_FI_DEV_FB_USED_BYTES"] == int(h100["DCGM_FI_DEV_FB_USED"]) * 2**20
