"""Pod churn on the simulated node (`churn: {pods_per_second: N}`, docs/simulate.md).

Every second N pods are replaced, round robin over the scenario's pods, by new pods of the same
workload, as a rollout does: a new name (`<pod>-r<incarnation>`), UID and container IDs, the
same devices, labels and claims, and the same GPU processes under new PIDs. Departed pods leave
the kubelet, the Kubernetes API, the /proc tree and the log names; their processes leave NVML.

The node after `generation` seconds of churn is a pure function of the scenario
(`churned`); the one mutable part is the scenario's `ChurnClock`, which the cluster's tick
(`run_churn`) advances once its fakes show the new pods, and which the backend reads, so the
GPU process lists follow without a channel of their own.
"""

import asyncio
import collections
import dataclasses
import logging
import re
import shutil
import time
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any, Final

from .scenario_values import At, as_int, as_mapping, check_keys
from .sim_model import PID_MAX, Scenario, SimGpu, SimPod, SimProcess, pod_uid

if TYPE_CHECKING:
    from .sim_cluster import SimulatedCluster

log = logging.getLogger(__name__)

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


# --- the cluster side: apply each tick to the fakes --------------------------------------------


def _sync_files(root: Path, old: Mapping[str, str], new: Mapping[str, str]) -> None:
    """The /proc tree from `old` to `new`: departed pids' directories go, new ones appear."""
    for pid in {f.split("/")[0] for f in old} - {f.split("/")[0] for f in new}:
        shutil.rmtree(root / pid, ignore_errors=True)
    for relative, text in new.items():
        if old.get(relative) != text:
            path = root / relative
            path.parent.mkdir(parents=True, exist_ok=True)
            path.write_text(text, encoding="utf-8")


def _sync_log_names(root: Path, old: Sequence[str], new: Sequence[str]) -> None:
    for name in set(old) - set(new):
        path = root / name
        if name.startswith("pods/"):
            shutil.rmtree(path, ignore_errors=True)
        else:
            path.unlink(missing_ok=True)
    for name in set(new) - set(old):
        path = root / name
        path.parent.mkdir(parents=True, exist_ok=True)
        if name.startswith("pods/"):
            path.mkdir(exist_ok=True)
        else:
            path.touch()


def apply(cluster: "SimulatedCluster", old: Scenario, new: Scenario) -> None:
    """Show `new` in the cluster's fakes: only the departed and new pods change in the API (a
    DELETED and an ADDED event each, as a rollout gives a watch)."""
    from .kube.fake_objects import pod_object
    from .sim_cluster import claim_allocations, log_names, pod_metas, proc_files

    cluster.kubelet.set_assignments(new.pods)
    cluster.kubelet.set_claims(claim_allocations(new, cluster.node_name))
    before = set(cluster.api.pods)  # what the API holds, whatever a failed tick left
    after = {m.uid: m for m in pod_metas(new)}
    for uid in before - set(after):
        cluster.api.delete_pod(uid)
    for uid in set(after) - before:
        cluster.api.upsert_pod(pod_object(after[uid], cluster.node_name))
    _sync_files(cluster.proc_root, proc_files(old), proc_files(new))
    _sync_log_names(cluster.log_root, log_names(old), log_names(new))


async def run_churn(cluster: "SimulatedCluster", scenario: Scenario) -> None:
    """Tick once a second (on a fixed schedule: a late tick catches up at once rather than
    drifting), replacing the pods in the fakes first, then advancing the scenario's clock."""
    clock = scenario.churn_clock
    shown = churned(scenario, clock.generation)
    versions: collections.deque[int] = collections.deque(maxlen=HISTORY_TICKS)
    started = time.monotonic() - clock.generation * TICK_SECONDS
    log.info("simulated churn: %d pod(s) replaced every second, of %d",
             scenario.churn_pods_per_second, len(pod_keys(scenario)))
    while True:
        due = started + (clock.generation + 1) * TICK_SECONDS
        await asyncio.sleep(max(0.0, due - time.monotonic()))
        generation = int((time.monotonic() - started) / TICK_SECONDS)
        if generation <= clock.generation:
            continue
        node = churned(scenario, generation)
        try:
            apply(cluster, shown, node)
        except OSError as err:  # the /proc tree or log names (a full disk): the next tick again
            log.warning("simulated churn: %s", err)
            await asyncio.sleep(TICK_SECONDS)
            continue
        shown = node
        clock.generation = generation
        if len(versions) == versions.maxlen:
            cluster.api.compact(through=versions[0])
        versions.append(cluster.api.version)
