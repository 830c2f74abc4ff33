"""`--drop-labels` on the simulated node (GPUs, MIG instances, an MPS-shared GPU with virtual
GPUs, DRA claims, pod labels and UIDs, processes): the dropped labels are gone from every DCGM
and per-process series, every series is still there, and no two became one."""

import os
import signal
import socket
import subprocess
import sys
import time
import urllib.error
import urllib.request
from collections import Counter
from collections.abc import Iterator

import pytest
from prometheus_client.parser import text_string_to_metric_families

from gpu_enricher.exposition.label_drop import DROPPABLE

DROP = frozenset({*DROPPABLE, "DCGM_FI_DRIVER_VERSION", "team"}) - {"hostname"}
COMMON = ["--simulate", "-c", "200", "--kubernetes-virtual-gpus",
          "--kubernetes-enable-pod-labels", "--kubernetes-enable-pod-uid"]
DROPS_FROM = ("DCGM_", "gpu_enricher_process_", "gpu_enricher_pod_",
              "gpu_enricher_unallocated_process_info", "gpu_enricher_xid_errors_total")
"""The families built per pass with the DCGM ones; the exporter's own metrics
(prometheus_client: `gpu_enricher_gpu_up`, …) keep their labels (docs/scale.md)."""

Series = tuple[str, frozenset[tuple[str, str]]]


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port: int = s.getsockname()[1]
        return port


def _get(url: str) -> str:
    with urllib.request.urlopen(url, timeout=5) as resp:
        return str(resp.read().decode())


def _value(body: str, name: str) -> str | None:
    return next((line.split()[1] for line in body.splitlines()
                 if line.startswith(name + " ")), None)


@pytest.fixture
def spawn() -> Iterator[list[subprocess.Popen[str]]]:
    procs: list[subprocess.Popen[str]] = []
    yield procs
    for proc in procs:
        if proc.poll() is None:
            proc.send_signal(signal.SIGTERM)
            try:
                proc.communicate(timeout=15)
            except subprocess.TimeoutExpired:
                proc.kill()
                proc.communicate()


def settled(procs: list[subprocess.Popen[str]], extra: list[str]) -> str:
    """The exposition once pods, their labels and processes are attributed and steady."""
    port = _free_port()
    env = {k: v for k, v in os.environ.items()
           if not k.startswith(("FAKE_NVML_", "GPU_ENRICHER_", "DCGM_EXPORTER_"))}
    env["NODE_NAME"] = "sim-node"
    proc = subprocess.Popen([sys.executable, "-m", "gpu_enricher", "-a", f"127.0.0.1:{port}",
                             *COMMON, *extra], env=env, stdout=subprocess.PIPE,
                            stderr=subprocess.PIPE, text=True)
    procs.append(proc)
    deadline, counts = time.monotonic() + 30, [0]
    while time.monotonic() < deadline:
        assert proc.poll() is None, proc.communicate()
        try:
            body = _get(f"http://127.0.0.1:{port}/metrics")
        except (urllib.error.URLError, ConnectionError):
            time.sleep(0.05)
            continue
        ready = (_value(body, "gpu_enricher_kubelet_up") == "1.0"
                 and _value(body, "gpu_enricher_kubernetes_synced") == "1.0"
                 and "gpu_enricher_unallocated_process_info{" in body)
        # Series and label pairs (pod labels attach a pass after the pod watch syncs).
        shape = body.count("\n") * 100_000 + body.count('="')
        counts = [*counts[-2:], shape] if ready else [0]
        if len(counts) == 3 and len(set(counts)) == 1:
            return body
        time.sleep(0.25)  # a pass is 0.2 s: three equal counts span two passes
    raise AssertionError(f"the exposition never settled: {counts}")


def series(body: str) -> Counter[Series]:
    return Counter((s.name, frozenset(s.labels.items()))
                   for f in text_string_to_metric_families(body) for s in f.samples
                   if s.name.startswith(DROPS_FROM))


def test_dropped_labels_leave_every_series_and_merge_none(
        spawn: list[subprocess.Popen[str]]) -> None:
    full = series(settled(spawn, []))
    body = settled(spawn, ["--drop-labels", ",".join(sorted(DROP))])
    dropped = series(body)
    # Every kind of label the flag can drop was there to drop.
    present = {name for _, labels in full for name, _ in labels}
    assert present >= DROP, DROP - present
    # Gone from every DCGM and process series, and from no series gone missing.
    assert not {name for _, labels in dropped for name, _ in labels} & DROP
    assert max(dropped.values()) == 1, [s for s, n in dropped.items() if n > 1]
    projected = Counter((name, frozenset(p for p in labels if p[0] not in DROP))
                        for name, labels in full.elements())
    assert max(projected.values()) == 1, "the full exposition would collide"
    assert dropped.keys() == projected.keys()
    # What identifies series is left, and the exporter's own metrics keep theirs.
    assert all("gpu" in dict(labels) for name, labels in dropped
               if name != "gpu_enricher_pod_gpu_seconds_total")  # per pod, not per GPU
    assert {"vgpu", "pod", "GPU_I_ID", "dra_claim_name", "pid"} <= {
        name for _, labels in dropped for name, _ in labels}
    gpu_up = [line for line in body.splitlines() if line.startswith("gpu_enricher_gpu_up{")]
    assert gpu_up and all('UUID="GPU-' in line for line in gpu_up)
    assert "Hostname=" not in body, "dropping Hostname is -n: gpu_up loses it too"
