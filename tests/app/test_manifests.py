"""Switching from dcgm-exporter changes the image and nothing else: the exporter started with
exactly the environment, arguments and files each deployment renders (the GPU Operator's
ClusterPolicy and GPUCluster, dcgm-exporter's chart 4.8.2 and 4.8.3), paths mapped into a
temporary folder (manifests.py), against the fake library, the grpc.aio fake kubelet and the
fake Kubernetes API. Each test asserts what a user would look at: the fields and the labels.

The facts of each manifest: ../shared/reference/dcgm-deployments.md.
"""

import asyncio
import shutil
import tempfile
import time
from collections.abc import AsyncIterator, Callable, Iterator
from dataclasses import dataclass
from pathlib import Path

import pytest

from gpu_enricher.model import ClaimAllocation, PodAssignment, SliceDevice
from gpu_enricher.sim.fake_api.claims import StoredClaim
from gpu_enricher.sim.fake_api.objects import config_map_object
from gpu_enricher.sim.fake_api.server import FakeKubeApi
from gpu_enricher.sim.fake_api.slices import slice_object
from gpu_enricher.sim.fake_kubelet.server import FakeKubelet
from tests.app.manifests import Deployed, Manifest
from tests.app.test_process import get
from tests.samples import value

NODE = "gpu-node-1"
GPU0 = "GPU-fa4e0000-7953-256e-8f33-1343419b1a1c"  # the fake library's UUIDs
GPU1 = "GPU-fa4e0001-7953-256e-8f33-1343419b1a1c"
TRAINER = PodAssignment("ml", "trainer", "main", "nvidia.com/gpu", (GPU0,))
DRIVER = "gpu.nvidia.com"

# The GPU Operator's ClusterPolicy DaemonSet (assets/state-dcgm-exporter/0800_daemonset.yaml as
# TransformDCGMExporter renders it): no args, this env, pod-resources mounted read-only.
OPERATOR_ENV = {
    "DCGM_EXPORTER_LISTEN": ":9400",
    "DCGM_EXPORTER_KUBERNETES": "true",
    "NODE_NAME": NODE,  # fieldRef spec.nodeName
    "DCGM_EXPORTER_COLLECTORS": "/etc/dcgm-exporter/dcp-metrics-included.csv",
}
CUSTOM_CSV = ("# The user's ConfigMap, item dcgm-metrics.csv\n"
              "DCGM_FI_DEV_GPU_TEMP, gauge, GPU temperature (in C).\n"
              "DCGM_FI_DEV_POWER_USAGE, gauge, Power draw (in W).\n")


@dataclass
class Node:
    root: Path
    nvml: dict[str, str]
    kubelet: FakeKubelet
    api: FakeKubeApi
    started: list[Deployed]

    async def deploy(self, manifest: Manifest) -> Deployed:
        exporter = Deployed(manifest, self.root, self.nvml, self.kubelet, self.api)
        self.started.append(exporter)
        await asyncio.to_thread(exporter.wait_ready)
        return exporter


@pytest.fixture
def root() -> Iterator[Path]:
    path = Path(tempfile.mkdtemp(prefix="gpe-m-"))  # short: a unix socket path is bounded
    yield path
    shutil.rmtree(path, ignore_errors=True)


@pytest.fixture
async def node(root: Path, fake_nvml_path: Path) -> AsyncIterator[Node]:
    kubelet = FakeKubelet(root / "kubelet.sock")
    kubelet.set_assignments([TRAINER])
    await kubelet.start()
    api = FakeKubeApi()
    await api.start()
    nvml = {"LD_LIBRARY_PATH": str(fake_nvml_path.parent), "FAKE_NVML_GPU_COUNT": "2"}
    made = Node(root, nvml, kubelet, api, [])
    try:
        yield made
    finally:
        for exporter in made.started:
            if exporter.proc.poll() is None:
                exporter.proc.kill()
            exporter.proc.communicate()
        await api.stop()
        await kubelet.stop()


