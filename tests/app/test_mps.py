"""A GPU shared through MPS (issue 25), end to end with real parts: pynvml over the fake
libnvidia-ml (the MPS server in the compute list, two clients in the MPS list), a fake /proc
tree, the grpc.aio fake kubelet giving out the device plugin's replicas `<uuid>::N`, the aiohttp
fake Kubernetes API, the collector with `--kubernetes-virtual-gpus`, and `gpu-enricher inspect`.
"""

import json
import shutil
import tempfile
import uuid
from collections.abc import AsyncIterator, Iterator
from dataclasses import dataclass
from pathlib import Path

import pytest

from gpu_enricher.app import make_app
from gpu_enricher.attribution.podlabels import PodLabelPolicy
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
from tests.app.test_process_attribution import (
    Pod,
    ProcTree,
    cid,
    inspect_served,
    series,
    wait_synced,
)
from tests.fake_nvml.build import FakeNvml, FakeProcess
from tests.samples import value

NODE = "gpu-node-1"
CSV = ("DCGM_FI_DEV_FB_USED, gauge, Framebuffer memory used (in MiB).\n"
       "DCGM_FI_DEV_GPU_UTIL, gauge, GPU utilization (in %).\n")
GPU0 = "GPU-fa4e0000-7953-256e-8f33-1343419b1a1c"
MIB = 1 << 20

CHAT = Pod("inference", "chat-0", "server", str(uuid.uuid4()), cid("mps-chat"))
EMBED = Pod("inference", "embed-0", "server", str(uuid.uuid4()), cid("mps-embed"))
# The NVIDIA device plugin's MPS control daemon: it runs nvidia-cuda-mps-control, which starts
# nvidia-cuda-mps-server; it holds no GPU through the kubelet (it sees them all).
DAEMON = Pod("nvidia-device-plugin", "nvidia-device-plugin-mps-control-daemon-x7k2p",
             "mps-control-daemon-ctr", str(uuid.uuid4()), cid("mps-daemon"))
SERVER_PID, CONTROL_PID, CHAT_PID, EMBED_PID = 700, 701, 710, 711


@dataclass
class MpsNode:
    fake: FakeNvml
    proc: ProcTree
    collector: Collector

    async def text(self) -> str:
        await self.collector.collect_once()
        return self.collector.exposition.text.decode()


@pytest.fixture
def runtime_dir() -> Iterator[Path]:
    path = Path(tempfile.mkdtemp(prefix="gpe-"))  # short: a unix socket path is bounded
    yield path
    shutil.rmtree(path, ignore_errors=True)


@pytest.fixture
async def node(fake: FakeNvml, runtime_dir: Path) -> AsyncIterator[MpsNode]:
    fake.set_processes(0, [
        FakeProcess(SERVER_PID, 320, sm_percent=55),  # the server: compute list
        FakeProcess(CHAT_PID, 4096, sm_percent=35, kind="m"),  # MPS list only
        FakeProcess(EMBED_PID, 1024, sm_percent=15, kind="M"),  # MPS and compute (M+C)
    ])
    fake.set_processes(1, [])
    proc = ProcTree(runtime_dir / "proc")
    # comm holds 15 characters: both daemons read `nvidia-cuda-mps`.
    proc.add(SERVER_PID, "nvidia-cuda-mps-server"[:15], DAEMON)
    proc.add(CONTROL_PID, "nvidia-cuda-mps-control"[:15], DAEMON)
    proc.add(CHAT_PID, "tritonserver", CHAT)
    proc.add(EMBED_PID, "python3", EMBED)
    kubelet = FakeKubelet(runtime_dir / "kubelet.sock")
    kubelet.set_assignments([
        PodAssignment(p.namespace, p.name, p.container, "nvidia.com/gpu", (f"{GPU0}::{n}",))
        for n, p in enumerate((CHAT, EMBED))])
    await kubelet.start()
    api = FakeKubeApi()
    api.set_pods([pod_object(PodMeta(p.uid, p.namespace, p.name, {}, "Running",
                                     {p.container_id: p.container}), NODE)
                  for p in (CHAT, EMBED, DAEMON)])
    await api.start()
    pods = PodWatchSource(PodWatchOptions(NODE, host=api.url, watch_timeout_seconds=5,
                                          stall_margin_seconds=1, stale_after_seconds=5,
                                          backoff_initial_seconds=0.05,
                                          backoff_max_seconds=0.2))
    collector = Collector(
        NvmlBackend(),
        CollectorOptions(interval_seconds=1, hostname=NODE, counters=parse_counters(CSV, "t.csv"),
                         virtual_gpus=True, process_metrics=True,
                         pod_policy=PodLabelPolicy(False, False)),
        assignments=KubeletSource(PodResourcesClient(kubelet.socket_path, 1.0),
                                  KubeletOptions(max_age_seconds=10)),
        pods=pods, processes=ProcessSource(proc.root))
    for source in collector.sources:
        await source.start()
    await collector.open_backend()
    await wait_synced(pods, 3)
    yield MpsNode(fake, proc, collector)
    for source in collector.sources:
        await source.close()
    collector.backend.close()
    await api.stop()
    await kubelet.stop()


