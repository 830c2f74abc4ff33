"""`hpc_job` in /metrics: the real NVML path (the fake libnvidia-ml), the job mapping source
over a real directory, the collector, and the text /metrics serves, golden, in dcgm-exporter's
order (hpc.go adds `hpc_job` to the attribute map: after the label-type fields, sorted with
container, namespace and pod)."""

from pathlib import Path

import pytest

from gpu_enricher.attribution.jobmap_reader import JobMapReader
from gpu_enricher.attribution.jobmap_source import JobMapSource
from gpu_enricher.collector.loop import Collector, CollectorOptions
from gpu_enricher.fields.counters import parse_counters
from gpu_enricher.kubelet.client import PodResourcesClient
from gpu_enricher.kubelet.source import KubeletOptions, KubeletSource
from gpu_enricher.model import PodAssignment
from gpu_enricher.nvml.backend import NvmlBackend
from gpu_enricher.sim.fake_kubelet.server import FakeKubelet
from tests.fake_nvml.build import FakeNvml
from tests.kubelet.test_kubelet import kubelet as kubelet  # the fixture
from tests.kubelet.test_kubelet import socket_dir as socket_dir  # the fixture

CSV = """DCGM_FI_DEV_GPU_TEMP, gauge, GPU temperature (in C).
DCGM_FI_DRIVER_VERSION, label, Driver version.
DCGM_FI_DEV_XID_ERRORS, gauge, Value of the last XID error encountered.
"""
NV1 = "GPU-fa4e0001-7953-256e-8f33-1343419b1a1c"
LATER = 1 << 62  # every file settled: what changes is read, nothing else


@pytest.fixture
def jobs_dir(tmp_path: Path) -> Path:
    directory = tmp_path / "job-mapping"
    directory.mkdir()
    (directory / "0").write_text("4242\n")
    (directory / "1").write_text("4243\n4244\n")
    (directory / "2").write_text("9999\n")  # a MIG GPU's whole-GPU file: not its instances'
    (directory / "2.2").write_text("4245\n")
    return directory


async def metrics_text(jobs_dir: Path, kubelet: FakeKubelet | None = None) -> str:
    assignments = None if kubelet is None else KubeletSource(
        PodResourcesClient(kubelet.socket_path, 1.0), KubeletOptions(max_age_seconds=10))
    collector = Collector(
        NvmlBackend(),
        CollectorOptions(interval_seconds=1, hostname="node-a",
                         counters=parse_counters(CSV, "t.csv")),
        assignments=assignments,
        jobs=JobMapSource(jobs_dir, JobMapReader(jobs_dir, clock=lambda: LATER)))
    try:
        await collector.open_backend()
        await collector.collect_once()
        return collector.exposition.text.decode()
    finally:
        if assignments is not None:
            await assignments.close()
        collector.backend.close()


def dcgm_part(text: str) -> str:
    return text.split("# HELP gpu_enricher_", 1)[0]


@pytest.fixture
def three_gpus_one_mig(fake: FakeNvml, monkeypatch: pytest.MonkeyPatch) -> FakeNvml:
    monkeypatch.setenv("FAKE_NVML_GPU_COUNT", "3")
    monkeypatch.setenv("FAKE_NVML_MIG", "2=1:9,2:19")
    fake.reset()
    return fake


H100 = 'modelName="NVIDIA H100 80GB HBM3",Hostname="node-a"'
A100 = 'modelName="NVIDIA A100-SXM4-80GB"'
DRIVER = 'DCGM_FI_DRIVER_VERSION="580.105.08"'
GPU0 = ('gpu="0",UUID="GPU-fa4e0000-7953-256e-8f33-1343419b1a1c",pci_bus_id="00000000:18:00.0",'
        f'device="nvidia0",{H100},{DRIVER}')
GPU1 = (f'gpu="1",UUID="{NV1}",pci_bus_id="00000000:28:00.0",device="nvidia1",{H100},'
        f'{DRIVER}')