async def scrape(exporter: Deployed, until: Callable[[str], bool] = lambda _: True,
                 within: float = 15.0) -> str:
    """/metrics once `until` holds for it."""
    deadline = time.monotonic() + within
    while True:
        assert exporter.proc.poll() is None, exporter.proc.communicate()
        status, body = await asyncio.to_thread(get, exporter.base + "/metrics")
        if status == 200 and until(body):
            return body
        if time.monotonic() > deadline:
            pytest.fail(f"not seen within {within}s; /metrics:\n{body}")
        await asyncio.sleep(0.1)


def dcgm_fields(body: str) -> set[str]:
    return {line.split("{")[0] for line in body.splitlines() if line.startswith("DCGM_FI_")}


def series(body: str, field: str, gpu: str) -> list[str]:
    return [line for line in body.splitlines()
            if line.startswith(f'{field}{{gpu="{gpu}",')]


def trainer_on_gpu0(body: str) -> bool:
    return any('pod="trainer"' in line for line in series(body, "DCGM_FI_DEV_GPU_TEMP", "0"))


async def stop(exporter: Deployed) -> str:
    """The exporter's log, once it has ended on SIGTERM."""
    code, err = await asyncio.to_thread(exporter.stop)
    assert code == 0, err
    return err


# --- the GPU Operator, ClusterPolicy ---------------------------------------------------------


async def test_operator_cluster_policy_default(node: Node) -> None:
    """dcp-metrics-included.csv is a file of dcgm-exporter's image: absent here, the bundled
    counters stand in (with one warning), and the kubelet's pods label the GPUs."""
    exporter = await node.deploy(Manifest(OPERATOR_ENV))
    body = await scrape(exporter, trainer_on_gpu0)
    assert {"DCGM_FI_DEV_GPU_UTIL", "DCGM_FI_DEV_FB_USED", "DCGM_FI_DEV_GPU_TEMP"} \
        <= dcgm_fields(body)
    (gpu0,) = series(body, "DCGM_FI_DEV_GPU_UTIL", "0")
    assert f'UUID="{GPU0}"' in gpu0 and 'Hostname="gpu-node-1"' in gpu0
    assert 'container="main",namespace="ml",pod="trainer"' in gpu0
    assert "pod=" not in series(body, "DCGM_FI_DEV_GPU_UTIL", "1")[0]
    log = await stop(exporter)
    assert log.count("dcp-metrics-included.csv is a counters file of dcgm-exporter's image") == 1


async def test_operator_custom_metrics_configmap(node: Node) -> None:
    """`dcgmExporter.config.name`: the user's ConfigMap mounted at dcgm-metrics.csv."""
    env = {**OPERATOR_ENV, "DCGM_EXPORTER_COLLECTORS": "/etc/dcgm-exporter/dcgm-metrics.csv"}
    exporter = await node.deploy(Manifest(
        env, files={"/etc/dcgm-exporter/dcgm-metrics.csv": CUSTOM_CSV}))
    body = await scrape(exporter, trainer_on_gpu0)
    assert dcgm_fields(body) == {"DCGM_FI_DEV_GPU_TEMP", "DCGM_FI_DEV_POWER_USAGE"}
    assert 'pod="trainer"' in series(body, "DCGM_FI_DEV_POWER_USAGE", "0")[0]


async def test_operator_hpc_job_mapping(node: Node) -> None:
    """`hpcJobMapping.enabled`: the variable and a read-only hostPath at that directory, where
    a Slurm prolog writes `<gpu index>` files."""
    directory = "/var/lib/dcgm-exporter/job-mapping"
    exporter = await node.deploy(Manifest(
        {**OPERATOR_ENV, "DCGM_HPC_JOB_MAPPING_DIR": directory},
        files={f"{directory}/1": "slurm-4242\nslurm-4243\n"}))
    body = await scrape(exporter, lambda b: "hpc_job=" in b and trainer_on_gpu0(b))
    gpu1 = series(body, "DCGM_FI_DEV_GPU_TEMP", "1")
    assert [('hpc_job="slurm-4242"' in line, 'hpc_job="slurm-4243"' in line)
            for line in gpu1] == [(True, False), (False, True)], gpu1
    (gpu0,) = series(body, "DCGM_FI_DEV_GPU_TEMP", "0")
    assert "hpc_job" not in gpu0 and 'pod="trainer"' in gpu0


