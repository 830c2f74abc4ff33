"""Property tests of the scenario loader: whatever the file holds, either a scenario the
simulated node can run or one ScenarioError line that names the file, never another exception."""

from pathlib import Path
from typing import Any

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from gpu_enricher.fields.table import IMPLEMENTED
from gpu_enricher.sim.backend import SimulatedBackend
from gpu_enricher.sim.cluster_state import claim_allocations, log_names, proc_files, slice_devices
from gpu_enricher.sim.node import Scenario
from gpu_enricher.sim.scenario import ScenarioError, load_scenario, parse_scenario

KEYS = ["seed", "gpus", "driver_version", "period_seconds", "pods", "model", "uuid",
        "pci_bus_id", "memory_mib", "utilization", "memory_used_mib", "power_watts",
        "temperature", "sm_clock_mhz", "mem_clock_mhz", "lost", "mig", "processes", "gpm", "xids",
        "thermal_slowdown", "unbound_every_seconds", "namespace", "pod", "container", "resource",
        "replica", "device_ids", "uid", "labels", "claim", "gi", "profile", "activity", "pid",
        "used_memory_mib", "name", "sm_utilization"]
# YAML's syntax, values of the types it resolves, and the characters that trip readers.
TOKENS = [*(f"{k}: " for k in KEYS), "\n", "\n  ", "\n    ", "- ", "[", "]", "{", "}", ", ",
          ": ", "&a ", "*a", "!!binary ", "!!python/object:os.system ", "!x ", "? ", "---\n",
          "...\n", "'", '"', "#", "|\n", ">\n", "0", "1", "-1", "7", "1.5", ".inf", ".nan",
          "true", "no", "~", "null", "0x1f", "1_000", "1:30", "2001-02-30", "3g.40gb", "1g.10gb",
          "ml/x", "\t", "\x00", "\x85", "\u2028", "\ufeff", "\r", "é", "%YAML 1.1\n", "<<: "]

yaml_like = st.lists(st.sampled_from(TOKENS) | st.text(max_size=3), max_size=40).map("".join)


def _check_scenario(scenario: Scenario) -> None:
    """An accepted scenario runs: the backend samples it, the fakes' data builds."""
    sim = SimulatedBackend(scenario, lambda: 1000.0)
    sim.open()
    snap = sim.sample(frozenset(IMPLEMENTED))
    assert len(snap.gpus) == len(scenario.gpus)
    for gpu in snap.gpus:  # no duplicate series
        assert len({i.gpu_instance_id for i in gpu.instances}) == len(gpu.instances)
        assert len({p.pid for p in gpu.processes}) == len(gpu.processes)
    assert len({g.uuid for g in scenario.gpus}) == len(scenario.gpus)
    scenario.allocatable()
    proc_files(scenario)
    log_names(scenario)
    claim_allocations(scenario, "node")
    slice_devices(scenario, "node")


@pytest.fixture(scope="module")
def fuzz_dir(tmp_path_factory: pytest.TempPathFactory) -> Path:
    # Module-scoped: hypothesis runs many examples per call of a function-scoped fixture.
    return tmp_path_factory.mktemp("scenario-fuzz")


def _load(path: Path) -> None:
    try:
        scenario = load_scenario(path)
    except ScenarioError as exc:
        assert str(exc).startswith(f"{path}:"), exc
        assert "\n" not in str(exc) and "\r" not in str(exc), exc
        return
    _check_scenario(scenario)


@settings(suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(text=yaml_like | st.text())
def test_any_text_loads_or_fails_with_a_scenario_error(fuzz_dir: Path, text: str) -> None:
    path = fuzz_dir / "node.yaml"
    path.write_text(text, encoding="utf-8")
    _load(path)


@settings(suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(data=st.binary(max_size=100)
       | st.tuples(yaml_like, st.binary(min_size=1, max_size=3), yaml_like)
       .map(lambda t: t[0].encode() + t[1] + t[2].encode()))
def test_any_bytes_load_or_fail_with_a_scenario_error(fuzz_dir: Path, data: bytes) -> None:
    path = fuzz_dir / "node.yaml"
    path.write_bytes(data)
    _load(path)


# Decoded YAML of every shape, keyed mostly by the format's own keys so that parsing goes deep.
scalars = (st.none() | st.booleans() | st.integers(-3, 9) | st.floats(allow_nan=True)
           | st.sampled_from(["", "x", "ml/x", "ml/", "1g.10gb", "7g.80gb", "GPU-1", "50"]))
values = st.recursive(
    scalars,
    lambda inner: st.lists(inner, max_size=4)
    | st.dictionaries(st.sampled_from(KEYS) | st.text(max_size=3), inner, max_size=5),
    max_leaves=30)
gpu_like = st.dictionaries(st.sampled_from(KEYS[5:21]), values, max_size=6)
mig_like = st.fixed_dictionaries({"gi": st.integers(0, 3), "profile": st.sampled_from(
    ["1g.10gb", "2g.20gb", "3g.40gb", "x"])}, optional={"memory_mib": st.integers(0, 50000)})
process_like = st.fixed_dictionaries({"pid": st.integers(0, 5)}, optional={
    "gi": st.integers(0, 3), "pod": st.sampled_from(["a/b", "a/c", "x"]),
    "container": st.sampled_from(["c", "d"]), "name": st.sampled_from(["p", 1])})
pod_like = st.fixed_dictionaries(
    {"namespace": st.just("a"), "pod": st.sampled_from(["b", "c"]),
     "container": st.sampled_from(["c", "d"])},
    optional={"gpus": st.lists(st.integers(-1, 3) | st.booleans(), max_size=2),
              "mig": st.lists(st.lists(st.integers(0, 3), min_size=2, max_size=2)
                              | values, max_size=2),
              "claim": st.sampled_from(["k", "", 3]), "replica": st.integers(-1, 2),
              "device_ids": st.lists(st.sampled_from(["nvidia0", 3]), max_size=2),
              "labels": st.dictionaries(st.sampled_from(["a", "b"]), scalars, max_size=2)})
structured = st.fixed_dictionaries(
    {"gpus": st.lists(gpu_like | st.fixed_dictionaries({}, optional={
        "mig": st.lists(mig_like, max_size=4), "processes": st.lists(process_like, max_size=3),
        "memory_mib": st.integers(0, 90000), "uuid": st.sampled_from(["GPU-1", "GPU-2"])}),
        max_size=4)},
    optional={"pods": st.lists(pod_like | values, max_size=4), "seed": values,
              "period_seconds": values, "driver_version": values})


@given(raw=values | structured)
def test_any_decoded_yaml_parses_or_fails_with_a_scenario_error(raw: Any) -> None:
    try:
        scenario = parse_scenario(raw, "node.yaml")
    except ScenarioError as exc:
        assert str(exc).startswith("node.yaml"), exc
        assert "\n" not in str(exc) and "\r" not in str(exc), exc
        return
    _check_scenario(scenario)
