"""Pod churn on the simulated node (`churn: {pods_per_second: N}`): which pods and processes
exist after N seconds, the scenario key and its errors, the backend's process lists."""

from pathlib import Path

import pytest

from gpu_enricher.fields.table import IMPLEMENTED
from gpu_enricher.sim.backend import SimulatedBackend
from gpu_enricher.sim.churn import churned, pod_keys
from gpu_enricher.sim.node import Scenario
from gpu_enricher.sim.scenario import ScenarioError, builtin_scenario, load_scenario

NODE = """\
gpus:
  - mig: [{gi: 1, profile: 3g.40gb}, {gi: 2, profile: 3g.40gb}]
    processes:
      - {pid: 100, gi: 1, pod: ml/train}
      - {pid: 101, gi: 1, pod: ml/train}
      - {pid: 200, gi: 2, pod: ml/infer}
  - processes:
      - {pid: 300, pod: web/chat}
      - {pid: 50, name: gpu-burn}
pods:
  - {namespace: ml, pod: train, container: c, mig: [[0, 1]], labels: {app: train}}
  - {namespace: ml, pod: infer, container: c, mig: [[0, 2]]}
  - {namespace: web, pod: chat, container: c, gpus: [1]}
  - {namespace: kube-system, pod: proxy, container: p}
"""


def node(tmp_path: Path, churn: str = "churn: {pods_per_second: 3}\n") -> Scenario:
    path = tmp_path / "node.yaml"
    path.write_text(NODE + churn)
    return load_scenario(path)


def names(scenario: Scenario) -> set[tuple[str, str]]:
    return {(s.namespace, s.pod) for s in scenario.pod_specs}


def test_the_key_and_its_absence(tmp_path: Path) -> None:
    assert node(tmp_path).churn_pods_per_second == 3
    assert node(tmp_path, "").churn_pods_per_second == 0
    assert builtin_scenario().churn_pods_per_second == 0
    # The clock is state, not description: two loads of one file are equal whatever it says.
    a, b = node(tmp_path), node(tmp_path)
    a.churn_clock.generation = 5
    assert a == b


@pytest.mark.parametrize(("churn", "message"), [
    ("churn: {pods_per_second: 5}\n", r"node.yaml:\d+: churn.pods_per_second: 5 is too large "
                                      r"\(at most 4\)"),
    ("churn: {pods_per_second: -1}\n", "churn.pods_per_second: expected a non-negative"),
    ("churn: {pod_per_second: 1}\n", r"unknown key 'pod_per_second' \(did you mean "
                                     r"'pods_per_second'\?\)"),
    ("churn: 3\n", "churn: expected a mapping"),
])
def test_errors_name_the_key(tmp_path: Path, churn: str, message: str) -> None:
    with pytest.raises(ScenarioError, match=message):
        node(tmp_path, churn)


def test_a_pod_named_as_a_churned_one_is_an_error(tmp_path: Path) -> None:
    path = tmp_path / "node.yaml"
    path.write_text("gpus: [{}]\npods:\n  - {namespace: a, pod: x, container: c}\n"
                    "  - {namespace: a, pod: x-r2, container: c}\n"
                    "churn: {pods_per_second: 1}\n")
    with pytest.raises(ScenarioError, match="pod a/x-r2 has the name churn would give a new a/x"):
        load_scenario(path)


def test_round_robin_replaces_n_pods_per_tick(tmp_path: Path) -> None:
    scenario = node(tmp_path)
    assert pod_keys(scenario) == (("ml", "train"), ("ml", "infer"), ("web", "chat"),
                                  ("kube-system", "proxy"))
    assert churned(scenario, 0) is scenario
    one = churned(scenario, 1)  # replacements 0, 1, 2
    assert names(one) == {("ml", "train-r1"), ("ml", "infer-r1"), ("web", "chat-r1"),
                          ("kube-system", "proxy")}
    two = churned(scenario, 2)  # 3, 4, 5: proxy, then train and infer a second time
    assert names(two) == {("ml", "train-r2"), ("ml", "infer-r2"), ("web", "chat-r1"),
                          ("kube-system", "proxy-r1")}
    assert churned(scenario, 2) == two, "a pure function of the generation"


def test_a_new_pod_keeps_devices_and_labels_with_a_new_uid(tmp_path: Path) -> None:
    scenario = node(tmp_path)
    before = {p.pod: p for p in scenario.pods}
    after = {p.pod: p for p in churned(scenario, 1).pods}
    assert after["train-r1"].device_ids == before["train"].device_ids
    assert after["chat-r1"].device_ids == before["chat"].device_ids
    specs = {s.pod: s for s in churned(scenario, 1).pod_specs}
    old = {s.pod: s for s in scenario.pod_specs}
    assert specs["train-r1"].labels == {"app": "train"}
    assert specs["train-r1"].uid != old["train"].uid


def test_processes_follow_their_pods_under_new_pids(tmp_path: Path) -> None:
    scenario = node(tmp_path)
    owner: dict[int, tuple[str, str] | None] = {}
    for generation in range(1, 40):
        gpus = churned(scenario, generation).gpus
        procs = [p for g in gpus for p in g.processes]
        pods = names(churned(scenario, generation))
        # Every pod process names a pod that exists now, on its GPU instance as before.
        assert all(p.pod in pods for p in procs if p.pod is not None)
        assert [(p.gpu_instance_id, p.used_memory_mib) for p in gpus[0].processes] == [
            (1, 0), (1, 0), (2, 0)]
        pids = [p.pid for p in procs]
        assert len(set(pids)) == len(pids)
        assert 50 in pids, "a host process is not churned"
        for proc in procs:  # a pid never passes from a departed pod to another
            assert owner.setdefault(proc.pid, proc.pod) == proc.pod, proc
    # 39 ticks x 3: replacements 0..116 of pod k mod 4: train (two processes) 30 times,
    # infer and chat (one) 29 times each, proxy (none); and the host process.
    assert len(owner) == 30 * 2 + 29 + 29 + 1
    assert {100, 101, 200, 300}.isdisjoint(p.pid for g in churned(scenario, 1).gpus
                                           for p in g.processes)


def test_the_backend_lists_the_processes_of_the_clock_generation(tmp_path: Path) -> None:
    scenario = node(tmp_path)
    backend = SimulatedBackend(scenario, lambda: 1000.0)
    backend.open()
    pids = [p.pid for p in backend.sample(frozenset(IMPLEMENTED)).gpus[0].processes]
    assert pids == [100, 101, 200]
    scenario.churn_clock.generation = 1
    now = backend.sample(frozenset(IMPLEMENTED)).gpus[0].processes
    assert [p.pid for p in now] == [p.pid for p in churned(scenario, 1).gpus[0].processes]
    assert {p.pid for p in now}.isdisjoint(pids)