async def test_operator_standalone_dcgm(node: Node) -> None:
    """`dcgm.enabled` (the standalone host engine): DCGM_REMOTE_HOSTENGINE_INFO is rendered;
    there is no host engine to use here: one INFO line, the same series as without it."""
    plain = await node.deploy(Manifest(OPERATOR_ENV))
    expected = await scrape(plain, trainer_on_gpu0)
    await stop(plain)
    engine = await node.deploy(Manifest({**OPERATOR_ENV,
                                         "DCGM_REMOTE_HOSTENGINE_INFO": "nvidia-dcgm:5555"}))
    body = await scrape(engine, trainer_on_gpu0)
    assert dcgm_fields(body) == dcgm_fields(expected)
    assert series(body, "DCGM_FI_DEV_GPU_TEMP", "0")[0].split("}")[0] == \
        series(expected, "DCGM_FI_DEV_GPU_TEMP", "0")[0].split("}")[0]
    log = await stop(engine)
    (line,) = [line for line in log.splitlines() if "DCGM_REMOTE_HOSTENGINE_INFO" in line]
    assert " INFO " in line and "nothing changes" in line and " ERROR " not in log, log


# --- the GPU Operator, GPUCluster (DRA) ------------------------------------------------------

EXPORTER_POD = "nvidia-dcgm-exporter-x7k2p"
# The pod's claim `admin-gpus` from the ResourceClaimTemplate nvidia-dcgm-exporter-admin
# (deviceClassName gpu.nvidia.com, allocationMode All, adminAccess true).
ADMIN_CLAIM = f"{EXPORTER_POD}-admin-gpus-9qz4c"


async def test_operator_gpu_cluster_admin_claim(node: Node) -> None:
    """The DRA stack's DaemonSet: the same env plus KUBERNETES_ENABLE_DRA=true, the token,
    ResourceSlices, and the exporter pod's admin claim of every GPU; its Role reads
    ResourceClaims in its own namespace only. "gpu-operator" sorts before the workload's "ml",
    and still the workload keeps its labels; the GPU only the admin claim holds has none."""
    devices = [SliceDevice(DRIVER, NODE, "gpu-0", GPU0, "gpu"),
               SliceDevice(DRIVER, NODE, "gpu-1", GPU1, "gpu")]
    node.api.set_slices([slice_object(NODE, DRIVER, NODE, devices)])
    node.api.claims.set_claims([
        StoredClaim("gpu-operator", ADMIN_CLAIM, ((DRIVER, NODE, "gpu-0"), (DRIVER, NODE, "gpu-1")),
                    admin_access=True),
        StoredClaim("ml", "trainer-gpu", ((DRIVER, NODE, "gpu-0"),))])
    node.api.claims.readable_namespaces = {"gpu-operator"}
    node.kubelet.set_assignments([])
    node.kubelet.set_claims([
        *(ClaimAllocation("gpu-operator", EXPORTER_POD, "nvidia-dcgm-exporter", ADMIN_CLAIM,
                          "gpu-operator", DRIVER, NODE, device) for device in ("gpu-0", "gpu-1")),
        ClaimAllocation("ml", "trainer", "main", "trainer-gpu", "ml", DRIVER, NODE, "gpu-0")])
    exporter = await node.deploy(Manifest({**OPERATOR_ENV, "KUBERNETES_ENABLE_DRA": "true"},
                                          token=True))
    body = await scrape(exporter, trainer_on_gpu0)
    (gpu0,) = series(body, "DCGM_FI_DEV_GPU_TEMP", "0")
    assert ('dra_claim_name="trainer-gpu",dra_claim_namespace="ml",dra_device_name="gpu-0",'
            f'dra_driver_name="{DRIVER}",dra_pool_name="{NODE}",namespace="ml",'
            'pod="trainer"}') in gpu0
    (gpu1,) = series(body, "DCGM_FI_DEV_GPU_TEMP", "1")
    assert "pod=" not in gpu1 and "dra_" not in gpu1
    assert EXPORTER_POD not in "".join(line for line in body.splitlines()
                                       if line.startswith("DCGM_"))
    for device in ("gpu-0", "gpu-1"):
        assert value(body, "gpu_enricher_device_allocation_info", pod=EXPORTER_POD,
                     admin_access="true", device_id=f"{NODE}/{device}") == 1
    assert value(body, "gpu_enricher_dra_claim_reads_total", result="forbidden") == 1


