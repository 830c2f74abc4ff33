"""The ResourceSlice watch end to end: the real kubernetes_asyncio client against the fake API
server on 127.0.0.1, serving `resource.k8s.io` in the versions each test picks."""

import asyncio
import logging
import subprocess
import sys
from collections.abc import AsyncIterator, Awaitable, Callable
from dataclasses import replace
from typing import Any

import pytest

from gpu_enricher.kube.slice_source import ResourceSliceOptions, ResourceSliceSource
from gpu_enricher.model import SliceDevice
from gpu_enricher.sim.fake_api.server import FakeKubeApi, RecordedRequest
from gpu_enricher.sim.fake_api.slices import slice_object
from tests.kube_helpers import (
    eventually,
    family_values,
    fast_options,
    loopback_only,
    starter,
    synced,
)

NODE = "gpu-node-1"
OTHER = "gpu-node-2"
DRIVER = "gpu.nvidia.com"
H100 = "GPU-a0ac1a35-4b1c-6f2e-9d3a-2c1e5b7f8d90"
A100 = "GPU-0451a3f1-3b8c-2a1f-9f0e-7d6c5b4a3928"
MIG = "MIG-5c89852c-d268-c3f3-1b07-005d5ae1dc3f"
WHOLE = SliceDevice(DRIVER, NODE, "gpu-0", H100, "gpu")
SLICE_1G = SliceDevice(DRIVER, NODE, "gpu-1-mig-1g10gb-0", MIG, "mig", A100, "1g.10gb")
ALL_VERSIONS = ("v1", "v1beta2", "v1beta1")
GROUP_PATH = "/apis/resource.k8s.io/"

__all__ = ["loopback_only"]  # the autouse fixture (kube_helpers)


def gpu_slice(node: str = NODE, devices: tuple[SliceDevice, ...] = (WHOLE, SLICE_1G),
              driver: str = DRIVER, pool: str = NODE, **fields: Any) -> dict[str, Any]:
    return slice_object(node, driver, pool, devices, **fields)


def slice_requests(api: FakeKubeApi, watch: bool | None = None) -> list[RecordedRequest]:
    return [r for r in api.requests if r.path.endswith("/resourceslices")
            and (watch is None or r.watch == watch)]


def uuids(source: ResourceSliceSource) -> set[str]:
    return {d.uuid for d in source.snapshot().devices}


@pytest.fixture
async def api() -> AsyncIterator[FakeKubeApi]:
    fake = FakeKubeApi(resource_versions=ALL_VERSIONS)
    await fake.start()
    yield fake
    await fake.stop()


Start = Callable[..., Awaitable[ResourceSliceSource]]


@pytest.fixture
async def start(api: FakeKubeApi) -> AsyncIterator[Start]:
    """Starts a source on `api` (option changes as keywords); all are closed at the end."""

    def make(**changes: Any) -> ResourceSliceSource:
        return ResourceSliceSource(fast_options(ResourceSliceOptions, NODE, api, **changes))

    async with starter(make) as start_source:
        yield start_source


@pytest.mark.parametrize(("served", "chosen"), [
    (ALL_VERSIONS, "v1"), (("v1beta1",), "v1beta1"), (("v1beta2", "v1beta1"), "v1beta2")])
async def test_lists_and_watches_this_nodes_gpu_slices(api: FakeKubeApi, start: Start,
                                                       served: tuple[str, ...],
                                                       chosen: str) -> None:
    api.resource_versions = served
    api.set_slices([
        gpu_slice(),
        gpu_slice(OTHER, (replace(WHOLE, uuid=A100),), pool=OTHER),  # another node's
        gpu_slice(devices=(replace(WHOLE, uuid="NIC-1"),), driver="nic.example.com"),
    ])
    source = await synced(start, api)
    snapshot = source.snapshot()
    assert snapshot.devices == (WHOLE, SLICE_1G) and snapshot.api_version == chosen
    # Discovery, then the calls kubernetes_asyncio makes, for the chosen version only.
    assert [(r.path, r.query_string) for r in api.requests] == [
        (GROUP_PATH, ""),
        (f"/apis/resource.k8s.io/{chosen}/resourceslices",
         "fieldSelector=spec.nodeName%3Dgpu-node-1"),
        (f"/apis/resource.k8s.io/{chosen}/resourceslices",
         "allowWatchBookmarks=True&fieldSelector=spec.nodeName%3Dgpu-node-1"
         f"&resourceVersion={api.version}&timeoutSeconds=30&watch=True"),
    ]
    values = family_values(source)
    assert values[("gpu_enricher_dra_slices", ())] == 1
    assert values[("gpu_enricher_dra_devices", ())] == 2
    assert values[("gpu_enricher_dra_api_version_info", (("version", chosen),))] == 1
    assert values[("gpu_enricher_dra_synced", ())] == 1

    # Published after start (qualified attribute names, as some drivers write them).
    extra = SliceDevice(DRIVER, "extra", "gpu-2", A100, "gpu")
    added = gpu_slice(devices=(extra,), pool="extra", qualified=True, version=chosen)
    api.upsert_slice(added)
    await eventually(lambda: uuids(source) == {H100, MIG, A100}, within=1.0)
    api.delete_slice(added["metadata"]["uid"])
    await eventually(lambda: uuids(source) == {H100, MIG}, within=1.0)
    # A republished pool: its newer generation replaces the old one's devices.
    api.upsert_slice(gpu_slice(devices=(WHOLE,), name="gen-2", generation=2))
    await eventually(lambda: source.snapshot().devices == (WHOLE,), within=1.0)
    assert len(slice_requests(api, watch=False)) == 1 and source.health().up


