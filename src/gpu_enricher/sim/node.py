"""The simulated node's description as data: GPUs, MIG instances, processes and pods.

Built by sim/scenario.py from the built-in node or `--simulate FILE.yaml` (docs/simulate.md).
"""

import hashlib
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Final

from ..model import AllocatableDevices, PodAssignment

Range = tuple[float, float]

MIG_COMPUTE_SLICES: Final = 7
"""The most compute slices of a MIG-capable GPU (A100, H100, H200, B200: 7; A30: 4), so the
most that a GPU's instances may take together."""
PID_MAX: Final = 4_194_304
"""Linux's largest pid (PID_MAX_LIMIT on 64-bit)."""


@dataclass(frozen=True, slots=True)
class SimProcess:
    pid: int
    used_memory_mib: int
    gpu_instance_id: int | None = None
    name: str = "python"
    pod: tuple[str, str] | None = None  # (namespace, pod); None: a host process
    container: str | None = None
    sm_utilization: Range = (0.0, 0.0)  # ratio 0..1
    kind: str = "compute"  # NVML's list: compute, graphics, or mps (an MPS client)
    docker: str | None = None  # a Docker host's container it runs in (`containers:`)
    user: str = "root"  # who runs it: its status's UID, named by the simulated host's passwd


@dataclass(frozen=True, slots=True)
class SimInstance:
    gpu_instance_id: int
    profile: str
    memory_mib: int
    memory_used_mib: Range = (0.0, 0.0)
    activity: Range = (0.0, 0.0)  # ratio 0..1 that drives the profiling fields


@dataclass(frozen=True, slots=True)
class SimGpu:
    index: int
    model: str
    uuid: str
    pci_bus_id: str
    memory_mib: int = 81559
    utilization: Range = (0.0, 0.0)  # percent
    memory_used_mib: Range = (0.0, 0.0)
    power_watts: Range = (60.0, 70.0)
    temperature: Range = (30.0, 35.0)
    sm_clock_mhz: Range = (1410.0, 1410.0)
    mem_clock_mhz: int = 2619
    lost: bool = False
    instances: tuple[SimInstance, ...] = ()
    processes: tuple[SimProcess, ...] = ()
    gpm: bool = True  # profiling fields (NVML GPM): Hopper and newer only
    xids: tuple[int, ...] = ()  # XID errors raised once at start
    thermal_slowdown: bool = False  # held back by HW thermal slowdown the whole time
    hpc_jobs: tuple[str, ...] = ()  # a Slurm prolog's job IDs for it (--hpc-job-mapping-dir)
    unbound_every_seconds: float | None = None  # bound, unbound, bound … for this long each


# NVML GPM, our source of DCGM_FI_PROF_*, exists on Hopper (H100, H200, H800, H20, GH200) and
# newer (Blackwell B100/B200/GB200…); an A100 or L4 answers NOT_SUPPORTED. dcgm-exporter gets
# profiling on A100 through DCGM's own profiling module, which we do not use.
GPM_MODEL_MARKERS: Final = ("H100", "H200", "H800", "H20", "GH200", "B100", "B200", "B300",
                            "GB200", "GB300")


def has_gpm(model: str) -> bool:
    return any(marker in model.upper() for marker in GPM_MODEL_MARKERS)


@dataclass(frozen=True, slots=True)
class SimPod:
    """A pod's container as the Kubernetes API would describe it (the fake API serves it)."""

    namespace: str
    pod: str
    container: str
    uid: str
    labels: Mapping[str, str]
    claim: str | None = None
    """Its devices come through this DRA ResourceClaim instead of the device plugin."""
    claim_devices: tuple[tuple[int, int | None], ...] = ()  # (GPU index, GI or None)
    admin_access: bool = False
    """The claim monitors its devices (as the GPU Operator's DRA exporter claims every GPU)."""


