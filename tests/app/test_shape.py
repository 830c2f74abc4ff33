"""dcgm-exporter's output-shape flags (`-d`, `-rbmn`, `-o`), end to end with real parts: the
command line or the environment the chart and the operator set → Config → the assembly's
collector, pynvml over the fake libnvidia-ml (two whole GPUs around a MIG GPU), the grpc.aio fake
kubelet on a unix socket, the aiohttp fake Kubernetes API's pods. Golden: the exact /metrics
text."""

import asyncio
import shutil
import tempfile
import uuid
from collections.abc import AsyncIterator, Awaitable, Callable, Iterator, Mapping, Sequence
from pathlib import Path

import pytest

from gpu_enricher.assembly import make_collector
from gpu_enricher.cli.settings import parse_config
from gpu_enricher.collector.loop import Collector
from gpu_enricher.fields.counters import parse_counters
from gpu_enricher.kubelet.client import PodResourcesClient
from gpu_enricher.kubelet.source import KubeletOptions, KubeletSource
from gpu_enricher.model import PodAssignment, PodMeta
from gpu_enricher.nvml.backend import NvmlBackend
from gpu_enricher.sim.fake_api.objects import pod_object
from gpu_enricher.sim.fake_api.server import FakeKubeApi
from gpu_enricher.sim.fake_kubelet.server import FakeKubelet
from tests.fake_nvml.build import FakeNvml

NODE = "gpu-node-1"
CSV = ("DCGM_FI_DEV_FB_USED, gauge, Framebuffer memory used (in MiB).\n"
       "DCGM_FI_DEV_GPU_TEMP, gauge, GPU temperature (in C).\n")
GPU0 = "GPU-fa4e0000-7953-256e-8f33-1343419b1a1c"  # the fake library's UUIDs
GPU1 = "GPU-fa4e0001-7953-256e-8f33-1343419b1a1c"
GPU2 = "GPU-fa4e0002-7953-256e-8f33-1343419b1a1c"
GPU3 = "GPU-fa4e0003-7953-256e-8f33-1343419b1a1c"
MODEL = "NVIDIA H100 80GB HBM3"
TRAINER_UID = str(uuid.uuid4())
SLICER_UID = str(uuid.uuid4())

Exposition = Callable[[Sequence[str], Mapping[str, str]], Awaitable[str]]


@pytest.fixture
def runtime_dir() -> Iterator[Path]:
    path = Path(tempfile.mkdtemp(prefix="gpe-"))  # short: a unix socket path is bounded
    yield path
    shutil.rmtree(path, ignore_errors=True)


def dcgm_part(text: str) -> str:
    """The DCGM families of an exposition (the exporter's own metrics follow them)."""
    lines = text.splitlines(keepends=True)
    own = next(n for n, line in enumerate(lines) if line.startswith("# HELP gpu_enricher_"))
    return "".join(lines[:own])


async def _settled(collector: Collector) -> str:
    """The DCGM families once the kubelet's two holders (and, when asked, the pods from the
    API) are in."""
    assert collector.assignments is not None
    for _ in range(200):
        await collector.collect_once()
        held = len(collector.assignments.snapshot().assignments) == 2
        pods = collector.pods is None or len(collector.pods.snapshot().pods) == 2
        if held and pods:
            await collector.collect_once()  # the pass after both answers joins them
            return dcgm_part(collector.exposition.text.decode())
        await asyncio.sleep(0.02)
    raise AssertionError("the kubelet's holders or the API's pods never came")