async def test_other_drivers_when_asked_for(api: FakeKubeApi, start: Start) -> None:
    nic = SliceDevice("nic.example.com", NODE, "nic-0", "NIC-1")
    api.set_slices([gpu_slice(devices=(WHOLE,)),
                    gpu_slice(devices=(nic,), driver="nic.example.com")])
    source = await synced(start, api, drivers=frozenset({DRIVER, "nic.example.com"}))
    assert source.snapshot().devices == (WHOLE, nic)


async def test_bookmarks_and_gone_reuse_the_list_watch(api: FakeKubeApi, start: Start) -> None:
    api.set_slices([gpu_slice()])
    source = await synced(start, api)
    api.upsert_slice(gpu_slice(OTHER, pool=OTHER))  # moves the version, no event for us
    api.bookmark()
    await eventually(lambda: source.resource_version == str(api.version))
    api.expire_next_watch()
    api.end_watches()
    await eventually(lambda: len(slice_requests(api, watch=False)) == 2
                     and api.open_watches == 1)
    gone = ("gpu_enricher_dra_watch_restarts_total", (("reason", "gone"),))
    assert family_values(source)[gone] == 1 and uuids(source) == {H100, MIG}


async def test_forbidden_logs_the_rule_once(api: FakeKubeApi, start: Start,
                                           caplog: pytest.LogCaptureFixture) -> None:
    api.set_slices([gpu_slice()])
    api.fail_next(403, count=1000, watch=False)
    with caplog.at_level(logging.WARNING, logger="gpu_enricher.kube"):
        source = await start()
        await eventually(lambda: source.health().errors.get("forbidden", 0) >= 3)
        health, snapshot = source.health(), source.snapshot()
        assert not health.up and not snapshot.synced and snapshot.devices == ()
        messages = [r.getMessage() for r in caplog.records]
        assert len(messages) == 1
        assert all(part in messages[0] for part in (
            "get, list and watch", '["resource.k8s.io"]', '["resourceslices"]'))
        api.clear_failures()
        await eventually(lambda: source.snapshot().synced and source.health().up)
    assert uuids(source) == {H100, MIG}


async def test_a_cluster_without_dra(caplog: pytest.LogCaptureFixture) -> None:
    async with FakeKubeApi(resource_versions=()) as api:
        api.set_slices([gpu_slice()])
        with caplog.at_level(logging.WARNING, logger="gpu_enricher.kube"):
            source = ResourceSliceSource(ResourceSliceOptions(
                NODE, host=api.url, backoff_initial_seconds=0.02, backoff_max_seconds=0.1))
            await source.start()
            try:
                await eventually(lambda: source.health().errors.get("not_served", 0) >= 3)
                assert source.snapshot().devices == () and source.snapshot().api_version == ""
                assert not source.health().up
                assert not slice_requests(api)  # nothing asked past discovery
                assert [r.getMessage().split(";")[0] for r in caplog.records] == [
                    "this cluster serves no resource.k8s.io API: DRA labels off"]
                api.resource_versions = ("v1",)  # the cluster is upgraded
                await eventually(lambda: source.snapshot().synced)
                assert uuids(source) == {H100, MIG} and source.snapshot().api_version == "v1"
            finally:
                await source.close()