# --- -m: the counters from a ConfigMap, through the API ---------------------------------------

CONFIGMAP_ENV = {**OPERATOR_ENV, "DCGM_EXPORTER_CONFIGMAP_DATA": "gpu-operator:dcgm-metrics"}
"""`dcgmExporter.env` setting DCGM_EXPORTER_CONFIGMAP_DATA (the Operator then mounts the token)."""


def metrics_map(csv: str) -> dict[str, object]:
    return config_map_object("gpu-operator", "dcgm-metrics", {"metrics": csv, "other": "x"})


async def test_operator_configmap_data_is_read_and_watched(node: Node) -> None:
    """The counters come from the ConfigMap's `metrics` key, not from -f's file; an edit is
    in force without a restart (dcgm-exporter reads it once); a deletion keeps the last good
    list, refused and counted once."""
    node.api.upsert_config_map(metrics_map(CUSTOM_CSV))
    exporter = await node.deploy(Manifest({**CONFIGMAP_ENV, "GPU_ENRICHER_CONFIG_CHECK_INTERVAL":
                                           "200"}, token=True))
    body = await scrape(exporter, lambda b: trainer_on_gpu0(b) and value(
        b, "gpu_enricher_configmap_synced") == 1)
    assert dcgm_fields(body) == {"DCGM_FI_DEV_GPU_TEMP", "DCGM_FI_DEV_POWER_USAGE"}
    node.api.upsert_config_map(metrics_map(
        "DCGM_FI_DEV_SM_CLOCK, gauge, SM clock frequency (in MHz).\n"))
    body = await scrape(exporter, lambda b: dcgm_fields(b) == {"DCGM_FI_DEV_SM_CLOCK"})
    assert 'pod="trainer"' in series(body, "DCGM_FI_DEV_SM_CLOCK", "0")[0]
    node.api.upsert_config_map(metrics_map("DCGM_FI_DEV_GPU_TEMP gauge\n"))  # no commas
    await scrape(exporter, lambda b: value(
        b, "gpu_enricher_config_reload_failures_total", file="configmap") == 1)
    node.api.delete_config_map("cm-gpu-operator-dcgm-metrics")
    body = await scrape(exporter, lambda b: value(
        b, "gpu_enricher_config_reload_failures_total", file="configmap") == 2)
    assert dcgm_fields(body) == {"DCGM_FI_DEV_SM_CLOCK"}, "the last good list stays"
    assert value(body, "gpu_enricher_config_reload_success") == 0
    log = await stop(exporter)
    assert log.count("ConfigMap gpu-operator/dcgm-metrics not found") == 1, log
    assert "ConfigMap gpu-operator/dcgm-metrics key metrics:1" in log, log


