"""Which process of which pod uses a GPU, end to end with every real part this machine has:
pynvml over the fake libnvidia-ml (processes from two pods and a host process), a fake /proc
tree, the grpc.aio fake kubelet on a unix socket, the aiohttp fake Kubernetes API driven by
kubernetes_asyncio's list and watch, the collector, the HTTP server and `gpu-enricher inspect`.
"""

import asyncio
import json
import os
import shutil
import subprocess
import sys
import tempfile
import uuid
from collections.abc import AsyncIterator, Iterator
from dataclasses import dataclass
from pathlib import Path

import aiohttp
import pytest
from aiohttp import web
from aiohttp.test_utils import TestServer

from gpu_enricher.app import make_app
from gpu_enricher.attribution.podlabels import PodLabelPolicy
from gpu_enricher.attribution.podlogs import LogNameSource
from gpu_enricher.attribution.proc_source import ProcessSource
from gpu_enricher.collector.loop import Collector, CollectorOptions
from gpu_enricher.fields.counters import parse_counters
from gpu_enricher.kube.source import PodWatchOptions, PodWatchSource
from gpu_enricher.kubelet.client import PodResourcesClient
from gpu_enricher.kubelet.source import KubeletOptions, KubeletSource
from gpu_enricher.model import PodAssignment, PodMeta
from gpu_enricher.nvml.backend import NvmlBackend
from gpu_enricher.sim.fake_api.objects import pod_object
from gpu_enricher.sim.fake_api.server import FakeKubeApi
from gpu_enricher.sim.fake_kubelet.server import FakeKubelet
from tests.fake_nvml.build import FakeNvml, FakeProcess
from tests.samples import value

NODE = "gpu-node-1"
CSV = "DCGM_FI_DEV_FB_USED, gauge, Framebuffer memory used (in MiB).\n"
GPU0 = "GPU-fa4e0000-7953-256e-8f33-1343419b1a1c"  # the fake library's UUIDs
GPU1 = "GPU-fa4e0001-7953-256e-8f33-1343419b1a1c"


def cid(seed: str) -> str:
    return (uuid.uuid5(uuid.NAMESPACE_DNS, seed).hex * 2)[:64]


@dataclass(frozen=True)
class Pod:
    namespace: str
    name: str
    container: str
    uid: str
    container_id: str

    def meta(self, labels: dict[str, str] | None = None) -> PodMeta:
        return PodMeta(self.uid, self.namespace, self.name, labels or {}, "Running",
                       {self.container_id: self.container})


TRAINER = Pod("ml", "trainer-0", "pytorch", str(uuid.uuid4()), cid("trainer"))
SERVER = Pod("serve", "chat-1", "server", str(uuid.uuid4()), cid("chat"))
NEWCOMER = Pod("ml", "late-2", "worker", str(uuid.uuid4()), cid("late"))


class ProcTree:
    """A fake host /proc: `<pid>/stat`, `comm`, `cgroup`."""

    def __init__(self, root: Path) -> None:
        self.root = root

    def add(self, pid: int, name: str, pod: Pod | None, start: int = 1000) -> None:
        directory = self.root / str(pid)
        directory.mkdir(parents=True, exist_ok=True)
        (directory / "stat").write_text(f"{pid} ({name}) S 1 {pid} {pid} " + "0 " * 15
                                        + f"{start} 0 0\n")
        (directory / "comm").write_text(name + "\n")
        if pod is None:
            line = "0::/system.slice/sshd.service\n"
        else:
            line = ("0::/kubepods.slice/kubepods-burstable.slice/kubepods-burstable-pod"
                    f"{pod.uid.replace('-', '_')}.slice/cri-containerd-{pod.container_id}.scope\n")
        (directory / "cgroup").write_text(line)

    def remove(self, pid: int) -> None:
        shutil.rmtree(self.root / str(pid))


@pytest.fixture
def runtime_dir() -> Iterator[Path]:
    path = Path(tempfile.mkdtemp(prefix="gpe-"))  # short: a unix socket path is bounded
    yield path
    shutil.rmtree(path, ignore_errors=True)


