"""Device IDs that name nothing on this node (issue 26, item 1): dropped on the kubelet client's
thread, counted and logged once, never carried to the join; what is kept between passes is the
node's, whatever the answer's size. A real grpc.aio fake kubelet on a real unix socket, the real
client and source, the collector on the simulated node."""

import asyncio
import logging
from collections.abc import AsyncIterator

import pytest

from gpu_enricher.attribution.devices import held_here, node_index, parse_device_id
from gpu_enricher.collector.loop import Collector
from gpu_enricher.kubelet.client import PodResourcesClient
from gpu_enricher.kubelet.selection import held_on
from gpu_enricher.kubelet.source import KubeletOptions, KubeletSource
from gpu_enricher.model import AllocatableDevices, PodAssignment
from gpu_enricher.sim.backend import SimulatedBackend
from gpu_enricher.sim.fake_kubelet.server import FakeKubelet
from gpu_enricher.sim.node import mig_uuid
from tests.kubelet.test_kubelet import SIM, SIM_UUIDS, Clock, make_collector, node_of, text_of
from tests.kubelet.test_kubelet import collectors as collectors  # the fixture
from tests.kubelet.test_kubelet import kubelet as kubelet  # the fixture
from tests.kubelet.test_kubelet import socket_dir as socket_dir  # the fixture
from tests.kubelet.test_large import MIB, Lateness
from tests.samples import samples, value

SIM_NODE = SimulatedBackend(SIM).sample(frozenset())
UNMATCHED = "gpu_enricher_kubelet_unmatched_device_ids"
GPU = "nvidia.com/gpu"


def elsewhere(pods: int, per_pod: int = 10) -> list[PodAssignment]:
    """Pods holding `nvidia.com/gpu` replicas of GPUs of no node here: a broken device plugin
    advertising replicas (issue 26)."""
    return [PodAssignment("elsewhere", f"job-{n:06d}", "main", GPU, tuple(
        f"GPU-{n:08x}-7953-256e-8f33-{d:012x}::{d}" for d in range(per_pod)))
        for n in range(pods)]


def family_samples(source: KubeletSource, name: str) -> dict[str, float]:
    return {s.labels["call"]: s.value for f in source.families() for s in f.samples
            if s.name == name}


@pytest.fixture
async def source(kubelet: FakeKubelet) -> AsyncIterator[KubeletSource]:
    made = KubeletSource(PodResourcesClient(kubelet.socket_path, 20.0), KubeletOptions(
        max_age_seconds=60, extra_resources=frozenset({"nvidia.com/gpu.shared"})))
    yield made
    await made.close()


# Every form the join matches, for GPUs and MIG instances of the simulated node.
REAL = [
    PodAssignment("a", "whole", "c", GPU, (SIM_UUIDS[0],)),
    PodAssignment("a", "replica", "c", "nvidia.com/gpu.shared", (f"{SIM_UUIDS[1]}::3",)),
    PodAssignment("a", "upper", "c", GPU, (SIM_UUIDS[3].upper(),)),
    PodAssignment("a", "bare", "c", GPU, (f"{SIM_UUIDS[0].removeprefix('GPU-')}::1",)),
    PodAssignment("a", "mig", "c", "nvidia.com/mig-3g.40gb", (mig_uuid(SIM_UUIDS[2], 1),)),
    PodAssignment("a", "mig-replica", "c", "nvidia.com/mig-3g.40gb",
                  (f"{mig_uuid(SIM_UUIDS[2], 2)}::1",)),
    PodAssignment("a", "legacy", "c", "nvidia.com/mig-3g.40gb", (f"MIG-{SIM_UUIDS[2]}/1/0",)),
    PodAssignment("a", "gke", "c", GPU, ("nvidia1", "nvidia2/gi2")),
    # another resource handing out one of our GPUs: its other IDs go, uncounted
    PodAssignment("a", "other", "c", "example.com/vgpu", (f"{SIM_UUIDS[1]}::2",)),
]


