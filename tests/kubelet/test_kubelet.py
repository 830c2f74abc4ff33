"""Pod attribution end to end: a real grpc.aio fake kubelet on a unix socket, the real client,
the collector, and the exposition that /metrics serves."""

import asyncio
import shutil
import tempfile
import time
from collections.abc import AsyncIterator, Iterator
from pathlib import Path

import aiohttp
import grpc
import pytest
from aiohttp.test_utils import TestServer

from gpu_enricher.app import make_app
from gpu_enricher.collector.loop import Collector, CollectorOptions
from gpu_enricher.fields.counters import parse_counters
from gpu_enricher.kubelet.client import PodResourcesClient
from gpu_enricher.kubelet.source import KubeletOptions, KubeletSource
from gpu_enricher.model import (
    AllocatableDevices,
    DeviceIdentity,
    GpuSnapshot,
    NodeSnapshot,
    PodAssignment,
)
from gpu_enricher.nvml.backend import NvmlBackend
from gpu_enricher.sim.backend import SimulatedBackend
from gpu_enricher.sim.fake_kubelet.server import FakeKubelet
from gpu_enricher.sim.node import mig_uuid
from gpu_enricher.sim.scenario import builtin_scenario
from tests.fake_nvml.build import FakeNvml
from tests.samples import value

CSV = """DCGM_FI_DEV_GPU_TEMP, gauge, GPU temperature (in C).
DCGM_FI_DEV_FB_USED, gauge, Framebuffer memory used (in MiB).
"""
SIM = builtin_scenario()
SIM_UUIDS = [g.uuid for g in SIM.gpus]


def node_of(*uuids: str) -> NodeSnapshot:
    """A node of these GPUs, as an NVML pass hands it to the kubelet source: the source keeps
    only the device IDs that name them."""
    return NodeSnapshot(tuple(GpuSnapshot(DeviceIdentity(i, u, f"00000000:{i + 1:02x}:00.0",
                                                         "NVIDIA H100"))
                              for i, u in enumerate(uuids)))


class Clock:
    def __init__(self) -> None:
        self.now = 100.0

    def __call__(self) -> float:
        return self.now


@pytest.fixture
def socket_dir() -> Iterator[Path]:
    # pytest's tmp_path can exceed the 107-byte limit of a unix socket path.
    path = Path(tempfile.mkdtemp(prefix="kubelet-"))
    yield path
    shutil.rmtree(path, ignore_errors=True)


@pytest.fixture
async def kubelet(socket_dir: Path) -> AsyncIterator[FakeKubelet]:
    fake = FakeKubelet(socket_dir / "kubelet.sock")
    await fake.start()
    yield fake
    await fake.stop()


def make_collector(backend: SimulatedBackend | NvmlBackend, socket: Path, *,
                   clock: Clock | None = None, virtual_gpus: bool = False,
                   timeout: float = 1.0, max_age: float = 10.0,
                   extra: frozenset[str] = frozenset()) -> Collector:
    source = KubeletSource(
        PodResourcesClient(socket, timeout),
        KubeletOptions(max_age_seconds=max_age, extra_resources=extra),
        **({"clock": clock} if clock is not None else {}),
    )
    return Collector(backend, CollectorOptions(
        interval_seconds=1, hostname="node-a", counters=parse_counters(CSV, "t.csv"),
        virtual_gpus=virtual_gpus, extra_resources=extra), assignments=source)


@pytest.fixture
async def collectors() -> AsyncIterator[list[Collector]]:
    made: list[Collector] = []
    yield made
    for collector in made:
        if collector.assignments is not None:
            await collector.assignments.close()
        collector.backend.close()


async def text_of(collector: Collector) -> str:
    if collector.plan is None:
        await collector.open_backend()
    await collector.collect_once()
    return collector.exposition.text.decode()


def temp_lines(text: str) -> list[str]:
    return [line for line in text.splitlines() if line.startswith("DCGM_FI_DEV_GPU_TEMP{")]


# --- every device-ID form, through the real NVML path (fake libnvidia-ml) ------------------

NV0 = "GPU-fa4e0000-7953-256e-8f33-1343419b1a1c"
NV1 = "GPU-fa4e0001-7953-256e-8f33-1343419b1a1c"
NV2 = "GPU-fa4e0002-7953-256e-8f33-1343419b1a1c"
MIG_2_1 = "MIG-fa4e0002-0001-5000-8000-000000000000"
MIG_2_2 = "MIG-fa4e0002-0002-5000-8000-000000000000"


