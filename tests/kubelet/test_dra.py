"""Devices held through DRA ResourceClaims: the real client and `KubeletSource` against the
fake kubelet's grpc.aio server on a unix socket, serving `dynamic_resources` in v1 `List`."""

import shutil
import tempfile
from collections.abc import AsyncIterator, Iterable, Iterator
from pathlib import Path

import grpc
import pytest
from prometheus_client import generate_latest
from prometheus_client.metrics_core import Metric
from prometheus_client.registry import Collector, CollectorRegistry

from gpu_enricher.kubelet.client import PodResourcesClient
from gpu_enricher.kubelet.source import KubeletOptions, KubeletSource
from gpu_enricher.model import ClaimAllocation, PodAssignment
from gpu_enricher.sim.fake_kubelet.server import FakeKubelet
from tests.kubelet.test_kubelet import node_of
from tests.samples import samples, value

NVIDIA = "gpu.nvidia.com"
NODE = "node-a"  # the NVIDIA DRA driver names its pool after the node
GPU0 = "GPU-8a748984-0fe7-297f-916c-4b998ce202d1"
NODE_A = node_of(GPU0)
CLAIM_METRIC = "gpu_enricher_kubelet_allocated_claim_devices"

WHOLE = ClaimAllocation("ml", "train", "main", "single-gpu", "ml", NVIDIA, NODE, "gpu-0")
MIG = ClaimAllocation("ml", "infer", "server", "mig-slice", "ml", NVIDIA, NODE,
                      "gpu-1-mig-1g10gb-0")
SHARED = [ClaimAllocation("ml", pod, "main", "shared-gpu", "ml", NVIDIA, NODE, "gpu-2",
                          share_id="5f1c") for pod in ("share-a", "share-b")]
NIC = ClaimAllocation("ml", "train", "main", "rdma", "ml", "rdma.example.com", NODE, "nic-0")


class Clock:
    def __init__(self) -> None:
        self.now = 100.0

    def __call__(self) -> float:
        return self.now


class _Families(Collector):
    """Lets prometheus_client render a source's own families, as /metrics does."""

    def __init__(self, source: KubeletSource) -> None:
        self.source = source

    def collect(self) -> Iterable[Metric]:
        return self.source.families()


def exposition(source: KubeletSource) -> str:
    registry = CollectorRegistry(auto_describe=False)
    registry.register(_Families(source))
    return generate_latest(registry).decode()


@pytest.fixture
def socket_path() -> Iterator[Path]:
    # pytest's tmp_path can exceed the 107-byte limit of a unix socket path.
    path = Path(tempfile.mkdtemp(prefix="kubelet-dra-"))
    yield path / "kubelet.sock"
    shutil.rmtree(path, ignore_errors=True)


@pytest.fixture
async def kubelet(socket_path: Path) -> AsyncIterator[FakeKubelet]:
    async with FakeKubelet(socket_path) as fake:
        yield fake


@pytest.fixture
def clock() -> Clock:
    return Clock()


@pytest.fixture
async def source(kubelet: FakeKubelet, clock: Clock) -> AsyncIterator[KubeletSource]:
    made = KubeletSource(PodResourcesClient(kubelet.socket_path, 1.0),
                         KubeletOptions(max_age_seconds=10.0, retry_max_seconds=0.0), clock)
    yield made
    await made.close()


async def test_whole_gpu_claim(kubelet: FakeKubelet, source: KubeletSource) -> None:
    kubelet.set_claims([WHOLE])
    result = await source.client.list()
    assert (result.api, result.assignments, result.claims) == ("v1", (), (WHOLE,))
    assert result.claims[0].share_id is None  # unset, not ""
    await source.refresh(NODE_A)
    snapshot = source.snapshot()
    assert snapshot.claims == (WHOLE,) and snapshot.assignments == ()
    assert snapshot.pod_age == {("ml", "train"): 0}
    assert value(exposition(source), CLAIM_METRIC, driver=NVIDIA) == 1


