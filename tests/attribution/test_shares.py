"""Each holder's share of a whole GPU: the device-ID forms through `attribute` and the DRA
claims through `claim_holders`, as the join builds them."""

from hypothesis import given
from hypothesis import strategies as st

from gpu_enricher.attribution.claims import claim_holders, merged
from gpu_enricher.attribution.devices import Attribution, attribute
from gpu_enricher.attribution.shares import (
    held_shares,
    occupant_holdings,
    occupant_shares,
    offered_replicas,
)
from gpu_enricher.model import (
    AllocatableDevices,
    ClaimAccess,
    ClaimAllocation,
    DeviceIdentity,
    GpuInstance,
    GpuSnapshot,
    PodAssignment,
    SliceDevice,
    SliceDirectory,
)

U0 = "GPU-8a748984-0fe7-297f-916c-4b998ce202d1"
U1 = "GPU-0451a3f1-7953-256e-8f33-1343419b1a1c"
MIG3 = "MIG-5c89852c-d268-c3f3-8ea0-7d07e1a7cf25"
MIG1 = "MIG-a3c7e1a8-1b1d-5b2e-9c3f-2e6f4b4b8d10"
GPU = "nvidia.com/gpu"
DRIVER = "gpu.nvidia.com"


def node(*, lost: bool = False, slices: bool = True) -> tuple[GpuSnapshot, ...]:
    """An H100 and an A100 in MIG mode (a 3g.40gb and a 1g.10gb instance)."""
    counts = (3, 1, 7) if slices else (None, None, None)
    return (
        GpuSnapshot(DeviceIdentity(0, U0, "00000000:18:00.0", "NVIDIA H100"), healthy=not lost),
        GpuSnapshot(DeviceIdentity(1, U1, "00000000:28:00.0", "NVIDIA A100"), mig_enabled=True,
                    instances=(GpuInstance(1, 0, "3g.40gb", MIG3, slices=counts[0],
                                           gpu_slices=counts[2]),
                               GpuInstance(5, 0, "1g.10gb", MIG1, slices=counts[1],
                                           gpu_slices=counts[2]))),
    )


def held(pod: str, resource: str, *ids: str) -> PodAssignment:
    return PodAssignment("ml", pod, "main", resource, ids)


def shares(gpus: tuple[GpuSnapshot, ...], assignments: list[PodAssignment],
           offered: list[AllocatableDevices] | None = None) -> dict[str, float]:
    found = held_shares(gpus, attribute(gpus, assignments), offered_replicas(gpus, offered))
    return {pod: share for (_, pod, _, _), share in found.items()}


def test_a_whole_gpu_is_one_and_a_mig_instance_its_slices_over_the_gpus() -> None:
    assert shares(node(), [held("a", GPU, U0), held("b", "nvidia.com/mig-3g.40gb", MIG3),
                           held("c", "nvidia.com/mig-1g.10gb", MIG1)]) == \
        {"a": 1.0, "b": 3 / 7, "c": 1 / 7}


def test_a_replica_is_one_over_the_replicas_the_kubelet_offers() -> None:
    offered = [AllocatableDevices(GPU, tuple(f"{U0}::{n}" for n in range(4)))]
    found = shares(node(), [held("a", GPU, f"{U0}::0"), held("b", GPU, f"{U0}::1", f"{U0}::3")],
                   offered)
    assert found == {"a": 0.25, "b": 0.5}
    # Without GetAllocatableResources: the replicas held share the GPU.
    assert shares(node(), [held("a", GPU, f"{U0}::0"), held("b", GPU, f"{U0}::1")]) == \
        {"a": 0.5, "b": 0.5}
    # A replica of a MIG instance (time-slicing on MIG): the instance's share, split.
    mig = [AllocatableDevices("nvidia.com/mig-3g.40gb", (f"{MIG3}::0", f"{MIG3}::1"))]
    assert shares(node(), [held("c", "nvidia.com/mig-3g.40gb", f"{MIG3}::1")], mig) == \
        {"c": 3 / 14}


def test_an_exclusive_gpu_listed_for_a_finished_pod_bills_only_its_holder() -> None:
    """kubernetes #119423: the newest pod holds it (`pod_age`: answers since first seen)."""
    gpus = node()
    found = attribute(gpus, [held("old", GPU, U0), held("new", GPU, U0)],
                      pod_age={("ml", "old"): 9, ("ml", "new"): 1})
    assert held_shares(gpus, found) == {("ml", "new", "main", GPU): 1.0}


def test_a_lost_gpu_and_an_instance_of_unknown_slices_count_nothing() -> None:
    assignments = [held("a", GPU, U0), held("b", "nvidia.com/mig-3g.40gb", MIG3)]
    assert shares(node(lost=True), assignments) == {"a": 0.0, "b": 3 / 7}
    assert shares(node(slices=False), assignments) == {"a": 1.0, "b": 0.0}