@dataclass
class Node:
    fake: FakeNvml
    proc: ProcTree
    logs: Path
    kubelet: FakeKubelet
    api: FakeKubeApi
    collector: Collector

    async def text(self) -> str:
        await self.collector.collect_once()
        return self.collector.exposition.text.decode()

    def write_log_names(self, pod: Pod) -> None:
        (self.logs / "pods" / f"{pod.namespace}_{pod.name}_{pod.uid}" / pod.container).mkdir(
            parents=True, exist_ok=True)
        (self.logs / "containers").mkdir(exist_ok=True)
        (self.logs / "containers" /
         f"{pod.name}_{pod.namespace}_{pod.container}-{pod.container_id}.log").touch()


async def wait_synced(source: PodWatchSource, pods: int) -> None:
    for _ in range(200):
        snapshot = source.snapshot()
        if snapshot.synced and len(snapshot.pods) == pods:
            return
        await asyncio.sleep(0.02)
    raise AssertionError(f"pod watch not synced: {source.snapshot()}")


@pytest.fixture
async def node(fake: FakeNvml, runtime_dir: Path) -> AsyncIterator[Node]:
    fake.set_processes(0, [FakeProcess(101, 4096, sm_percent=70), FakeProcess(102, 1024,
                                                                              sm_percent=10),
                           FakeProcess(900, 256)])
    fake.set_processes(1, [FakeProcess(201, 2048, sm_percent=40)])
    proc = ProcTree(runtime_dir / "proc")
    proc.add(101, "python", TRAINER)
    proc.add(102, "tritonserver", SERVER)
    proc.add(900, "nvidia-smi", None)
    proc.add(201, "python", TRAINER)
    logs = runtime_dir / "log"
    logs.mkdir()
    kubelet = FakeKubelet(runtime_dir / "kubelet.sock")
    # The trainer holds GPU 0 and GPU 1; the server holds nothing: its process on GPU 0 is
    # a GPU it was never given.
    kubelet.set_assignments([PodAssignment(TRAINER.namespace, TRAINER.name, TRAINER.container,
                                           "nvidia.com/gpu", (GPU0, GPU1))])
    await kubelet.start()
    api = FakeKubeApi()
    api.set_pods([pod_object(TRAINER.meta({"app.kubernetes.io/name": "trainer"}), NODE),
                  pod_object(SERVER.meta(), NODE),
                  pod_object(PodMeta(str(uuid.uuid4()), "other", "elsewhere", {}, "Running",
                                     {cid("x"): "c"}), "another-node")])
    await api.start()
    pods = PodWatchSource(PodWatchOptions(NODE, host=api.url, watch_timeout_seconds=5,
                                          stall_margin_seconds=1, stale_after_seconds=0.5,
                                          backoff_initial_seconds=0.05,
                                          backoff_max_seconds=0.2))
    collector = Collector(
        NvmlBackend(),
        CollectorOptions(interval_seconds=1, hostname=NODE, counters=parse_counters(CSV, "t.csv"),
                         process_metrics=True, pod_policy=PodLabelPolicy(True, True)),
        assignments=KubeletSource(PodResourcesClient(kubelet.socket_path, 1.0),
                                  KubeletOptions(max_age_seconds=10)),
        pods=pods, logs=LogNameSource(logs), processes=ProcessSource(proc.root))
    for source in collector.sources:
        await source.start()
    await collector.open_backend()
    await wait_synced(pods, 2)
    yield Node(fake, proc, logs, kubelet, api, collector)
    for source in collector.sources:
        await source.close()
    collector.backend.close()
    await api.stop()
    await kubelet.stop()


def series(text: str, name: str) -> list[str]:
    return [line for line in text.splitlines() if line.startswith(name + "{")]