@pytest.mark.parametrize(
    ("resource", "device_id", "labelled"),
    [
        ("nvidia.com/gpu", NV0, 'gpu="0",'),
        ("nvidia.com/gpu", f"{NV1}::2", 'gpu="1",'),
        ("nvidia.com/gpu", MIG_2_1, 'GPU_I_ID="1"'),  # MIG strategy single
        ("nvidia.com/mig-1g.10gb", MIG_2_2, 'GPU_I_ID="2"'),
        ("nvidia.com/mig-1g.10gb", f"{MIG_2_2}::1", 'GPU_I_ID="2"'),
        ("nvidia.com/mig-3g.40gb", f"MIG-{NV2}/1/0", 'GPU_I_ID="1"'),
        ("nvidia.com/gpu", "nvidia0", 'gpu="1",'),  # minor 0 is NVML index 1 on this node
        ("nvidia.com/gpu", "nvidia1/vgpu3", 'gpu="0",'),
        ("nvidia.com/gpu", "nvidia2/gi2", 'GPU_I_ID="2"'),
        ("nvidia.com/gpu", "nvidia2/gi1/vgpu0", 'GPU_I_ID="1"'),
    ],
)
async def test_every_device_id_form_through_nvml(
        fake: FakeNvml, monkeypatch: pytest.MonkeyPatch, kubelet: FakeKubelet,
        collectors: list[Collector], resource: str, device_id: str, labelled: str) -> None:
    monkeypatch.setenv("FAKE_NVML_GPU_COUNT", "3")
    monkeypatch.setenv("FAKE_NVML_MINOR", "0:1,1:0")
    monkeypatch.setenv("FAKE_NVML_MIG", "2=1:9,2:19")
    fake.reset()
    kubelet.set_assignments([PodAssignment("team", "pod-x", "main", resource, (device_id,)),
                             PodAssignment("team", "pod-x", "main", "example.com/rdma", ("r0",))])
    collector = make_collector(NvmlBackend(), kubelet.socket_path)
    collectors.append(collector)
    lines = temp_lines(await text_of(collector))
    held = [line for line in lines if 'pod="pod-x"' in line]
    assert len(held) == 1, lines
    assert labelled in held[0]
    assert held[0].split("} ")[0].endswith(
        ',container="main",namespace="team",pod="pod-x"'), "dcgm-exporter's label order"
    assert len(lines) == 4, "the other GPU and instances carry no pod labels"


# --- behaviour over time, on the simulated node --------------------------------------------


async def test_pods_follow_churn_within_one_cycle(kubelet: FakeKubelet,
                                                  collectors: list[Collector]) -> None:
    kubelet.set_assignments([PodAssignment("a", "old", "c", "nvidia.com/gpu", (SIM_UUIDS[0],))])
    collector = make_collector(SimulatedBackend(SIM), kubelet.socket_path)
    collectors.append(collector)
    assert 'pod="old"' in await text_of(collector)
    kubelet.set_assignments([PodAssignment("a", "new", "c", "nvidia.com/gpu", (SIM_UUIDS[3],))])
    text = await text_of(collector)
    # Its GPU time, billed up to this pass, shows once more (docs/chargeback.md); no other
    # series names it.
    labelled = [line for line in text.splitlines() if 'pod="old"' in line]
    assert [line.split("{")[0] for line in labelled] == ["gpu_enricher_pod_gpu_seconds_total"], \
        "a pod gone from List loses its labels at the next pass"
    assert 'pod="old"' not in await text_of(collector), "then its GPU time ends too"
    assert 'gpu="3"' in next(line for line in temp_lines(text) if 'pod="new"' in line)


