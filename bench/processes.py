"""Per-process attribution's cost: CPU per pass, exporter memory, and the pod watch's CPU.

The node: the fake NVML library with 8 GPUs shared by time-slicing, 110 pods (the kubelet's
default max-pods) in a fake kubelet and a fake Kubernetes API, every container with a runtime
ID; 50 pods hold one replica of a GPU (`GPU-<uuid>::<n>`) and run two GPU processes each (100,
12-14 per GPU, with SM samples), plus two host processes; a fake /proc tree with their `stat`,
`comm` and `cgroup` (containerd, systemd driver, cgroup v2), and the kubelet's log names
(/var/log/pods, /var/log/containers) of every pod. Default counters. Three parts (`--parts`):

  pass    in-process, `time.process_time()` (CPU of every thread of this process: the /proc
          and log reads run in a worker thread) per collection pass, median of `--cycles`:
          with process metrics on, ProcessSource.refresh (warm cache), LogNameSource.refresh,
          PodWatchSource.refresh (synced with 110 pods from the fake API, in-process), and
          Collector._render (the join `cycle.compose` with process families, self-metrics and
          the render); with them off (the baseline, `-k` alone) Collector._render with no pod,
          log or process source. The difference is the process part. Also the join alone
          (`compose`, thread_time) and the cold-cache /proc read. Target: <= 10 ms per pass.
  rss     `python -m gpu_enricher -c 1000 -k` against the fake kubelet, without (baseline: no
          Kubernetes client) and with `--process-metrics` (the pod watch through
          kubernetes_asyncio, `--kubeconfig` pointing at the fake API on 127.0.0.1, the fake
          /proc and log root); VmRSS once synced (gpu_enricher_kubernetes_synced 1, 110 pods,
          102 process series) and after `--scrapes` gzip scrapes, one a second. Target:
          <= 110 MiB with process metrics.
  churn   in that exporter (the last `--process-metrics` run of `rss`): its CPU (utime+stime)
          over `--churn-seconds` windows while the fake API modifies one pod's labels every
          second (a MODIFIED event of the watch), against equal windows without churn,
          `--churn-rounds` alternating pairs; CPU % of one core, paired difference.

The fake kubelet and the fake API run in a helper process (this script, `--serve-fakes`);
by default the exporter is pinned to CPU 1 and the helper and this script to CPU 0.
See bench/README.md.
"""

from __future__ import annotations

import argparse
import asyncio
import hashlib
import importlib
import json
import os
import re
import shlex
import shutil
import subprocess
import sys
import tempfile
import time
import uuid
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from _common import (
    DEFAULT_BUILD_DIR,
    PYTHON,
    ROOT,
    Server,
    build_fake_nvml,
    exporter_argv,
    fake_env,
    free_port,
    http_get,
    median,
    proc_cpu_seconds,
    proc_status_kib,
    set_plan,
)

from gpu_enricher.model import AllocatableDevices, PodAssignment, PodMeta

NODE = "gpu-node-bench"
GPUS = 8
PODS = 110
GPU_PODS = 50
PROCS_PER_POD = 2
REPLICAS = 8  # time-slicing replicas per GPU the device plugin advertises
HOST_PROCESSES = ((900, "nvidia-smi", 0, 64, "c"), (901, "Xorg", 1, 32, "g"))
EXPECTED_PROCESSES = GPU_PODS * PROCS_PER_POD + len(HOST_PROCESSES)
BOOT_TICKS = 5_000_000
CHURN_LABEL = "bench.gpu-enricher.io/revision"
TARGET_PASS_MS = 10.0
TARGET_RSS_MIB = 110.0
_NS = uuid.UUID("6f1b2c1e-3a43-4c55-9d55-0b5e1f3e2a10")

# namespace, workload, main container, process name, sidecar
_GPU_WORKLOADS = (
    ("inference", "vllm-llama-3-8b", "vllm", "python3", "istio-proxy"),
    ("inference", "triton-resnet50", "triton", "tritonserver", "istio-proxy"),
    ("ml-training", "bert-finetune", "trainer", "python", None),
    ("research", "jupyter-gpu", "notebook", "python", None),
    ("ml-platform", "embedding-batch", "worker", "python", "metrics-agent"),
)
# namespace, workload, containers: the pods without GPUs
_OTHER_PODS = (
    ("kube-system", "kube-proxy", ("kube-proxy",)),
    ("kube-system", "aws-node", ("aws-node", "aws-eks-nodeagent")),
    ("kube-system", "ebs-csi-node", ("ebs-plugin", "node-driver-registrar", "liveness-probe")),
    ("monitoring", "node-exporter", ("node-exporter", "kube-rbac-proxy")),
    ("monitoring", "gpu-enricher", ("exporter",)),
    ("logging", "fluent-bit", ("fluent-bit",)),
    ("gpu-operator", "nvidia-device-plugin", ("nvidia-device-plugin", "config-manager")),
    ("data", "feature-store", ("server", "istio-proxy")),
    ("web", "api-gateway", ("gateway", "istio-proxy", "otel-collector")),
    ("batch", "report-job", ("job",)),
)
_ALPHABET = "bcdfghjklmnpqrstvwxz2456789"


