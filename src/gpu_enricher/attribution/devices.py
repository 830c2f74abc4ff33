"""Kubelet device IDs → this node's GPUs and MIG instances. Pure: no I/O, no logging.

The forms real clusters produce (podresources-api.md): `GPU-<uuid>`, `<uuid>::<n>` (time-slicing
or MPS replica), `MIG-<uuid>` (resolved through NVML's MIG device UUIDs), `MIG-<uuid>::<n>`,
legacy `MIG-GPU-<uuid>/<gi>/<ci>`, and GKE's `nvidia<N>`, `nvidia<N>/vgpu<K>`, `nvidia<N>/gi<M>`,
`nvidia<N>/gi<M>/vgpu<K>`. GKE's N is the `/dev/nvidia<N>` minor number, which can differ from
the NVML index: matching uses the minor number (dcgm-exporter uses the index and mislabels such
nodes); the `device` label keeps dcgm-exporter's `nvidia<index>`.
"""

import functools
import re
from collections.abc import Collection, Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Final

from ..model import AllocatableDevices, GpuSnapshot, PodAssignment

NVIDIA_GPU: Final = "nvidia.com/gpu"
NVIDIA_MIG_PREFIX: Final = "nvidia.com/mig-"

# An empty suffix (`GPU-<uuid>::`) is no replica: dcgm-exporter strips it and matches the base.
# Numbers are ASCII and at most 9 digits: `\d` also matches other scripts' digits, and int() of
# over 4,300 digits raises, which would fail the whole pass on one odd device ID (issue 13).
_REPLICA = re.compile(r"^(?P<base>.+)::(?P<replica>[0-9]*)$")
_BARE_UUID = re.compile(r"^[0-9a-fA-F]{8}(-[0-9a-fA-F]{4}){3}-[0-9a-fA-F]{12}$")
_LEGACY_MIG = re.compile(r"^MIG-(?P<gpu>GPU-[0-9a-fA-F-]+)/(?P<gi>[0-9]{1,9})/(?P<ci>[0-9]{1,9})$")
_GKE = re.compile(r"^nvidia(?P<minor>[0-9]{1,9})(?:/gi(?P<gi>[0-9]{1,9}))?"
                  r"(?:/vgpu(?P<vgpu>[0-9]{1,9}))?$")

EntityKey = tuple[int, int | None]
"""(NVML index of the GPU, GPU instance id or None for the whole GPU): one set of series."""


@dataclass(frozen=True, slots=True)
class DeviceRef:
    """A parsed device ID: which GPU (by UUID or minor number), which instance, which replica."""

    gpu_uuid: str | None = None
    mig_uuid: str | None = None
    minor: int | None = None
    gpu_instance: int | None = None
    replica: str | None = None


@dataclass(frozen=True, slots=True)
class ClaimRef:
    """The DRA ResourceClaim behind a holding: dcgm-exporter's `dra_*` labels."""

    claim_name: str
    claim_namespace: str
    driver: str
    pool: str
    device: str
    mig_profile: str | None = None
    mig_uuid: str | None = None
    admin_access: bool = False
    """Allocated with admin access: its pod monitors the device (claims.py)."""

    def label_pairs(self) -> list[tuple[str, str]]:
        pairs = [("dra_claim_name", self.claim_name),
                 ("dra_claim_namespace", self.claim_namespace),
                 ("dra_device_name", self.device), ("dra_driver_name", self.driver),
                 ("dra_pool_name", self.pool)]
        if self.mig_profile is not None:
            pairs.append(("dra_mig_profile", self.mig_profile))
        if self.mig_uuid is not None:
            pairs.append(("dra_mig_device_uuid", self.mig_uuid))
        return pairs


@dataclass(frozen=True, slots=True, order=True)
class Holder:
    """One (pod, container) holding one device ID; ordered for a deterministic choice."""

    namespace: str
    pod: str
    container: str
    resource: str  # a device plugin's resource name, or a DRA driver's name
    device_id: str  # as the kubelet reports it; for a claim `<pool>/<device>`
    replica: str | None = None
    claim: ClaimRef | None = field(default=None, compare=False)


