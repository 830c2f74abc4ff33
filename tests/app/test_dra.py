"""GPUs held through DRA ResourceClaims, end to end with real parts: pynvml over the fake
libnvidia-ml (a whole GPU and a MIG GPU), the grpc.aio fake kubelet serving `dynamic_resources`
on a unix socket, the aiohttp fake Kubernetes API serving this node's ResourceSlices (v1, and on
a second run only v1beta1) to kubernetes_asyncio's list and watch, the collector and its
exposition."""

import asyncio
import dataclasses
import logging
import shutil
import tempfile
from collections.abc import AsyncIterator, Iterator, Sequence
from dataclasses import dataclass
from pathlib import Path

import pytest

from gpu_enricher.collector.loop import Collector, CollectorOptions
from gpu_enricher.fields.counters import parse_counters
from gpu_enricher.kube.claim_source import ClaimReadOptions, ResourceClaimSource
from gpu_enricher.kube.slice_source import ResourceSliceOptions, ResourceSliceSource
from gpu_enricher.kubelet.client import PodResourcesClient
from gpu_enricher.kubelet.source import KubeletOptions, KubeletSource
from gpu_enricher.model import AllocatableDevices, ClaimAllocation, SliceDevice
from gpu_enricher.nvml.backend import NvmlBackend
from gpu_enricher.sim.fake_api.server import FakeKubeApi
from gpu_enricher.sim.fake_api.slices import slice_object
from gpu_enricher.sim.fake_kubelet.server import FakeKubelet
from tests.fake_nvml.build import FakeNvml
from tests.samples import value

NODE = "gpu-node-1"
DRIVER = "gpu.nvidia.com"
CSV = "DCGM_FI_DEV_FB_USED, gauge, Framebuffer memory used (in MiB).\n"
GPU0 = "GPU-fa4e0000-7953-256e-8f33-1343419b1a1c"  # the fake library's UUIDs
GPU1 = "GPU-fa4e0001-7953-256e-8f33-1343419b1a1c"
IDENT0 = (f'gpu="0",UUID="{GPU0}",pci_bus_id="00000000:18:00.0",device="nvidia0",'
          'modelName="NVIDIA H100 80GB HBM3",Hostname="gpu-node-1"')


def claim(pod: str, name: str, device: str, share: str | None = None) -> ClaimAllocation:
    return ClaimAllocation("ml", pod, "main", name, "ml", DRIVER, NODE, device, share)


@dataclass
class Cluster:
    fake: FakeNvml
    kubelet: FakeKubelet
    api: FakeKubeApi
    collector: Collector
    mig5: str  # the MIG device UUID of GPU 1's instance 5

    async def text(self) -> str:
        await self.collector.collect_once()
        return self.collector.exposition.text.decode()

    def publish(self, *devices: SliceDevice) -> None:
        self.api.set_slices([slice_object(NODE, DRIVER, NODE, list(devices))])

    def gpu0(self) -> SliceDevice:
        return SliceDevice(DRIVER, NODE, "gpu-0", GPU0, "gpu")

    def mig(self) -> SliceDevice:
        return SliceDevice(DRIVER, NODE, "gpu-1-mig-5", self.mig5, "mig", GPU1, "1g.10gb")


@pytest.fixture
def runtime_dir() -> Iterator[str]:
    path = tempfile.mkdtemp(prefix="gpe-dra-")  # short: a unix socket path is bounded
    yield path
    shutil.rmtree(path, ignore_errors=True)


async def wait_for(predicate: object, what: str) -> None:
    assert callable(predicate)
    for _ in range(200):
        if predicate():
            return
        await asyncio.sleep(0.02)
    raise AssertionError(f"timed out waiting for {what}")


