"""GPUs held through DRA ResourceClaims → this node's GPUs and MIG instances. Pure.

The kubelet's `List` names a claimed device by (driver, pool, device name); the DRA driver's
ResourceSlices give that device's `uuid` (a GPU UUID, or a MIG device UUID with `parentUUID`
and `profile`), which NVML knows. A MIG slice the driver created after start is matched as soon
as NVML lists it: instances are enumerated every pass (dcgm-exporter #714).
"""

from collections.abc import Collection, Iterable, Mapping, Sequence
from dataclasses import dataclass
from typing import Final

from .devices import Attribution, ClaimRef, EntityKey, Holder, NodeIndex, node_index, ordered
from .model import ClaimAllocation, GpuSnapshot, SliceDevice, SliceDirectory

NVIDIA_DRA_DRIVER: Final = "gpu.nvidia.com"


@dataclass(frozen=True, slots=True)
class ClaimHolders:
    holders: Mapping[EntityKey, tuple[Holder, ...]]
    unresolved: tuple[str, ...] = ()
    """`driver/pool/device` of considered claims that no ResourceSlice device of this node's
    GPUs names (not published yet, another node's pool, a device NVML does not list)."""
    managed: frozenset[EntityKey] = frozenset()
    """Every device of this node the DRA drivers publish (claimed or not)."""


def _key(device: SliceDevice, node: NodeIndex) -> EntityKey | None:
    uuid = device.uuid.lower()
    if uuid.startswith("mig-"):
        return node.by_mig_uuid.get(uuid)
    index = node.by_uuid.get(uuid)
    return None if index is None else (index, None)


def _claim_ref(claim: ClaimAllocation, device: SliceDevice) -> ClaimRef:
    mig = device.kind == "mig" or device.uuid.upper().startswith("MIG-")
    return ClaimRef(claim.claim_name, claim.claim_namespace, claim.driver, claim.pool,
                    claim.device, device.profile if mig else None,
                    device.uuid if mig else None)


def claim_holders(gpus: Sequence[GpuSnapshot], claims: Iterable[ClaimAllocation],
                  slices: SliceDirectory, drivers: Collection[str]) -> ClaimHolders:
    """Holders of this node's GPUs and MIG instances through claims of `drivers`."""
    node = node_index(gpus)
    published = {(d.driver, d.pool, d.name): d for d in slices.devices if d.driver in drivers}
    managed = {key for d in published.values() if (key := _key(d, node)) is not None}
    holders: dict[EntityKey, set[Holder]] = {}
    unresolved: set[str] = set()
    for claim in claims:
        if claim.driver not in drivers:
            continue
        device = published.get((claim.driver, claim.pool, claim.device))
        key = _key(device, node) if device is not None else None
        if device is None or key is None:
            unresolved.add(f"{claim.driver}/{claim.pool}/{claim.device}")
            continue
        holders.setdefault(key, set()).add(Holder(
            claim.namespace, claim.pod, claim.container, claim.driver,
            f"{claim.pool}/{claim.device}", claim.share_id, _claim_ref(claim, device)))
    return ClaimHolders({k: tuple(v) for k, v in holders.items()}, tuple(sorted(unresolved)),
                        frozenset(managed))


def merged(attribution: Attribution, claims: ClaimHolders,
           pod_age: Mapping[tuple[str, str], int]) -> Attribution:
    """Device-plugin and claim holders together, ordered by the same rules (a shared claim
    is a shared device: one stable holder, or one series per holder with virtual GPUs)."""
    if not claims.holders:
        return attribution
    keys = set(attribution.holders) | set(claims.holders)
    together = {key: ordered({*attribution.holders.get(key, ()), *claims.holders.get(key, ())},
                             pod_age) for key in keys}
    return Attribution(together, attribution.unmatched)