@pytest.fixture
async def exposition(fake: FakeNvml, runtime_dir: Path,
                     monkeypatch: pytest.MonkeyPatch) -> AsyncIterator[Exposition]:
    """`/metrics` of an exporter started with these arguments and environment: GPU 0 held by
    trainer-0, GPU 1 in MIG mode (GPU instance 1 3g.40gb, 5 1g.10gb held by slicer-0), GPUs 2
    and 3 free. DCGM's entity ids of GPU 1's instances: 5 → 7 (profile index 0), 1 → 8."""
    monkeypatch.setenv("FAKE_NVML_GPU_COUNT", "4")
    fake.reset()
    fake.set_mig(1, [(1, 9), (5, 19)])
    kubelet = FakeKubelet(runtime_dir / "kubelet.sock")
    await kubelet.start()
    api = FakeKubeApi()
    api.set_pods([pod_object(PodMeta(TRAINER_UID, "ml", "trainer-0",
                                     {"team": "vision", "pod_name": "clash"}, "Running"), NODE),
                  pod_object(PodMeta(SLICER_UID, "ml", "slicer-0", {"team": "search"},
                                     "Running"), NODE)])
    await api.start()
    collectors: list[Collector] = []

    async def start(argv: Sequence[str], env: Mapping[str, str]) -> str:
        config, warnings = parse_config(["-k", *argv], {"NODE_NAME": NODE, **env})
        assert warnings == []
        backend = NvmlBackend()
        collector = make_collector(
            config, parse_counters(CSV, "t.csv"), backend,
            KubeletSource(PodResourcesClient(kubelet.socket_path, 1.0),
                          KubeletOptions(max_age_seconds=10)),
            api_url=lambda: api.url)
        collectors.append(collector)
        for source in collector.sources:
            await source.start()
        await collector.open_backend()
        await collector.collect_once()
        assert collector.snapshot is not None
        mig5 = next(i.uuid for i in collector.snapshot.gpus[1].instances
                    if i.gpu_instance_id == 5)
        kubelet.set_assignments([
            PodAssignment("ml", "trainer-0", "pytorch", "nvidia.com/gpu", (GPU0,)),
            PodAssignment("ml", "slicer-0", "main", "nvidia.com/mig-1g.10gb", (mig5,))])
        return await _settled(collector)

    yield start
    for collector in collectors:
        for source in collector.sources:
            await source.close()
        collector.backend.close()
    await api.stop()
    await kubelet.stop()


def ident(gpu: int, uuid_label: str = "UUID", model: str = MODEL) -> str:
    return (f'gpu="{gpu}",{uuid_label}="{(GPU0, GPU1, GPU2, GPU3)[gpu]}",'
            f'pci_bus_id="00000000:{gpu + 1}8:00.0",device="nvidia{gpu}",modelName="{model}"')


def golden(*series: tuple[str, int, int]) -> str:
    """The two families, each with these (labels, FB_USED, GPU_TEMP) series in order."""
    fb = "".join(f"DCGM_FI_DEV_FB_USED{{{labels}}} {used}\n" for labels, used, _ in series)
    temp = "".join(f"DCGM_FI_DEV_GPU_TEMP{{{labels}}} {t}\n" for labels, _, t in series)
    return ("# HELP DCGM_FI_DEV_FB_USED Framebuffer memory used (in MiB).\n"
            "# TYPE DCGM_FI_DEV_FB_USED gauge\n" + fb +
            "# HELP DCGM_FI_DEV_GPU_TEMP GPU temperature (in C).\n"
            "# TYPE DCGM_FI_DEV_GPU_TEMP gauge\n" + temp)


# Both host labels by default (issue 31): dcgm-exporter 4.8.2's Hostname, 4.8.3's hostname.
HOST = f'Hostname="{NODE}",hostname="{NODE}"'
TRAINER = 'container="pytorch",namespace="ml",pod="trainer-0"'
SLICER = 'container="main",namespace="ml",pod="slicer-0"'
GI1 = 'GPU_I_PROFILE="3g.40gb",GPU_I_ID="1"'
GI5 = 'GPU_I_PROFILE="1g.10gb",GPU_I_ID="5"'
WHOLE = {0: (f"{ident(0)},{HOST},{TRAINER}", 1024, 30), 1: (f"{ident(1)},{HOST}", 2048, 31),
         2: (f"{ident(2)},{HOST}", 3072, 32), 3: (f"{ident(3)},{HOST}", 4096, 33)}
INSTANCE = {1: (f"{ident(1)},{GI1},{HOST}", 100, 31), 5: (f"{ident(1)},{GI5},{HOST},{SLICER}",
                                                          500, 31)}
DEFAULT = golden(WHOLE[0], INSTANCE[1], INSTANCE[5], WHOLE[2], WHOLE[3])
ONLY_GPUS = golden(*WHOLE.values())


async def test_default_is_the_flex_selection(exposition: Exposition) -> None:
    """`-d f`: the MIG GPU by its instances, each with its own holder."""
    assert await exposition([], {}) == DEFAULT
    assert await exposition(["-d", "f"], {}) == DEFAULT


async def test_devices_g_shows_a_mig_gpu_whole_without_its_instances_pods(
        exposition: Exposition) -> None:
    """GPU 1 as one GPU: its own values (the whole board's memory), no GPU_I_* labels, and no
    pod: slicer-0 holds an instance, not the GPU (dcgm-exporter keys the series by the GPU's
    UUID, which no pod was given)."""
    assert await exposition(["-d", "g"], {}) == ONLY_GPUS