async def test_shared_gpu_one_stable_holder_or_virtual_gpus(
        kubelet: FakeKubelet, collectors: list[Collector]) -> None:
    kubelet.set_assignments([
        PodAssignment("web", "b-pod", "srv", "nvidia.com/gpu.shared", (f"{SIM_UUIDS[1]}::1",)),
        PodAssignment("web", "a-pod", "srv", "nvidia.com/gpu.shared", (f"{SIM_UUIDS[1]}::0",)),
    ])
    extra = frozenset({"nvidia.com/gpu.shared"})
    plain = make_collector(SimulatedBackend(SIM), kubelet.socket_path, extra=extra)
    virtual = make_collector(SimulatedBackend(SIM), kubelet.socket_path, extra=extra,
                             virtual_gpus=True)
    collectors.extend([plain, virtual])
    for _ in range(3):
        gpu1 = [line for line in temp_lines(await text_of(plain)) if 'gpu="1"' in line]
        assert len(gpu1) == 1 and 'pod="a-pod"' in gpu1[0], "sorted first holder, never flips"
    gpu1 = [line for line in temp_lines(await text_of(virtual)) if 'gpu="1"' in line]
    assert len(gpu1) == 2
    assert 'pod="a-pod",vgpu="0"}' in gpu1[0] and 'pod="b-pod",vgpu="1"}' in gpu1[1]
    assert gpu1[0].rsplit(" ", 1)[1] == gpu1[1].rsplit(" ", 1)[1], "values repeated, not split"
    text = virtual.exposition.text.decode()
    assert text.count("gpu_enricher_device_allocation_info{") == 2


async def test_kubelet_killed_and_restarted(kubelet: FakeKubelet,
                                            collectors: list[Collector]) -> None:
    clock = Clock()
    kubelet.set_assignments([PodAssignment("a", "p", "c", "nvidia.com/gpu", (SIM_UUIDS[0],))])
    collector = make_collector(SimulatedBackend(SIM), kubelet.socket_path, clock=clock,
                               max_age=15)
    collectors.append(collector)
    assert 'pod="p"' in await text_of(collector)
    await kubelet.stop()
    clock.now += 5
    text = await text_of(collector)
    assert 'pod="p"' in text, "the last good assignments are kept for a bounded time"
    assert value(text, "gpu_enricher_kubelet_up") == 0
    assert value(text, "gpu_enricher_kubelet_assignments_age_seconds") == 5.0
    assert value(text, "gpu_enricher_collection_errors_total", source="kubelet",
                 reason="SOCKET_MISSING") is not None
    clock.now += 11  # beyond max_age: better no labels than possibly wrong ones
    text = await text_of(collector)
    assert 'pod="' not in "\n".join(temp_lines(text))
    assert value(text, "gpu_enricher_kubelet_assignments_age_seconds") is None
    assert len(temp_lines(text)) == 6, "GPU series keep flowing"
    await kubelet.start()
    clock.now += 60  # past any backoff
    text = await text_of(collector)
    assert 'pod="p"' in text
    assert value(text, "gpu_enricher_kubelet_up") == 1


async def test_kubelet_restart_without_socket_removal_reconnects(
        kubelet: FakeKubelet, collectors: list[Collector]) -> None:
    clock = Clock()
    kubelet.set_assignments([PodAssignment("a", "p", "c", "nvidia.com/gpu", (SIM_UUIDS[0],))])
    collector = make_collector(SimulatedBackend(SIM), kubelet.socket_path, clock=clock)
    collectors.append(collector)
    assert 'pod="p"' in await text_of(collector)
    await kubelet.stop()
    await kubelet.start()  # a new socket file under the same path, same client channel
    kubelet.set_assignments([PodAssignment("a", "q", "c", "nvidia.com/gpu", (SIM_UUIDS[0],))])
    for _ in range(5):
        clock.now += 60
        text = await text_of(collector)
        if 'pod="q"' in text:
            break
    assert 'pod="q"' in text


async def test_resource_exhausted_and_deadline_keep_labels_and_count(
        kubelet: FakeKubelet, collectors: list[Collector]) -> None:
    clock = Clock()
    kubelet.set_assignments([PodAssignment("a", "p", "c", "nvidia.com/gpu", (SIM_UUIDS[0],))])
    collector = make_collector(SimulatedBackend(SIM), kubelet.socket_path, clock=clock,
                               timeout=0.3)
    collectors.append(collector)
    await text_of(collector)
    kubelet.fail_next("v1.List", grpc.StatusCode.RESOURCE_EXHAUSTED, 1, "rejected by rate limit")
    clock.now += 1
    text = await text_of(collector)
    assert 'pod="p"' in text
    errors = "gpu_enricher_collection_errors_total"
    assert value(text, errors, source="kubelet", reason="RESOURCE_EXHAUSTED") == 1
    kubelet.delay_seconds = 1.0
    clock.now += 2  # past the (jittered) backoff of one failure, within max_age
    text = await text_of(collector)
    assert value(text, errors, source="kubelet", reason="DEADLINE_EXCEEDED") == 1
    assert 'pod="p"' in text
    kubelet.delay_seconds = 0
    clock.now += 2
    assert value(await text_of(collector), "gpu_enricher_kubelet_up") == 1