@dataclass(frozen=True, slots=True)
class Attribution:
    holders: Mapping[EntityKey, tuple[Holder, ...]]
    """Every holder of every entity, sorted; an entity without holders is absent."""
    unmatched: tuple[str, ...] = ()
    """Device IDs of considered resources that name nothing on this node, or no known form."""

    def primary(self, key: EntityKey) -> Holder | None:
        """The holder whose labels a shared device carries without virtual GPUs: the first
        in sorted order, so labels never flip between scrapes."""
        found = self.holders.get(key)
        return found[0] if found else None


EMPTY_ATTRIBUTION: Final = Attribution({})


def is_gpu_resource(resource: str, extra_names: Collection[str] = ()) -> bool:
    """`nvidia.com/gpu`, every `nvidia.com/mig-*`, and `--nvidia-resource-names`."""
    return resource == NVIDIA_GPU or resource.startswith(NVIDIA_MIG_PREFIX) or \
        resource in extra_names


# The same IDs come back every pass (assignments, allocatable devices): parsed once each.
@functools.lru_cache(maxsize=4096)
def parse_device_id(device_id: str) -> DeviceRef | None:
    """One of the known forms, or None."""
    replica: str | None = None
    base = device_id.strip()
    if (m := _REPLICA.match(base)) is not None:
        base, replica = m["base"], m["replica"] or None
    if (m := _LEGACY_MIG.match(base)) is not None:
        return DeviceRef(gpu_uuid=m["gpu"], gpu_instance=int(m["gi"]), replica=replica)
    if base.startswith("GPU-"):
        return DeviceRef(gpu_uuid=base, replica=replica)
    if base.startswith("MIG-"):
        return DeviceRef(mig_uuid=base, replica=replica)
    if _BARE_UUID.match(base):
        return DeviceRef(gpu_uuid=f"GPU-{base}", replica=replica)
    if (m := _GKE.match(base)) is not None and replica is None:
        gi = m["gi"]
        return DeviceRef(minor=int(m["minor"]), gpu_instance=None if gi is None else int(gi),
                         replica=m["vgpu"])
    return None


@dataclass(frozen=True, slots=True)
class NodeIndex:
    by_uuid: Mapping[str, int]
    by_minor: Mapping[int, int]
    by_mig_uuid: Mapping[str, EntityKey]
    instances: frozenset[EntityKey]
    prefixes: frozenset[str] = frozenset()
    """What a device ID that names a GPU or MIG instance here by UUID starts with, lowercased
    (`held_here`): each GPU's UUID, bare and in `MIG-GPU-<uuid>/…`, each MIG device's UUID."""
    prefix_lengths: tuple[int, ...] = ()


def node_index(gpus: Iterable[GpuSnapshot]) -> NodeIndex:
    by_uuid: dict[str, int] = {}
    by_minor: dict[int, int] = {}
    by_mig: dict[str, EntityKey] = {}
    instances: set[EntityKey] = set()
    for gpu in gpus:
        ident = gpu.identity
        if ident.uuid:
            by_uuid[ident.uuid.lower()] = ident.index
        # Without a minor number (NOT_SUPPORTED) the index is the best guess, as in dcgm-exporter.
        by_minor[ident.minor_number if ident.minor_number is not None else ident.index] = \
            ident.index
        for inst in gpu.instances:
            by_mig[inst.uuid.lower()] = (ident.index, inst.gpu_instance_id)
            instances.add((ident.index, inst.gpu_instance_id))
    prefixes = {*by_uuid, *(f"mig-{u}" for u in by_uuid), *by_mig,
                *(u.removeprefix("gpu-") for u in by_uuid if u.startswith("gpu-"))}
    return NodeIndex(by_uuid, by_minor, by_mig, frozenset(instances), frozenset(prefixes),
                     tuple(sorted({len(p) for p in prefixes})))