async def make_cluster(fake: FakeNvml, runtime_dir: str, versions: tuple[str, ...],
                       virtual_gpus: bool = False, refused: bool = False, *,
                       claim_reads: ClaimReadOptions | None = None,
                       own_pod: tuple[str, str] | None = None,
                       allocatable: Sequence[AllocatableDevices] = ()) -> Cluster:
    """`claim_reads`: with the ResourceClaim source (admin access) reading from the fake API;
    `allocatable`: the kubelet's GetAllocatableResources (asked at the first pass)."""
    fake.set_mig(1, [(1, 9), (5, 19)])
    kubelet = FakeKubelet(Path(runtime_dir) / "kubelet.sock")
    kubelet.set_allocatable(allocatable)
    await kubelet.start()
    api = FakeKubeApi(resource_versions=versions)
    if refused:  # no RBAC for resourceslices from the start
        api.fail_next(403, count=1000)
    await api.start()
    slices = ResourceSliceSource(ResourceSliceOptions(
        NODE, host=api.url, watch_timeout_seconds=5, stall_margin_seconds=1,
        backoff_initial_seconds=0.05, backoff_max_seconds=0.2))
    assignments = KubeletSource(PodResourcesClient(kubelet.socket_path, 1.0),
                                KubeletOptions(max_age_seconds=10))
    claim_access = None
    if claim_reads is not None:
        claim_access = ResourceClaimSource(
            dataclasses.replace(claim_reads, host=api.url),
            lambda: assignments.snapshot().claims)
    collector = Collector(
        NvmlBackend(),
        CollectorOptions(interval_seconds=1, hostname=NODE, counters=parse_counters(CSV, "t.csv"),
                         virtual_gpus=virtual_gpus, dra_drivers=frozenset({DRIVER}),
                         own_pod=own_pod),
        assignments=assignments, slices=slices, claim_access=claim_access)
    for source in collector.sources:
        await source.start()
    await collector.open_backend()
    await collector.collect_once()
    assert collector.snapshot is not None
    mig5 = next(i.uuid for i in collector.snapshot.gpus[1].instances if i.gpu_instance_id == 5)
    return Cluster(fake, kubelet, api, collector, mig5)


@pytest.fixture(params=[("v1",), ("v1beta1",)], ids=["v1", "v1beta1-only"])
async def cluster(request: pytest.FixtureRequest, fake: FakeNvml,
                  runtime_dir: str) -> AsyncIterator[Cluster]:
    made = await make_cluster(fake, runtime_dir, request.param)
    yield made
    await close(made)


async def close(cluster: Cluster) -> None:
    for source in cluster.collector.sources:
        await source.close()
    cluster.collector.backend.close()
    await cluster.api.stop()
    await cluster.kubelet.stop()


def fb_lines(text: str) -> list[str]:
    return [line for line in text.splitlines() if line.startswith("DCGM_FI_DEV_FB_USED{")]


async def synced(cluster: Cluster, devices: int) -> None:
    source = cluster.collector.slices
    assert source is not None
    await wait_for(lambda: source.snapshot().synced and len(source.snapshot().devices) == devices,
                   f"{devices} slice devices")


async def test_a_whole_gpu_and_a_mig_slice_through_claims(cluster: Cluster) -> None:
    cluster.publish(cluster.gpu0(), cluster.mig())
    cluster.kubelet.set_claims([claim("trainer", "single-gpu", "gpu-0"),
                                claim("slicer", "small-slice", "gpu-1-mig-5")])
    await synced(cluster, 2)
    text = await cluster.text()
    lines = fb_lines(text)
    # The golden DRA series: dcgm-exporter's attribute labels, sorted after the identity.
    assert any(line.startswith(
        f'DCGM_FI_DEV_FB_USED{{{IDENT0},container="main",dra_claim_name="single-gpu",'
        f'dra_claim_namespace="ml",dra_device_name="gpu-0",dra_driver_name="{DRIVER}",'
        f'dra_pool_name="{NODE}",namespace="ml",pod="trainer"}} ') for line in lines), lines
    mig = [line for line in lines if 'GPU_I_ID="5"' in line]
    assert len(mig) == 1
    assert (f'dra_mig_device_uuid="{cluster.mig5}",dra_mig_profile="1g.10gb",'
            f'dra_pool_name="{NODE}",namespace="ml",pod="slicer"') in mig[0]
    assert not any('GPU_I_ID="1"' in line and "pod=" in line for line in lines)
    assert value(text, "gpu_enricher_dra_claim_devices", resolved="true") == 2
    assert value(text, "gpu_enricher_device_allocation_info", dra_claim_name="small-slice",
                 device_id=f"{NODE}/gpu-1-mig-5", GPU_I_ID="5") == 1
    assert value(text, "gpu_enricher_source_up", source="resourceslices") == 1


async def test_a_shared_claim_is_a_shared_device(fake: FakeNvml, runtime_dir: str) -> None:
    cluster = await make_cluster(fake, runtime_dir, ("v1",), virtual_gpus=True)
    try:
        cluster.publish(cluster.gpu0())
        cluster.kubelet.set_claims([claim("b-second", "shared", "gpu-0", share="1"),
                                    claim("a-first", "shared", "gpu-0", share="0")])
        await synced(cluster, 1)
        text = await cluster.text()
        gpu0 = [line for line in fb_lines(text) if 'gpu="0"' in line]
        assert ['pod="a-first",vgpu="0"' in gpu0[0], 'pod="b-second",vgpu="1"' in gpu0[1]] == \
            [True, True], gpu0
        # Every holder is in the allocation family, with the claim.
        assert value(text, "gpu_enricher_device_allocation_info", pod="b-second",
                     dra_claim_name="shared") == 1
    finally:
        await close(cluster)


