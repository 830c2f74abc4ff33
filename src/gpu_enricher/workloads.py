"""Who runs each GPU process: NVML's PIDs joined with /proc, the pod directories and the
kubelet's holders into `GpuProcess` records. Pure.

A process's (pod UID, container ID) comes from its cgroup; its names come, in this order, from
the Kubernetes API's pods, the kubelet's log directory names, and finally the device's
pod-resources holders when exactly one pod holds it. A host process stays unattributed: its
series carry no pod labels at all (dcgm-exporter #109, #347 asked for this attribution).
"""

from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from typing import Final

from .devices import Attribution, EntityKey, Holder
from .model import (
    ContainerRef,
    GpuInstance,
    GpuSnapshot,
    NodeSnapshot,
    PodDirectory,
    PodMeta,
    ProcessSample,
    ProcessTable,
)

FINISHED_PHASES: Final = frozenset({"Succeeded", "Failed"})


@dataclass(frozen=True, slots=True, order=True)
class Workload:
    """The pod and container a process belongs to; `pod_uid` is "" when no source knew it."""

    namespace: str
    pod: str
    container: str
    pod_uid: str = ""


@dataclass(frozen=True, slots=True)
class GpuProcess:
    """One process on one GPU or GPU instance, with whatever is known about its pod."""

    key: EntityKey
    gpu: GpuSnapshot
    instance: GpuInstance | None
    sample: ProcessSample
    name: str
    workload: Workload | None
    allocated: bool | None
    """Whether its pod holds this device per pod-resources; None when unknown (a host
    process, or no kubelet answer to compare with)."""


@dataclass(frozen=True, slots=True)
class PodIndex:
    """One pod directory, indexed for lookups by container ID, pod UID and name."""

    by_container: Mapping[str, tuple[PodMeta, str]]
    by_uid: Mapping[str, PodMeta]
    by_name: Mapping[tuple[str, str], PodMeta]

    @staticmethod
    def of(directory: PodDirectory | None) -> "PodIndex":
        by_container: dict[str, tuple[PodMeta, str]] = {}
        by_uid: dict[str, PodMeta] = {}
        by_name: dict[tuple[str, str], PodMeta] = {}
        for pod in directory.pods if directory is not None else ():
            for container_id, container in pod.containers.items():
                by_container[container_id] = (pod, container)
            for uid in (pod.uid, pod.mirror_uid):
                if uid:
                    by_uid[uid] = pod
            by_name[pod.namespace, pod.name] = pod
        return PodIndex(by_container, by_uid, by_name)

    def workload(self, ref: ContainerRef) -> Workload | None:
        found = self.by_container.get(ref.container_id)
        if found is not None:
            pod, container = found
            return Workload(pod.namespace, pod.name, container, pod.uid or ref.pod_uid)
        pod_meta = self.by_uid.get(ref.pod_uid)
        if pod_meta is not None:  # a container the pod's status does not list yet
            return Workload(pod_meta.namespace, pod_meta.name, "", pod_meta.uid)
        return None


EMPTY_INDEX: Final = PodIndex({}, {}, {})


def resolve(ref: ContainerRef, indexes: Sequence[PodIndex],
            holders: Sequence[Holder]) -> Workload | None:
    """The first source that names the container wins; one that names only the pod is
    completed by a later one that knows the container."""
    partial: Workload | None = None
    for index in indexes:
        found = index.workload(ref)
        if found is None:
            continue
        if found.container:
            # The earlier (API) source's UID wins: a static pod's log directory carries its
            # config hash, the API its metadata.uid, which the DCGM series' pod_uid shows.
            uid = (partial.pod_uid if partial is not None else "") or found.pod_uid
            return Workload(found.namespace, found.pod, found.container, uid)
        partial = partial or found
    pods = {(h.namespace, h.pod) for h in holders}
    if len(pods) == 1:  # exactly one pod holds the device: the process is that pod's
        only = min(holders)
        if partial is None or (partial.namespace, partial.pod) == (only.namespace, only.pod):
            uid = partial.pod_uid if partial is not None else ""
            return Workload(only.namespace, only.pod, only.container, uid)
    return partial


def _entity(gpu: GpuSnapshot, sample: ProcessSample) -> tuple[EntityKey, GpuInstance | None]:
    index = gpu.identity.index
    if gpu.mig_enabled and gpu.instances and sample.gpu_instance_id is not None:
        for inst in gpu.instances:
            if inst.gpu_instance_id == sample.gpu_instance_id:
                return (index, inst.gpu_instance_id), inst
    return (index, None), None


def gpu_processes(
    node: NodeSnapshot,
    table: ProcessTable,
    indexes: Sequence[PodIndex],
    attribution: Attribution | None,
) -> tuple[GpuProcess, ...]:
    """Every process of every healthy GPU, attributed. `attribution` None: the kubelet's
    holders are unknown, so no process is called unallocated."""
    result: list[GpuProcess] = []
    for gpu in node.gpus:
        if not gpu.healthy:
            continue
        for sample in gpu.processes:
            key, instance = _entity(gpu, sample)
            holders = attribution.holders.get(key, ()) if attribution is not None else ()
            host = table.processes.get(sample.pid)
            workload = (resolve(host.container, indexes, holders)
                        if host is not None and host.container is not None else None)
            allocated = None
            if workload is not None and attribution is not None:
                allocated = any((h.namespace, h.pod) == (workload.namespace, workload.pod)
                                for h in holders)
            result.append(GpuProcess(key, gpu, instance, sample,
                                     host.name if host is not None else "", workload, allocated))
    return tuple(result)


def live_holders(attribution: Attribution, pods: PodIndex) -> Attribution:
    """Drop holders whose pod the Kubernetes API reports finished: an old kubelet still lists
    Succeeded/Failed pods (kubernetes #119423), and their labels must not stay on a GPU."""
    kept: dict[EntityKey, tuple[Holder, ...]] = {}
    for key, holders in attribution.holders.items():
        alive = tuple(h for h in holders
                      if (meta := pods.by_name.get((h.namespace, h.pod))) is None
                      or meta.phase not in FINISHED_PHASES)
        if alive:
            kept[key] = alive
    return Attribution(kept, attribution.unmatched)


def per_pod(processes: Iterable[GpuProcess]) -> dict[tuple[EntityKey, str, str],
                                                      tuple[int, float | None]]:
    """(device, namespace, pod) → (used memory bytes, SM ratio) summed over its processes;
    the ratio is None when no process of the pod had a utilisation sample."""
    sums: dict[tuple[EntityKey, str, str], tuple[int, float | None]] = {}
    for proc in processes:
        if proc.workload is None:
            continue
        key = (proc.key, proc.workload.namespace, proc.workload.pod)
        memory, sm = sums.get(key, (0, None))
        memory += proc.sample.used_memory_bytes or 0
        if proc.sample.sm_utilization is not None:
            sm = (sm or 0.0) + proc.sample.sm_utilization
        sums[key] = (memory, sm)
    return sums