@dataclass(frozen=True, slots=True)
class SimContainer:
    """A container a Docker host runs (its fake Engine API serves it, `--container-labels`), or
    a containerd host (`runtime: containerd`: its fake containerd serves it)."""

    container_id: str
    name: str
    env: tuple[str, ...] = ()  # `NVIDIA_VISIBLE_DEVICES=…`, as the nvidia runtime reads it
    device_requests: tuple[Mapping[str, object], ...] = ()  # what `docker run --gpus` sends
    namespace: str | None = None
    """containerd's namespace; None on a Docker host."""
    labels: Mapping[str, str] = field(default_factory=dict)  # Compose's, when it started it

    @property
    def cgroup(self) -> str:
        """Where its processes run: Docker's systemd scope, or ctr's `/<namespace>/<id>`."""
        if self.namespace is None:
            return f"/system.slice/docker-{self.container_id}.scope"
        return f"/{self.namespace}/{self.container_id}"


@dataclass(slots=True, eq=False)
class ChurnClock:
    """Ticks of pod churn the simulated node has gone through (sim/churn.py): the one mutable
    part of a scenario, advanced by its cluster once the fakes show the new pods and read by its
    backend, whose process lists follow."""

    generation: int = 0


@dataclass(frozen=True, slots=True)
class Scenario:
    gpus: tuple[SimGpu, ...]
    seed: int = 1
    driver_version: str = "580.105.08"
    period_seconds: float = 120.0  # one load wave: slow enough to look like real work
    pods: tuple[PodAssignment, ...] = ()  # served by the simulated node's fake kubelet
    pod_specs: tuple[SimPod, ...] = ()  # every pod container, with or without devices
    churn_pods_per_second: int = 0  # pods replaced every second (`churn:`); 0: none
    containers: tuple[SimContainer, ...] = ()  # a Docker host's, served by a fake Engine API
    churn_clock: ChurnClock = field(default_factory=ChurnClock, compare=False, repr=False)

    def allocatable(self) -> tuple[AllocatableDevices, ...]:
        """What the fake kubelet reports as allocatable: every GPU (its replicas when pods
        hold replicas of it) and every MIG instance under its `nvidia.com/mig-*` resource."""
        held = {d for p in self.pods for d in p.device_ids}
        # A device a DRA driver manages is not the device plugin's to offer.
        claimed = {d for p in self.pod_specs for d in p.claim_devices}
        by_resource: dict[str, list[str]] = {}
        for gpu in self.gpus:
            if gpu.instances:
                for inst in gpu.instances:
                    if (gpu.index, inst.gpu_instance_id) not in claimed:
                        by_resource.setdefault(f"nvidia.com/mig-{inst.profile}", []).append(
                            mig_uuid(gpu.uuid, inst.gpu_instance_id))
                continue
            if (gpu.index, None) in claimed:
                continue
            replicas = sorted(d for d in held if d.startswith(f"{gpu.uuid}::"))
            by_resource.setdefault("nvidia.com/gpu", []).extend(replicas or [gpu.uuid])
        return tuple(AllocatableDevices(r, tuple(ids)) for r, ids in sorted(by_resource.items()))


def mig_uuid(gpu_uuid: str, gpu_instance_id: int) -> str:
    """The simulated MIG device UUID of a GPU instance (stable, derived from its GPU's)."""
    digest = hashlib.sha256(f"{gpu_uuid}/{gpu_instance_id}".encode()).hexdigest()
    return f"MIG-{digest[:8]}-{digest[8:12]}-{digest[12:16]}-{digest[16:20]}-{digest[20:32]}"


def default_uuid(seed: int, index: int) -> str:
    digest = hashlib.sha256(f"gpu-enricher-sim:{seed}:{index}".encode()).hexdigest()
    return f"GPU-{digest[:8]}-{digest[8:12]}-{digest[12:16]}-{digest[16:20]}-{digest[20:32]}"


def pod_uid(namespace: str, pod: str) -> str:
    """A simulated pod's UID, stable across runs."""
    d = hashlib.sha256(f"pod:{namespace}/{pod}".encode()).hexdigest()
    return f"{d[:8]}-{d[8:12]}-{d[12:16]}-{d[16:20]}-{d[20:32]}"


def docker_id(name: str) -> str:
    """The simulated Docker container ID of a `containers:` entry (stable, from its name)."""
    return hashlib.sha256(f"gpu-enricher-sim-container:{name}".encode()).hexdigest()