async def test_mps_clients_are_their_pods_and_the_server_is_nobodys_use(node: MpsNode) -> None:
    text = await node.text()
    processes = series(text, "gpu_enricher_process_memory_used_bytes")
    assert len(processes) == 3, processes
    chat = next(ln for ln in processes if f'pid="{CHAT_PID}"' in ln)
    assert 'process_name="tritonserver",process_type="mps",container="server",' \
           'namespace="inference",pod="chat-0"' in chat and chat.endswith(f" {4096 * MIB}")
    # The server's own series stays (what NVML reports for it), with its daemon pod, typed so
    # that a sum over a pod's processes can leave it out.
    server = next(ln for ln in processes if f'pid="{SERVER_PID}"' in ln)
    assert 'process_name="nvidia-cuda-mps",process_type="mps-server"' in server
    assert f'pod="{DAEMON.name}"' in server
    assert value(text, "gpu_enricher_process_sm_utilization_ratio", pid=str(EMBED_PID)) == \
        pytest.approx(0.15)
    # Per pod: the clients' figures; the daemon's pod uses nothing, and is not flagged for
    # running a process on GPUs it was never given.
    pod_memory = series(text, "gpu_enricher_pod_memory_used_bytes")
    assert len(pod_memory) == 2 and not any(DAEMON.name in ln for ln in pod_memory)
    assert value(text, "gpu_enricher_pod_memory_used_bytes", pod="chat-0") == 4096 * MIB
    assert value(text, "gpu_enricher_pod_memory_used_bytes", pod="embed-0") == 1024 * MIB
    assert value(text, "gpu_enricher_pod_sm_utilization_ratio", pod="chat-0") == \
        pytest.approx(0.35)
    assert not any(DAEMON.name in ln
                   for ln in series(text, "gpu_enricher_pod_sm_utilization_ratio"))
    assert series(text, "gpu_enricher_unallocated_process_info") == []
    # --kubernetes-virtual-gpus: the shared GPU's series per replica holder, split by the
    # clients' own memory and SM (the server's 320 MiB and 55 % are nobody's).
    assert value(text, "DCGM_FI_DEV_FB_USED", pod="chat-0") == 4096
    assert value(text, "DCGM_FI_DEV_FB_USED", pod="embed-0") == 1024
    assert value(text, "DCGM_FI_DEV_GPU_UTIL", pod="chat-0") == 35
    assert value(text, "DCGM_FI_DEV_GPU_UTIL", pod="embed-0") == 15
    assert value(text, "DCGM_FI_DEV_FB_USED", pod=DAEMON.name) is None


async def test_query_api_and_inspect_show_the_mps_types(node: MpsNode) -> None:
    await node.collector.collect_once()
    document = json.loads(node.collector.document_body)
    gpu0 = document["gpus"][0]
    by_pid = {p["pid"]: p for p in gpu0["processes"]}
    assert {pid: (p["type"], p["pod"], p["allocated"]) for pid, p in by_pid.items()} == {
        CHAT_PID: ("mps", "chat-0", True),
        EMBED_PID: ("mps", "embed-0", True),
        SERVER_PID: ("mps-server", DAEMON.name, None),
    }
    assert [h["device_id"] for h in gpu0["holders"]] == [f"{GPU0}::0", f"{GPU0}::1"]
    app = make_app(node.collector)
    app.cleanup_ctx.clear()  # the test drives the collection itself
    result = await inspect_served(app)
    assert result.returncode == 0, result.stderr
    rows = [r.split() for r in result.stdout.splitlines()]
    assert ["0", "-", str(SERVER_PID), "nvidia-cuda-mps", "mps-server", "320", "55%",
            DAEMON.namespace, DAEMON.name, DAEMON.container, "-"] in rows, result.stdout
    assert ["0", "-", str(CHAT_PID), "tritonserver", "mps", "4096", "35%", "inference",
            "chat-0", "server", "yes"] in rows, result.stdout


async def test_a_server_not_found_in_proc_is_reported_as_nvml_lists_it(node: MpsNode) -> None:
    """Without /proc the server cannot be told from a compute process: it stays `compute`,
    unattributed (no pod), so it is still in no pod's sums."""
    node.proc.remove(SERVER_PID)
    text = await node.text()
    server = next(ln for ln in series(text, "gpu_enricher_process_memory_used_bytes")
                  if f'pid="{SERVER_PID}"' in ln)
    assert 'process_name="",process_type="compute"' in server and "pod=" not in server
    assert value(text, "DCGM_FI_DEV_FB_USED", pod="chat-0") == 4096


async def test_unsampled_mps_clients_keep_the_gpus_utilisation(node: MpsNode) -> None:
    """As a real H200 answers (docs/real-gpu.md): NVML samples the MPS server only. The
    clients' memory is still theirs, but no pod gets an SM figure it was never measured to
    have: no pod SM series, and the virtual-GPU series keep the GPU's own utilisation rather
    than a 0 that would show a busy GPU idle."""
    node.fake.set_processes(0, [
        FakeProcess(SERVER_PID, 66, sm_percent=100),
        FakeProcess(CHAT_PID, 3014, kind="M"),
        FakeProcess(EMBED_PID, 2758, kind="M"),
    ])
    text = await node.text()
    assert node.collector.snapshot is not None
    gpu_util = node.collector.snapshot.gpus[0].values["DCGM_FI_DEV_GPU_UTIL"]
    assert value(text, "DCGM_FI_DEV_FB_USED", pod="chat-0") == 3014
    assert value(text, "DCGM_FI_DEV_FB_USED", pod="embed-0") == 2758
    assert value(text, "DCGM_FI_DEV_GPU_UTIL", pod="chat-0") == gpu_util
    assert value(text, "DCGM_FI_DEV_GPU_UTIL", pod="embed-0") == gpu_util
    assert series(text, "gpu_enricher_pod_sm_utilization_ratio") == []
    assert value(text, "gpu_enricher_process_sm_utilization_ratio", pid=str(SERVER_PID)) == 1.0
