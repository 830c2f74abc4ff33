"""The simulated cluster as each of its fakes shows it, derived from the scenario: the pods the
Kubernetes API lists, the claims the kubelet reports and the devices the DRA driver publishes,
the /proc files of the GPU processes and the kubelet's log names. Pure: `cluster.py` serves
and writes them, and applies each tick of churn through them.
"""

import hashlib
from collections.abc import Mapping

from ..model import ClaimAllocation, PodMeta, SliceDevice
from .node import Scenario, SimContainer, SimProcess, mig_uuid

BOOT_TICKS = 4_200_000  # a start time far after boot, the same every run


def container_id(namespace: str, pod: str, container: str) -> str:
    """A simulated container's 64-hex runtime ID, stable across runs."""
    return hashlib.sha256(f"ctr:{namespace}/{pod}/{container}".encode()).hexdigest()


def pod_metas(scenario: Scenario) -> tuple[PodMeta, ...]:
    """Every pod of the scenario as the Kubernetes API would list it (Running)."""
    merged: dict[tuple[str, str], PodMeta] = {}
    for spec in scenario.pod_specs:
        key = (spec.namespace, spec.pod)
        known = merged.get(key)
        containers = dict(known.containers) if known is not None else {}
        containers[container_id(spec.namespace, spec.pod, spec.container)] = spec.container
        labels = {**(known.labels if known is not None else {}), **spec.labels}
        merged[key] = PodMeta(spec.uid, spec.namespace, spec.pod, labels, "Running", containers)
    return tuple(merged.values())


DRA_DRIVER = "gpu.nvidia.com"


def dra_device_name(gpu_index: int, gpu_instance: int | None) -> str:
    """Device names in the style of NVIDIA's DRA driver: `gpu-0`, `gpu-2-mig-2`."""
    return f"gpu-{gpu_index}" if gpu_instance is None else f"gpu-{gpu_index}-mig-{gpu_instance}"


def claim_allocations(scenario: Scenario, pool: str) -> tuple[ClaimAllocation, ...]:
    """What the kubelet lists under `dynamic_resources` for the scenario's claims."""
    return tuple(
        ClaimAllocation(spec.namespace, spec.pod, spec.container, spec.claim, spec.namespace,
                        DRA_DRIVER, pool, dra_device_name(*device))
        for spec in scenario.pod_specs if spec.claim is not None
        for device in spec.claim_devices)


ClaimedDevices = tuple[tuple[tuple[str, str, str], ...], bool]


def claimed_devices(scenario: Scenario, pool: str) -> dict[tuple[str, str], ClaimedDevices]:
    """(namespace, claim) → its devices (driver, pool, device) and whether with admin access:
    the ResourceClaims the fake API serves."""
    claims: dict[tuple[str, str], ClaimedDevices] = {}
    for spec in scenario.pod_specs:
        if spec.claim is not None:
            devices = tuple((DRA_DRIVER, pool, dra_device_name(*d)) for d in spec.claim_devices)
            claims[(spec.namespace, spec.claim)] = (devices, spec.admin_access)
    return claims


def slice_devices(scenario: Scenario, pool: str) -> tuple[SliceDevice, ...]:
    """The devices the simulated DRA driver publishes: the claimed ones."""
    gpus = {gpu.index: gpu for gpu in scenario.gpus}
    devices: dict[str, SliceDevice] = {}
    for spec in scenario.pod_specs:
        for index, gi in spec.claim_devices:
            gpu = gpus[index]
            name = dra_device_name(index, gi)
            if gi is None:
                devices[name] = SliceDevice(DRA_DRIVER, pool, name, gpu.uuid, "gpu")
            else:
                profile = next(i.profile for i in gpu.instances if i.gpu_instance_id == gi)
                devices[name] = SliceDevice(DRA_DRIVER, pool, name, mig_uuid(gpu.uuid, gi), "mig",
                                            gpu.uuid, profile)
    return tuple(devices.values())


def _cgroup_line(process: SimProcess, pods: Mapping[tuple[str, str], PodMeta],
                 containers: Mapping[str, SimContainer]) -> str:
    """containerd with the systemd driver on cgroup v2, as on EKS (cgroup-paths.md)."""
    if process.docker is not None:  # a Docker host's (the systemd driver) or containerd's
        return f"0::{containers[process.docker].cgroup}\n"
    meta = pods.get(process.pod) if process.pod is not None else None
    if meta is None:
        return "0::/system.slice/gpu-burn.service\n"
    name = process.container or next(iter(meta.containers.values()))
    cid = container_id(meta.namespace, meta.name, name)
    uid = meta.uid.replace("-", "_")
    return ("0::/kubepods.slice/kubepods-burstable.slice/kubepods-burstable-pod"
            f"{uid}.slice/cri-containerd-{cid}.scope\n")


def proc_files(scenario: Scenario) -> dict[str, str]:
    """`<pid>/stat`, `<pid>/comm`, `<pid>/cgroup`, `<pid>/status` for every simulated GPU
    process, and the passwd that names their users (root 0, people from 1000)."""
    pods = {(p.namespace, p.name): p for p in pod_metas(scenario)}
    containers = {c.name: c for c in scenario.containers}
    people = sorted({p.user for gpu in scenario.gpus for p in gpu.processes} - {"root"})
    users = {"root": 0, **{name: 1000 + n for n, name in enumerate(people)}}
    files: dict[str, str] = {}
    for gpu in scenario.gpus:
        for proc in gpu.processes:
            # Field 22 (start time) after the command in parentheses, as the kernel writes it.
            start = str(BOOT_TICKS + proc.pid)
            fields = ["S", "1", str(proc.pid), str(proc.pid), *["0"] * 15, start]
            files[f"{proc.pid}/stat"] = f"{proc.pid} ({proc.name}) {' '.join(fields)} 0 0\n"
            files[f"{proc.pid}/comm"] = proc.name + "\n"
            files[f"{proc.pid}/cgroup"] = _cgroup_line(proc, pods, containers)
            uid = users[proc.user]
            files[f"{proc.pid}/status"] = f"Name:\t{proc.name}\nUid:\t{uid}\t{uid}\t{uid}\t{uid}\n"
    # The host's passwd as the exporter reads it through the host's root (attribution/users.py).
    files["1/root/etc/passwd"] = "".join(f"{name}:x:{uid}:{uid}::/home/{name}:/bin/sh\n"
                                         for name, uid in users.items())
    return files


def job_files(scenario: Scenario) -> dict[str, str]:
    """The HPC job mapping directory a Slurm prolog would have written: `<gpu index>` → one
    job ID per line."""
    return {str(gpu.index): "".join(f"{job}\n" for job in gpu.hpc_jobs)
            for gpu in scenario.gpus if gpu.hpc_jobs}


def log_names(scenario: Scenario) -> list[str]:
    """`pods/<ns>_<pod>_<uid>` and `containers/<pod>_<ns>_<container>-<id>.log` entries."""
    names: list[str] = []
    for meta in pod_metas(scenario):
        names.append(f"pods/{meta.namespace}_{meta.name}_{meta.uid}")
        names += [f"containers/{meta.name}_{meta.namespace}_{container}-{cid}.log"
                  for cid, container in meta.containers.items()]
    return names
