"""DRA claims → this node's GPUs and MIG instances, through its ResourceSlices."""

import dataclasses

from gpu_enricher.attribution.claims import (
    NOT_ON_THIS_NODE,
    NOT_PUBLISHED,
    NVIDIA_DRA_DRIVER,
    claim_holders,
    merged,
)
from gpu_enricher.attribution.devices import ClaimRef, Holder, attribute, ordered, without_pod
from gpu_enricher.model import (
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
MIG5 = "MIG-a3c7e1a8-1b1d-5b2e-9c3f-2e6f4b4b8d10"
NODE = (
    GpuSnapshot(DeviceIdentity(0, U0, "00000000:18:00.0", "NVIDIA H100")),
    GpuSnapshot(DeviceIdentity(1, U1, "00000000:28:00.0", "NVIDIA A100"), mig_enabled=True,
                instances=(GpuInstance(5, 0, "1g.10gb", MIG5),)),
)
D = NVIDIA_DRA_DRIVER
SLICES = SliceDirectory((
    SliceDevice(D, "node-a", "gpu-0", U0, "gpu"),
    SliceDevice(D, "node-a", "gpu-1-mig-5", MIG5, "mig", U1, "1g.10gb"),
    SliceDevice(D, "node-a", "gpu-9", "GPU-99999999-0000-0000-0000-000000000000", "gpu"),
    SliceDevice("other.example.com", "node-a", "gpu-0", U0, "gpu"),
), synced=True, api_version="v1")
DRIVERS = frozenset({D})


def claim(pod: str, device: str, name: str = "c", share: str | None = None,
          driver: str = D, pool: str = "node-a") -> ClaimAllocation:
    return ClaimAllocation("ml", pod, "main", name, "ml", driver, pool, device, share)


def test_a_whole_gpu_and_a_mig_slice_through_claims() -> None:
    found = claim_holders(NODE, [claim("a", "gpu-0", "single"), claim("b", "gpu-1-mig-5",
                                                                     "slice")], SLICES, DRIVERS)
    assert found.unresolved == {} and found.claimed == 2
    (gpu_holder,) = found.holders[(0, None)]
    assert gpu_holder == Holder("ml", "a", "main", D, "node-a/gpu-0")
    assert gpu_holder.claim == ClaimRef("single", "ml", D, "node-a", "gpu-0")
    (mig_holder,) = found.holders[(1, 5)]
    assert mig_holder.claim == ClaimRef("slice", "ml", D, "node-a", "gpu-1-mig-5", "1g.10gb",
                                        MIG5)
    assert found.managed == {(0, None), (1, 5)}, "gpu-9 is no GPU of this node"


def test_unresolved_claims_are_reported_not_raised() -> None:
    found = claim_holders(NODE, [claim("a", "gpu-7"),  # no slice names it (yet)
                                 claim("a", "gpu-9"),  # a slice does, but NVML has no such GPU
                                 claim("a", "gpu-0", pool="other-node")],
                          SLICES, DRIVERS)
    assert found.holders == {}
    assert found.unresolved == {f"{D}/node-a/gpu-7": NOT_PUBLISHED,
                                f"{D}/node-a/gpu-9": NOT_ON_THIS_NODE,
                                f"{D}/other-node/gpu-0": NOT_PUBLISHED}


def test_only_the_given_drivers_count() -> None:
    other = claim("a", "gpu-0", driver="other.example.com")
    assert claim_holders(NODE, [other], SLICES, DRIVERS).holders == {}
    assert claim_holders(NODE, [other], SLICES, DRIVERS).unresolved == {}
    both = claim_holders(NODE, [other], SLICES, DRIVERS | {"other.example.com"})
    assert [h.resource for h in both.holders[(0, None)]] == ["other.example.com"]


def test_no_slices_yet_resolves_nothing() -> None:
    found = claim_holders(NODE, [claim("a", "gpu-0")], SliceDirectory(), DRIVERS)
    assert found.holders == {} and found.unresolved == {f"{D}/node-a/gpu-0": NOT_PUBLISHED}


def test_a_device_whose_slice_just_went_still_resolves_and_the_published_one_wins() -> None:
    """A driver republishing its pool (issue 32): the claim keeps its holder meanwhile."""
    gone = SliceDirectory((), synced=True, api_version="v1", recent=SLICES.devices[:1])
    (holder,) = claim_holders(NODE, [claim("a", "gpu-0")], gone, DRIVERS).holders[(0, None)]
    assert holder.pod == "a"
    moved = dataclasses.replace(SLICES.devices[0], uuid=U1)  # what the slice says now wins
    both = SliceDirectory((moved,), synced=True, recent=SLICES.devices[:1])
    assert set(claim_holders(NODE, [claim("a", "gpu-0")], both, DRIVERS).holders) == {(1, None)}


def test_a_shared_claim_keeps_sorted_order_and_merges_with_device_plugin_holders() -> None:
    shared = claim_holders(NODE, [claim("z-newest", "gpu-0", "shared"),
                                  claim("a-oldest", "gpu-0", "shared")], SLICES, DRIVERS)
    # Pods sharing a claim are a real share: sorted, never the "newest pod wins" reorder.
    age = {("ml", "z-newest"): 0, ("ml", "a-oldest"): 5}
    together = merged(attribute(NODE, [PodAssignment("ml", "m", "c", "nvidia.com/gpu",
                                                     (f"{U1}::",))]), shared, age)
    assert [h.pod for h in together.holders[(0, None)]] == ["a-oldest", "z-newest"]
    assert [h.pod for h in together.holders[(1, None)]] == ["m"], "device-plugin holder kept"


def test_share_id_becomes_the_replica() -> None:
    found = claim_holders(NODE, [claim("a", "gpu-0", share="3")], SLICES, DRIVERS)
    assert found.holders[(0, None)][0].replica == "3"


def test_the_newest_pod_rule_still_applies_to_device_plugin_holders() -> None:
    old = Holder("ml", "a-old", "c", "nvidia.com/gpu", U0)
    new = Holder("ml", "z-new", "c", "nvidia.com/gpu", U0)
    assert ordered({old, new}, {("ml", "z-new"): 0, ("ml", "a-old"): 3}) == (new, old)


def test_a_mig_slice_published_by_parent_and_profile() -> None:
    """NVIDIA's driver publishes an on-demand MIG slice without a UUID: its parent and
    profile find the instance, and when the parent has several of that profile, the
    placement start its name ends with."""
    two = (GpuSnapshot(DeviceIdentity(1, U1, "00000000:28:00.0", "NVIDIA A100"),
                       mig_enabled=True,
                       instances=(GpuInstance(3, 0, "1g.10gb", "MIG-a", placement_start=4),
                                  GpuInstance(5, 0, "1g.10gb", "MIG-b", placement_start=6),
                                  GpuInstance(1, 0, "3g.40gb", "MIG-c", placement_start=0))),)
    slices = SliceDirectory((
        SliceDevice(D, "node-a", "gpu-0-mig-1g.10gb-19-6", "", "mig", U1, "1g.10gb"),
        SliceDevice(D, "node-a", "gpu-0-mig-3g.40gb-9-0", "", "mig", U1, "3g.40gb"),
        SliceDevice(D, "node-a", "gpu-0-mig-1g.10gb-any", "", "mig", U1, "1g.10gb"),
    ), synced=True)
    found = claim_holders(two, [claim("a", "gpu-0-mig-1g.10gb-19-6"),
                                claim("b", "gpu-0-mig-3g.40gb-9-0"),
                                claim("c", "gpu-0-mig-1g.10gb-any")], slices, DRIVERS)
    assert {k: [h.pod for h in v] for k, v in found.holders.items()} == {
        (1, 5): ["a"], (1, 1): ["b"]}
    assert found.unresolved == {f"{D}/node-a/gpu-0-mig-1g.10gb-any": NOT_ON_THIS_NODE}, \
        "two 1g.10gb instances and no placement in the name: ambiguous, not guessed"
    assert found.holders[(1, 5)][0].claim == ClaimRef("c", "ml", D, "node-a",
                                                      "gpu-0-mig-1g.10gb-19-6", "1g.10gb",
                                                      "MIG-b"), "NVML's MIG UUID"


def test_distinct_claims_still_get_the_newest_pod_rule() -> None:
    """A stale device-plugin pod an old kubelet still lists beside the pod that now holds the
    GPU through a claim: the newest pod's labels win, as for two device-plugin pods."""
    stale = Holder("ml", "a-stale", "c", "nvidia.com/gpu", U0)
    new = Holder("ml", "z-new", "c", D, "node-a/gpu-0",
                 claim=ClaimRef("mine", "ml", D, "node-a", "gpu-0"))
    assert ordered({stale, new}, {("ml", "z-new"): 0, ("ml", "a-stale"): 4}) == (new, stale)


def test_admin_access_and_the_own_pod_monitor_and_never_hold() -> None:
    """The GPU Operator's DRA exporter claims every GPU with admin access: whatever the names'
    order ("a..." sorts first), the workload holds; the monitors are kept apart."""
    operator = ClaimAllocation("a-ops", "a-exporter", "x", "admin", "a-ops", D, "node-a",
                               "gpu-0")
    ours = ClaimAllocation("a-ours", "a-enricher", "x", "mine", "a-ours", D, "node-a",
                           "gpu-1-mig-5")
    workload = claim("trainer", "gpu-0", "single")
    access = ClaimAccess(frozenset({("a-ops", "admin", D, "node-a", "gpu-0")}))
    found = claim_holders(NODE, [operator, ours, workload], SLICES, DRIVERS, access,
                          own_pod=("a-ours", "a-enricher"))
    assert [h.pod for h in found.holders[(0, None)]] == ["trainer"]
    assert (1, 5) not in found.holders, "held by monitors only: no holder"
    (monitor,) = found.monitors[(0, None)]
    assert monitor.pod == "a-exporter" and monitor.claim is not None
    assert monitor.claim.admin_access
    (own,) = found.monitors[(1, 5)]
    assert own.pod == "a-enricher" and own.claim is not None and not own.claim.admin_access
    assert found.claimed == 2, "every resolved device still counts as claimed"
    # Who may run processes on a device: holders and monitors; who labels it: holders only.
    labels = merged(attribute(NODE, [], ()), found, {})
    everyone = merged(attribute(NODE, [], ()), found, {}, monitors=True)
    assert {h.pod for h in labels.holders[(0, None)]} == {"trainer"}
    assert {h.pod for h in everyone.holders[(0, None)]} == {"trainer", "a-exporter"}
    assert {h.pod for h in everyone.holders[(1, 5)]} == {"a-enricher"}


def test_the_own_pod_never_holds_through_the_device_plugin_either() -> None:
    own = PodAssignment("a-ours", "a-enricher", "x", "nvidia.com/gpu", (U0,))
    other = PodAssignment("ml", "trainer", "main", "nvidia.com/gpu", (U0,))
    found = without_pod(attribute(NODE, [own, other], ()), ("a-ours", "a-enricher"))
    assert [h.pod for h in found.holders[(0, None)]] == ["trainer"]
    alone = without_pod(attribute(NODE, [own], ()), ("a-ours", "a-enricher"))
    assert (0, None) not in alone.holders


def test_a_claim_not_asked_about_yet_labels_nothing() -> None:
    """At start, while the ResourceClaim client loads, a claim may be a monitor: it holds
    nothing until read (or until reading it failed, then it is an ordinary holder)."""
    operator = ClaimAllocation("a-ops", "a-exporter", "x", "admin", "a-ops", D, "node-a",
                               "gpu-0")
    pending = ClaimAccess(pending=frozenset({("a-ops", "admin")}))
    found = claim_holders(NODE, [operator, claim("trainer", "gpu-0", "single")], SLICES,
                          DRIVERS, pending)
    assert [h.pod for h in found.holders[(0, None)]] == ["trainer"] and not found.monitors
