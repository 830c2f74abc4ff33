"""Immutable snapshots that flow from the sources through the join into the renderer.

A collection cycle produces new objects; nothing here is ever mutated in place, so the
HTTP handlers can read whatever snapshot is current without locks.
"""

from collections.abc import Mapping
from dataclasses import dataclass, field

FieldValue = int | float | str
"""An exported value in dcgm-exporter's unit: int (plain), float (six decimals) or text."""



@dataclass(frozen=True, slots=True)
class DeviceIdentity:
    """What names a physical GPU in every series: NVML index, UUID, PCI bus id, model."""

    index: int
    uuid: str
    pci_bus_id: str
    model_name: str
    minor_number: int | None = None


@dataclass(frozen=True, slots=True)
class GpuInstance:
    """A MIG GPU instance (with its compute instance) of a parent GPU."""

    gpu_instance_id: int
    compute_instance_id: int
    profile: str
    """Profile name as dcgm-exporter prints it, e.g. `1g.10gb` (NVML's `MIG 1g.10gb`)."""
    uuid: str
    """The MIG device UUID, `MIG-…`; series carry the parent's UUID, this one is for matching."""
    values: Mapping[str, FieldValue] = field(default_factory=dict)
    placement_start: int | None = None
    """The first memory slice it occupies (`nvmlGpuInstanceGetInfo`): tells apart instances
    of one profile, as DRA's MIG device names do."""
    entity_id: int | None = None
    """DCGM's GPU-instance entity id, which dcgm-exporter's `-d i:IDS` selects by: the GPU's
    index times its MIG device slots (`nvmlDeviceGetMaxMigDeviceCount`, 7 on an A100 or H100)
    plus the instance's rank on that GPU, ordered by profile index, then GPU instance id, as
    DCGM's cache manager enumerates them."""
    slices: int | None = None
    """Compute slices of its GPU instance profile (NVML's `sliceCount`: 3 for `3g.40gb`)."""
    gpu_slices: int | None = None
    """Compute slices of the whole GPU: the largest profile's `sliceCount` (7 on an A100 or
    H100, 4 on an A30). `slices / gpu_slices` is the share of the GPU the instance holds."""


@dataclass(frozen=True, slots=True)
class ProcessSample:
    """One process on one GPU (or GPU instance), as NVML reports it in a pass."""

    pid: int
    """A host PID: the driver is not PID-namespace aware."""
    used_memory_bytes: int | None
    gpu_instance_id: int | None = None
    sm_utilization: float | None = None
    """Ratio 0..1 of SM time since the previous pass; None: NVML had no sample for it."""
    memory_utilization: float | None = None
    kind: str = "compute"
    """`mps` (an MPS client), `compute` or `graphics`: NVML's lists, a process in several
    reported once, in that order of precedence; `mps-server` once /proc names it the MPS
    server or control daemon (attribution/workloads.py)."""


@dataclass(frozen=True, slots=True)
class GpuSnapshot:
    """One GPU in one collection pass.

    `healthy` is False when the GPU's queries failed as a whole (lost, unknown error): its
    values are then empty and only `gpu_enricher_gpu_up` reports it.
    """

    identity: DeviceIdentity
    healthy: bool = True
    error: str | None = None
    values: Mapping[str, FieldValue] = field(default_factory=dict)
    mig_enabled: bool = False
    instances: tuple[GpuInstance, ...] = ()
    processes: tuple[ProcessSample, ...] = ()
    p2p_nvlink: Mapping[int, int] = field(default_factory=dict)
    """Peer GPU index → `nvmlDeviceGetP2PStatus(this, peer, NVML_P2P_CAPS_INDEX_NVLINK)`
    (nvmlGpuP2PStatus_t, 0 OK … 6 unknown); read only for DCGM_EXP_P2P_STATUS."""


@dataclass(frozen=True, slots=True)
class SampleError:
    """One failed query in a pass, counted by the collector's self-metrics."""

    source: str
    reason: str
    gpu_index: int | None = None


@dataclass(frozen=True, slots=True)
class NodeSnapshot:
    """Everything one backend pass saw on this node."""

    gpus: tuple[GpuSnapshot, ...]
    driver_version: str = ""
    errors: tuple[SampleError, ...] = field(default=())
    rebound: frozenset[str] = frozenset()
    """UUIDs of the GPUs whose series end because the GPUs bound to the driver changed (one
    unbound, or renumbered by a bind or an unbind): gone on purpose, not lost."""


@dataclass(frozen=True, slots=True)
class PodAssignment:
    """One container's devices of one resource, as the kubelet's pod-resources `List` says."""

    namespace: str
    pod: str
    container: str
    resource: str
    device_ids: tuple[str, ...]


@dataclass(frozen=True, slots=True)
class ClaimAllocation:
    """One device of a ResourceClaim a container uses, as the kubelet's `List` reports it
    under `dynamic_resources` (one per `ClaimResource`)."""

    namespace: str
    pod: str
    container: str
    claim_name: str
    claim_namespace: str
    driver: str  # e.g. gpu.nvidia.com
    pool: str  # usually the node's name
    device: str  # the DRA driver's device name, e.g. gpu-0 or a MIG device name
    share_id: str | None = None  # set when the device is shared (ClaimResource.share_id)


@dataclass(frozen=True, slots=True)
class AllocatableDevices:
    """One resource's devices from `GetAllocatableResources`."""

    resource: str
    device_ids: tuple[str, ...]