def claims(*allocations: ClaimAllocation, admin: frozenset[tuple[str, str, str, str, str]]
           = frozenset()) -> dict[tuple[str, str], float]:
    gpus = node()
    published = SliceDirectory((SliceDevice(DRIVER, "n", "gpu-0", U0, "gpu"),
                                SliceDevice(DRIVER, "n", "gpu-1-mig-1", MIG3, "mig", U1,
                                            "3g.40gb")), synced=True)
    found = claim_holders(gpus, allocations, published, {DRIVER}, ClaimAccess(admin=admin))
    together = merged(Attribution({}), found, {})
    return {(pod, container): share
            for (_, pod, container, _), share in held_shares(gpus, together).items()}


def claim(pod: str, name: str, device: str, container: str = "main",
          share_id: str | None = None) -> ClaimAllocation:
    return ClaimAllocation("ml", pod, container, name, "ml", DRIVER, "n", device, share_id)


def test_a_claim_is_the_device_it_names_split_between_its_holders() -> None:
    assert claims(claim("a", "one", "gpu-0"), claim("b", "slice", "gpu-1-mig-1")) == \
        {("a", "main"): 1.0, ("b", "main"): 3 / 7}
    # One claim referenced by two pods (and one of them from two containers).
    assert claims(claim("a", "shared", "gpu-0"), claim("b", "shared", "gpu-0"),
                  claim("b", "shared", "gpu-0", "sidecar")) == \
        {("a", "main"): 1 / 3, ("b", "main"): 1 / 3, ("b", "sidecar"): 1 / 3}
    # A device shared between claims (consumable capacity: a share ID per claim).
    assert claims(claim("a", "x", "gpu-0", share_id="0"),
                  claim("b", "y", "gpu-0", share_id="1")) == {("a", "main"): 0.5,
                                                               ("b", "main"): 0.5}


def test_an_admin_access_claim_counts_nothing() -> None:
    monitor = ClaimAllocation("gpu-operator", "nvidia-dcgm-exporter-x", "exporter", "admin",
                              "gpu-operator", DRIVER, "n", "gpu-0")
    assert claims(monitor, claim("a", "one", "gpu-0"),
                  admin=frozenset({("gpu-operator", "admin", DRIVER, "n", "gpu-0")})) == \
        {("a", "main"): 1.0}


IDS = [U0, *(f"{U0}::{n}" for n in range(3)), MIG3, f"{MIG3}::0", f"{MIG3}::1", MIG1]


@given(st.lists(st.tuples(st.sampled_from("abcd"), st.lists(st.sampled_from(IDS), min_size=1,
                                                            max_size=3)), max_size=6),
       st.booleans())
def test_the_shares_on_a_device_never_add_up_to_more_than_the_device(
        holdings: list[tuple[str, list[str]]], offer: bool) -> None:
    gpus = node()
    attribution = attribute(gpus, [held(pod, GPU, *ids) for pod, ids in holdings])
    replicas = offered_replicas(gpus, [AllocatableDevices(GPU, tuple(IDS))] if offer else None)
    whole = {(0, None): 1.0, (1, 1): 3 / 7, (1, 5): 1 / 7}
    total = 0.0
    for key, holders in attribution.holders.items():
        on_device = held_shares(gpus, Attribution({key: holders}), replicas)
        assert all(share > 0 for share in on_device.values())
        assert sum(on_device.values()) <= whole[key] + 1e-9
        total += sum(on_device.values())
    # A tenant's share is the sum of what it holds on each device.
    assert abs(sum(held_shares(gpus, attribution, replicas).values()) - total) < 1e-9


def test_occupants_share_the_devices_no_pod_holds_evenly() -> None:
    """A host without Kubernetes (issue 34): each device's occupants split its share; a MIG
    GPU counts by its instances, never also whole; a device a pod holds is the pod's."""
    def gpu(index: int, *instances: GpuInstance) -> GpuSnapshot:
        return GpuSnapshot(DeviceIdentity(index, f"GPU-{index}", f"0000:0{index}:00.0", "H100"),
                           mig_enabled=bool(instances), instances=instances)

    gpus = (gpu(0), gpu(1, GpuInstance(3, 0, "3g.40gb", "MIG-3", slices=3, gpu_slices=7)),
            gpu(2))
    nb, alice, web = ("container", "notebook"), ("user", "alice"), ("container", "web")
    holdings = occupant_holdings(gpus, {
        (0, None): (nb, alice), (1, None): (web,), (1, 3): (web,), (2, None): (nb,)},
        held={(2, None)})
    assert holdings == {(0, None): [(nb, 0.5), (alice, 0.5)], (1, 3): [(web, 3 / 7)]}
    assert occupant_shares(holdings) == {nb: 0.5, alice: 0.5, web: 3 / 7}
