"""Pod churn on the simulated node, and the exporter under it for three minutes.

The first test runs the simulated cluster's churn for a few ticks and reads its fakes as the
exporter does (the kubelet over gRPC, the API's pods, the /proc tree, the log names). The second
is the CI version of `bench/soak.py --duration 3600`: the exporter on a node of 8 GPUs x 7 MIG
instances and 110 pods, 5 of them (with their GPU processes) replaced every second, scraped every
second for 180 s; RSS must not grow more than 5 % after the warm-up, every pod and pid label
must be of something that existed, and no departed pod's label may be served more than one
interval (+ 1 s) after it left (its GPU-time and energy counters, which show their final value
one pass more: two intervals), except while the exporter keeps its last kubelet answer (a
`List` that timed out), which it logs and does for 3 intervals at most.
"""

import asyncio
import json
import os
import subprocess
import sys
import tempfile
from pathlib import Path

import pytest

from gpu_enricher.kubelet.client import PodResourcesClient
from gpu_enricher.sim.backend import SimulatedBackend
from gpu_enricher.sim.churn import churned
from gpu_enricher.sim.cluster import SimulatedCluster
from gpu_enricher.sim.cluster_state import log_names, pod_metas, proc_files
from gpu_enricher.sim.scenario import load_scenario

ROOT = Path(__file__).resolve().parents[2]
SOAK_SECONDS = 180

NODE = """\
gpus:
  - processes:
      - {pid: 100, pod: ml/train}
      - {pid: 7, name: gpu-burn}
  - processes: [{pid: 200, pod: ml/infer}]
pods:
  - {namespace: ml, pod: train, container: c, gpus: [0]}
  - {namespace: ml, pod: infer, container: c, gpus: [1]}
  - {namespace: ops, pod: agent, container: a}
churn: {pods_per_second: 2}
"""


async def test_the_cluster_churns_its_fakes_and_the_backend_follows(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(tempfile, "tempdir", str(tmp_path))
    path = tmp_path / "node.yaml"
    path.write_text(NODE)
    scenario = load_scenario(path)
    backend = SimulatedBackend(scenario)
    cluster = SimulatedCluster(scenario, "node-a")
    await cluster.start()
    client = PodResourcesClient(cluster.kubelet.socket_path, 5.0)
    try:
        before = {p["metadata"]["name"] for p in cluster.api.pods.values()}
        assert before == {"train", "infer", "agent"}
        for _ in range(200):  # the tick's own clock: nothing to wait on but time
            if scenario.churn_clock.generation >= 2:
                break
            await asyncio.sleep(0.05)
        for _ in range(3):  # read every fake within one tick (they change together)
            generation = scenario.churn_clock.generation
            api = {(p["metadata"]["namespace"], p["metadata"]["name"])
                   for p in cluster.api.pods.values()}
            listed = await client.list()
            on_disk = {str(f.relative_to(cluster.proc_root))
                       for f in cluster.proc_root.rglob("*") if f.is_file()}
            logs = {str(f.relative_to(cluster.log_root)) for f in cluster.log_root.glob("*/*")}
            sampled = backend.sample(frozenset()).gpus
            if scenario.churn_clock.generation == generation:
                break
        node = churned(scenario, generation)
        # Ticks 1 and 2: train, infer / agent, train: train twice, the others once.
        expected = {("ml", "train-r2"), ("ml", "infer-r1"), ("ops", "agent-r1")}
        assert generation > 2 or {(m.namespace, m.name) for m in pod_metas(node)} == expected
        assert api == {(m.namespace, m.name) for m in pod_metas(node)}
        assert {(a.namespace, a.pod) for a in listed.assignments} == {
            (p.namespace, p.pod) for p in node.pods}
        assert on_disk == set(proc_files(node))
        assert "100/stat" not in on_disk and "7/stat" in on_disk
        assert logs == set(log_names(node))
        assert [p.pid for g in sampled for p in g.processes] == [
            p.pid for g in node.gpus for p in g.processes]
    finally:
        await client.close()
        await cluster.stop()
    assert not cluster.directory.exists()


def test_soak_three_minutes(tmp_path: Path) -> None:
    result_path = tmp_path / "soak.json"
    env = {k: v for k, v in os.environ.items() if not k.startswith("FAKE_NVML_")}
    run = subprocess.run(
        [sys.executable, str(ROOT / "bench" / "soak.py"), "--duration", str(SOAK_SECONDS),
         "--sample-every", "5", "--warmup", "60", "--out", str(tmp_path / "out"),
         "--json", str(result_path)],
        cwd=ROOT, env=env, capture_output=True, text=True, timeout=SOAK_SECONDS + 120)
    assert result_path.exists(), run.stderr[-3000:]
    result = json.loads(result_path.read_text())
    assert result["pods_departed"] >= 5 * (SOAK_SECONDS - 30), "the node churned"
    assert result["errors"] == 0, run.stdout
    assert result["rss_growth"] <= 0.05, (
        f"RSS grew {100 * result['rss_growth']:.1f} % after the warm-up: "
        f"{result['rss_warm_mib']:.1f} -> {result['rss_end_mib']:.1f} MiB\n{run.stdout}")
    assert result["unknown_count"] == 0, result["unknown_labels"]
    assert result["series_growth"] <= 0.05, (
        f"series: warm-up max {result['series_warmup_max']}, max {result['series_max']}")
    # A departed pod's label after one interval only while the exporter said it kept its last
    # kubelet answer (a List that timed out on a busy machine: kept 3 intervals by design).
    assert result["stale_count"] == result["stale_explained"], result["stale_labels"]
    assert run.returncode == 0, run.stdout + run.stderr[-3000:]
