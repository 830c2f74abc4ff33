"""Who runs each GPU process: NVML's PIDs joined with /proc, the pod directories and the
kubelet's holders into `GpuProcess` records. Pure.

A process's (pod UID, container ID) comes from its cgroup; its names come, in this order, from
the Kubernetes API's pods, the kubelet's log directory names, and finally the device's
pod-resources holders when exactly one pod holds it. A host process stays unattributed: its
series carry no pod labels at all (dcgm-exporter #109, #347 asked for this attribution).

On a GPU shared through MPS the clients are NVML's MPS list, attributed like any process; the
MPS server (in the compute list) and its control daemon run in the device plugin's daemon pod
and are infrastructure: type `mps-server`, never their pod's use (issue 25).
"""

from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, replace
from typing import Final

from ..model import (
    ContainerRef,
    GpuInstance,
    GpuSnapshot,
    NodeSnapshot,
    PodDirectory,
    PodMeta,
    ProcessSample,
    ProcessTable,
)
from .devices import Attribution, EntityKey, Holder

FINISHED_PHASES: Final = frozenset({"Succeeded", "Failed"})
MPS_DAEMON_COMM: Final = "nvidia-cuda-mps"
"""`/proc/PID/comm` of both `nvidia-cuda-mps-server` and `nvidia-cuda-mps-control`: the kernel
keeps 15 characters of a name."""
MPS_SERVER: Final = "mps-server"
"""The type of the MPS server's (or control daemon's) process."""


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
    process, or no kubelet answer to compare with) and for the MPS server (infrastructure:
    its daemon pod holds no GPU by design)."""


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


def _holder_uids(holder: Holder, indexes: Sequence[PodIndex]) -> set[str]:
    """Every UID a source gives the holder's pod (API UID, a static pod's config hash)."""
    uids: set[str] = set()
    for index in indexes:
        meta = index.by_name.get((holder.namespace, holder.pod))
        if meta is not None:
            uids.update(u for u in (meta.uid, meta.mirror_uid) if u)
    return uids


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
    if len(pods) == 1:  # exactly one pod holds the device: the process may be that pod's
        only = min(holders)
        known = _holder_uids(only, indexes)
        if known and ref.pod_uid not in known:
            return partial  # another pod's process on the holder's GPU: never hide it
        if partial is None or (partial.namespace, partial.pod) == (only.namespace, only.pod):
            uid = (partial.pod_uid if partial is not None else "") or ref.pod_uid
            return Workload(only.namespace, only.pod, only.container, uid)
    return partial


@dataclass(frozen=True, slots=True)
class Allocation:
    """What the kubelet gave out, to tell whether a process's pod was given its GPU.

    `holders` covers every resource whose device IDs resolve to a device of this node, not
    only the ones whose series carry pod labels (`nvidia.com/gpu.shared` without
    `--nvidia-resource-names` still counts). `managed`: the devices the device plugin hands
    out (held or allocatable); on any other (a GPU given through DRA, a device the kubelet
    does not report) nothing can be decided.
    """

    holders: Mapping[EntityKey, tuple[Holder, ...]]
    managed: frozenset[EntityKey]

    def keys(self, gpu: GpuSnapshot, key: EntityKey) -> list[EntityKey]:
        """The devices a process may belong to: on a MIG GPU, a process whose GPU instance is
        unknown may be any instance's."""
        if key[1] is None and gpu.mig_enabled and gpu.instances:
            return [key, *((key[0], i.gpu_instance_id) for i in gpu.instances)]
        return [key]

    def decide(self, gpu: GpuSnapshot, key: EntityKey, work: Workload) -> bool | None:
        keys = self.keys(gpu, key)
        if not any(k in self.managed for k in keys):
            return None
        return any((h.namespace, h.pod) == (work.namespace, work.pod)
                   for k in keys for h in self.holders.get(k, ()))


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
    allocation: Allocation | None,
) -> tuple[GpuProcess, ...]:
    """Every process of every healthy GPU, attributed. `allocation` None: the kubelet's
    current answer is unknown, so no process is called unallocated."""
    result: list[GpuProcess] = []
    for gpu in node.gpus:
        if not gpu.healthy:
            continue
        for sample in gpu.processes:
            key, instance = _entity(gpu, sample)
            holders = allocation.holders.get(key, ()) if allocation is not None else ()
            host = table.processes.get(sample.pid)
            name = host.name if host is not None else ""
            workload = (resolve(host.container, indexes, holders)
                        if host is not None and host.container is not None else None)
            allocated = (allocation.decide(gpu, key, workload)
                         if workload is not None and allocation is not None else None)
            if name == MPS_DAEMON_COMM:
                sample = replace(sample, kind=MPS_SERVER)
                allocated = None
            result.append(GpuProcess(key, gpu, instance, sample, name, workload, allocated))
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


PodUsage = dict[tuple[EntityKey, str, str], tuple[int, float | None]]
"""(device, namespace, pod) → (used memory bytes, SM ratio or None)."""


def per_pod(processes: Iterable[GpuProcess]) -> PodUsage:
    """(device, namespace, pod) → (used memory bytes, SM ratio) summed over its processes;
    the ratio is None when no process of the pod had a utilisation sample. The MPS server is
    left out: its pod runs it for the clients, whose own figures are their pods' use."""
    sums: dict[tuple[EntityKey, str, str], tuple[int, float | None]] = {}
    for proc in processes:
        if proc.workload is None or proc.sample.kind == MPS_SERVER:
            continue
        key = (proc.key, proc.workload.namespace, proc.workload.pod)
        memory, sm = sums.get(key, (0, None))
        memory += proc.sample.used_memory_bytes or 0
        if proc.sample.sm_utilization is not None:
            sm = (sm or 0.0) + proc.sample.sm_utilization
        sums[key] = (memory, sm)
    return sums