async def test_old_kubelet_v1alpha1_fallback(kubelet: FakeKubelet,
                                             collectors: list[Collector]) -> None:
    kubelet.v1_unimplemented = True
    kubelet.set_assignments([PodAssignment("a", "p", "c", "nvidia.com/gpu", (SIM_UUIDS[0],))])
    collector = make_collector(SimulatedBackend(SIM), kubelet.socket_path)
    collectors.append(collector)
    for _ in range(2):
        text = await text_of(collector)
        assert 'pod="p"' in text
    assert kubelet.calls["v1.List"] == 1, "v1 is not asked again once it is unimplemented"
    assert kubelet.calls["v1alpha1.List"] == 2
    assert "gpu_enricher_kubelet_allocatable_devices" not in text


async def test_list_response_above_4_mib(kubelet: FakeKubelet,
                                         collectors: list[Collector]) -> None:
    crowd = [PodAssignment(f"ns-{n % 50}", f"batch-job-{n:05d}", "worker", "example.com/rdma",
                           (f"rdma-device-with-a-long-identifier-{n:05d}-" + "x" * 200,))
             for n in range(20_000)]
    kubelet.set_assignments([*crowd, PodAssignment("a", "p", "c", "nvidia.com/gpu",
                                                   (SIM_UUIDS[0],))])
    collector = make_collector(SimulatedBackend(SIM), kubelet.socket_path, timeout=5)
    collectors.append(collector)
    text = await text_of(collector)
    assert 'pod="p"' in text
    assert value(text, "gpu_enricher_kubelet_up") == 1


async def test_allocatable_and_allocated_counts(kubelet: FakeKubelet,
                                                collectors: list[Collector]) -> None:
    kubelet.set_assignments(SIM.pods)
    kubelet.set_allocatable([*SIM.allocatable(), AllocatableDevices("amd.com/gpu", ("a0",))])
    collector = make_collector(SimulatedBackend(SIM), kubelet.socket_path)
    collectors.append(collector)
    text = await text_of(collector)
    allocated = "gpu_enricher_kubelet_allocated_devices"
    assert value(text, allocated, resource="nvidia.com/gpu") == 3
    assert value(text, allocated, resource="nvidia.com/mig-3g.40gb") == 1
    # The H100 and the two replicas of the MPS-shared A100; the L4 is the DRA driver's.
    assert value(text, "gpu_enricher_kubelet_allocatable_devices", resource="nvidia.com/gpu") == 3
    assert "amd.com" not in text
    assert value(text, "gpu_enricher_device_allocation_info",
                 device_id=mig_uuid(SIM_UUIDS[2], 1), namespace="research") == 1


async def test_socket_appearing_after_start(socket_dir: Path,
                                            collectors: list[Collector]) -> None:
    clock = Clock()
    socket = socket_dir / "kubelet.sock"
    collector = make_collector(SimulatedBackend(SIM), socket, clock=clock)
    collectors.append(collector)
    text = await text_of(collector)
    assert len(temp_lines(text)) == 6 and 'pod="' not in text
    assert value(text, "gpu_enricher_kubelet_up") == 0
    clock.now += 1
    await text_of(collector)
    async with FakeKubelet(socket) as kubelet:
        kubelet.set_assignments([PodAssignment("a", "p", "c", "nvidia.com/gpu",
                                               (SIM_UUIDS[0],))])
        clock.now += 1  # a missing socket is looked for every cycle, without backoff
        assert 'pod="p"' in await text_of(collector)