async def test_mig_claim_and_a_claim_of_two_devices(kubelet: FakeKubelet,
                                                    source: KubeletSource) -> None:
    second = ClaimAllocation("ml", "infer", "server", "mig-slice", "ml", NVIDIA, NODE,
                             "gpu-1-mig-1g10gb-1")
    kubelet.set_claims([MIG, second])
    await source.refresh(NODE_A)
    assert source.snapshot().claims == (MIG, second)
    assert value(exposition(source), CLAIM_METRIC, driver=NVIDIA) == 2


async def test_shared_claim_of_two_pods(kubelet: FakeKubelet, source: KubeletSource) -> None:
    kubelet.set_claims(SHARED)
    await source.refresh(NODE_A)
    snapshot = source.snapshot()
    assert snapshot.claims == tuple(SHARED)
    assert {c.share_id for c in snapshot.claims} == {"5f1c"}
    assert set(snapshot.pod_age) == {("ml", "share-a"), ("ml", "share-b")}
    # One device, however many pods hold it.
    assert value(exposition(source), CLAIM_METRIC, driver=NVIDIA) == 1


async def test_container_with_a_plugin_gpu_and_a_claim(kubelet: FakeKubelet,
                                                       source: KubeletSource) -> None:
    plugin = PodAssignment("ml", "train", "main", "nvidia.com/gpu", (GPU0,))
    kubelet.set_assignments([plugin])
    kubelet.set_claims([WHOLE])
    await source.refresh(NODE_A)
    snapshot = source.snapshot()
    assert (snapshot.assignments, snapshot.claims) == ((plugin,), (WHOLE,))
    text = exposition(source)
    assert value(text, CLAIM_METRIC, driver=NVIDIA) == 1
    assert value(text, "gpu_enricher_kubelet_allocated_devices", resource="nvidia.com/gpu") == 1


async def test_claims_of_other_drivers_are_kept(kubelet: FakeKubelet,
                                                source: KubeletSource) -> None:
    kubelet.set_claims([WHOLE, NIC])
    await source.refresh(NODE_A)
    assert source.snapshot().claims == (WHOLE, NIC)  # the join filters by driver, not the source
    text = exposition(source)
    assert value(text, CLAIM_METRIC, driver=NVIDIA) == 1
    assert value(text, CLAIM_METRIC, driver="rdma.example.com") == 1


async def test_pods_holding_only_claims_age_like_others(kubelet: FakeKubelet,
                                                        source: KubeletSource) -> None:
    kubelet.set_claims([SHARED[0]])
    await source.refresh(NODE_A)
    kubelet.set_claims(SHARED)
    await source.refresh(NODE_A)
    # "Newest pod wins" needs to know share-b came later than share-a.
    assert source.snapshot().pod_age == {("ml", "share-a"): 1, ("ml", "share-b"): 0}
    kubelet.set_claims([SHARED[1]])
    await source.refresh(NODE_A)
    assert source.snapshot().pod_age == {("ml", "share-b"): 1}


async def test_claims_dropped_with_the_assignments_after_max_age(
        kubelet: FakeKubelet, source: KubeletSource, clock: Clock) -> None:
    plugin = PodAssignment("ml", "other", "main", "nvidia.com/gpu", (GPU0,))
    kubelet.set_assignments([plugin])
    kubelet.set_claims([WHOLE])
    await source.refresh(NODE_A)
    kubelet.fail_next("v1.List", grpc.StatusCode.UNAVAILABLE, count=100)
    clock.now += 9
    await source.refresh(NODE_A)
    snapshot = source.snapshot()
    assert not snapshot.up
    assert (snapshot.assignments, snapshot.claims) == ((plugin,), (WHOLE,))  # still trusted
    clock.now += 2
    await source.refresh(NODE_A)
    snapshot = source.snapshot()
    assert (snapshot.assignments, snapshot.claims, snapshot.age_seconds) == ((), (), None)
    assert samples(exposition(source), CLAIM_METRIC) == []
    assert kubelet.calls["v1.List"] == 3


async def test_old_kubelet_gives_no_claims(kubelet: FakeKubelet, source: KubeletSource) -> None:
    plugin = PodAssignment("ml", "train", "main", "nvidia.com/gpu", (GPU0,))
    kubelet.set_assignments([plugin])
    kubelet.set_claims([WHOLE])
    kubelet.v1_unimplemented = True
    result = await source.client.list()
    assert (result.api, result.assignments, result.claims) == ("v1alpha1", (plugin,), ())