async def test_processes_get_their_pods_and_a_host_process_none(node: Node) -> None:
    text = await node.text()
    lines = series(text, "gpu_enricher_process_memory_used_bytes")
    assert len(lines) == 4, lines
    trainer = next(ln for ln in lines if 'pid="101"' in ln)
    assert trainer.startswith(f'gpu_enricher_process_memory_used_bytes{{gpu="0",UUID="{GPU0}",'
                              'pid="101",process_name="python",process_type="compute",'
                              'container="pytorch",'
                              f'namespace="ml",pod="trainer-0",pod_uid="{TRAINER.uid}"}} ')
    assert trainer.endswith(f" {4096 << 20}")
    host = next(ln for ln in lines if 'pid="900"' in ln)
    assert 'process_name="nvidia-smi"' in host
    assert "pod=" not in host and "namespace=" not in host and "container=" not in host
    assert value(text, "gpu_enricher_process_sm_utilization_ratio", gpu="0", pid="101") == \
        pytest.approx(0.7)
    # Per pod and device: the trainer on both GPUs, the server on GPU 0.
    assert value(text, "gpu_enricher_pod_memory_used_bytes", gpu="1", namespace="ml",
                 pod="trainer-0") == 2048 << 20
    # The server's process runs on a GPU the kubelet gave only to the trainer.
    flagged = series(text, "gpu_enricher_unallocated_process_info")
    assert flagged == [f'gpu_enricher_unallocated_process_info{{gpu="0",UUID="{GPU0}",'
                       'pid="102",namespace="serve",pod="chat-1",container="server"} 1']
    # The holder's DCGM series carry its UID and its (sanitised) labels, sorted.
    fb = series(text, "DCGM_FI_DEV_FB_USED")[0]
    assert (f'app_kubernetes_io_name="trainer",container="pytorch",namespace="ml",'
            f'pod="trainer-0",pod_uid="{TRAINER.uid}"}}') in fb


async def test_a_pod_deleted_through_the_watch_loses_its_labels(node: Node) -> None:
    text = await node.text()
    assert 'pod="chat-1"' in text
    node.api.delete_pod(SERVER.uid)
    await wait_synced(node.collector.pods, 1)  # type: ignore[arg-type]
    node.fake.set_processes(0, [FakeProcess(101, 4096, sm_percent=70)])
    node.proc.remove(102)
    text = await node.text()
    # Every family drops it at once but its energy account, which stays until the energy it
    # used before it left is billed: at the GPU counter's next read (docs/chargeback.md).
    assert not [ln for ln in text.splitlines() if 'pod="chat-1"' in ln
                and not ln.startswith("gpu_enricher_pod_energy_joules_total")]
    assert 'pid="102"' not in text
    assert node.collector.processes is not None
    assert 102 not in node.collector.processes.snapshot().processes


async def test_api_down_falls_back_to_the_log_directory(node: Node) -> None:
    await node.text()
    await node.api.stop()
    # A pod the API never told us about starts while it is down; the kubelet's log names know.
    node.write_log_names(NEWCOMER)
    node.proc.add(301, "python", NEWCOMER)
    node.fake.set_processes(1, [FakeProcess(201, 2048, sm_percent=40), FakeProcess(301, 512)])
    await asyncio.sleep(0.7)  # past stale_after: the API's view is no longer current
    text = await node.text()
    assert value(text, "gpu_enricher_kubernetes_synced") == 0
    newcomer = [ln for ln in series(text, "gpu_enricher_process_memory_used_bytes")
                if 'pid="301"' in ln]
    assert len(newcomer) == 1
    assert f'container="worker",namespace="ml",pod="late-2",pod_uid="{NEWCOMER.uid}"' \
        in newcomer[0]
    # Pods the API listed before it went down keep their names.
    assert 'pid="101",process_name="python",process_type="compute",container="pytorch"' in text
    await node.api.start()
    await wait_synced(node.collector.pods, 2)  # type: ignore[arg-type]


async def test_a_reused_pid_is_never_labelled_with_the_old_pod(node: Node) -> None:
    await node.text()
    # PID 102 exits and the kernel hands the number to a process of another pod.
    node.proc.remove(102)
    node.proc.add(102, "python", TRAINER, start=5000)
    text = await node.text()
    line = next(ln for ln in series(text, "gpu_enricher_process_memory_used_bytes")
            if 'pid="102"' in ln)
    assert 'pod="trainer-0"' in line and "chat-1" not in line
    assert not series(text, "gpu_enricher_unallocated_process_info"), \
        "the trainer holds GPU 0: its new process is allocated"