def gpu_uuid(index: int) -> str:
    return f"GPU-fa4e{index:04x}-7953-256e-8f33-1343419b1a1c"  # the fake library's UUIDs


# --- the node ------------------------------------------------------------------------------

@dataclass(frozen=True)
class BenchPod:
    namespace: str
    name: str
    uid: str
    containers: tuple[tuple[str, str], ...]  # (name, 64-hex runtime ID)
    labels: dict[str, str]
    device: str | None = None  # the GPU replica its first container holds

    def meta(self, labels: dict[str, str] | None = None) -> PodMeta:
        return PodMeta(self.uid, self.namespace, self.name,
                       self.labels if labels is None else labels, "Running",
                       {cid: name for name, cid in self.containers})


@dataclass(frozen=True)
class BenchProcess:
    pid: int
    name: str
    gpu: int
    used_mib: int
    sm: int | None
    mem: int | None
    kind: str
    pod: BenchPod | None


@dataclass
class BenchNode:
    pods: list[BenchPod] = field(default_factory=list)
    processes: list[BenchProcess] = field(default_factory=list)

    def assignments(self) -> list[PodAssignment]:
        result = []
        for pod in self.pods:
            for i, (container, _) in enumerate(pod.containers):
                if i == 0 and pod.device is not None:
                    result.append(PodAssignment(pod.namespace, pod.name, container,
                                                "nvidia.com/gpu", (pod.device,)))
                else:
                    result.append(PodAssignment(pod.namespace, pod.name, container, "", ()))
        return result

    def allocatable(self) -> list[AllocatableDevices]:
        return [AllocatableDevices("nvidia.com/gpu", tuple(
            f"{gpu_uuid(g)}::{r}" for g in range(GPUS) for r in range(REPLICAS)))]

    def nvml_spec(self) -> str:
        """FAKE_NVML_PROCESSES: every GPU listed, `PID:MIB::SM:MEM:KIND`."""
        per_gpu: list[list[str]] = [[] for _ in range(GPUS)]
        for p in self.processes:
            sm = "" if p.sm is None else str(p.sm)
            mem = "" if p.mem is None else str(p.mem)
            per_gpu[p.gpu].append(f"{p.pid}:{p.used_mib}::{sm}:{mem}:{p.kind}")
        return ";".join(f"{g}={','.join(procs)}" for g, procs in enumerate(per_gpu))


def _suffix(n: int) -> str:
    chars = []
    for _ in range(5):
        n, r = divmod(n, len(_ALPHABET))
        chars.append(_ALPHABET[r])
    return "".join(chars)


def _pod(namespace: str, workload: str, n: int, containers: Sequence[str],
         device: str | None) -> BenchPod:
    rs = hashlib.sha256(workload.encode()).hexdigest()[:10]
    name = f"{workload}-{rs}-{_suffix(n * 7919 + 13)}"
    ids = tuple((c, hashlib.sha256(f"ctr:{namespace}/{name}/{c}".encode()).hexdigest())
                for c in containers)
    labels = {"app.kubernetes.io/name": workload, "pod-template-hash": rs,
              "app.kubernetes.io/part-of": namespace}
    return BenchPod(namespace, name, str(uuid.uuid5(_NS, f"{namespace}/{name}")), ids, labels,
                    device)


