"""Per-process and per-pod GPU families (`--process-metrics`), rendered with the DCGM families
by our renderer (integers plain, ratios with six decimals). Pure.

Cardinality: one series per (GPU or GPU instance, live process) and one per (device, pod); a
process that has left is gone at the next pass, so the worst case is bounded by what NVML
reports at once (a 8-GPU node with 100 processes: ~200 process series, ≤ 2 per pod-device).
"""

from collections.abc import Mapping, Sequence

from ..attribution.containers import Occupant
from ..attribution.devices import EntityKey
from ..attribution.podlabels import PodLabelPolicy
from ..attribution.workloads import GpuProcess, PodUsage, per_pod
from ..fields import names
from ..model import GpuInstance, GpuSnapshot
from .label_drop import kept
from .render import Family, Sample, format_value, label_pairs

P = names.SELF_PREFIX


def device_pairs(gpu: GpuSnapshot, instance: GpuInstance | None) -> list[tuple[str, str]]:
    pairs = [(names.LABEL_GPU, str(gpu.identity.index)), (names.LABEL_UUID, gpu.identity.uuid)]
    if instance is not None:
        pairs += [(names.LABEL_GPU_I_PROFILE, instance.profile),
                  (names.LABEL_GPU_I_ID, str(instance.gpu_instance_id))]
    return pairs


def _process_labels(proc: GpuProcess, policy: PodLabelPolicy, drop: frozenset[str],
                    outside: Mapping[int, Occupant]) -> str:
    # The type lets a sum over a pod's processes leave the MPS server out (issue 25).
    pairs = [*device_pairs(proc.gpu, proc.instance), (names.LABEL_PID, str(proc.sample.pid)),
             (names.LABEL_PROCESS_NAME, proc.name), (names.LABEL_PROCESS_TYPE, proc.sample.kind)]
    work = proc.workload
    if work is not None:  # a host process has no pod labels at all, not empty ones
        attrs = [(names.LABEL_CONTAINER, work.container), (names.LABEL_NAMESPACE, work.namespace),
                 (names.LABEL_POD, work.pod)]
        if policy.uid and work.pod_uid:
            attrs.append((names.LABEL_POD_UID, work.pod_uid))
        pairs += sorted(a for a in attrs if a[1])
    elif (who := outside.get(proc.sample.pid)) is not None:
        pairs.append(who)  # no pod: the Docker or Podman container, else the Unix user
    return label_pairs(kept(pairs, drop))


def process_families(processes: Sequence[GpuProcess], policy: PodLabelPolicy,
                     sums: PodUsage | None = None, drop: frozenset[str] = frozenset(),
                     outside: Mapping[int, Occupant] | None = None) -> list[Family]:
    """`sums`: `per_pod(processes)` when the caller has it already; `drop`: label names left
    off (`--drop-labels`); `outside`: PID → the label that names a process no pod holds:
    its container outside any pod, or the person who runs it (attribution/containers.py)."""
    outside = outside or {}
    memory: list[Sample] = []
    sm: list[Sample] = []
    unallocated: list[Sample] = []
    for proc in processes:
        labels = _process_labels(proc, policy, drop, outside)
        if proc.sample.used_memory_bytes is not None:
            memory.append(Sample(labels, str(proc.sample.used_memory_bytes)))
        if proc.sample.sm_utilization is not None:
            sm.append(Sample(labels, format_value(proc.sample.sm_utilization)))
        work = proc.workload
        if proc.allocated is False and work is not None:
            pairs = [(names.LABEL_GPU, str(proc.gpu.identity.index)),
                     (names.LABEL_UUID, proc.gpu.identity.uuid),
                     (names.LABEL_PID, str(proc.sample.pid)),
                     (names.LABEL_NAMESPACE, work.namespace), (names.LABEL_POD, work.pod)]
            if work.container:  # unknown (a pod its status does not list yet): absent
                pairs.append((names.LABEL_CONTAINER, work.container))
            unallocated.append(Sample(label_pairs(kept(pairs, drop)), "1"))
    by_key = {p.key: p for p in processes}
    pod_memory: list[Sample] = []
    pod_sm: list[Sample] = []
    sums = sums if sums is not None else per_pod(processes)
    for (key, namespace, pod), (used, ratio) in sorted(sums.items(), key=_pod_order):
        proc = by_key[key]
        labels = label_pairs(kept([*device_pairs(proc.gpu, proc.instance),
                                   (names.LABEL_NAMESPACE, namespace), (names.LABEL_POD, pod)],
                                  drop))
        pod_memory.append(Sample(labels, str(used)))
        if ratio is not None:
            pod_sm.append(Sample(labels, format_value(min(1.0, ratio))))
    return [
        Family(f"{P}process_memory_used_bytes", "gauge",
               "GPU memory used by a process, with its pod and container when it runs in one.",
               tuple(memory)),
        Family(f"{P}process_sm_utilization_ratio", "gauge",
               "Share of time the process used the GPU's SMs since the previous pass (0-1); "
               "absent when NVML had no sample.", tuple(sm)),
        Family(f"{P}pod_memory_used_bytes", "gauge",
               "GPU memory used by a pod's processes on this GPU or GPU instance.",
               tuple(pod_memory)),
        Family(f"{P}pod_sm_utilization_ratio", "gauge",
               "Sum of the SM utilisation of a pod's processes on this GPU (0-1).", tuple(pod_sm)),
        Family(f"{P}unallocated_process_info", "gauge",
               "A pod's process uses a GPU that pod-resources does not assign to that pod "
               "(e.g. NVIDIA_VISIBLE_DEVICES=all); the value is always 1.", tuple(unallocated)),
    ]


def _pod_order(item: tuple[tuple[EntityKey, str, str], object]) -> tuple[int, int, str, str]:
    (index, gi), namespace, pod = item[0]
    return (index, -1 if gi is None else gi, namespace, pod)
