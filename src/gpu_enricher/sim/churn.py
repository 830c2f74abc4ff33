"""Pod churn on the simulated node (`churn: {pods_per_second: N}`, docs/simulate.md).

Every second N pods are replaced, round robin over the scenario's pods, by new pods of the same
workload, as a rollout does: a new name (`<pod>-r<incarnation>`), UID and container IDs, the
same devices, labels and claims, and the same GPU processes under new PIDs. Departed pods leave
the kubelet, the Kubernetes API, the /proc tree and the log names; their processes leave NVML.

The node after `generation` seconds of churn is a pure function of the scenario
(`churned`); the one mutable part is the scenario's `ChurnClock`, which the cluster's tick
(`cluster.run_churn`) advances once its fakes show the new pods, and which the backend reads, so the
GPU process lists follow without a channel of their own.
"""

import dataclasses
import re
from collections.abc import Sequence
from typing import Any, Final

from .node import PID_MAX, Scenario, SimGpu, SimPod, SimProcess, pod_uid
from .scenario_values import At, as_int, as_mapping, check_keys

_CHURN_KEYS: Final = frozenset({"pods_per_second"})
TICK_SECONDS: Final = 1.0
HISTORY_TICKS: Final = 30
"""The fake API keeps this many ticks of watch history (an API server compacts its etcd
history too): a watch resuming from an older version gets 410 Gone and lists again, and a
churning node's memory stays flat instead of growing with every event."""

PodKey = tuple[str, str]  # (namespace, pod) as the scenario names it


def pod_keys(scenario: Scenario) -> tuple[PodKey, ...]:
    """The scenario's pods, in file order: the round robin's order."""
    return tuple(dict.fromkeys((s.namespace, s.pod) for s in scenario.pod_specs))


def incarnation(generation: int, per_tick: int, index: int, pods: int) -> int:
    """How often pod `index` of `pods` has been replaced after `generation` ticks of
    `per_tick` replacements (replacement k replaces pod k mod pods)."""
    done = generation * per_tick
    return 0 if done <= index else (done - index + pods - 1) // pods


def churn_name(pod: str, incarnation_: int) -> str:
    return pod if incarnation_ == 0 else f"{pod}-r{incarnation_}"


def _pids_by_pod(gpus: Sequence[SimGpu]) -> dict[PodKey, list[int]]:
    """Each pod's distinct pids, in order of appearance (a pid on two GPUs is one process)."""
    pids: dict[PodKey, list[int]] = {}
    for gpu in gpus:
        for proc in gpu.processes:
            if proc.pod is not None and proc.pid not in pids.setdefault(proc.pod, []):
                pids[proc.pod].append(proc.pid)
    return pids


def churned(scenario: Scenario, generation: int) -> Scenario:
    """The node after `generation` ticks of churn."""
    per_tick = scenario.churn_pods_per_second
    keys = pod_keys(scenario)
    if generation <= 0 or per_tick <= 0 or not keys:
        return scenario
    count = len(keys)
    pids = _pids_by_pod(scenario.gpus)
    slots = max((len(p) for p in pids.values()), default=1)
    first = 1 + max((p.pid for g in scenario.gpus for p in g.processes), default=299)
    span = PID_MAX + 1 - first  # new pids go above the scenario's, wrapping as Linux's do
    names: dict[PodKey, str] = {}
    new_pids: dict[tuple[PodKey, int], int] = {}
    for index, key in enumerate(keys):
        inc = incarnation(generation, per_tick, index, count)
        if inc == 0:
            continue
        names[key] = churn_name(key[1], inc)
        replacement = (inc - 1) * count + index  # the k of the replacement that made it
        for slot, pid in enumerate(pids.get(key, ())):
            new_pids[(key, pid)] = first + (replacement * slots + slot) % span

    def process(proc: SimProcess) -> SimProcess:
        if proc.pod is None or proc.pod not in names:
            return proc
        return dataclasses.replace(proc, pid=new_pids[(proc.pod, proc.pid)],
                                   pod=(proc.pod[0], names[proc.pod]))

    def spec(pod: SimPod) -> SimPod:
        name = names.get((pod.namespace, pod.pod))
        return pod if name is None else dataclasses.replace(
            pod, pod=name, uid=pod_uid(pod.namespace, name))

    return dataclasses.replace(
        scenario,
        gpus=tuple(dataclasses.replace(g, processes=tuple(map(process, g.processes)))
                   for g in scenario.gpus),
        pods=tuple(p if (name := names.get((p.namespace, p.pod))) is None
                   else dataclasses.replace(p, pod=name) for p in scenario.pods),
        pod_specs=tuple(map(spec, scenario.pod_specs)),
    )


def parse_churn(raw: Any, at: At, scenario: Scenario) -> int:
    """`churn: {pods_per_second: N}`: N (0 when absent), checked against the scenario's pods:
    at most one replacement of each pod per tick, and no churned name that is another pod's."""
    if raw is None:
        return 0
    spec = as_mapping(raw, at)
    check_keys(spec, _CHURN_KEYS, at)
    where = at.field(spec, "pods_per_second")
    keys = pod_keys(scenario)
    rate = as_int(spec.get("pods_per_second"), where, max(len(keys), 1))
    if rate and not keys:
        raise where.error("there are no pods to churn (pods: is empty)")
    names = set(keys)
    for namespace, pod in keys:
        m = re.fullmatch(r"(.+)-r[0-9]+", pod)
        if rate and m is not None and (namespace, m[1]) in names:
            raise where.error(f"pod {namespace}/{pod} has the name churn would give a new "
                              f"{namespace}/{m[1]}; rename it")
    slots = max((len(p) for p in _pids_by_pod(scenario.gpus).values()), default=1)
    largest = max((p.pid for g in scenario.gpus for p in g.processes), default=0)
    if rate and PID_MAX - largest < slots * len(keys):
        raise where.error(f"churn needs {slots * len(keys)} free pids above the largest "
                          f"({largest})")
    return rate