async def test_operator_configmap_data_under_the_operators_role_is_polled(node: Node) -> None:
    """The Operator's Role gives configmaps `get, list`, no `watch`: the ConfigMap is still
    read and in force, listed again every 60 s instead of watched (said once, with the rule
    to add); the source stays up and synced."""
    node.api.unwatchable.add("configmaps")
    node.api.upsert_config_map(metrics_map(CUSTOM_CSV))
    exporter = await node.deploy(Manifest(CONFIGMAP_ENV, token=True))
    body = await scrape(exporter, lambda b: trainer_on_gpu0(b) and value(
        b, "gpu_enricher_collection_errors_total", source="configmap",
        reason="forbidden") == 1)  # the watch tried once, refused
    assert dcgm_fields(body) == {"DCGM_FI_DEV_GPU_TEMP", "DCGM_FI_DEV_POWER_USAGE"}
    assert value(body, "gpu_enricher_configmap_synced") == 1
    assert value(body, "gpu_enricher_source_up", source="configmap") == 1
    log = await stop(exporter)
    polled = [line for line in log.splitlines() if "forbids watching" in line]
    assert len(polled) == 1 and "listing them again every 60s instead" in polled[0], log


@pytest.mark.parametrize("stored, says", [
    (None, "-m gpu-operator:dcgm-metrics: ConfigMap gpu-operator/dcgm-metrics not found"),
    ({"other": "x"}, "has no key 'metrics' (its keys: other)"),
    ({"metrics": "DCGM_FI_DEV_GPU_TEMP gauge\n"}, "ConfigMap gpu-operator/dcgm-metrics key "
                                                  "metrics:1:"),
], ids=["no-configmap", "no-key", "bad-csv"])
async def test_operator_configmap_data_missing_at_start_exits_2(
        node: Node, stored: dict[str, str] | None, says: str) -> None:
    if stored is not None:
        node.api.upsert_config_map(config_map_object("gpu-operator", "dcgm-metrics", stored))
    exporter = Deployed(Manifest(CONFIGMAP_ENV, token=True), node.root, node.nvml, node.kubelet,
                        node.api)
    node.started.append(exporter)
    _, err = await asyncio.to_thread(exporter.proc.communicate, timeout=30)
    assert exporter.proc.returncode == 2, err
    (line,) = [line for line in err.splitlines() if line.startswith("gpu-enricher: error:")]
    assert says in line, err


# --- dcgm-exporter's Helm chart ---------------------------------------------------------------

CHART_ENV = {"DCGM_EXPORTER_KUBERNETES": "true", "DCGM_EXPORTER_LISTEN": ":9400",
             "NODE_NAME": NODE}
"""What both chart versions render (service.address `:9400`, kubernetes.enabled)."""
CHART_4_8_3_ENV = {**CHART_ENV, "DCGM_EXPORTER_WEB_READ_TIMEOUT": "10s",
                   "DCGM_EXPORTER_WEB_WRITE_TIMEOUT": "30s"}
DEFAULT_COUNTERS = "/etc/dcgm-exporter/default-counters.csv"


def charts_metrics() -> str:
    """The chart's own list (its ConfigMap key `metrics` when customMetrics is empty):
    dcgm-exporter's default-counters.csv, from ../shared/reference (the bundled list where
    that is absent, off CI)."""
    from gpu_enricher.fields.collection import default_counters_path
    from tests.reference import COUNTERS_NAME, shared_file

    path = shared_file(COUNTERS_NAME) or default_counters_path()
    return path.read_text(encoding="utf-8")


def fields_of(csv: str) -> set[str]:
    return {line.split(",")[0].strip() for line in csv.splitlines()
            if line.strip() and not line.lstrip().startswith("#")}


async def test_chart_4_8_2_default(node: Node) -> None:
    """`arguments: ["-f", "/etc/dcgm-exporter/default-counters.csv"]`, the chart's list mounted
    there by subPath."""
    metrics = charts_metrics()
    exporter = await node.deploy(Manifest(CHART_ENV, ["-f", DEFAULT_COUNTERS],
                                          {DEFAULT_COUNTERS: metrics}))
    body = await scrape(exporter, trainer_on_gpu0)
    served = dcgm_fields(body)
    assert served <= fields_of(metrics) and {"DCGM_FI_DEV_GPU_UTIL", "DCGM_FI_DEV_FB_USED",
                                             "DCGM_FI_DEV_SM_CLOCK", "DCGM_FI_DEV_XID_ERRORS"} \
        <= served, served
    log = await stop(exporter)
    assert "(named by --collectors)" in log