async def test_only_ids_naming_this_nodes_gpus_reach_the_join_the_rest_counted_once(
        kubelet: FakeKubelet, source: KubeletSource,
        caplog: pytest.LogCaptureFixture) -> None:
    odd = [PodAssignment("b", "stray", "c", GPU, ("GPU-from-another-node", "weird/0")),
           PodAssignment("b", "stray", "c", "nvidia.com/mig-1g.10gb", ("MIG-elsewhere",)),
           PodAssignment("b", "nic", "c", "example.com/nic", ("nic-0", "0000:3b:00.1")),
           PodAssignment("a", "other", "c", "example.com/vgpu", ("rdma0",)),
           PodAssignment("b", "share", "c", "nvidia.com/gpu.shared", ("share-0",))]
    kubelet.set_assignments([*REAL, *odd, *elsewhere(300)])
    for assignment in REAL:  # a known form: parse_device_id says what it names
        assert all(parse_device_id(d) is not None for d in assignment.device_ids)
    caplog.set_level(logging.INFO, logger="gpu_enricher.kubelet")
    for _ in range(3):
        await source.refresh(SIM_NODE)
    snapshot = source.snapshot()
    assert snapshot.assignments == tuple(REAL)
    assert set(snapshot.pod_age) == {("a", a.pod) for a in REAL}, "a pod of dropped IDs is gone"
    assert source.unmatched.count == 2 + 1 + 1 + 3000
    assert source.unmatched.sample == ("GPU-from-another-node", "weird/0", "MIG-elsewhere",
                                       "share-0", "GPU-00000000-7953-256e-8f33-000000000000::0")
    assert family_samples(source, UNMATCHED) == {"List": 3004, "GetAllocatableResources": 0}
    logged = [r for r in caplog.records if "name no GPU" in r.getMessage()]
    assert len(logged) == 1 and logged[0].levelno == logging.WARNING, "once, not per List"
    assert "3,004 device IDs" in logged[0].getMessage()
    assert "'GPU-from-another-node', 'weird/0', 'MIG-elsewhere'" in logged[0].getMessage()

    kubelet.set_assignments(REAL)
    await source.refresh(SIM_NODE)
    assert family_samples(source, UNMATCHED)["List"] == 0
    assert [r.levelno for r in caplog.records if "again" in r.getMessage()] == [logging.INFO]


