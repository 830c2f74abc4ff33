"""promtool lints the real exposition: no parse error, only the problems DCGM's names imply."""

import asyncio
import shutil
import subprocess
import tempfile
from collections.abc import Callable
from pathlib import Path

import pytest

from gpu_enricher.collector.loop import Collector, CollectorOptions
from gpu_enricher.fields.collection import default_counters_path
from gpu_enricher.fields.counters import load_counters
from gpu_enricher.kubelet.client import PodResourcesClient
from gpu_enricher.kubelet.source import KubeletOptions, KubeletSource
from gpu_enricher.sim.backend import SimulatedBackend
from gpu_enricher.sim.fake_kubelet.server import FakeKubelet
from gpu_enricher.sim.scenario import builtin_scenario
from tests.conftest import require_tool
from tests.reference import dcgm_counters_csv
from tests.samples import value

# What dcgm-exporter's own names make promtool say; nothing else is allowed.
ALLOWED_DCGM = {
    'counter metrics should have "_total" suffix',
    "label names should be written in 'snake_case' not 'camelCase'",
}
ALLOWED_BY_NAME = {
    "DCGM_FI_DEV_PCIE_REPLAY_COUNTER": {"metric name should not include type 'counter'"},
    # gpu_up carries dcgm-exporter's identity labels (modelName, UUID) so alerts can join
    # it with DCGM series; the issue defines its label set.
    "gpu_enricher_gpu_up": {"label names should be written in 'snake_case' not 'camelCase'"},
    "gpu_enricher_device_allocation_info": {
        "label names should be written in 'snake_case' not 'camelCase'"},
}


async def exposition(counters: Path) -> bytes:
    """The simulated node with its pods, through a fake kubelet and the real client."""
    backend = SimulatedBackend(builtin_scenario())
    socket_dir = Path(tempfile.mkdtemp(prefix="kubelet-"))
    try:
        async with FakeKubelet(socket_dir / "kubelet.sock") as kubelet:
            kubelet.set_assignments(backend.scenario.pods)
            kubelet.set_allocatable(backend.scenario.allocatable())
            source = KubeletSource(PodResourcesClient(kubelet.socket_path, 2.0),
                                   KubeletOptions(max_age_seconds=10))
            collector = Collector(backend, CollectorOptions(
                interval_seconds=1, hostname="node-a", counters=load_counters(counters)),
                assignments=source)
            await collector.open_backend()
            await collector.collect_once()
            await source.close()
            return collector.exposition.text
    finally:
        shutil.rmtree(socket_dir, ignore_errors=True)


@pytest.mark.parametrize(
    "counters",
    [pytest.param(default_counters_path, id="bundled-counters"),
     pytest.param(dcgm_counters_csv, id="dcgm-exporter-counters",
                  marks=pytest.mark.reference_compat)],
)
def test_promtool_check_metrics(counters: Callable[[], Path]) -> None:
    promtool = require_tool("promtool")
    body = asyncio.run(exposition(counters()))
    result = subprocess.run([promtool, "check", "metrics"], input=body, capture_output=True,
                            timeout=60, check=False)
    output = (result.stdout + result.stderr).decode()
    assert result.returncode in (0, 3), output  # 1 would be a parse error
    # promtool's own failures ("error while linting: …"), not metric names with ERROR in them.
    assert not any(line.lower().startswith("error") for line in output.splitlines()), output
    assert b'pod="llm-trainer-0"' in body
    assert value(body.decode(), "gpu_enricher_kubelet_up") == 1
    problems = [line.split(" ", 1) for line in output.splitlines() if line.strip()]
    assert problems, "dcgm-exporter's names always draw some lint; none means promtool saw nothing"
    for name, message in problems:
        allowed = ALLOWED_BY_NAME.get(name, set()) | (
            ALLOWED_DCGM if name.startswith("DCGM_") else set())
        assert message in allowed, f"{name}: {message}"
