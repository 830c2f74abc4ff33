"""The pure half of the ResourceSlice watch: slices of every served shape into SliceDevices,
the pool-generation and driver rules, version discovery, and the fake's rendering of slices."""

from typing import Any

import pytest
from hypothesis import given
from hypothesis import strategies as st

from gpu_enricher.kube.client import reason_for_status
from gpu_enricher.kube.slices import (
    ParsedSlice,
    choose_version,
    current_slices,
    parse_device,
    parse_slice,
    slice_devices,
)
from gpu_enricher.kube.watch_kind import ListWatchOptions, backoff_delay
from gpu_enricher.model import SliceDevice
from gpu_enricher.sim.fake_api.slices import group_document, neutral_slice, slice_object

DRIVER = "gpu.nvidia.com"
GPU = "GPU-c2f76b33-7953-256e-8f33-1343419b1a1c"
MIG = "MIG-5c89852c-d268-c3f3-1b07-005d5ae1dc3f"
WHOLE = SliceDevice(DRIVER, "node-a", "gpu-0", GPU, "gpu")
SLICE_1G = SliceDevice(DRIVER, "node-a", "gpu-1-mig-1g10gb-0", MIG, "mig",
                       "GPU-0451a3f1-3b8c-2a1f-9f0e-7d6c5b4a3928", "1g.10gb")


def v1_slice(devices: list[Any], driver: str = DRIVER) -> dict[str, Any]:
    """Trimmed from what `kubectl get resourceslice -o json` shows for NVIDIA's driver."""
    return {"apiVersion": "resource.k8s.io/v1", "kind": "ResourceSlice",
            "metadata": {"name": "node-a-gpu.nvidia.com-x7k2p", "uid": "7f1c",
                         "resourceVersion": "88", "ownerReferences": [{"kind": "Node"}]},
            "spec": {"driver": driver, "nodeName": "node-a",
                     "pool": {"name": "node-a", "generation": 3, "resourceSliceCount": 1},
                     "devices": devices}}


def gpu_device(**attributes: Any) -> dict[str, Any]:
    return {"name": "gpu-0", "attributes": attributes,
            "capacity": {"memory": {"value": "80Gi"}}}


def test_v1_whole_gpu_and_mig_device() -> None:
    mig = {"name": "gpu-1-mig-1g10gb-0", "attributes": {
        "type": {"string": "mig"}, "uuid": {"string": MIG},
        "parentUUID": {"string": SLICE_1G.parent_uuid}, "profile": {"string": "1g.10gb"},
        "index": {"int": 0}, "driverVersion": {"version": "580.95.5"}}}
    parsed = parse_slice(v1_slice([gpu_device(type={"string": "gpu"}, uuid={"string": GPU},
                                              productName={"string": "NVIDIA H100"}), mig]))
    assert parsed == ParsedSlice("node-a", DRIVER, "node-a", 3, (WHOLE, SLICE_1G), 0)


def test_v1beta1_nests_attributes_under_basic() -> None:
    obj = v1_slice([{"name": "gpu-0", "basic": {"attributes": {
        "type": {"string": "gpu"}, "uuid": {"string": GPU}}, "capacity": {}}}])
    obj["apiVersion"] = "resource.k8s.io/v1beta1"
    parsed = parse_slice(obj)
    assert parsed is not None and parsed.devices == (WHOLE,)


@pytest.mark.parametrize("version", ["v1", "v1beta2", "v1beta1"])
@pytest.mark.parametrize("qualified", [False, True])
def test_every_shape_the_fake_serves_parses_alike(version: str, qualified: bool) -> None:
    obj = slice_object("node-a", DRIVER, "node-a", [WHOLE, SLICE_1G], version,
                       qualified=qualified)
    assert obj["apiVersion"] == f"resource.k8s.io/{version}"
    device = obj["spec"]["devices"][0]
    assert ("basic" in device) == (version == "v1beta1")
    parsed = parse_slice(obj)
    assert parsed is not None and parsed.devices == (WHOLE, SLICE_1G)
    # The fake stores one neutral shape: any rendering of the same slice gives it back.
    assert neutral_slice(obj) == neutral_slice(slice_object(
        "node-a", DRIVER, "node-a", [WHOLE, SLICE_1G], "v1", qualified=qualified))


def test_attribute_names_qualified_with_the_drivers_domain_only() -> None:
    device = gpu_device(**{"gpu.nvidia.com/uuid": {"string": GPU},
                           "gpu.nvidia.com/type": {"string": "gpu"}})
    assert parse_device(device, DRIVER, "p") == SliceDevice(DRIVER, "p", "gpu-0", GPU, "gpu")
    # Another domain's `uuid` is another attribute, not the device's identity.
    foreign = gpu_device(**{"example.com/uuid": {"string": GPU}})
    assert parse_device(foreign, DRIVER, "p") is None