async def test_what_is_kept_is_the_same_whatever_the_number_of_unmatched_ids(
        kubelet: FakeKubelet, source: KubeletSource) -> None:
    """The bounded-memory property: the state kept between passes (assignments, pods, the
    allocatable devices, the parse cache) is the node's, for 30 or 30,000 IDs of elsewhere."""
    kept = []
    for pods in (3, 3_000):
        kubelet.set_assignments([*elsewhere(pods // 2), *REAL, *elsewhere(pods // 2)])
        kubelet.set_allocatable([*SIM.allocatable(),
                                 AllocatableDevices(GPU, tuple(f"GPU-{n:08x}-0::1"
                                                               for n in range(pods)))])
        parse_device_id.cache_clear()
        # Each change of GPUs asks List and GetAllocatableResources again at once.
        await source.refresh(node_of(*SIM_UUIDS))
        await source.refresh(SIM_NODE)
        snapshot = source.snapshot()
        kept.append((snapshot.assignments, dict(snapshot.pod_age), snapshot.allocatable))
        assert parse_device_id.cache_info().currsize < 50, \
            "IDs of other GPUs are ruled out unparsed: the parse cache holds this node's"
        assert family_samples(source, UNMATCHED) == {
            "List": pods // 2 * 2 * 10, "GetAllocatableResources": pods}
    assert kept[0][0] == kept[1][0] == tuple(REAL)
    assert kept[0][1].keys() == kept[1][1].keys()
    assert kept[0][2] == kept[1][2] and kept[0][2], "this node's allocatable devices alone"
    here = node_index(SIM_NODE.gpus)
    assert all(held_here(d, here) for entry in kept[1][2] for d in entry.device_ids)


async def test_a_list_before_any_gpu_is_known_is_not_asked_and_a_gpu_change_lists_at_once(
        kubelet: FakeKubelet) -> None:
    clock = Clock()
    # A budget that would defer the next List for a minute.
    source = KubeletSource(PodResourcesClient(kubelet.socket_path, 20.0),
                           KubeletOptions(max_age_seconds=600, list_cpu_budget=1e-9),
                           clock=clock)
    try:
        holders = [PodAssignment("a", "p", "c", GPU, (SIM_UUIDS[0],)),
                   PodAssignment("a", "q", "c", GPU, (SIM_UUIDS[1],))]
        kubelet.set_assignments(holders)
        await source.refresh()
        assert kubelet.calls["v1.List"] == 0, "no GPUs known: nothing could be matched"
        await source.refresh(node_of(SIM_UUIDS[0]))
        assert source.snapshot().assignments == (holders[0],)
        assert source.unmatched.count == 1
        clock.now += 1
        await source.refresh(node_of(SIM_UUIDS[0]))
        assert kubelet.calls["v1.List"] == 1 and source.deferred == 1, "within the budget"
        await source.refresh(node_of(SIM_UUIDS[0], SIM_UUIDS[1]))  # a GPU bound
        assert kubelet.calls["v1.List"] == 2, "its holders at once, budget or not"
        assert source.snapshot().assignments == tuple(holders)
        assert source.unmatched.count == 0
    finally:
        await source.close()


async def test_the_exporter_never_joins_a_pathological_answers_ids(
        kubelet: FakeKubelet, collectors: list[Collector],
        caplog: pytest.LogCaptureFixture) -> None:
    """The collector whole: the real holders labelled from the first pass, the 20,000 IDs of
    elsewhere counted in the gauge, one log line, none of them per ID from the join."""
    kubelet.set_assignments([*elsewhere(2_000), *SIM.pods])
    collector = make_collector(SimulatedBackend(SIM), kubelet.socket_path, timeout=10)
    collectors.append(collector)
    text = await text_of(collector)
    assert any("pod" in s.labels for s in samples(text, "DCGM_FI_DEV_GPU_TEMP"))
    for _ in range(2):
        text = await text_of(collector)
    assert value(text, UNMATCHED, call="List") == 20_000
    assert collector.assignments is not None
    kept = collector.assignments.snapshot().assignments
    assert kept and not any(a.namespace == "elsewhere" for a in kept)
    assert len([r for r in caplog.records if "name no GPU" in r.getMessage()]) == 1
    assert not [r for r in caplog.records if "matches no GPU" in r.getMessage()]


async def test_the_50_mb_answer_of_issue_26_keeps_only_the_nodes_holders(
        kubelet: FakeKubelet, source: KubeletSource) -> None:
    """The issue's answer itself: ~50 MB, 250,000 ~200-byte `nvidia.com/gpu` IDs naming no GPU
    here. Parsed and matched on the client's thread: the loop stays free (the longest stall,
    with generous slack for a loaded machine), and what is kept is the node's."""
    pad = "f" * 150
    kubelet.set_assignments([*REAL, *(
        PodAssignment("elsewhere", f"replica-job-{n:06d}", container, GPU, tuple(
            f"GPU-{n:08x}-{c:04x}-{d:04x}-8f33-1343419b1a1c-{pad}::{d}" for d in range(10)))
        for n in range(12_500) for c, container in enumerate(("worker", "sidecar")))])
    assert kubelet.list_answer_bytes > 48 * MIB
    async with Lateness() as lateness:
        await source.refresh(SIM_NODE)
    assert lateness.worst < 0.1, str(lateness)
    snapshot = source.snapshot()
    assert snapshot.up and snapshot.assignments == tuple(REAL)
    assert source.unmatched.count == 250_000
    assert family_samples(source, UNMATCHED)["List"] == 250_000


async def test_a_50_mb_allocatable_answer_is_matched_off_the_loop(
        kubelet: FakeKubelet, source: KubeletSource) -> None:
    """The same broken device plugin advertises its 250,000 replicas to
    GetAllocatableResources: a kubelet answers one entry per device, the fake one per resource;
    both are matched a slice at a time, the loop free, the node's devices alone kept."""
    pad = "f" * 150
    ids = [f"GPU-{n:08x}-0000-0000-8f33-1343419b1a1c-{pad}::{n % 7}" for n in range(250_000)]
    kubelet.set_allocatable([*SIM.allocatable(), *(AllocatableDevices(GPU, (d,))
                                                   for d in ids[:125_000]),
                             AllocatableDevices("nvidia.com/gpu.shared", tuple(ids[125_000:]))])
    select = held_on(node_index(SIM_NODE.gpus), frozenset({"nvidia.com/gpu.shared"}))
    async with Lateness() as lateness:
        offered = await source.client.allocatable(select)
    assert lateness.worst < 0.1, str(lateness)
    assert offered is not None and offered.unmatched.count == 250_000
    assert offered.unmatched.sample == tuple(ids[:5])
    assert offered.devices == tuple(sorted(SIM.allocatable(), key=lambda d: d.resource))


async def test_an_allocatable_answer_a_pass_gave_up_on_is_collected_by_the_next(
        kubelet: FakeKubelet) -> None:
    """A ~50 MB allocatable answer (a plugin advertising 250,000 replicas) outlasts a pass's
    deadline: the next pass, even one the CPU budget defers the List of, collects it rather
    than asking again (and never getting it in time)."""
    clock = Clock()
    pad = "f" * 150
    kubelet.set_allocatable([*SIM.allocatable(), *(
        AllocatableDevices(GPU, (f"GPU-{n:08x}-0000-0000-8f33-1343419b1a1c-{pad}::1",))
        for n in range(250_000))])  # and no pods: the List is quick
    source = KubeletSource(PodResourcesClient(kubelet.socket_path, 20.0),
                           KubeletOptions(max_age_seconds=600, list_cpu_budget=1e-9),
                           clock=clock)
    try:
        with pytest.raises(TimeoutError):  # the pass's deadline, in the allocatable call
            async with asyncio.timeout(0.5):
                await source.refresh(SIM_NODE)
        assert source.collections == 1 and source.snapshot().allocatable is None
        clock.now += 1
        await source.refresh(SIM_NODE)  # the List deferred; the allocatable collected
        assert source.deferred == 1
        assert source.snapshot().allocatable == tuple(sorted(SIM.allocatable(),
                                                             key=lambda d: d.resource))
        assert source.allocatable_unmatched is not None
        assert source.allocatable_unmatched.count == 250_000
        assert kubelet.calls["v1.GetAllocatableResources"] == 1, "not asked again"
    finally:
        await source.close()