GPU2 = ('gpu="2",UUID="GPU-fa4e0002-7953-256e-8f33-1343419b1a1c",pci_bus_id="00000000:38:00.0",'
        f'device="nvidia2",{A100}')
GI1 = f'{GPU2},GPU_I_PROFILE="3g.40gb",GPU_I_ID="1",Hostname="node-a",{DRIVER}'
GI2 = f'{GPU2},GPU_I_PROFILE="1g.10gb",GPU_I_ID="2",Hostname="node-a",{DRIVER}'
NO_XID = 'err_code="0",err_msg="No Error"'

GOLDEN = f"""# HELP DCGM_FI_DEV_GPU_TEMP GPU temperature (in C).
# TYPE DCGM_FI_DEV_GPU_TEMP gauge
DCGM_FI_DEV_GPU_TEMP{{{GPU0},hpc_job="4242"}} 30
DCGM_FI_DEV_GPU_TEMP{{{GPU1},hpc_job="4243"}} 31
DCGM_FI_DEV_GPU_TEMP{{{GPU1},hpc_job="4244"}} 31
DCGM_FI_DEV_GPU_TEMP{{{GI1}}} 32
DCGM_FI_DEV_GPU_TEMP{{{GI2},hpc_job="4245"}} 32
# HELP DCGM_FI_DEV_XID_ERRORS Value of the last XID error encountered.
# TYPE DCGM_FI_DEV_XID_ERRORS gauge
DCGM_FI_DEV_XID_ERRORS{{{GPU0},{NO_XID},hpc_job="4242"}} 0
DCGM_FI_DEV_XID_ERRORS{{{GPU1},{NO_XID},hpc_job="4243"}} 0
DCGM_FI_DEV_XID_ERRORS{{{GPU1},{NO_XID},hpc_job="4244"}} 0
DCGM_FI_DEV_XID_ERRORS{{{GI1},{NO_XID}}} 0
DCGM_FI_DEV_XID_ERRORS{{{GI2},{NO_XID},hpc_job="4245"}} 0
"""


async def test_every_series_of_a_gpu_once_per_job(three_gpus_one_mig: FakeNvml,
                                                  jobs_dir: Path) -> None:
    """GPU 1's two jobs repeat its series; GPU 2 is MIG: its instance 2 has `2.2`'s job, and
    its whole-GPU file `2` covers none of its instances (hpc.go keys a MIG series by
    `<gpu>.<gpu instance>`); instance 1 has no file and no `hpc_job` label at all."""
    assert dcgm_part(await metrics_text(jobs_dir)) == GOLDEN


async def test_with_pod_labels_both_sets_sorted_together(
        three_gpus_one_mig: FakeNvml, jobs_dir: Path, kubelet: FakeKubelet) -> None:
    kubelet.set_assignments([PodAssignment("team", "pod-x", "main", "nvidia.com/gpu", (NV1,))])
    pod = 'container="main",{},namespace="team",pod="pod-x"'
    expected = (GOLDEN
                .replace(f'{GPU1},hpc_job="4243"', f'{GPU1},' + pod.format('hpc_job="4243"'))
                .replace(f'{GPU1},hpc_job="4244"', f'{GPU1},' + pod.format('hpc_job="4244"'))
                .replace(f'{GPU1},{NO_XID},hpc_job="4243"',
                         f'{GPU1},container="main",{NO_XID},hpc_job="4243",namespace="team",'
                         'pod="pod-x"')
                .replace(f'{GPU1},{NO_XID},hpc_job="4244"',
                         f'{GPU1},container="main",{NO_XID},hpc_job="4244",namespace="team",'
                         'pod="pod-x"'))
    assert expected.count('pod="pod-x"') == 4
    assert dcgm_part(await metrics_text(jobs_dir, kubelet)) == expected


async def test_the_exporters_own_families_carry_no_job(three_gpus_one_mig: FakeNvml,
                                                      jobs_dir: Path) -> None:
    text = await metrics_text(jobs_dir)
    own = text.split("# HELP gpu_enricher_", 1)[1]
    assert 'hpc_job="' not in own
    assert "gpu_enricher_hpc_job_mapping_files 4.0" in own