def test_devices_without_a_uuid_or_name_are_skipped_and_counted() -> None:
    parsed = parse_slice(v1_slice([
        gpu_device(uuid={"string": GPU}),
        gpu_device(type={"string": "gpu"}),  # no uuid
        gpu_device(uuid={"int": 7}),  # not a string
        gpu_device(uuid={"string": ""}),
        {"attributes": {"uuid": {"string": GPU}}},  # no name
        "gpu-9",
    ]))
    assert parsed is not None
    assert [d.uuid for d in parsed.devices] == [GPU] and parsed.skipped == 5
    assert parsed.devices[0].kind == "" and parsed.devices[0].parent_uuid is None


@pytest.mark.parametrize("obj", [
    {}, {"spec": None}, {"spec": []}, {"spec": {"devices": None}}, {"spec": {"devices": {}}},
    {"spec": {"pool": "node-a", "driver": 5, "devices": [{"name": "g", "basic": "x"}]}},
    {"spec": {"devices": [{"name": "g", "attributes": {"uuid": "GPU-1"}}]}},
    {"spec": {"devices": [{"name": "g", "attributes": [1, 2]}]}},
])
def test_malformed_slices_have_no_devices(obj: dict[str, Any]) -> None:
    parsed = parse_slice(obj)
    assert parsed is not None and parsed.devices == ()


def test_not_an_object_is_no_slice() -> None:
    assert parse_slice([1, 2]) is None  # type: ignore[arg-type]


JSON = st.recursive(st.none() | st.booleans() | st.integers() | st.text(max_size=8),
                    lambda inner: st.lists(inner, max_size=4)
                    | st.dictionaries(st.sampled_from(["spec", "devices", "basic", "attributes",
                                                       "uuid", "name", "string", "pool",
                                                       "driver", "generation", "x"]),
                                      inner, max_size=5),
                    max_leaves=30)


@given(JSON)
def test_parsing_never_raises(obj: Any) -> None:
    parsed = parse_slice(obj)
    assert parsed is None or isinstance(parsed.devices, tuple)


def parsed(node: str = "node-a", driver: str = DRIVER, pool: str = "node-a",
           generation: int = 1, *names: str) -> ParsedSlice:
    devices = tuple(SliceDevice(driver, pool, n, f"GPU-{n}") for n in names)
    return ParsedSlice(node, driver, pool, generation, devices, 0)


def test_only_this_nodes_drivers_and_each_pools_newest_generation() -> None:
    old = parsed("node-a", DRIVER, "node-a", 1, "gpu-0", "gpu-1")
    new = parsed("node-a", DRIVER, "node-a", 2, "gpu-0")
    other_pool = parsed("node-a", DRIVER, "extra", 1, "gpu-7")
    other_node = parsed("node-b", DRIVER, "node-b", 5, "gpu-0")
    other_driver = parsed("node-a", "nic.example.com", "node-a", 9, "nic-0")
    everything = [old, new, other_pool, other_node, other_driver]
    assert current_slices(everything, "node-a", frozenset({DRIVER})) == (new, other_pool)
    both = current_slices(everything, "node-a", frozenset({DRIVER, "nic.example.com"}))
    assert [d.name for d in slice_devices(both)] == ["gpu-7", "gpu-0", "nic-0"]


@pytest.mark.parametrize(("served", "chosen"), [
    (["v1beta1", "v1beta2", "v1"], "v1"),
    (["v1beta1", "v1beta2"], "v1beta2"),
    (["v1alpha3", "v1beta1"], "v1beta1"),
    (["v1alpha3"], None),
    ([], None),
])
def test_the_best_served_version_is_chosen(served: list[str], chosen: str | None) -> None:
    assert choose_version(group_document(served)) == chosen


@pytest.mark.parametrize("document", [None, [], {"versions": None}, {"versions": ["v1"]},
                                      {"versions": [{"version": 1}]}])
def test_a_malformed_discovery_document_serves_nothing(document: Any) -> None:
    assert choose_version(document) is None


def test_not_served_backs_off_like_a_missing_permission() -> None:
    assert reason_for_status(404) == "not_served"
    options = ListWatchOptions(backoff_initial_seconds=1.0, backoff_max_seconds=60.0)
    delays = [backoff_delay(n, "not_served", options, lambda a, b: 1.0) for n in (1, 2, 3)]
    assert delays == [1.0, 8.0, 60.0]


def test_a_mig_device_the_driver_creates_on_demand_has_no_uuid_but_is_kept() -> None:
    """NVIDIA's driver publishes dynamic MIG slices by parent and profile: no UUID until the
    slice exists. Such a device is kept; one with neither uuid nor parent+profile is not."""
    parsed = parse_slice(v1_slice([
        gpu_device(type={"string": "mig"}, parentUUID={"string": GPU},
                   profile={"string": "1g.10gb"}),
        gpu_device(type={"string": "mig"}, parentUUID={"string": GPU}),  # no profile
    ]))
    assert parsed is not None and parsed.skipped == 1
    (device,) = parsed.devices
    assert (device.uuid, device.kind, device.parent_uuid, device.profile) == (
        "", "mig", GPU, "1g.10gb")