async def test_unknown_device_ids_are_logged_once(kubelet: FakeKubelet,
                                                  collectors: list[Collector],
                                                  caplog: pytest.LogCaptureFixture) -> None:
    kubelet.set_assignments([
        PodAssignment("a", "p", "c", "nvidia.com/gpu", ("GPU-from-another-node", "weird/0")),
        PodAssignment("a", "q", "c", "nvidia.com/gpu", (SIM_UUIDS[0],)),
    ])
    collector = make_collector(SimulatedBackend(SIM), kubelet.socket_path)
    collectors.append(collector)
    for _ in range(3):
        text = await text_of(collector)
    assert 'pod="q"' in text and 'pod="p"' not in text
    # Dropped on the client's thread (issue 26): one line for the answer, naming a sample,
    # not one per ID from the join.
    logged = [r.getMessage() for r in caplog.records if "name no GPU" in r.getMessage()]
    assert len(logged) == 1 and "'GPU-from-another-node', 'weird/0'" in logged[0], logged
    assert not [r for r in caplog.records if "matches no GPU" in r.getMessage()]
    assert value(text, "gpu_enricher_kubelet_unmatched_device_ids", call="List") == 2


async def test_ready_does_not_wait_for_a_slow_kubelet(kubelet: FakeKubelet) -> None:
    kubelet.delay_seconds = 3.0
    collector = make_collector(SimulatedBackend(SIM), kubelet.socket_path, timeout=2.5)
    task = asyncio.create_task(collector.run())
    try:
        for _ in range(100):
            if collector.ready:
                break
            await asyncio.sleep(0.01)
        assert collector.ready, "ready within 1 s although the kubelet takes 3 s"
        assert "DCGM_FI_DEV_GPU_TEMP{" in collector.exposition.text.decode()
    finally:
        task.cancel()
        await asyncio.gather(task, return_exceptions=True)


async def test_scrapes_never_call_the_kubelet(kubelet: FakeKubelet) -> None:
    kubelet.set_assignments(SIM.pods)
    collector = make_collector(SimulatedBackend(SIM), kubelet.socket_path)
    collector.options = CollectorOptions(interval_seconds=0.2, hostname="node-a",
                                         counters=collector.options.counters)
    server = TestServer(make_app(collector), host="127.0.0.1")
    started = time.monotonic()
    await server.start_server()
    try:
        async with aiohttp.ClientSession() as http:
            for _ in range(200):
                async with http.get(server.make_url("/metrics")) as resp:
                    assert resp.status == 200
                    await resp.read()
        elapsed = time.monotonic() - started
        # At most one List per 0.2 s cycle (plus the first), whatever the 200 scrapes did.
        assert 1 <= kubelet.calls["v1.List"] <= elapsed / 0.2 + 2, (kubelet.calls, elapsed)
    finally:
        await server.close()


class BrokenSource(KubeletSource):
    """An assignment source with a bug: refresh raises something unexpected."""

    async def refresh(self, gpus: NodeSnapshot | None = None) -> None:
        raise RuntimeError("bug in the assignment source")


async def test_a_broken_assignment_source_never_freezes_gpu_series(socket_dir: Path) -> None:
    source = BrokenSource(PodResourcesClient(socket_dir / "kubelet.sock", 1.0),
                          KubeletOptions(max_age_seconds=10))
    collector = Collector(SimulatedBackend(SIM), CollectorOptions(
        interval_seconds=1, hostname="node-a", counters=parse_counters(CSV, "t.csv")),
        assignments=source)
    await collector.open_backend()
    await collector.collect_once()
    await collector.collect_once()
    text = collector.exposition.text.decode()
    assert value(text, "gpu_enricher_collections_total", source="simulated") == 2, \
        "rendered each pass"
    assert value(text, "gpu_enricher_collection_errors_total", source="kubelet",
                 reason="internal") == 2, "counted under the source that failed"
    await source.close()


async def test_newest_pod_wins_an_exclusive_gpu_still_listed_for_a_finished_one(
        kubelet: FakeKubelet, collectors: list[Collector]) -> None:
    finished = PodAssignment("ml", "a-finished", "c", "nvidia.com/gpu", (SIM_UUIDS[0],))
    kubelet.set_assignments([finished])
    collector = make_collector(SimulatedBackend(SIM), kubelet.socket_path)
    collectors.append(collector)
    assert 'pod="a-finished"' in "\n".join(temp_lines(await text_of(collector)))
    kubelet.set_assignments([finished, PodAssignment("ml", "z-new", "c", "nvidia.com/gpu",
                                                     (SIM_UUIDS[0],))])
    lines = "\n".join(temp_lines(await text_of(collector)))
    assert 'pod="z-new"' in lines and 'pod="a-finished"' not in lines
