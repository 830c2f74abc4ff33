"""Device-ID forms → GPUs and MIG instances: one table row per form real clusters produce."""

import pytest

from gpu_enricher.attribution.devices import (
    DeviceRef,
    Holder,
    attribute,
    is_gpu_resource,
    parse_device_id,
)
from gpu_enricher.model import DeviceIdentity, GpuInstance, GpuSnapshot, PodAssignment

U0 = "GPU-8a748984-0fe7-297f-916c-4b998ce202d1"
U1 = "GPU-0451a3f1-7953-256e-8f33-1343419b1a1c"
U2 = "GPU-c2f76b33-7953-256e-8f33-1343419b1a1c"
MIG1 = "MIG-5c89852c-d268-c3f3-8ea0-7d07e1a7cf25"
MIG2 = "MIG-a3c7e1a8-1b1d-5b2e-9c3f-2e6f4b4b8d10"

# GPU 0 and GPU 1 have swapped /dev minor numbers (GKE names devices by minor number).
NODE = (
    GpuSnapshot(DeviceIdentity(0, U0, "00000000:18:00.0", "NVIDIA H100", minor_number=1)),
    GpuSnapshot(DeviceIdentity(1, U1, "00000000:28:00.0", "NVIDIA H100", minor_number=0)),
    GpuSnapshot(DeviceIdentity(2, U2, "00000000:38:00.0", "NVIDIA A100", minor_number=2),
                mig_enabled=True,
                instances=(GpuInstance(1, 0, "3g.40gb", MIG1), GpuInstance(5, 0, "1g.10gb", MIG2))),
)


@pytest.mark.parametrize(
    ("resource", "device_id", "key", "replica"),
    [
        ("nvidia.com/gpu", U0, (0, None), None),
        ("nvidia.com/gpu", f"{U1}::3", (1, None), "3"),
        ("nvidia.com/gpu", U0.removeprefix("GPU-") + "::0", (0, None), "0"),
        ("nvidia.com/gpu", MIG1, (2, 1), None),
        ("nvidia.com/mig-1g.10gb", MIG2, (2, 5), None),
        ("nvidia.com/mig-1g.10gb", f"{MIG2}::2", (2, 5), "2"),
        ("nvidia.com/mig-3g.40gb", f"MIG-{U2}/1/0", (2, 1), None),
        ("nvidia.com/gpu", "nvidia0", (1, None), None),  # minor 0 is NVML index 1
        ("nvidia.com/gpu", "nvidia1/vgpu4", (0, None), "4"),
        ("nvidia.com/gpu", "nvidia2/gi5", (2, 5), None),
        ("nvidia.com/gpu", "nvidia2/gi1/vgpu1", (2, 1), "1"),
        ("nvidia.com/gpu.shared", f"{U0}::1", (0, None), "1"),  # --nvidia-resource-names
        ("nvidia.com/gpu", "GPU-" + U0[4:].upper(), (0, None), None),  # case-insensitive
        # An empty replica suffix is no replica (dcgm-exporter strips `::` and matches the base).
        ("nvidia.com/gpu", f"{U0}::", (0, None), None),
        ("nvidia.com/gpu", U1.removeprefix("GPU-") + "::", (1, None), None),
        ("nvidia.com/mig-3g.40gb", f"{MIG1}::", (2, 1), None),
    ],
)
def test_every_device_id_form(resource: str, device_id: str, key: tuple[int, int | None],
                              replica: str | None) -> None:
    result = attribute(NODE, [PodAssignment("ns", "pod-a", "main", resource, (device_id,))],
                       extra_resources={"nvidia.com/gpu.shared"})
    assert result.unmatched == ()
    assert result.holders == {key: (Holder("ns", "pod-a", "main", resource, device_id, replica),)}


@pytest.mark.parametrize(
    "device_id",
    ["GPU-00000000-0000-0000-0000-000000000000", "MIG-00000000-0000-0000-0000-000000000000",
     "nvidia9", "nvidia2/gi9", "weird-form", "nvidia0::1", ""],
)
def test_unknown_or_foreign_ids_are_reported_not_raised(device_id: str) -> None:
    result = attribute(NODE, [PodAssignment("ns", "p", "c", "nvidia.com/gpu", (device_id,))])
    assert result.holders == {}
    assert result.unmatched == (device_id,)


def test_other_resources_are_ignored() -> None:
    assignments = [PodAssignment("ns", "p", "c", r, (U0,))
                   for r in ("amd.com/gpu", "example.com/rdma", "nvidia.com/gpu.shared", "cpu")]
    assert attribute(NODE, assignments) == attribute(NODE, [])
    assert is_gpu_resource("nvidia.com/mig-2g.20gb") and not is_gpu_resource("nvidia.com/gpux")


def test_several_gpus_containers_and_shared_devices() -> None:
    result = attribute(NODE, [
        PodAssignment("ml", "trainer", "worker", "nvidia.com/gpu", (U0, U1)),
        PodAssignment("ml", "trainer", "sidecar", "nvidia.com/mig-1g.10gb", (MIG2,)),
        PodAssignment("b", "infer-2", "srv", "nvidia.com/mig-3g.40gb", (f"{MIG1}::1",)),
        PodAssignment("a", "infer-1", "srv", "nvidia.com/mig-3g.40gb", (f"{MIG1}::0",)),
        PodAssignment("a", "idle", "srv", "nvidia.com/gpu", ()),
    ])
    assert [h.pod for h in result.holders[(0, None)]] == ["trainer"]
    assert [h.pod for h in result.holders[(1, None)]] == ["trainer"]
    assert [h.container for h in result.holders[(2, 5)]] == ["sidecar"]
    shared = result.holders[(2, 1)]
    assert [(h.namespace, h.pod, h.replica) for h in shared] == [("a", "infer-1", "0"),
                                                                 ("b", "infer-2", "1")]
    assert result.primary((2, 1)) == shared[0]
    assert result.primary((0, 5)) is None


def test_parse_forms() -> None:
    assert parse_device_id(f"MIG-{U2}/3/0") == DeviceRef(gpu_uuid=U2, gpu_instance=3)
    assert parse_device_id("nvidia3/gi2/vgpu7") == DeviceRef(minor=3, gpu_instance=2, replica="7")
    assert parse_device_id("nvidia") is None


def test_finished_pod_still_listed_loses_an_exclusive_gpu_to_the_newer_pod() -> None:
    # A kubelet before 1.34 keeps listing a finished pod with the GPU its successor now holds.
    assignments = [PodAssignment("ml", "a-finished", "c", "nvidia.com/gpu", (U0,)),
                   PodAssignment("ml", "z-running", "c", "nvidia.com/gpu", (U0,))]
    fresh = attribute(NODE, assignments,
                      pod_age={("ml", "a-finished"): 40, ("ml", "z-running"): 2})
    assert [h.pod for h in fresh.holders[(0, None)]] == ["z-running", "a-finished"]
    unknown = attribute(NODE, assignments)
    assert [h.pod for h in unknown.holders[(0, None)]] == ["a-finished", "z-running"], \
        "no history: sorted order"
    # Replicas of a shared GPU are legitimately held together: sorted, whatever their age.
    shared = attribute(NODE, [PodAssignment("ml", "b", "c", "nvidia.com/gpu", (f"{U0}::1",)),
                              PodAssignment("ml", "a", "c", "nvidia.com/gpu", (f"{U0}::0",))],
                       pod_age={("ml", "a"): 9, ("ml", "b"): 0})
    assert [h.pod for h in shared.holders[(0, None)]] == ["a", "b"]
