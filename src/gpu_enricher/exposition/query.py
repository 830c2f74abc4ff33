"""`GET /api/v1/gpus`: who holds and who uses each GPU, as JSON. Pure.

Built once per collection cycle from the same joined state as /metrics; a request only
filters it and encodes it. Schema and example: docs/processes.md.
"""

import json
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any, Final

from ..attribution.containers import Occupant, Occupants
from ..attribution.devices import Attribution, EntityKey, Holder
from ..attribution.workloads import GpuProcess, PodIndex
from ..fields.convert import MIB
from ..fields.names import LABEL_CONTAINER, LABEL_USER
from ..fields.namings import (
    FB_CAPACITY_BYTES,
    FB_TOTAL,
    FB_USED,
    FB_USED_BYTES,
    GPU_UTIL,
    GPU_UTIL_RATIO,
)
from ..model import NO_JOBS, FieldValue, GpuInstance, GpuSnapshot, JobMapping, NodeSnapshot

API_VERSION: Final = "v1"
Document = dict[str, Any]


def _bytes(values: Mapping[str, FieldValue], exact: str, mib: str) -> int | None:
    """NVML's byte count where the counters read it (a DCGM 4.7 `…_BYTES` name), else the
    classic MiB figure in bytes."""
    value = values.get(exact)
    if isinstance(value, int | float):
        return int(value)
    value = values.get(mib)
    return int(value) * MIB if isinstance(value, int | float) else None


def _utilization(values: Mapping[str, FieldValue]) -> float | None:
    """DCGM_FI_DEV_GPU_UTIL_RATIO (DCGM 4.7), else DCGM_FI_DEV_GPU_UTIL (%) as a ratio."""
    value = values.get(GPU_UTIL_RATIO)
    if isinstance(value, int | float):
        return round(float(value), 4)
    value = values.get(GPU_UTIL)
    return round(float(value) / 100, 4) if isinstance(value, int | float) else None


def _activity(values: Mapping[str, FieldValue]) -> float | None:
    value = values.get("DCGM_FI_PROF_GR_ENGINE_ACTIVE")
    return round(float(value), 4) if isinstance(value, int | float) else None


def _holder(holder: Holder, pods: PodIndex) -> Document:
    meta = pods.by_name.get((holder.namespace, holder.pod))
    return {"namespace": holder.namespace, "pod": holder.pod, "container": holder.container,
            "pod_uid": meta.uid if meta is not None else None,
            "resource": holder.resource, "device_id": holder.device_id,
            "replica": holder.replica,
            "claim": None if holder.claim is None else dict(holder.claim.label_pairs())}


@dataclass(frozen=True, slots=True)
class OutsidePods:
    """Who uses a device or runs a process that no pod holds (attribution/containers.py)."""

    occupants: Occupants = field(default_factory=dict)
    processes: Mapping[int, Occupant] = field(default_factory=dict)


NO_OUTSIDE: Final = OutsidePods()


def _process(proc: GpuProcess, outside: OutsidePods) -> Document:
    work = proc.workload
    sample = proc.sample
    label, name = outside.processes.get(sample.pid, ("", ""))
    return {
        "pid": sample.pid, "name": proc.name, "type": sample.kind,
        "memory_used_bytes": sample.used_memory_bytes,
        "sm_utilization_ratio": sample.sm_utilization,
        "memory_utilization_ratio": sample.memory_utilization,
        "namespace": work.namespace if work else None,
        "pod": work.pod if work else None,
        "container": ((work.container or None) if work else
                      name if label == LABEL_CONTAINER else None),
        "pod_uid": (work.pod_uid or None) if work else None,
        "user": name if label == LABEL_USER else None,
        "allocated": proc.allocated,
    }


def _device(key: EntityKey, attribution: Attribution, procs: Sequence[GpuProcess],
            pods: PodIndex, jobs: JobMapping, outside: OutsidePods) -> Document:
    found = outside.occupants.get(key, ())
    return {"holders": [_holder(h, pods) for h in attribution.holders.get(key, ())],
            "processes": [_process(p, outside) for p in procs if p.key == key],
            "hpc_jobs": list(jobs.of(*key)),
            "containers": [n for label, n in found if label == LABEL_CONTAINER],
            "users": [n for label, n in found if label == LABEL_USER]}


def _instance(gpu: GpuSnapshot, inst: GpuInstance, attribution: Attribution,
              procs: Sequence[GpuProcess], pods: PodIndex, jobs: JobMapping,
              outside: OutsidePods) -> Document:
    return {
        "gpu_instance_id": inst.gpu_instance_id, "compute_instance_id": inst.compute_instance_id,
        "profile": inst.profile, "uuid": inst.uuid,
        "memory_total_bytes": _bytes(inst.values, FB_CAPACITY_BYTES, FB_TOTAL),
        "memory_used_bytes": _bytes(inst.values, FB_USED_BYTES, FB_USED),
        # NVML has no GPU_UTIL per instance; its graphics-engine activity (GPM) is the figure.
        "utilization_ratio": _activity(inst.values),
        **_device((gpu.identity.index, inst.gpu_instance_id), attribution, procs, pods, jobs,
                  outside),
    }