async def test_without_virtual_gpus_a_shared_claim_keeps_one_stable_holder(
        cluster: Cluster) -> None:
    cluster.publish(cluster.gpu0())
    cluster.kubelet.set_claims([claim("b-second", "shared", "gpu-0"),
                                claim("a-first", "shared", "gpu-0")])
    await synced(cluster, 1)
    for _ in range(2):
        gpu0 = [line for line in fb_lines(await cluster.text()) if 'gpu="0"' in line]
        assert len(gpu0) == 1 and 'pod="a-first"' in gpu0[0]


async def test_a_slice_published_after_the_claim_labels_within_one_pass(
        cluster: Cluster, caplog: pytest.LogCaptureFixture) -> None:
    cluster.publish(cluster.gpu0())
    cluster.kubelet.set_claims([claim("slicer", "small-slice", "gpu-1-mig-5"),
                                claim("ghost", "elsewhere", "gpu-7")])  # no slice, ever
    await synced(cluster, 1)
    text = await cluster.text()
    assert value(text, "gpu_enricher_dra_claim_devices", resolved="false") == 2
    assert not any("pod=" in line for line in fb_lines(text)), "no DRA labels yet"
    assert len([line for line in fb_lines(text) if 'gpu="1"' in line]) == 2, "series flow"
    warnings = [r.getMessage() for r in caplog.records if "DRA claimed device" in r.getMessage()]
    assert len(warnings) == 2, "once per device"
    # The DRA driver creates the MIG slice and publishes it (dcgm-exporter #714).
    cluster.publish(cluster.gpu0(), cluster.mig())
    await synced(cluster, 2)
    text = await cluster.text()
    assert any('GPU_I_ID="5"' in line and 'pod="slicer"' in line for line in fb_lines(text))
    assert value(text, "gpu_enricher_dra_claim_devices", resolved="false") == 1
    await cluster.text()
    assert len([r for r in caplog.records if "DRA claimed device" in r.getMessage()]) == 2


async def test_no_rbac_for_resourceslices_degrades_to_no_dra_labels(
        fake: FakeNvml, runtime_dir: str, caplog: pytest.LogCaptureFixture) -> None:
    caplog.set_level(logging.WARNING)
    cluster = await make_cluster(fake, runtime_dir, ("v1",), refused=True)
    try:
        cluster.kubelet.set_claims([claim("trainer", "single-gpu", "gpu-0")])
        cluster.publish(cluster.gpu0())
        source = cluster.collector.slices
        assert source is not None
        await wait_for(lambda: not source.health().up and source.health().errors,
                       "a refused list")
        text = await cluster.text()
        assert value(text, "gpu_enricher_source_up", source="resourceslices") == 0
        assert value(text, "gpu_enricher_collection_errors_total", source="resourceslices",
                     reason="forbidden") >= 1
        assert len(fb_lines(text)) == 3 and not any("pod=" in ln for ln in fb_lines(text))
        rbac = [r.getMessage() for r in caplog.records if "resourceslices" in r.getMessage()
                and "resource.k8s.io" in r.getMessage()]
        assert len(rbac) == 1, rbac
        cluster.api.clear_failures()  # RBAC granted: labels come without a restart
        await synced(cluster, 1)
        assert any('pod="trainer"' in line for line in fb_lines(await cluster.text()))
    finally:
        await close(cluster)


async def test_a_mig_slice_the_driver_creates_after_start_is_matched(
        fake: FakeNvml, runtime_dir: str) -> None:
    """dcgm-exporter #714: the DRA driver creates MIG slices on demand. Instances are
    enumerated every pass, so the new one is labelled as soon as NVML and a slice name it."""
    cluster = await make_cluster(fake, runtime_dir, ("v1",))
    try:
        fake.set_mig(1, [(1, 9)])  # only instance 1 exists now
        cluster.kubelet.set_claims([claim("slicer", "small-slice", "gpu-1-mig-5")])
        text = await cluster.text()
        assert not any('GPU_I_ID="5"' in line for line in fb_lines(text))
        fake.set_mig(1, [(1, 9), (5, 19)])  # the driver creates the slice …
        cluster.publish(cluster.mig())  # … and publishes it
        await synced(cluster, 1)
        text = await cluster.text()
        mig = [line for line in fb_lines(text) if 'GPU_I_ID="5"' in line]
        assert len(mig) == 1 and 'pod="slicer"' in mig[0] and "dra_mig_profile" in mig[0]
        document = cluster.collector.document
        instance = next(i for i in document["gpus"][1]["mig_instances"]
                        if i["gpu_instance_id"] == 5)
        assert instance["holders"][0]["claim"]["dra_claim_name"] == "small-slice"
    finally:
        await close(cluster)