async def test_a_process_gone_between_nvml_and_proc_is_simply_unattributed(node: Node) -> None:
    node.proc.remove(102)  # NVML still lists it; /proc no longer has it
    text = await node.text()
    line = next(ln for ln in series(text, "gpu_enricher_process_memory_used_bytes")
            if 'pid="102"' in ln)
    assert 'process_name=""' in line and "pod=" not in line
    assert value(text, "gpu_enricher_proc_vanished_processes_total") == 1


async def test_query_api_and_inspect_answer_who_is_on_a_gpu(node: Node) -> None:
    await node.collector.collect_once()
    app = make_app(node.collector)
    app.cleanup_ctx.clear()  # the test drives the collection itself
    server = TestServer(app, host="127.0.0.1")
    await server.start_server()
    try:
        base = f"http://127.0.0.1:{server.port}"
        async with aiohttp.ClientSession() as session:
            async with session.get(f"{base}/api/v1/gpus") as response:
                assert response.status == 200
                assert response.content_type == "application/json"
                document = await response.json()
            async with session.get(f"{base}/api/v1/gpus?namespace=serve&pod=chat-1") as response:
                only = await response.json()
        gpu0 = document["gpus"][0]
        assert gpu0["uuid"] == GPU0
        assert [(h["namespace"], h["pod"], h["pod_uid"]) for h in gpu0["holders"]] == \
            [("ml", "trainer-0", TRAINER.uid)]
        by_pid = {p["pid"]: p for p in gpu0["processes"]}
        assert by_pid[101]["pod"] == "trainer-0" and by_pid[101]["allocated"] is True
        assert by_pid[102]["pod"] == "chat-1" and by_pid[102]["allocated"] is False
        assert by_pid[900]["pod"] is None and by_pid[900]["allocated"] is None
        assert [g["index"] for g in only["gpus"]] == [0], "chat-1 runs on GPU 0 only"
        # The CLI, as an operator runs it.
        # A proxy in the environment (as in many pods) is not used for this host's exporter.
        proxied = {**os.environ, "http_proxy": "http://127.0.0.1:9",
                   "HTTP_PROXY": "http://127.0.0.1:9"}
        result = await asyncio.to_thread(
            subprocess.run, [sys.executable, "-m", "gpu_enricher", "inspect", "--url", base,
                             "--namespace", "serve"], capture_output=True, text=True, timeout=30,
            env=proxied)
        assert result.returncode == 0, result.stderr
        rows = [r.split() for r in result.stdout.splitlines()]
        assert ["0", "-", "102", "tritonserver", "compute", "1024", "10%", "serve", "chat-1",
                "server", "NO"] in rows, result.stdout
    finally:
        await server.close()
    unreachable = await asyncio.to_thread(
        subprocess.run, [sys.executable, "-m", "gpu_enricher", "inspect", "--url", base],
        capture_output=True, text=True, timeout=30)
    assert unreachable.returncode == 1
    assert unreachable.stderr.count("\n") == 1
    assert unreachable.stderr.startswith(f"gpu-enricher inspect: cannot reach {base}/api/v1/gpus")
    json.dumps(document)  # the document is plain JSON all the way down


async def inspect_served(app: web.Application) -> subprocess.CompletedProcess[str]:
    """`gpu-enricher inspect` as a process, against `app` served on a real port."""
    server = TestServer(app, host="127.0.0.1")
    await server.start_server()
    try:
        return await asyncio.to_thread(
            subprocess.run, [sys.executable, "-m", "gpu_enricher", "inspect", "--url",
                             f"http://127.0.0.1:{server.port}"],
            capture_output=True, text=True, timeout=30)
    finally:
        await server.close()


async def test_inspect_says_so_when_the_answer_is_not_its_document() -> None:
    async def odd(request: web.Request) -> web.Response:
        return web.json_response({"gpus": [{"index": 0}]})  # a GPU without its fields

    app = web.Application()
    app.router.add_get("/api/v1/gpus", odd)
    result = await inspect_served(app)
    assert result.returncode == 1
    assert result.stderr.count("\n") == 1 and "cannot read (KeyError" in result.stderr