async def test_chart_4_8_3_default(node: Node) -> None:
    """No `-f`: dcgm-exporter's default path, where the chart mounts its list."""
    metrics = charts_metrics()
    exporter = await node.deploy(Manifest(CHART_4_8_3_ENV, files={DEFAULT_COUNTERS: metrics}))
    body = await scrape(exporter, trainer_on_gpu0)
    assert dcgm_fields(body) <= fields_of(metrics)
    assert "DCGM_FI_DEV_SM_CLOCK" in dcgm_fields(body)
    assert 'container="main",namespace="ml",pod="trainer"' in \
        series(body, "DCGM_FI_DEV_SM_CLOCK", "0")[0]
    log = await stop(exporter)
    assert ("no -f given, and dcgm-exporter's default /etc/dcgm-exporter/default-counters.csv "
            "exists") in log


async def test_chart_4_8_3_custom_metrics(node: Node) -> None:
    """`customMetrics`: the user's CSV in the same ConfigMap key, at the same path."""
    exporter = await node.deploy(Manifest(CHART_4_8_3_ENV,
                                          files={DEFAULT_COUNTERS: CUSTOM_CSV}))
    body = await scrape(exporter, trainer_on_gpu0)
    assert dcgm_fields(body) == {"DCGM_FI_DEV_GPU_TEMP", "DCGM_FI_DEV_POWER_USAGE"}


async def test_chart_4_8_3_config_enabled(node: Node) -> None:
    """`config.enabled`: DCGM_EXPORTER_CONFIG_FILE and the ConfigMap key config.yaml by
    subPath, beside the metrics list; the file's metrics and interval win over the default
    path, as no -f or -c is set."""
    config = ("version: 1\nmetrics:\n  fields:\n"
              "    - {name: DCGM_FI_DEV_SM_CLOCK, prometheusType: gauge, help: SM clock.}\n"
              "    - {name: DCGM_FI_DEV_GPU_TEMP, prometheusType: gauge, help: Temperature.}\n"
              "collection:\n  interval: 1s\n  watchGroups:\n"
              "    - {name: clocks, interval: 1m, fields: ['DCGM_FI_DEV_*_CLOCK']}\n")
    exporter = await node.deploy(Manifest(
        {**CHART_4_8_3_ENV, "DCGM_EXPORTER_CONFIG_FILE": "/etc/dcgm-exporter/config.yaml"},
        files={DEFAULT_COUNTERS: charts_metrics(), "/etc/dcgm-exporter/config.yaml": config}))
    body = await scrape(exporter, trainer_on_gpu0)
    assert dcgm_fields(body) == {"DCGM_FI_DEV_SM_CLOCK", "DCGM_FI_DEV_GPU_TEMP"}
    log = await stop(exporter)
    assert "the metrics.fields of" in log and "every 1000 ms" in log, log


async def test_chart_4_8_3_arguments(node: Node) -> None:
    """`arguments`: what users pass there, verbatim (dcgm-exporter's own flags, Go's
    single-dash spelling included)."""
    exporter = await node.deploy(Manifest(
        CHART_4_8_3_ENV, ["-c", "1000", "-rbmn", "-o", "-d", "g", "--kubernetes-gpu-id-type",
                          "uid"], files={DEFAULT_COUNTERS: CUSTOM_CSV}))
    body = await scrape(exporter, lambda b: 'pod_name="trainer"' in b)
    (gpu0,) = series(body, "DCGM_FI_DEV_GPU_TEMP", "0")
    assert f'uuid="{GPU0}"' in gpu0 and 'modelName="NVIDIA-H100-80GB-HBM3"' in gpu0, gpu0
    assert ('container_name="main",pod_name="trainer",pod_namespace="ml"' in gpu0
            or 'pod_name="trainer"' in gpu0), gpu0
    log = await stop(exporter)
    assert "every 1000 ms" in log
