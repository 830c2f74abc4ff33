"""The GPU Operator's DRA stack (GPUCluster) gives the exporter's own pod a ResourceClaim of
every GPU with admin access, and the kubelet's `List` reports it like any other claim. With real
parts (pynvml over the fake library, the grpc.aio fake kubelet, the fake API server serving
ResourceClaims with the operator's RBAC), that claim monitors: it never becomes a holder."""

import asyncio
from collections.abc import AsyncIterator

import pytest

from gpu_enricher.kube.claim_source import ClaimReadOptions
from gpu_enricher.model import ClaimAllocation
from gpu_enricher.sim.fake_api.claims import StoredClaim
from tests.app.test_dra import (
    DRIVER,
    NODE,
    Cluster,
    claim,
    close,
    fb_lines,
    make_cluster,
    synced,
)
from tests.app.test_dra import runtime_dir as runtime_dir  # a fixture, used by name
from tests.fake_nvml.build import FakeNvml
from tests.samples import value

EXPORTER_POD = "nvidia-dcgm-exporter-7xq2p"
# The claim the operator's ResourceClaimTemplate `nvidia-dcgm-exporter-admin` makes for the pod
# (its claim `admin-gpus`): generated name <pod>-<claim>-<suffix>.
ADMIN_CLAIM = f"{EXPORTER_POD}-admin-gpus-k4w9d"
READS = ClaimReadOptions(retry_seconds=0.0, forbidden_retry_seconds=3600.0)


def admin(namespace: str, device: str) -> ClaimAllocation:
    return ClaimAllocation(namespace, EXPORTER_POD, "nvidia-dcgm-exporter", ADMIN_CLAIM,
                           namespace, DRIVER, NODE, device)


def stored(namespace: str) -> list[StoredClaim]:
    return [StoredClaim(namespace, ADMIN_CLAIM, ((DRIVER, NODE, "gpu-0"),
                                                 (DRIVER, NODE, "gpu-1-mig-5")), True),
            StoredClaim("ml", "single-gpu", ((DRIVER, NODE, "gpu-0"),))]


async def operator_node(cluster: Cluster, namespace: str) -> None:
    """Both GPUs' devices published; the exporter's admin claim of all of them and a workload
    claim of GPU 0; the operator's Role: ResourceClaims of its own namespace only."""
    cluster.publish(cluster.gpu0(), cluster.mig())
    cluster.api.claims.set_claims(stored(namespace))
    cluster.api.claims.readable_namespaces = {namespace}
    cluster.kubelet.set_claims([admin(namespace, "gpu-0"), admin(namespace, "gpu-1-mig-5"),
                                claim("trainer", "single-gpu", "gpu-0")])
    await synced(cluster, 2)


@pytest.fixture
async def cluster(fake: FakeNvml, runtime_dir: str) -> AsyncIterator[Cluster]:
    made = await make_cluster(fake, runtime_dir, ("v1",), claim_reads=READS)
    yield made
    await close(made)


# "a-gpu-operator" sorts before the workload's "ml": one holder per device would pick the
# exporter pod; "zz-gpu-operator" after it.
@pytest.mark.parametrize("namespace", ["a-gpu-operator", "zz-gpu-operator"])
async def test_the_operators_admin_claim_monitors_and_never_holds(
        cluster: Cluster, namespace: str) -> None:
    await operator_node(cluster, namespace)
    text = await cluster.text()
    lines = fb_lines(text)
    gpu0 = [line for line in lines if 'gpu="0"' in line]
    assert len(gpu0) == 1 and 'namespace="ml",pod="trainer"' in gpu0[0], gpu0
    assert EXPORTER_POD not in text.split("# HELP gpu_enricher_")[0], "no DCGM series has it"
    # The MIG instance held only by the admin claim carries no pod labels at all.
    mig5 = [line for line in lines if 'GPU_I_ID="5"' in line]
    assert len(mig5) == 1 and "pod=" not in mig5[0] and "dra_" not in mig5[0], mig5
    # Still visible, marked: the allocation family lists the monitor.
    for device, gi in (("gpu-0", None), ("gpu-1-mig-5", "5")):
        labels = {"pod": EXPORTER_POD, "admin_access": "true", "device_id": f"{NODE}/{device}"}
        assert value(text, "gpu_enricher_device_allocation_info",
                     **labels, **({"GPU_I_ID": gi} if gi else {})) == 1
    assert value(text, "gpu_enricher_device_allocation_info", pod="trainer",
                 admin_access="false") == 1
    # The workload's claim is in a namespace the operator's Role does not cover: 403, an
    # ordinary holder, not asked again on the next passes.
    assert value(text, "gpu_enricher_dra_claim_reads_total", result="read") == 1
    assert value(text, "gpu_enricher_dra_claim_reads_total", result="forbidden") == 1
    assert value(text, "gpu_enricher_dra_admin_access_devices") == 2
    assert value(text, "gpu_enricher_dra_claim_devices", resolved="true") == 2
    reads = cluster.api.claims.reads
    await cluster.text()
    await cluster.text()
    assert cluster.api.claims.reads == reads, "a claim is read once while it is in use"