@dataclass(frozen=True, slots=True)
class AssignmentSnapshot:
    """What the exporter believes about pods now: the assignments in use and their age."""

    assignments: tuple[PodAssignment, ...]
    age_seconds: float | None  # None: no assignments in use (never fetched, or too old)
    up: bool
    allocatable: tuple[AllocatableDevices, ...] | None
    api: str
    pod_age: Mapping[tuple[str, str], int] = field(default_factory=dict)
    """(namespace, pod) → how many `List` answers ago the pod first appeared."""
    claims: tuple[ClaimAllocation, ...] = ()
    """Devices held through DRA ResourceClaims (`dynamic_resources`), every driver."""


@dataclass(frozen=True, slots=True)
class SourceHealth:
    """What one source (nvml, kubelet, the pod watch, /proc, …) says about itself."""

    up: bool
    collections: int = 0
    errors: Mapping[str, int] = field(default_factory=dict)  # reason → count since start
    last_duration_seconds: float | None = None
    last_success_timestamp: float | None = None


@dataclass(frozen=True, slots=True)
class ContainerRef:
    """The pod and container a process runs in, as its cgroup path names them."""

    pod_uid: str
    """Lowercase, with dashes (the systemd driver's `_` restored); a static pod's 32-hex
    config hash stays as it is."""
    container_id: str
    """The runtime's 64-hex container ID, lowercase, without a `containerd://` prefix."""


@dataclass(frozen=True, slots=True)
class HostProcess:
    """What `/proc/<pid>` says about one GPU process."""

    pid: int
    start_time: int  # clock ticks after boot, `/proc/<pid>/stat` field 22
    name: str  # `/proc/<pid>/comm`
    container: ContainerRef | None  # None: a host process (or CRI-O's conmon)
    runtime_container: str | None = None
    """Outside any pod: the 64-hex ID of the Docker, Podman or containerd container it runs in."""
    user: str | None = None
    """Its real UID's name in the host's passwd, else the UID; None: unread."""
    cgroup: str | None = None
    """Outside any pod: the cgroup it runs in (the unified hierarchy's, else the first named),
    where a runtime's container is found when its ID is not 64-hex (containerd's own)."""


@dataclass(frozen=True, slots=True)
class ProcessTable:
    """The GPU processes found in `/proc` in one pass; a PID that vanished is absent."""

    processes: Mapping[int, HostProcess] = field(default_factory=dict)


@dataclass(frozen=True, slots=True)
class PodMeta:
    """The little we keep of one pod from the Kubernetes API (or the kubelet's log names)."""

    uid: str
    namespace: str
    name: str
    labels: Mapping[str, str] = field(default_factory=dict)
    phase: str = ""
    containers: Mapping[str, str] = field(default_factory=dict)
    """Container ID (bare 64-hex, lowercase) → container name."""
    mirror_uid: str | None = None
    """A static pod's config hash (annotation `kubernetes.io/config.mirror`): the UID its
    cgroup and log directory carry."""


@dataclass(frozen=True, slots=True)
class PodDirectory:
    """This node's pods as one source knows them (the Kubernetes API or the log names)."""

    pods: tuple[PodMeta, ...] = ()
    synced: bool = False
    """True once a complete list arrived and the source is current."""


@dataclass(frozen=True, slots=True)
class SliceDevice:
    """One device a DRA driver publishes in this node's ResourceSlices."""

    driver: str
    pool: str
    name: str
    uuid: str  # attribute `uuid`: a GPU UUID (GPU-…) or a MIG device UUID (MIG-…)
    kind: str = ""  # attribute `type`: gpu or mig (other drivers: whatever they say)
    parent_uuid: str | None = None  # MIG: attribute `parentUUID`
    profile: str | None = None  # MIG: attribute `profile`, e.g. 1g.10gb


ClaimedDevice = tuple[str, str, str, str, str]
"""(claim namespace, claim name, driver, pool, device): one device of one ResourceClaim."""


@dataclass(frozen=True, slots=True)
class ClaimAccess:
    """What the Kubernetes API says of the ResourceClaims the kubelet reports.

    A device allocated with admin access is monitored, not used: the GPU Operator's DRA
    exporter claims every GPU so. It never makes its pod a holder of the device.
    """

    admin: frozenset[ClaimedDevice] = frozenset()
    pending: frozenset[tuple[str, str]] = frozenset()
    """(namespace, name) of claims not asked about yet (the API client still loading, at
    start): they label nothing until read, or until reading them failed."""


@dataclass(frozen=True, slots=True)
class SliceDirectory:
    """The DRA devices of this node, from the Kubernetes API's ResourceSlices."""

    devices: tuple[SliceDevice, ...] = ()
    synced: bool = False
    api_version: str = ""  # the resource.k8s.io version served: v1, v1beta2 or v1beta1
    recent: tuple[SliceDevice, ...] = ()
    """Devices whose slice went a short while ago (a driver republishing its pool): a claim
    that still names one resolves to it, never to no device meanwhile."""


@dataclass(frozen=True, slots=True)
class JobMapping:
    """HPC jobs by GPU, from `--hpc-job-mapping-dir`'s files: (GPU index, GPU instance ID, or
    None for the file of a whole GPU) → the job IDs, in file order without repeats."""

    jobs: Mapping[tuple[int, int | None], tuple[str, ...]] = field(default_factory=dict)

    def of(self, index: int, gpu_instance: int | None) -> tuple[str, ...]:
        return self.jobs.get((index, gpu_instance), ())


NO_JOBS = JobMapping()
