"""How much of a whole GPU each (pod, container) holds: the share behind
`gpu_enricher_pod_gpu_seconds_total` (docs/chargeback.md). Pure.

- A whole GPU: 1. A MIG instance: its profile's compute slices over the GPU's (`3g.40gb` on an
  A100: 3/7), NVML's `sliceCount`; an instance whose slices NVML did not tell counts nothing.
- A time-sliced or MPS replica (`<id>::N`, GKE's `/vgpuN`): the device's share over the
  replicas the kubelet offers for it (`GetAllocatableResources`), or over the replicas held
  when it does not answer.
- An exclusive device listed for several pods (a kubelet before 1.34 still listing finished
  pods, kubernetes #119423): only its first holder (`devices.ordered`: the newest pod).
- A DRA claim: the device it names, split evenly between the claims on that device (shared
  devices, `share_id`) and each claim's part between the containers that reference it.
  Admin-access claims are monitors and never in the holders here.

The shares on one device never add up to more than the device.

On a host without Kubernetes (`--container-labels`, issue 34), a device no pod holds is split
evenly between its occupants (attribution/containers.py: the containers given it, then the
containers and people using it), each a share of the device.
"""

from collections.abc import Collection, Iterable, Mapping, Sequence
from typing import Final

from ..model import AllocatableDevices, GpuSnapshot
from .containers import Occupant, Occupants
from .devices import (
    Attribution,
    EntityKey,
    Holder,
    is_gpu_resource,
    node_index,
    parse_device_id,
    resolve,
)

Tenant = tuple[str, str, str, str]
"""(namespace, pod, container, resource): one series of GPU time."""
OccupantHoldings = dict[EntityKey, list[tuple[Occupant, float]]]
"""Per GPU or MIG instance no pod holds: each occupant and its share of the whole GPU."""

NO_REPLICAS: Final[Mapping[EntityKey, int]] = {}


def offered_replicas(gpus: Sequence[GpuSnapshot],
                     allocatable: Iterable[AllocatableDevices] | None,
                     extra_resources: Collection[str] = ()) -> dict[EntityKey, int]:
    """Replica device IDs the kubelet offers per GPU or MIG instance (shared devices only)."""
    if allocatable is None:
        return {}
    node = node_index(gpus)
    ids: dict[EntityKey, set[str]] = {}
    for devices in allocatable:
        if not is_gpu_resource(devices.resource, extra_resources):
            continue
        for device_id in devices.device_ids:
            ref = parse_device_id(device_id)
            if ref is not None and ref.replica is not None and \
                    (key := resolve(ref, node)) is not None:
                ids.setdefault(key, set()).add(device_id)
    return {key: len(found) for key, found in ids.items()}


def device_share(gpus_by_index: Mapping[int, GpuSnapshot], key: EntityKey) -> float:
    """The share of its GPU one entity is: 1, or a MIG instance's slices over the GPU's; 0
    while NVML reports the GPU lost (the backend lost too): a gap is not billed."""
    index, instance_id = key
    gpu = gpus_by_index.get(index)
    if gpu is None or not gpu.healthy:  # lost, or the backend is: nobody can use it
        return 0.0
    if instance_id is None:
        return 1.0
    for inst in gpu.instances:
        if inst.gpu_instance_id == instance_id and inst.slices and inst.gpu_slices:
            return min(1.0, inst.slices / inst.gpu_slices)
    return 0.0


def _split(holders: tuple[Holder, ...], replicas: int) -> list[tuple[Holder, float]]:
    """Fractions of one device per holding, before the device's own share is applied."""
    parts: list[tuple[Holder, float]] = []
    plugin = [h for h in holders if h.claim is None]
    first: dict[str, Holder] = {}  # a replica listed twice (a finished pod): its first holder
    for h in plugin:
        if h.replica is not None:
            first.setdefault(h.device_id, h)
    if first:
        parts += [(h, 1.0 / max(replicas, len(first))) for h in first.values()]
    elif plugin:
        parts.append((plugin[0], 1.0))
    claims: dict[tuple[str, str, str | None], list[Holder]] = {}
    for h in holders:
        if h.claim is not None:
            claims.setdefault((h.claim.claim_namespace, h.claim.claim_name, h.replica),
                              []).append(h)
    parts += [(h, 1.0 / len(claims) / len(members))
              for members in claims.values() for h in members]
    total = sum(part for _, part in parts)
    # A device both a device plugin and a DRA driver hand out: never more than the device.
    return [(h, part / total) for h, part in parts] if total > 1.0 else parts


Holdings = dict[EntityKey, list[tuple[Holder, float]]]
"""Per GPU or MIG instance: each holding and its share of the whole GPU."""


def entity_holdings(gpus: Sequence[GpuSnapshot], attribution: Attribution,
                    replicas: Mapping[EntityKey, int] = NO_REPLICAS) -> Holdings:
    """Each device's holdings with their share of a whole GPU (also what idle energy is
    split by, attribution/energy.py)."""
    by_index = {gpu.identity.index: gpu for gpu in gpus}
    return {key: [(h, device_share(by_index, key) * part)
                  for h, part in _split(holders, replicas.get(key, 0))]
            for key, holders in attribution.holders.items()}


def held_shares(gpus: Sequence[GpuSnapshot], attribution: Attribution,
                replicas: Mapping[EntityKey, int] = NO_REPLICAS) -> dict[Tenant, float]:
    """Each (namespace, pod, container, resource)'s share of a whole GPU, summed over what
    it holds. A holder of a device that counts nothing now (lost) is there with 0: it still
    holds it, so its series goes on."""
    return tenant_shares(entity_holdings(gpus, attribution, replicas))


def tenant_shares(holdings: Holdings) -> dict[Tenant, float]:
    """`held_shares` from holdings already found."""
    shares: dict[Tenant, float] = {}
    for parts in holdings.values():
        for h, share in parts:
            tenant = (h.namespace, h.pod, h.container, h.resource)
            shares[tenant] = shares.get(tenant, 0.0) + share
    return shares


def occupant_holdings(gpus: Sequence[GpuSnapshot], occupied: Occupants,
                      held: Collection[EntityKey] = ()) -> OccupantHoldings:
    """Each device's occupants with their share of a whole GPU: the device's share split evenly
    between them. A device a pod holds (`held`) is the pod's; a MIG GPU is counted by its
    instances, not also whole (their occupants include the GPU's)."""
    by_index = {gpu.identity.index: gpu for gpu in gpus}
    holdings: OccupantHoldings = {}
    for key, found in occupied.items():
        gpu = by_index.get(key[0])
        if not found or key in held or gpu is None or (key[1] is None and gpu.instances):
            continue
        share = device_share(by_index, key) / len(found)
        holdings[key] = [(occupant, share) for occupant in found]
    return holdings


def occupant_shares(holdings: OccupantHoldings) -> dict[Occupant, float]:
    shares: dict[Occupant, float] = {}
    for parts in holdings.values():
        for occupant, share in parts:
            shares[occupant] = shares.get(occupant, 0.0) + share
    return shares
