"""GPU time per pod (`gpu_enricher_pod_gpu_seconds_total`) with real parts: pynvml over the
fake libnvidia-ml (an H100, and an A100 in MIG mode with a 3g.40gb and a 1g.10gb instance),
the grpc.aio fake kubelet (device plugin holders and DRA claims), the fake API server, the
collector; and the real process under `--simulate`, scraped over HTTP."""

import asyncio
import time
from collections.abc import AsyncIterator

import pytest

from gpu_enricher.model import AllocatableDevices, PodAssignment
from tests.app.test_dra import GPU0, Cluster, claim, close, make_cluster, synced
from tests.app.test_dra import runtime_dir as runtime_dir  # a fixture, used by name
from tests.app.test_dra_admin import EXPORTER_POD, READS, operator_node
from tests.app.test_process import Exporter, get
from tests.app.test_process import exporters as exporters  # a fixture, used by name
from tests.fake_nvml.build import FakeNvml
from tests.samples import samples, value

FAMILY = "gpu_enricher_pod_gpu_seconds_total"
GPU = "nvidia.com/gpu"


@pytest.fixture
async def cluster(fake: FakeNvml, runtime_dir: str) -> AsyncIterator[Cluster]:
    # GPU 0 time-sliced into 4 replicas (the device plugin's `replicas: 4`).
    made = await make_cluster(fake, runtime_dir, ("v1",), claim_reads=READS, allocatable=[
        AllocatableDevices(GPU, tuple(f"{GPU0}::{n}" for n in range(4)))])
    yield made
    await close(made)


def mig_uuid(cluster: Cluster, gi: int) -> str:
    assert cluster.collector.snapshot is not None
    return next(i.uuid for i in cluster.collector.snapshot.gpus[1].instances
                if i.gpu_instance_id == gi)


def seconds(text: str) -> dict[str, float]:
    return {s.labels["pod"]: s.value for s in samples(text, FAMILY)}


async def timed_pass(cluster: Cluster) -> tuple[str, float, float]:
    """A pass's exposition, and the monotonic clock just before and after it: the pass's own
    reading lies between."""
    before = time.monotonic()
    text = await cluster.text()
    return text, before, time.monotonic()


async def test_whole_gpu_mig_instances_and_replicas_bill_their_share(cluster: Cluster) -> None:
    # The MIG instances under the mixed strategy's resources.
    mig3, mig1 = mig_uuid(cluster, 1), mig_uuid(cluster, 5)
    cluster.kubelet.set_assignments([
        PodAssignment("ml", "one-replica", "main", GPU, (f"{GPU0}::0",)),
        PodAssignment("ml", "two-replicas", "main", GPU, (f"{GPU0}::1", f"{GPU0}::2")),
        PodAssignment("research", "notebook", "jupyter", "nvidia.com/mig-3g.40gb", (mig3,)),
        PodAssignment("vision", "slicer", "main", "nvidia.com/mig-1g.10gb", (mig1,))])
    share = {"one-replica": 0.25, "two-replicas": 0.5, "notebook": 3 / 7, "slicer": 1 / 7}
    first, first_before, first_after = await timed_pass(cluster)
    assert seconds(first) == dict.fromkeys(share, 0.0), "a new series starts at 0"
    assert value(first, FAMILY, namespace="research", pod="notebook", container="jupyter",
                 resource="nvidia.com/mig-3g.40gb") == 0.0
    await asyncio.sleep(0.3)
    second, second_before, second_after = await timed_pass(cluster)
    low, high = second_before - first_after, second_after - first_before
    for pod, billed in seconds(second).items():
        assert low * share[pod] - 1e-6 <= billed <= high * share[pod] + 1e-6, (pod, billed)
    # The pod that leaves: billed up to the pass that sees it gone, shown once more, then gone.
    cluster.kubelet.set_assignments([
        PodAssignment("ml", "one-replica", "main", GPU, (f"{GPU0}::0",))])
    third = seconds(await cluster.text())
    assert third["two-replicas"] >= seconds(second)["two-replicas"]
    assert set(third) == set(share)
    assert set(seconds(await cluster.text())) == {"one-replica"}