async def test_devices_env_as_the_chart_and_operator_set_it(exposition: Exposition) -> None:
    assert await exposition([], {"DCGM_EXPORTER_DEVICES_STR": "g"}) == ONLY_GPUS


async def test_devices_i_selects_gpu_instances_by_dcgm_entity_id(exposition: Exposition) -> None:
    """GPU 1's instances are entities 7 (GI 5, 1g.10gb: the first profile) and 8 (GI 1); the
    whole GPUs are not selected."""
    assert await exposition(["-d", "i:7"], {}) == golden(INSTANCE[5])
    assert await exposition(["--devices=i:8,7"], {}) == golden(INSTANCE[1], INSTANCE[5])
    assert await exposition(["-d", "i"], {}) == golden(INSTANCE[1], INSTANCE[5])


async def test_devices_g_plus_i_shows_the_gpus_then_the_instances(
        exposition: Exposition) -> None:
    assert await exposition(["-d", "g+i"], {}) == golden(*WHOLE.values(), INSTANCE[1],
                                                          INSTANCE[5])
    assert await exposition(["-d", "g:1+i:7"], {}) == golden(WHOLE[1], INSTANCE[5])


async def test_devices_g_with_ids_and_a_range(exposition: Exposition) -> None:
    assert await exposition(["-d", "g:0,2-3"], {}) == golden(WHOLE[0], WHOLE[2], WHOLE[3])


DASHED = DEFAULT.replace(f'modelName="{MODEL}"', 'modelName="NVIDIA-H100-80GB-HBM3"')


async def test_replace_blanks_in_model_name(exposition: Exposition) -> None:
    assert DASHED != DEFAULT
    assert await exposition(["-rbmn"], {}) == DASHED


async def test_replace_blanks_env_as_the_chart_sets_it(exposition: Exposition) -> None:
    assert await exposition([], {"DCGM_EXPORTER_REPLACE_BLANKS_IN_MODEL_NAME": "true"}) == DASHED


def old_names(pod_uid: bool) -> str:
    """-o with pod labels (and UIDs): `uuid`; the label map (`team`) before the attributes,
    sorted by their 1.x names; a pod label named like one (`pod_name`) is prefixed."""
    def pod(container: str, name: str, uid: str) -> str:
        attrs = [f'container_name="{container}"', f'pod_name="{name}"', 'pod_namespace="ml"']
        return ",".join(attrs + ([f'pod_uid="{uid}"'] if pod_uid else []))

    trainer = pod("pytorch", "trainer-0", TRAINER_UID)
    slicer = pod("main", "slicer-0", SLICER_UID)
    return golden(
        (f'{ident(0, "uuid")},{HOST},pod_label_pod_name="clash",team="vision",{trainer}', 1024,
         30),
        (f'{ident(1, "uuid")},{GI1},{HOST}', 100, 31),
        (f'{ident(1, "uuid")},{GI5},{HOST},team="search",{slicer}', 500, 31),
        (f'{ident(2, "uuid")},{HOST}', 3072, 32), (f'{ident(3, "uuid")},{HOST}', 4096, 33))


async def test_old_namespace_with_pod_labels(exposition: Exposition) -> None:
    assert await exposition(["-o", "--kubernetes-enable-pod-labels",
                             "--kubernetes-enable-pod-uid"], {}) == old_names(pod_uid=True)


async def test_old_namespace_env_as_the_chart_sets_it(exposition: Exposition) -> None:
    env = {"DCGM_EXPORTER_USE_OLD_NAMESPACE": "true",
           "DCGM_EXPORTER_KUBERNETES_ENABLE_POD_LABELS": "true"}
    assert await exposition([], env) == old_names(pod_uid=False)


async def test_an_id_that_matches_nothing_selects_nothing_and_is_logged_once(
        exposition: Exposition, caplog: pytest.LogCaptureFixture) -> None:
    """dcgm-exporter refuses to start; here the others are exported and the id is named."""
    assert await exposition(["-d", "g:0,9+i:7,12"], {}) == golden(WHOLE[0], INSTANCE[5])
    said = [r.getMessage() for r in caplog.records if "-d/--devices" in r.getMessage()]
    assert said == [f"-d/--devices id '{i}' matches no GPU or MIG instance of this node: "
                    "nothing is exported for it (dcgm-exporter would not start)"
                    for i in ("g:9", "i:12")], "once each, over several passes"