async def test_the_admin_claim_is_recognised_in_the_pass_that_first_reports_it(
        cluster: Cluster) -> None:
    """The claim source runs after the kubelet's List of the same pass: the exporter pod
    never shows on a series, not even for one scrape."""
    await operator_node(cluster, "a-gpu-operator")
    cluster.kubelet.set_claims([claim("trainer", "single-gpu", "gpu-0")])
    await cluster.text()
    cluster.kubelet.set_claims([admin("a-gpu-operator", "gpu-0"),
                                claim("trainer", "single-gpu", "gpu-0")])
    gpu0 = [line for line in fb_lines(await cluster.text()) if 'gpu="0"' in line]
    assert len(gpu0) == 1 and 'pod="trainer"' in gpu0[0], gpu0


async def test_without_rbac_the_claim_counts_as_a_holder_until_it_can_be_read(
        fake: FakeNvml, runtime_dir: str) -> None:
    """No ResourceClaim may be read (a Role missing): every claim is an ordinary holder, as
    before this feature; the exporter pod then shows where it sorts first. RBAC granted
    later: recognised at the retry, without a restart."""
    retry = 1.5  # two passes take milliseconds: well inside it, even on a loaded machine
    cluster = await make_cluster(fake, runtime_dir, ("v1",), claim_reads=ClaimReadOptions(
        forbidden_retry_seconds=retry))
    try:
        await operator_node(cluster, "a-gpu-operator")
        cluster.api.claims.readable_namespaces = set()
        text = await cluster.text()
        assert value(text, "gpu_enricher_dra_claim_reads_total", result="forbidden") == 2
        assert any(EXPORTER_POD in line for line in fb_lines(text) if 'gpu="0"' in line)
        await cluster.text()
        assert value(await cluster.text(), "gpu_enricher_dra_claim_reads_total",
                     result="forbidden") == 2, "not asked again before the retry"
        cluster.api.claims.readable_namespaces = {"a-gpu-operator"}
        await asyncio.sleep(retry)
        gpu0 = [line for line in fb_lines(await cluster.text()) if 'gpu="0"' in line]
        assert 'pod="trainer"' in gpu0[0], gpu0
    finally:
        await close(cluster)


async def test_the_api_server_down_keeps_every_label_and_recovers(cluster: Cluster) -> None:
    await operator_node(cluster, "zz-gpu-operator")
    await cluster.api.stop()
    text = await cluster.text()
    assert value(text, "gpu_enricher_source_up", source="resourceclaims") == 0
    assert any('pod="trainer"' in line for line in fb_lines(text) if 'gpu="0"' in line)
    await cluster.api.start()
    text = await cluster.text()
    assert value(text, "gpu_enricher_source_up", source="resourceclaims") == 1
    assert value(text, "gpu_enricher_dra_admin_access_devices") == 2


async def test_the_exporters_own_pod_never_holds_even_unreadable(
        fake: FakeNvml, runtime_dir: str) -> None:
    """Our chart passes POD_NAME and POD_NAMESPACE: the exporter's own pod is a monitor even
    when its claim cannot be read."""
    cluster = await make_cluster(fake, runtime_dir, ("v1",), claim_reads=READS,
                                 own_pod=("a-gpu-operator", EXPORTER_POD))
    try:
        await operator_node(cluster, "a-gpu-operator")
        cluster.api.claims.readable_namespaces = set()
        text = await cluster.text()
        gpu0 = [line for line in fb_lines(text) if 'gpu="0"' in line]
        assert len(gpu0) == 1 and 'pod="trainer"' in gpu0[0], gpu0
        assert value(text, "gpu_enricher_device_allocation_info", pod=EXPORTER_POD,
                     admin_access="false", device_id=f"{NODE}/gpu-0") == 1
    finally:
        await close(cluster)