async def test_a_whole_gpu_is_one_and_the_admin_claim_counts_nothing(cluster: Cluster) -> None:
    """The operator's admin-access claim of every GPU: a monitor, never billed; the workload's
    claim of GPU 0 bills the whole GPU under the DRA driver's name."""
    await operator_node(cluster, "a-gpu-operator")
    _, first_before, first_after = await timed_pass(cluster)
    await asyncio.sleep(0.2)
    text, before, after = await timed_pass(cluster)
    assert EXPORTER_POD not in {s.labels["pod"] for s in samples(text, FAMILY)}
    billed = value(text, FAMILY, namespace="ml", pod="trainer", container="main",
                   resource="gpu.nvidia.com")
    assert billed is not None
    assert before - first_after - 1e-6 <= billed <= after - first_before + 1e-6


async def test_a_claim_of_a_mig_slice_bills_its_slices(cluster: Cluster) -> None:
    cluster.publish(cluster.mig())
    cluster.kubelet.set_claims([claim("slicer", "small-slice", "gpu-1-mig-5")])
    await synced(cluster, 1)
    _, first_before, first_after = await timed_pass(cluster)
    await asyncio.sleep(0.2)
    text, before, after = await timed_pass(cluster)
    billed = seconds(text)["slicer"]
    assert (before - first_after) / 7 - 1e-6 <= billed <= (after - first_before) / 7 + 1e-6


def test_the_simulated_node_bills_gpu_seconds_by_share(exporters: list[Exporter]) -> None:
    """The real process: the built-in node's holders over HTTP. Series that start in the same
    pass grow in the ratio of their shares."""
    exp = Exporter(["--simulate", "-c", "200"], {})
    exporters.append(exp)
    exp.wait_ready()
    deadline = time.monotonic() + 10
    while not {"llm-trainer-0", "detector-0"} <= set(first := metrics(exp)):
        assert time.monotonic() < deadline, first
        time.sleep(0.05)
    started = time.monotonic()
    time.sleep(2.0)
    body = get(exp.base + "/metrics")[1]
    grown = seconds(body)
    trainer = grown["llm-trainer-0"] - first["llm-trainer-0"]
    # ~2 s of a whole GPU at 0.2 s passes; generous bounds for a loaded machine.
    assert 0.5 <= trainer <= time.monotonic() - started + 2.0, trainer
    # The device plugin's holders come from one kubelet List, the claims from it and the
    # ResourceSlices: each group starts in one pass.
    total, claims = grown["llm-trainer-0"], grown["detector-0"]
    assert grown["notebook-alice"] == pytest.approx(total * 3 / 7, abs=1e-4), "MIG 3g.40gb"
    assert grown["chat-7d9f-abcde"] == pytest.approx(total / 2, abs=1e-4), "two replicas"
    assert grown["slicer-0"] == pytest.approx(claims * 2 / 7, abs=1e-4), "a DRA MIG claim"
    assert "nvidia-dcgm-exporter-sim" not in grown, "the admin-access claim"
    assert "etl-runner-6f7d" not in grown, "holds no GPU (uses one it was never given)"
    assert "# TYPE gpu_enricher_pod_gpu_seconds_total counter" in body


def metrics(exp: Exporter) -> dict[str, float]:
    return seconds(get(exp.base + "/metrics")[1])


async def test_a_lost_gpu_is_not_billed_while_lost(cluster: Cluster) -> None:
    """GPU_IS_LOST on the held GPU: the step the last healthy pass saw is billed, then nothing
    until NVML answers for it again; the series stays (the pod still holds it)."""
    cluster.kubelet.set_assignments([PodAssignment("ml", "whole", "main", GPU, (GPU0,))])
    await cluster.text()
    await asyncio.sleep(0.05)
    before_loss = seconds(await cluster.text())["whole"]
    assert before_loss > 0
    cluster.fake.set_lost(0)
    lost = seconds(await cluster.text())["whole"]  # the step before the loss was seen
    await asyncio.sleep(0.05)
    assert seconds(await cluster.text())["whole"] == lost
    cluster.fake.set_lost(0, False)
    assert seconds(await cluster.text())["whole"] == lost, "back: billed from this pass on"
    await asyncio.sleep(0.05)
    assert seconds(await cluster.text())["whole"] > lost