async def test_an_upgrade_moves_to_the_new_version(api: FakeKubeApi, start: Start,
                                                  caplog: pytest.LogCaptureFixture) -> None:
    api.resource_versions = ("v1beta1",)
    api.set_slices([gpu_slice()])
    source = await synced(start, api)
    with caplog.at_level(logging.WARNING, logger="gpu_enricher.kube"):
        api.resource_versions = ("v1",)  # v1beta1 removed: its watch now answers 404
        api.bookmark()  # an event: the watch that ends next is not a "short" one
        api.end_watches()
        await eventually(lambda: source.snapshot().api_version == "v1"
                         and api.open_watches == 1)
    paths = [r.path for r in slice_requests(api, watch=False)]
    # A new version's resourceVersions are not assumed comparable: listed afresh.
    assert paths == ["/apis/resource.k8s.io/v1beta1/resourceslices",
                     "/apis/resource.k8s.io/v1/resourceslices"]
    assert uuids(source) == {H100, MIG} and source.health().errors == {"not_served": 1}
    assert any("was v1beta1" in r.getMessage() for r in caplog.records)


async def test_api_down_then_back_resyncs(api: FakeKubeApi, start: Start) -> None:
    api.set_slices([gpu_slice()])
    source = await synced(start, api, stale_after_seconds=0.3)
    await api.stop()
    await eventually(lambda: not source.health().up)
    await eventually(lambda: not source.snapshot().synced, within=2.0)
    assert uuids(source) == {H100, MIG}  # kept through the outage
    assert family_values(source)[("gpu_enricher_dra_synced", ())] == 0
    api.set_slices([gpu_slice(devices=(WHOLE,))])  # changed while we were away
    await api.start()
    await eventually(lambda: source.snapshot().synced and source.health().up)
    await eventually(lambda: uuids(source) == {H100})
    assert source.health().errors.get("unavailable", 0) >= 1
    # Reconnecting asks for the version again, each time.
    assert sum(r.path == GROUP_PATH for r in api.requests) >= 2


async def test_close_leaves_no_tasks(api: FakeKubeApi) -> None:
    before = asyncio.all_tasks()
    source = ResourceSliceSource(ResourceSliceOptions(NODE, host=api.url))
    await source.start()
    await eventually(lambda: source.snapshot().synced)
    await source.close()
    await eventually(lambda: api.open_watches == 0)
    await api.stop()
    assert asyncio.all_tasks() == before
    await source.close()  # twice is harmless


def test_the_source_factory_does_not_import_the_client_library() -> None:
    code = ("import sys\n"
            "from gpu_enricher.kube.slice_source import ResourceSliceOptions, make_slice_source\n"
            "source = make_slice_source(ResourceSliceOptions('n', host='http://127.0.0.1:1'))\n"
            "source.snapshot(); source.health(); source.families()\n"
            "assert not [m for m in sys.modules if m.startswith('kubernetes_asyncio')]\n")
    subprocess.run([sys.executable, "-c", code], check=True, timeout=60)


async def test_a_republished_pool_keeps_its_devices_resolvable_meanwhile(
        api: FakeKubeApi, start: Start, monkeypatch: pytest.MonkeyPatch) -> None:
    """A DRA driver that restarts deletes its slices and publishes them again (or publishes a
    new generation slice by slice): a device named by a claim must not resolve to nothing in
    between (issue 32), nor stay once its slice is gone for good."""
    monkeypatch.setattr("gpu_enricher.kube.slice_source.DEVICE_GRACE_SECONDS", 0.5)
    first = gpu_slice()
    api.set_slices([first])
    source = await synced(start, api)
    assert source.snapshot().recent == ()
    api.delete_slice(first["metadata"]["uid"])
    await eventually(lambda: source.snapshot().devices == (), within=1.0)
    assert set(source.snapshot().recent) == {WHOLE, SLICE_1G}, "gone a moment ago: still known"
    assert family_values(source)[("gpu_enricher_dra_devices_kept", ())] == 2
    # Republished (a new generation, one slice at a time): published again, not "recent".
    api.upsert_slice(gpu_slice(devices=(WHOLE,), name="gen-2", generation=2))
    await eventually(lambda: source.snapshot().devices == (WHOLE,), within=1.0)
    assert source.snapshot().recent == (SLICE_1G,)
    # Past the grace, a device no slice publishes is gone.
    await eventually(lambda: source.snapshot().recent == (), within=2.0)
    assert family_values(source)[("gpu_enricher_dra_devices_kept", ())] == 0
