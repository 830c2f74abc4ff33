"""A real Prometheus (Debian package, loopback only) scrapes the real exporter process.

Prometheus 2.x asks for OpenMetrics first, so this proves its strict parser accepts our output
(DCGM counters typed `unknown`, `# EOF`, escaping) and that dashboard 12239's queries find data.
"""

import json
import subprocess
import time
import urllib.parse
import urllib.request
from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.conftest import require_tool
from tests.integration.test_process import Exporter, free_port


@pytest.fixture
def exporter() -> Iterator[Exporter]:
    exp = Exporter(["--simulate", "-c", "500"], {"NODE_NAME": "sim-node"})
    try:
        exp.wait_ready()
        yield exp
    finally:
        exp.stop()


def query(base: str, promql: str) -> list[dict[str, object]]:
    url = f"{base}/api/v1/query?{urllib.parse.urlencode({'query': promql})}"
    with urllib.request.urlopen(url, timeout=5) as resp:
        answer = json.load(resp)
    assert answer["status"] == "success", answer
    result: list[dict[str, object]] = answer["data"]["result"]
    return result


def test_prometheus_scrapes_and_dashboard_queries_return_data(
        exporter: Exporter, tmp_path: Path) -> None:
    prometheus = require_tool("prometheus")
    port = free_port()
    config = tmp_path / "prometheus.yml"
    config.write_text(
        "global: {scrape_interval: 1s, evaluation_interval: 1s}\n"
        "scrape_configs:\n"
        "  - job_name: gpu-enricher\n"
        f"    static_configs: [{{targets: ['127.0.0.1:{exporter.port}']}}]\n"
    )
    log = (tmp_path / "prometheus.log").open("wb")
    proc = subprocess.Popen(
        [prometheus, f"--config.file={config}", f"--web.listen-address=127.0.0.1:{port}",
         f"--storage.tsdb.path={tmp_path / 'data'}"],
        stdout=subprocess.DEVNULL, stderr=log)
    base = f"http://127.0.0.1:{port}"
    try:
        deadline = time.monotonic() + 60
        temps: list[dict[str, object]] = []
        while time.monotonic() < deadline and not temps:
            time.sleep(1)
            try:
                temps = query(base, "DCGM_FI_DEV_GPU_TEMP")
            except OSError:
                continue
        assert temps, "Prometheus never stored a sample"
        with urllib.request.urlopen(f"{base}/api/v1/targets", timeout=5) as resp:
            targets = json.load(resp)
        target = targets["data"]["activeTargets"][0]
        assert target["health"] == "up", target
        assert target["lastError"] == ""
        # Every panel and both variables of dashboard 12239 (instance/gpu selectors match all).
        sel = '{instance=~".*", gpu=~".*"}'
        for promql in (f"DCGM_FI_DEV_GPU_TEMP{sel}", f"avg(DCGM_FI_DEV_GPU_TEMP{sel})",
                       f"DCGM_FI_DEV_POWER_USAGE{sel}", f"sum(DCGM_FI_DEV_POWER_USAGE{sel})",
                       f"DCGM_FI_DEV_SM_CLOCK{sel} * 1000000", f"DCGM_FI_DEV_GPU_UTIL{sel}",
                       f"DCGM_FI_DEV_FB_USED{sel}", f"DCGM_FI_PROF_PIPE_TENSOR_ACTIVE{sel}",
                       "count by (instance) (DCGM_FI_DEV_GPU_TEMP)",
                       "count by (gpu) (DCGM_FI_DEV_GPU_TEMP)"):
            assert query(base, promql), promql
        labels = temps[0]["metric"]
        assert isinstance(labels, dict)
        assert labels["Hostname"] == "sim-node" and labels["modelName"]
        energy = query(base, "DCGM_FI_DEV_TOTAL_ENERGY_CONSUMPTION")
        assert len(energy) == 6
        assert query(base, 'gpu_enricher_gpu_up{gpu="0"} == 1')
        # Prometheus Adapter's seriesQuery and a metricsQuery rendered for a simulated pod.
        assert query(base, 'DCGM_FI_DEV_GPU_UTIL{namespace!="",pod!=""}')
        per_pod = query(base, 'avg(DCGM_FI_DEV_GPU_UTIL{namespace="ml",pod="llm-trainer-0"})'
                              ' by (pod)')
        assert len(per_pod) == 1 and per_pod[0]["metric"] == {"pod": "llm-trainer-0"}
    finally:
        proc.terminate()
        proc.wait(timeout=15)
        log.close()
