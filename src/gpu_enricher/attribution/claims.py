"""GPUs held through DRA ResourceClaims → this node's GPUs and MIG instances. Pure.

The kubelet's `List` names a claimed device by (driver, pool, device name); the DRA driver's
ResourceSlices give that device's `uuid` (a GPU UUID, or a MIG device UUID with `parentUUID`
and `profile`), which NVML knows. A MIG slice the driver created after start is matched as soon
as NVML lists it: instances are enumerated every pass (dcgm-exporter #714).
"""

import dataclasses
import re
from collections.abc import Collection, Iterable, Mapping, Sequence
from dataclasses import dataclass
from typing import Final

from ..model import ClaimAccess, ClaimAllocation, GpuSnapshot, SliceDevice, SliceDirectory
from .devices import Attribution, ClaimRef, EntityKey, Holder, NodeIndex, node_index, ordered

NVIDIA_DRA_DRIVER: Final = "gpu.nvidia.com"
# A device name ending in the placement start, as NVIDIA's driver names on-demand MIG slices
# (`…-mig-<profile>-<profile id>-<placement start>`).
_PLACEMENT = re.compile(r"-mig-.*-(?P<start>\d+)$")
NOT_PUBLISHED: Final = "no ResourceSlice of this node publishes it (yet)"
NOT_ON_THIS_NODE: Final = "its slice names a GPU or MIG slice NVML does not list here"
NO_ADMIN_ACCESS: Final = ClaimAccess()


@dataclass(frozen=True, slots=True)
class ClaimHolders:
    holders: Mapping[EntityKey, tuple[Holder, ...]]
    unresolved: Mapping[str, str] = dataclasses.field(default_factory=dict)
    """`driver/pool/device` of considered claims that name no GPU of this node → why."""
    managed: frozenset[EntityKey] = frozenset()
    """Every device of this node the DRA drivers publish (claimed or not)."""
    claimed: int = 0
    """Distinct claimed devices (driver, pool, device) resolved to a GPU or MIG instance."""
    monitors: Mapping[EntityKey, tuple[Holder, ...]] = dataclasses.field(default_factory=dict)
    """Pods that claim a device with admin access, or the exporter's own pod: they watch it
    (their processes on it are not unallocated) but never label its series."""


def _mig_by_parent(device: SliceDevice, node: NodeIndex,
                   gpus: Mapping[int, GpuSnapshot]) -> EntityKey | None:
    """A MIG slice published by parent and profile: the one instance of that profile, or
    the one at the placement its name carries."""
    index = node.by_uuid.get((device.parent_uuid or "").lower())
    gpu = gpus.get(index) if index is not None else None
    if gpu is None or not device.profile:
        return None
    candidates = [i for i in gpu.instances if i.profile == device.profile]
    found = _PLACEMENT.search(device.name)
    if found is not None and len(candidates) > 1:
        candidates = [i for i in candidates if i.placement_start == int(found["start"])]
    return (gpu.identity.index, candidates[0].gpu_instance_id) if len(candidates) == 1 else None


def _key(device: SliceDevice, node: NodeIndex,
         gpus: Mapping[int, GpuSnapshot]) -> EntityKey | None:
    uuid = device.uuid.lower()
    if uuid.startswith("mig-"):
        return node.by_mig_uuid.get(uuid)
    if uuid:
        index = node.by_uuid.get(uuid)
        return None if index is None else (index, None)
    return _mig_by_parent(device, node, gpus) if device.kind == "mig" else None


def _claim_ref(claim: ClaimAllocation, device: SliceDevice, key: EntityKey,
               mig_uuids: Mapping[EntityKey, str], admin: bool) -> ClaimRef:
    """The MIG UUID is NVML's (an on-demand slice is published without one)."""
    mig = key[1] is not None
    return ClaimRef(claim.claim_name, claim.claim_namespace, claim.driver, claim.pool,
                    claim.device, device.profile if mig else None,
                    (mig_uuids.get(key) or device.uuid) if mig else None, admin)


def claim_holders(gpus: Sequence[GpuSnapshot], claims: Iterable[ClaimAllocation],
                  slices: SliceDirectory, drivers: Collection[str],
                  access: ClaimAccess = NO_ADMIN_ACCESS,
                  own_pod: tuple[str, str] | None = None) -> ClaimHolders:
    """Holders of this node's GPUs and MIG instances through claims of `drivers`, and the
    monitors: admin-access claims (`access`) and the exporter's own pod (namespace, name)."""
    node = node_index(gpus)
    by_index = {gpu.identity.index: gpu for gpu in gpus}
    mig_uuids: dict[EntityKey, str] = {(gpu.identity.index, i.gpu_instance_id): i.uuid
                                       for gpu in gpus for i in gpu.instances}
    published = {(d.driver, d.pool, d.name): d for d in (*slices.recent, *slices.devices)
                 if d.driver in drivers}  # the published win over the recently gone
    keys = {name: _key(d, node, by_index) for name, d in published.items()}
    holders: dict[EntityKey, set[Holder]] = {}
    monitors: dict[EntityKey, set[Holder]] = {}
    unresolved: dict[str, str] = {}
    claimed: set[tuple[str, str, str]] = set()
    for claim in claims:
        pending = (claim.claim_namespace, claim.claim_name) in access.pending
        if claim.driver not in drivers or pending:  # not asked yet: could be a monitor
            continue
        name = (claim.driver, claim.pool, claim.device)
        device, key = published.get(name), keys.get(name)
        if device is None or key is None:
            unresolved["/".join(name)] = NOT_PUBLISHED if device is None else NOT_ON_THIS_NODE
            continue
        admin = (claim.claim_namespace, claim.claim_name, *name) in access.admin
        watching = admin or own_pod == (claim.namespace, claim.pod)
        claimed.add(name)
        (monitors if watching else holders).setdefault(key, set()).add(Holder(
            claim.namespace, claim.pod, claim.container, claim.driver,
            f"{claim.pool}/{claim.device}", claim.share_id,
            _claim_ref(claim, device, key, mig_uuids, admin)))
    managed = frozenset(key for key in keys.values() if key is not None)
    return ClaimHolders({k: tuple(sorted(v)) for k, v in holders.items()},
                        dict(sorted(unresolved.items())), managed, len(claimed),
                        {k: tuple(sorted(v)) for k, v in monitors.items()})


def merged(attribution: Attribution, claims: ClaimHolders,
           pod_age: Mapping[tuple[str, str], int], *, monitors: bool = False) -> Attribution:
    """Device-plugin and claim holders together, ordered by the same rules (a shared claim
    is a shared device: one stable holder, or one series per holder with virtual GPUs);
    `monitors`: the monitors too (who may run processes on a device, not who labels it)."""
    extra: dict[EntityKey, tuple[Holder, ...]] = dict(claims.holders)
    if monitors:
        for key, watching in claims.monitors.items():
            extra[key] = (*extra.get(key, ()), *watching)
    if not extra:
        return attribution
    keys = set(attribution.holders) | set(extra)
    together = {key: ordered({*attribution.holders.get(key, ()), *extra.get(key, ())},
                             pod_age) for key in keys}
    return Attribution(together, attribution.unmatched)