def build_node(pods: int = PODS, gpu_pods: int = GPU_PODS) -> BenchNode:
    """Deterministic: the helper process and this one build the same node."""
    node = BenchNode()
    for k in range(gpu_pods):
        namespace, workload, main, proc_name, sidecar = _GPU_WORKLOADS[k % len(_GPU_WORKLOADS)]
        gpu = k % GPUS
        containers: tuple[str, ...] = (main,) if sidecar is None else (main, sidecar)
        pod = _pod(namespace, workload, k, containers, f"{gpu_uuid(gpu)}::{k // GPUS}")
        node.pods.append(pod)
        for j in range(PROCS_PER_POD):
            pid = 10_000 + 37 * k + j
            sm = (k * 7 + j * 13) % 90 + 5
            node.processes.append(BenchProcess(pid, proc_name, gpu, 512 * (1 + (k + j) % 8), sm,
                                               sm // 2, "c", pod))
    k = 0
    while len(node.pods) < pods:
        namespace, workload, others = _OTHER_PODS[k % len(_OTHER_PODS)]
        node.pods.append(_pod(namespace, workload, gpu_pods + k, others, None))
        k += 1
    for pid, name, gpu, mib, kind in HOST_PROCESSES:
        node.processes.append(BenchProcess(pid, name, gpu, mib, None, None, kind, None))
    return node


def pod_json(pod: BenchPod, pad_bytes: int, labels: dict[str, str] | None = None,
             ) -> dict[str, Any]:
    """The API server's object, padded with a last-applied-configuration annotation to about
    `pad_bytes` of JSON (real pods are several KiB: managed fields, env, probes, volumes)."""
    from gpu_enricher.sim.fake_api.objects import pod_object

    obj = pod_object(pod.meta(labels), NODE)
    size = len(json.dumps(obj))
    if pad_bytes > size:
        filler = {"spec": {"containers": [{"name": c, "image": f"registry.example/{c}:1.0",
                                           "env": [{"name": f"VAR_{i}", "value": "x" * 24}
                                                   for i in range(40)]}
                                          for c, _ in pod.containers]}}
        text = json.dumps(filler)
        while len(text) < pad_bytes - size:
            text += text
        obj["metadata"]["annotations"] = {
            "kubectl.kubernetes.io/last-applied-configuration": text[:pad_bytes - size]}
    return obj


def write_proc_tree(node: BenchNode, root: Path) -> None:
    """`<pid>/stat` (52 fields), `comm`, `cgroup` for every GPU process."""
    for p in node.processes:
        directory = root / str(p.pid)
        directory.mkdir(parents=True, exist_ok=True)
        start = BOOT_TICKS + p.pid
        fields = ["S", "1", str(p.pid), str(p.pid), "0", "-1", "4194560", "51234", "0", "12",
                  "0", "73410", "5120", "0", "0", "20", "0", "24", "0", str(start),
                  "48318382080", "2621440", "18446744073709551615", *["0"] * 27]
        (directory / "stat").write_text(f"{p.pid} ({p.name}) {' '.join(fields)}\n")
        (directory / "comm").write_text(p.name + "\n")
        if p.pod is None:
            line = "0::/system.slice/nvidia-persistenced.service\n"
        else:
            cid = p.pod.containers[0][1]
            line = ("0::/kubepods.slice/kubepods-burstable.slice/kubepods-burstable-pod"
                    f"{p.pod.uid.replace('-', '_')}.slice/cri-containerd-{cid}.scope\n")
        (directory / "cgroup").write_text(line)


def write_log_root(node: BenchNode, root: Path) -> None:
    """/var/log/pods/<ns>_<pod>_<uid>/<container>/0.log and /var/log/containers/*.log."""
    (root / "containers").mkdir(parents=True, exist_ok=True)
    for pod in node.pods:
        for container, cid in pod.containers:
            directory = root / "pods" / f"{pod.namespace}_{pod.name}_{pod.uid}" / container
            directory.mkdir(parents=True, exist_ok=True)
            (directory / "0.log").touch()
            (root / "containers" / f"{pod.name}_{pod.namespace}_{container}-{cid}.log").touch()


def write_kubeconfig(path: Path, url: str) -> None:
    path.write_text(f"""apiVersion: v1
kind: Config
clusters:
- name: bench
  cluster:
    server: {url}
users:
- name: bench
  user: {{}}
contexts:
- name: bench
  context:
    cluster: bench
    user: bench
current-context: bench
""")


# --- the helper process: fake kubelet + fake API, churn on command --------------------------

async def serve_fakes(directory: Path, pad_bytes: int) -> None:
    """Commands on stdin, one per line: `churn RATE` (events/s), `stop` (answers
    `stopped EVENTS`), `quit` or EOF."""
    from gpu_enricher.sim.fake_api.server import FakeKubeApi
    from gpu_enricher.sim.fake_kubelet.server import FakeKubelet

    node = build_node()
    kubelet = FakeKubelet(directory / "kubelet.sock")
    kubelet.set_assignments(node.assignments())
    kubelet.set_allocatable(node.allocatable())
    await kubelet.start()
    api = FakeKubeApi()
    api.set_pods(pod_json(p, pad_bytes) for p in node.pods)
    await api.start()
    print(f"ready {api.url} {kubelet.socket_path}", flush=True)
    events = 0

    async def churn(rate: float) -> None:
        nonlocal events
        t0 = time.monotonic()
        n = 0
        while True:  # at (n + 1/2) / rate: a window of W s holds W * rate events
            await asyncio.sleep(max(0.0, t0 + (n + 0.5) / rate - time.monotonic()))
            pod = node.pods[events % len(node.pods)]
            api.upsert_pod(pod_json(pod, pad_bytes, {**pod.labels, CHURN_LABEL: str(events)}))
            events += 1
            n += 1

    task: asyncio.Task[None] | None = None
    before = 0
    try:
        while True:
            words = (await asyncio.to_thread(sys.stdin.readline)).split()
            if not words or words[0] == "quit":
                break
            if words[0] == "churn" and task is None:
                before = events
                task = asyncio.create_task(churn(float(words[1])))
                print("churning", flush=True)
            elif words[0] == "stop" and task is not None:
                task.cancel()
                task = None
                print(f"stopped {events - before} watches={api.open_watches}", flush=True)
    finally:
        if task is not None:
            task.cancel()
        await api.stop()
        await kubelet.stop(grace=0.5)


class Fakes:
    def __init__(self, directory: Path, pad_bytes: int, cpus: set[int] | None) -> None:
        def pin() -> None:
            if cpus:
                os.sched_setaffinity(0, cpus)

        self.proc = subprocess.Popen(
            [PYTHON, __file__, "--serve-fakes", str(directory), "--pod-bytes", str(pad_bytes)],
            stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True, preexec_fn=pin,
            env={**os.environ, "PYTHONUNBUFFERED": "1"})
        words = self._line().split()
        if not words or words[0] != "ready":
            raise RuntimeError(f"fakes did not start: {words}")
        self.url, self.socket = words[1], Path(words[2])

    def _line(self) -> str:
        assert self.proc.stdout is not None
        return self.proc.stdout.readline()

    def command(self, line: str) -> str:
        assert self.proc.stdin is not None
        self.proc.stdin.write(line + "\n")
        self.proc.stdin.flush()
        return self._line().strip()

    def close(self) -> None:
        assert self.proc.stdin is not None
        self.proc.stdin.close()
        try:
            self.proc.wait(timeout=15)
        except subprocess.TimeoutExpired:
            self.proc.kill()
            self.proc.wait()


# --- part 1: CPU of one pass, in-process ----------------------------------------------------

@dataclass
class PassTimes:
    proc: list[float] = field(default_factory=list)
    logs: list[float] = field(default_factory=list)
    pods: list[float] = field(default_factory=list)
    render_on: list[float] = field(default_factory=list)
    render_off: list[float] = field(default_factory=list)
    compose_on: list[float] = field(default_factory=list)
    compose_off: list[float] = field(default_factory=list)
    total_on: list[float] = field(default_factory=list)
    diff: list[float] = field(default_factory=list)
    cold_read: list[float] = field(default_factory=list)
    warm_read: list[float] = field(default_factory=list)
    series_on: int = 0
    series_off: int = 0
    process_series: int = 0
    attributed: int = 0
    bytes_on: int = 0
    bytes_off: int = 0


class StaticAssignments:
    """The kubelet's answer, fixed (the same in both variants; its `List` is not measured)."""

    name = "kubelet"
    after_gpus = False

    def __init__(self, node: BenchNode) -> None:
        from gpu_enricher.model import AssignmentSnapshot

        self._snapshot = AssignmentSnapshot(tuple(node.assignments()), 1.0, True,
                                            tuple(node.allocatable()), "v1")

    async def start(self) -> None:
        pass

    async def refresh(self, gpus: object) -> None:
        pass

    def snapshot(self) -> Any:
        return self._snapshot

    def health(self) -> Any:
        from gpu_enricher.model import SourceHealth

        return SourceHealth(True, 1, {}, 0.002, time.time())

    def families(self) -> list[Any]:
        return []

    async def close(self) -> None:
        pass


def _series(text: bytes) -> int:
    return sum(1 for line in text.splitlines() if line and not line.startswith(b"#"))


async def measure_pass(fake: Any, node: BenchNode, tmp: Path, cycles: int, warmup: int,
                       cold_reads: int, pad_bytes: int) -> PassTimes:
    from gpu_enricher.attribution.podlogs import LogNameSource
    from gpu_enricher.attribution.proc_source import ProcessSource, gpu_pids
    from gpu_enricher.attribution.procfs import ProcReader
    from gpu_enricher.collector.cycle import compose
    from gpu_enricher.collector.loop import Collector, CollectorOptions
    from gpu_enricher.fields.collection import default_counters_path
    from gpu_enricher.fields.counters import load_counters, plan_counters
    from gpu_enricher.kube.source import PodWatchOptions, PodWatchSource
    from gpu_enricher.nvml.backend import NvmlBackend
    from gpu_enricher.sim.fake_api.server import FakeKubeApi

    os.environ["FAKE_NVML_GPU_COUNT"] = str(GPUS)
    os.environ["FAKE_NVML_PROCESSES"] = node.nvml_spec()
    os.environ.pop("FAKE_NVML_MIG", None)
    fake.reset()
    proc_root, log_root = tmp / "proc", tmp / "log"
    api = FakeKubeApi()
    api.set_pods(pod_json(p, pad_bytes) for p in node.pods)
    await api.start()
    pods = PodWatchSource(PodWatchOptions(NODE, host=api.url))
    backend = NvmlBackend()
    backend.open()
    try:
        await pods.start()
        for _ in range(1000):
            if pods.snapshot().synced and len(pods.snapshot().pods) == len(node.pods):
                break
            await asyncio.sleep(0.01)
        else:
            raise RuntimeError(f"pod watch not synced: {len(pods.snapshot().pods)} pods")
        counters = load_counters(default_counters_path())
        plan, _ = plan_counters(counters, backend.deliverable_fields(), backend.name)
        kubelet = StaticAssignments(node)
        procs, logs = ProcessSource(proc_root), LogNameSource(log_root)
        on = Collector(backend, CollectorOptions(1.0, NODE, counters, process_metrics=True),
                       assignments=kubelet, pods=pods, logs=logs, processes=procs)
        off = Collector(backend, CollectorOptions(1.0, NODE, counters), assignments=kubelet)
        for c in (on, off):
            set_plan(c, plan)
            c._session.opened = True
        clock, tclock = time.process_time, time.thread_time
        t = PassTimes()
        for i in range(warmup + cycles):
            snapshot = backend.sample(plan.sampled_fields)  # not measured: the same either way
            for c in (on, off):
                c.snapshot = snapshot
                c._session.collections += 1
                c._session.last_success = time.time()
                c._session.last_duration = 0.005

            async def run_on(snapshot: Any = snapshot) -> tuple[float, float, float, float]:
                p0 = clock()
                await procs.refresh(snapshot)
                p1 = clock()
                await logs.refresh(snapshot)
                p2 = clock()
                await pods.refresh(snapshot)
                p3 = clock()
                on.exposition = on._render()
                p4 = clock()
                return p1 - p0, p2 - p1, p3 - p2, p4 - p3

            def run_off() -> float:
                p0 = clock()
                off.exposition = off._render()
                return clock() - p0

            if i % 2:  # alternate the order
                ms_off = run_off()
                ms_on = await run_on()
            else:
                ms_on = await run_on()
                ms_off = run_off()
            t0 = tclock()
            compose(on._inputs(), on._join)
            t1 = tclock()
            compose(off._inputs(), off._join)
            t2 = tclock()
            if i < warmup:
                continue
            t.proc.append(ms_on[0] * 1e3)
            t.logs.append(ms_on[1] * 1e3)
            t.pods.append(ms_on[2] * 1e3)
            t.render_on.append(ms_on[3] * 1e3)
            t.render_off.append(ms_off * 1e3)
            t.total_on.append(sum(ms_on) * 1e3)
            t.diff.append((sum(ms_on) - ms_off) * 1e3)
            t.compose_on.append((t1 - t0) * 1e3)
            t.compose_off.append((t2 - t1) * 1e3)
        pids = gpu_pids(snapshot)
        warm = ProcReader(proc_root)
        warm.read(pids)
        for _ in range(cold_reads):
            reader = ProcReader(proc_root)  # an empty cache: every comm and cgroup read
            t0 = tclock()
            reader.read(pids)
            t1 = tclock()
            warm.read(pids)
            t2 = tclock()
            t.cold_read.append((t1 - t0) * 1e3)
            t.warm_read.append((t2 - t1) * 1e3)
        assert len(warm.read(pids).processes) == len(node.processes)
        text_on, text_off = on.exposition.text, off.exposition.text
        t.series_on, t.series_off = _series(text_on), _series(text_off)
        t.bytes_on, t.bytes_off = len(text_on), len(text_off)
        lines = [ln for ln in text_on.splitlines()
                 if ln.startswith(b"gpu_enricher_process_memory_used_bytes{")]
        t.process_series = len(lines)
        t.attributed = sum(1 for ln in lines if b',pod="' in ln)
        return t
    finally:
        await pods.close()
        await api.stop()
        backend.close()


# --- parts 2 and 3: the exporter process ----------------------------------------------------

_SYNCED = re.compile(rb"^gpu_enricher_kubernetes_synced (\S+)$", re.M)
_PODS = re.compile(rb"^gpu_enricher_kubernetes_pods (\S+)$", re.M)
_LISTS = re.compile(rb"^gpu_enricher_kubernetes_lists_total (\S+)$", re.M)
_RESTARTS = re.compile(rb'^gpu_enricher_kubernetes_watch_restarts_total\{reason="(\w+)"\} (\S+)$',
                       re.M)
_EVENT_AGE = re.compile(rb"^gpu_enricher_kubernetes_last_event_age_seconds (\S+)$", re.M)


def _gauge(pattern: re.Pattern[bytes], text: bytes) -> float | None:
    m = pattern.search(text)
    return round(float(m[1]), 3) if m else None


def _process_lines(text: bytes) -> list[bytes]:
    return [ln for ln in text.splitlines()
            if ln.startswith(b"gpu_enricher_process_memory_used_bytes{")]


@dataclass
class ExporterRun:
    name: str
    ready_s: float
    rss_ready: float
    rss: float
    hwm: float
    scrape_cpu_pct: float
    quiet_pct: list[float] = field(default_factory=list)
    churn_pct: list[float] = field(default_factory=list)
    churn_events: list[int] = field(default_factory=list)
    rss_end: float | None = None
    hwm_end: float | None = None
    watch_note: str = ""


def metrics(server: Server) -> bytes:
    status, _, body = http_get(server.base + "/metrics")
    assert status == 200, status
    return body


def wait_synced(server: Server, timeout: float = 60.0) -> float:
    """Seconds from spawn until the pod watch is synced with every pod and every GPU process
    has its series, the pod ones with their pod."""
    deadline = time.monotonic() + timeout
    text = b""
    while time.monotonic() < deadline:
        text = metrics(server)
        lines = _process_lines(text)
        if (_gauge(_SYNCED, text) == 1 and _gauge(_PODS, text) == PODS
                and len(lines) == EXPECTED_PROCESSES
                and sum(1 for ln in lines if b',pod="' in ln) == GPU_PODS * PROCS_PER_POD):
            return time.monotonic() - server.spawned_at
        time.sleep(0.1)
    raise RuntimeError(f"{server.name}: never synced: synced={_gauge(_SYNCED, text)} "
                       f"pods={_gauge(_PODS, text)} process series={len(_process_lines(text))}")


def cpu_window(pid: int, seconds: float) -> float:
    """% of one core over `seconds` of sleeping here."""
    c0, t0 = proc_cpu_seconds(pid), time.monotonic()
    time.sleep(seconds)
    return 100 * (proc_cpu_seconds(pid) - c0) / (time.monotonic() - t0)


def run_exporter(server: Server, process_metrics: bool, scrapes: int, fakes: Fakes | None,
                 churn_rounds: int, churn_seconds: float, churn_rate: float) -> ExporterRun:
    server.start()
    try:
        ready = server.wait_status("/ready", timeout=60)
        if process_metrics:
            ready = wait_synced(server)
        pid = server.pid
        rss_ready = proc_status_kib(pid, "VmRSS") / 1024
        c0, t0 = proc_cpu_seconds(pid), time.monotonic()
        for i in range(scrapes):
            status, _, _ = http_get(server.base + "/metrics", {"Accept-Encoding": "gzip"})
            assert status == 200
            time.sleep(max(0.0, t0 + i + 1 - time.monotonic()))
        scrape_pct = 100 * (proc_cpu_seconds(pid) - c0) / (time.monotonic() - t0)
        run = ExporterRun(server.name, ready, rss_ready, proc_status_kib(pid, "VmRSS") / 1024,
                          proc_status_kib(pid, "VmHWM") / 1024, scrape_pct)
        if fakes is None:
            return run
        before = metrics(server)
        for r in range(churn_rounds):
            for churning in ((False, True) if r % 2 == 0 else (True, False)):
                print(f"  round {r + 1}: {'churn' if churning else 'quiet'} window "
                      f"{churn_seconds:g} s", file=sys.stderr)
                if churning:
                    assert fakes.command(f"churn {churn_rate}") == "churning"
                    run.churn_pct.append(cpu_window(pid, churn_seconds))
                    answer = fakes.command("stop").split()
                    run.churn_events.append(int(answer[1]))
                else:
                    run.quiet_pct.append(cpu_window(pid, churn_seconds))
        after = metrics(server)
        run.rss_end = proc_status_kib(pid, "VmRSS") / 1024
        run.hwm_end = proc_status_kib(pid, "VmHWM") / 1024
        restarts = {m[1].decode(): float(m[2]) for m in _RESTARTS.finditer(after)}
        restarts_before = {m[1].decode(): float(m[2]) for m in _RESTARTS.finditer(before)}
        new_restarts = {k: v - restarts_before.get(k, 0) for k, v in restarts.items()
                        if v - restarts_before.get(k, 0)}
        run.watch_note = (f"lists {_gauge(_LISTS, before):g} -> {_gauge(_LISTS, after):g}, "
                          f"watch restarts during churn {new_restarts or 'none'}, "
                          f"synced {_gauge(_SYNCED, after):g}, last event age "
                          f"{_gauge(_EVENT_AGE, after)} s")
        return run
    finally:
        server.stop()


# --- the report -----------------------------------------------------------------------------

def _range(values: Sequence[float], fmt: str = ".1f") -> str:
    if len(values) < 2:
        return f"{median(values):{fmt}}"
    return f"{median(values):{fmt}} ({min(values):{fmt}}..{max(values):{fmt}})"


def report_pass(t: PassTimes, cycles: int, warmup: int,
                processes: int = EXPECTED_PROCESSES) -> None:
    m = median
    print(f"### pass: CPU ms per collection pass (process_time), median of {cycles} passes "
          f"after {warmup} warm-up\n")
    print("| variant | /proc read | log names | pod watch | join+render [join alone] "
          "| pass | series (body B) |")
    print("|---|---:|---:|---:|---:|---:|---:|")
    print(f"| process metrics on | {m(t.proc):.3f} | {m(t.logs):.3f} | {m(t.pods):.3f} "
          f"| {m(t.render_on):.3f} [{m(t.compose_on):.3f}] | {m(t.total_on):.3f} "
          f"| {t.series_on} ({t.bytes_on:,}) |")
    print(f"| off: `-k` alone (baseline) | - | - | - | {m(t.render_off):.3f} "
          f"[{m(t.compose_off):.3f}] | {m(t.render_off):.3f} "
          f"| {t.series_off} ({t.bytes_off:,}) |")
    print(f"| difference (paired per pass) | | | | "
          f"[{m([a - b for a, b in zip(t.compose_on, t.compose_off, strict=True)]):.3f}] "
          f"| **{m(t.diff):.3f}** | +{t.series_on - t.series_off} |")
    print(f"\n/proc read of {processes} PIDs, direct ProcReader.read (thread_time): "
          f"cold cache {_range(t.cold_read, '.3f')} ms, warm {_range(t.warm_read, '.3f')} ms "
          f"(median of {len(t.cold_read)}); process series {t.process_series}, "
          f"{t.attributed} with a pod")
    ratio = m(t.total_on) / m(t.render_off)
    verdict = "met" if m(t.diff) <= TARGET_PASS_MS else "MISSED"
    print(f"- process part of a pass: {m(t.diff):.3f} ms (on/off {ratio:.2f}x), target <= "
          f"{TARGET_PASS_MS:g} ms: {verdict}\n")


def report_rss(runs: dict[str, list[ExporterRun]], scrapes: int, interval_ms: int) -> None:
    print(f"### rss: exporter `-c {interval_ms} -k`, VmRSS MiB; medians (min..max) of "
          f"{len(next(iter(runs.values())))} start(s)\n")
    print(f"| exporter | spawn→ready/synced s | RSS at ready | RSS after {scrapes} scrapes "
          "| VmHWM | CPU % at 1 scrape/s |")
    print("|---|---:|---:|---:|---:|---:|")
    for name, rs in runs.items():
        print(f"| {name} | {_range([r.ready_s for r in rs], '.2f')} "
              f"| {_range([r.rss_ready for r in rs])} | {_range([r.rss for r in rs])} "
              f"| {_range([r.hwm for r in rs])} "
              f"| {_range([r.scrape_cpu_pct for r in rs], '.2f')} |")
    base, on = (median([r.rss for r in rs]) for rs in runs.values())
    print(f"| difference (ratio) | | | **+{on - base:.1f}** ({on / base:.2f}x) | | |")
    verdict = "met" if on <= TARGET_RSS_MIB else "MISSED"
    print(f"\n- RSS with process metrics and the Kubernetes client: {on:.1f} MiB, target <= "
          f"{TARGET_RSS_MIB:g} MiB: {verdict}\n")


def report_churn(run: ExporterRun, seconds: float, rate: float) -> None:
    diffs = [c - q for c, q in zip(run.churn_pct, run.quiet_pct, strict=True)]
    events = sum(run.churn_events)
    print(f"### churn: the `--process-metrics` exporter's CPU (utime+stime), % of one core, "
          f"{len(diffs)} pair(s) of {seconds:g} s windows\n")
    print("| window | CPU % (min..max) | pod events |")
    print("|---|---:|---:|")
    print(f"| no churn | {_range(run.quiet_pct, '.2f')} | 0 |")
    print(f"| {rate:g} label change/s | {_range(run.churn_pct, '.2f')} | {events} |")
    per_event = 10 * sum(diffs) * seconds / events if events else float("nan")
    print(f"| difference (paired) | **{_range(diffs, '+.2f')}** | ≈ {per_event:.2f} ms CPU "
          "per event |")
    print(f"\n{run.watch_note}; RSS after the windows {run.rss_end:.1f} MiB (before "
          f"{run.rss:.1f}), VmHWM {run.hwm_end:.1f} MiB. "
          f"/proc CPU counts 10 ms ticks: ±{100 * 0.01 / seconds:.2f} % per window.\n")


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--parts", default="pass,rss,churn", help="pass, rss, churn")
    parser.add_argument("--quick", action="store_true",
                        help="short run (~35 s): 50 passes, 1 start each, 5 scrapes, "
                             "1 pair of 10 s churn windows")
    parser.add_argument("--cycles", type=int, default=200, help="passes measured (pass)")
    parser.add_argument("--warmup", type=int, default=20, help="warm-up passes (pass)")
    parser.add_argument("--cold-reads", type=int, default=20,
                        help="cold-cache /proc reads, each with a new reader (pass)")
    parser.add_argument("--starts", type=int, default=2,
                        help="interleaved starts of each exporter (rss)")
    parser.add_argument("--scrapes", type=int, default=10,
                        help="gzip scrapes, one a second, before reading RSS (rss)")
    parser.add_argument("--interval-ms", type=int, default=1000, help="exporter -c")
    parser.add_argument("--churn-rounds", type=int, default=3,
                        help="pairs of (quiet, churn) windows, alternating order (churn)")
    parser.add_argument("--churn-seconds", type=float, default=20.0, help="window length")
    parser.add_argument("--churn-rate", type=float, default=1.0, help="label changes per s")
    parser.add_argument("--pod-bytes", type=int, default=6000,
                        help="JSON size of each pod object the fake API serves")
    parser.add_argument("--no-pin", action="store_true",
                        help="do not pin the exporter to CPU 1 and the rest to CPU 0")
    parser.add_argument("--pods", type=int, default=PODS, help="pods on the node (pass only)")
    parser.add_argument("--gpu-pods", type=int, default=GPU_PODS,
                        help=f"pods holding a GPU replica, {PROCS_PER_POD} processes each, at "
                             f"most {GPUS * 7} (pass only)")
    parser.add_argument("--build-dir", type=Path, default=DEFAULT_BUILD_DIR)
    parser.add_argument("--serve-fakes", type=Path, help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.serve_fakes is not None:
        asyncio.run(serve_fakes(args.serve_fakes, args.pod_bytes))
        return 0
    if args.quick:
        args.cycles, args.warmup, args.cold_reads = 50, 10, 5
        args.starts, args.scrapes = 1, 5
        args.churn_rounds, args.churn_seconds = 1, 10.0
    parts = {p.strip() for p in args.parts.split(",") if p.strip()}
    if (args.pods, args.gpu_pods) != (PODS, GPU_PODS) and parts != {"pass"}:
        parser.error("--pods and --gpu-pods apply to --parts pass only")
    if not 0 <= args.gpu_pods <= min(args.pods, GPUS * 7):  # the fake lists 16 per GPU
        parser.error(f"--gpu-pods: 0 to {min(args.pods, GPUS * 7)}")
    if "churn" in parts:
        parts.add("rss")  # it measures the last exporter of rss
    print(f"{os.cpu_count()} CPUs, load {os.getloadavg()[0]:.2f}", file=sys.stderr)
    started = time.monotonic()

    lib = build_fake_nvml(args.build_dir)
    node = build_node(args.pods, args.gpu_pods)
    tmp = Path(tempfile.mkdtemp(prefix="gpe-proc-"))  # short: holds the kubelet socket
    write_proc_tree(node, tmp / "proc")
    write_log_root(node, tmp / "log")
    pinned = not args.no_pin and (os.cpu_count() or 1) >= 2
    server_cpus, side_cpus = ({1}, {0}) if pinned else (None, None)

    exe = os.path.relpath(PYTHON) if PYTHON.startswith(os.getcwd() + os.sep) else PYTHON
    print(f"command: {shlex.join([exe, *sys.argv])}")
    print(f"node: {GPUS} fake GPUs (time-sliced, {REPLICAS} replicas each), {len(node.pods)} "
          f"pods ({args.gpu_pods} holding a GPU replica), {len(node.processes)} GPU processes "
          f"({len(HOST_PROCESSES)} on the host), default counters, pod objects "
          f"~{args.pod_bytes} B of JSON\n")
    try:
        if "pass" in parts:
            print("pass: in-process collection passes ...", file=sys.stderr)
            if str(ROOT) not in sys.path:
                sys.path.insert(0, str(ROOT))
            fake_cls = importlib.import_module("tests.fake_nvml.build").FakeNvml
            fake = fake_cls(lib)  # before pynvml loads libnvidia-ml.so.1
            times = asyncio.run(measure_pass(fake, node, tmp, args.cycles, args.warmup,
                                             args.cold_reads, args.pod_bytes))
            report_pass(times, args.cycles, args.warmup, len(node.processes))
        if "rss" in parts:
            if side_cpus:
                os.sched_setaffinity(0, side_cpus)
            fakes = Fakes(tmp, args.pod_bytes, side_cpus)
            try:
                write_kubeconfig(tmp / "kubeconfig", fakes.url)
                env = fake_env(lib, GPUS, {"FAKE_NVML_PROCESSES": node.nvml_spec(),
                                           "NODE_NAME": NODE})
                kubelet = ["-k", "--pod-resources-kubelet-socket", str(fakes.socket)]
                process = ["--process-metrics", "--proc-root", str(tmp / "proc"),
                           "--kubelet-log-root", str(tmp / "log"),
                           "--kubeconfig", str(tmp / "kubeconfig")]
                variants: list[tuple[str, list[str], bool]] = [
                    ("`-k` (baseline: no Kubernetes client)", kubelet, False),
                    ("`-k --process-metrics` (pod watch, 110 pods)", kubelet + process, True)]
                runs: dict[str, list[ExporterRun]] = {name: [] for name, _, _ in variants}
                last: ExporterRun | None = None
                for start in range(args.starts):
                    for name, extra, on in variants:
                        churn = "churn" in parts and on and start == args.starts - 1
                        print(f"rss: start {start + 1}: {name}{' + churn' if churn else ''}",
                              file=sys.stderr)
                        port = free_port()
                        server = Server(name, exporter_argv(port, args.interval_ms, extra), env,
                                        port, server_cpus)
                        run = run_exporter(server, on, args.scrapes, fakes if churn else None,
                                           args.churn_rounds, args.churn_seconds,
                                           args.churn_rate)
                        runs[name].append(run)
                        if churn:
                            last = run
            finally:
                fakes.close()
            report_rss(runs, args.scrapes, args.interval_ms)
            if last is not None:
                report_churn(last, args.churn_seconds, args.churn_rate)
    finally:
        shutil.rmtree(tmp, ignore_errors=True)
    print(f"took {time.monotonic() - started:.0f} s", file=sys.stderr)
    return 0


if __name__ == "__main__":
    sys.exit(main())