def gpus_document(node: NodeSnapshot | None, attribution: Attribution,
                  processes: Sequence[GpuProcess], pods: PodIndex, hostname: str | None,
                  collected_at: float | None, process_metrics: bool,
                  jobs: JobMapping = NO_JOBS, outside: OutsidePods = NO_OUTSIDE) -> Document:
    """`jobs`: each GPU's and instance's HPC jobs (`hpc_jobs`, [] without a mapping file);
    `outside`: the containers and people using each device and running each process outside
    any pod (`containers`, `users`; [] without `--container-labels`)."""
    gpus = []
    for gpu in node.gpus if node is not None else ():
        ident = gpu.identity
        values = gpu.values
        gpus.append({
            "index": ident.index, "uuid": ident.uuid, "model": ident.model_name,
            "pci_bus_id": ident.pci_bus_id, "healthy": gpu.healthy, "error": gpu.error,
            "memory_total_bytes": _bytes(values, FB_CAPACITY_BYTES, FB_TOTAL),
            "memory_used_bytes": _bytes(values, FB_USED_BYTES, FB_USED),
            "utilization_ratio": _utilization(values),
            "mig_enabled": gpu.mig_enabled,
            "mig_instances": [_instance(gpu, i, attribution, processes, pods, jobs, outside)
                              for i in gpu.instances],
            **_device((ident.index, None), attribution, processes, pods, jobs, outside),
        })
    return {"api_version": API_VERSION, "hostname": hostname, "collected_at": collected_at,
            "process_metrics": process_metrics, "gpus": gpus}


GpuSeconds = Mapping[tuple[str, str, str, str], float]
"""GPU-seconds since start by (namespace, pod, container, resource): collector/ledger.py."""
Joules = Mapping[tuple[int, str, str, str, int | None], float]
"""Joules since start by (GPU index, namespace, pod, container, GPU instance or None)."""
OccupantJoules = Mapping[tuple[int, str, str, int | None], float]
"""Joules since start by (GPU index, `container` or `user`, name, GPU instance or None)."""


@dataclass(frozen=True, slots=True)
class Billed:
    """What the accounts hold (collector/accounts.py): per pod container, and on a host without
    Kubernetes per container and person (`Occupant`)."""

    seconds: GpuSeconds = field(default_factory=dict)
    joules: Joules = field(default_factory=dict)
    occupant_seconds: Mapping[Occupant, float] = field(default_factory=dict)
    occupant_joules: OccupantJoules = field(default_factory=dict)


def _billed(device: Document, gpu: int, instance: int | None, billed: Billed) -> Document:
    holders = []
    for holder in device["holders"]:
        tenant = (holder["namespace"], holder["pod"], holder["container"])
        holders.append({**holder,
                        "gpu_seconds": billed.seconds.get((*tenant, holder["resource"])),
                        "energy_joules": billed.joules.get((gpu, *tenant, instance))})
    occupants = [*((LABEL_CONTAINER, n) for n in device["containers"]),
                 *((LABEL_USER, n) for n in device["users"])]
    accounts = [{label: name, "gpu_seconds": billed.occupant_seconds.get((label, name)),
                 "energy_joules": billed.occupant_joules.get((gpu, label, name, instance))}
                for label, name in occupants]
    return {**device, "holders": holders, "accounts": accounts}


def with_accounts(document: Document, billed: Billed) -> Document:
    """Each holder with its GPU time (all the pod container's devices of that resource) and
    its energy on that device since start, as the `gpu_enricher_pod_*_total` series of the
    same picture say (null where none is kept: without -k, or --process-metrics for energy);
    and each device's `accounts`, the same for the containers and people using it outside pods
    (`--container-labels`: their GPU time on every device, their energy on this one)."""
    gpus = []
    for gpu in document["gpus"]:
        index = gpu["index"]
        instances = [_billed(i, index, i["gpu_instance_id"], billed)
                     for i in gpu["mig_instances"]]
        gpus.append({**_billed(gpu, index, None, billed), "mig_instances": instances})
    return {**document, "gpus": gpus}


def _involves(device: Document, namespace: str | None, pod: str | None) -> bool:
    def match(entry: Document) -> bool:
        return ((namespace is None or entry.get("namespace") == namespace)
                and (pod is None or entry.get("pod") == pod))
    return any(match(e) for e in (*device["holders"], *device["processes"]))


def filtered(document: Document, namespace: str | None, pod: str | None) -> Document:
    """Only the GPUs (and, of a MIG GPU, only the instances) the pod holds or runs on."""
    if namespace is None and pod is None:
        return document
    gpus = []
    for gpu in document["gpus"]:
        instances = [i for i in gpu["mig_instances"] if _involves(i, namespace, pod)]
        if instances or _involves(gpu, namespace, pod):
            gpus.append({**gpu, "mig_instances": instances})
    return {**document, "gpus": gpus}


def _dumps(value: object) -> str:
    return json.dumps(value, separators=(",", ":"))


def encode(document: Document) -> bytes:
    """`json.dumps` of the document, compact, in pieces: a list's items one call each, so a
    painter thread lets the event loop in between (one C call holds the GIL throughout)."""
    parts = [f"{_dumps(key)}:" + ("[" + ",".join(map(_dumps, value)) + "]"
                                  if isinstance(value, list) else _dumps(value))
             for key, value in document.items()]
    return ("{" + ",".join(parts) + "}").encode()