def resolve(ref: DeviceRef, node: NodeIndex) -> EntityKey | None:
    if ref.mig_uuid is not None:
        return node.by_mig_uuid.get(ref.mig_uuid.lower())
    if ref.gpu_uuid is not None:
        index = node.by_uuid.get(ref.gpu_uuid.lower())
    elif ref.minor is not None:
        index = node.by_minor.get(ref.minor)
    else:
        return None
    if index is None:
        return None
    key = (index, ref.gpu_instance)
    return key if ref.gpu_instance is None or key in node.instances else None


def held_here(device_id: str, node: NodeIndex) -> DeviceRef | None:
    """`device_id` parsed when it names a GPU or MIG instance of this node (`resolve` finds
    it), else None. An ID of another node is ruled out by a few set lookups, unparsed: every
    form that names a GPU by UUID starts with that UUID (lowercase is per character, so a
    prefix stays one), so an ID that starts with none of `node.prefixes` can resolve to
    nothing here. A kubelet listing 250,000 IDs of other GPUs cost ~4 us each to parse
    (issue 26). Leading whitespace and GKE's `nvidia<N>` forms take the whole parse."""
    lowered = device_id.lower()
    prefixes = node.prefixes
    for n in node.prefix_lengths:
        if lowered[:n] in prefixes:
            break
    else:
        if not (device_id[:1].isspace() or lowered.startswith("nvidia")):
            return None
    ref = parse_device_id(device_id)
    return ref if ref is not None and resolve(ref, node) is not None else None


def without_pod(attribution: Attribution, pod: tuple[str, str] | None) -> Attribution:
    """`attribution` less the holdings of `pod` (namespace, name): the exporter's own pod
    monitors the GPUs it is given, it never uses them."""
    if pod is None:
        return attribution
    kept = {key: rest for key, holders in attribution.holders.items()
            if (rest := tuple(h for h in holders if (h.namespace, h.pod) != pod))}
    return Attribution(kept, attribution.unmatched)


def ordered(holders: set[Holder], pod_age: Mapping[tuple[str, str], int]) -> tuple[Holder, ...]:
    """Sorted; but an exclusive device (no replica) listed for several pods is a kubelet before
    1.34 still listing finished pods (kubernetes #119423): the newest pod holds it, so it
    goes first. `pod_age` is how many `List` answers ago a pod first appeared. Pods sharing a
    ResourceClaim are a real share, not that bug: they keep the sorted order."""
    result = sorted(holders)
    claims = [(h.claim.claim_namespace, h.claim.claim_name) for h in result if h.claim]
    shared_claim = len(claims) != len(set(claims))
    if len(result) > 1 and not shared_claim and all(h.replica is None for h in result):
        result.sort(key=lambda h: pod_age.get((h.namespace, h.pod), 0))
    return tuple(result)


def attribute(
    gpus: Sequence[GpuSnapshot],
    assignments: Iterable[PodAssignment],
    extra_resources: Collection[str] = (),
    pod_age: Mapping[tuple[str, str], int] | None = None,
) -> Attribution:
    """Which (pod, container) holds each GPU and MIG instance of this node."""
    node = node_index(gpus)
    holders: dict[EntityKey, set[Holder]] = {}
    unmatched: list[str] = []
    for assignment in assignments:
        if not is_gpu_resource(assignment.resource, extra_resources):
            continue
        for device_id in assignment.device_ids:
            ref = parse_device_id(device_id)
            key = resolve(ref, node) if ref is not None else None
            if ref is None or key is None:
                unmatched.append(device_id)
                continue
            holders.setdefault(key, set()).add(Holder(
                assignment.namespace, assignment.pod, assignment.container,
                assignment.resource, device_id, ref.replica))
    ages = pod_age or {}
    return Attribution({k: ordered(v, ages) for k, v in holders.items()},
                       tuple(sorted(set(unmatched))))


def count_devices(entries: Iterable[PodAssignment | AllocatableDevices],
                  extra_resources: Collection[str] = ()) -> dict[str, int]:
    """Distinct device IDs per considered resource (allocated or allocatable)."""
    per_resource: dict[str, set[str]] = {}
    for entry in entries:
        if is_gpu_resource(entry.resource, extra_resources):
            per_resource.setdefault(entry.resource, set()).update(entry.device_ids)
    return {resource: len(ids) for resource, ids in sorted(per_resource.items())}
