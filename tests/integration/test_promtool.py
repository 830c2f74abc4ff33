"""promtool lints the real exposition: no parse error, only the problems DCGM's names imply."""

import asyncio
import subprocess
from pathlib import Path

import pytest

from gpu_enricher.cli import default_counters_path
from gpu_enricher.collector import Collector, CollectorOptions
from gpu_enricher.counters import load_counters
from gpu_enricher.scenario import builtin_scenario
from gpu_enricher.simulated import SimulatedBackend
from tests.conftest import SHARED_REFERENCE, require_tool

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
}


async def exposition(counters: Path) -> bytes:
    collector = Collector(
        SimulatedBackend(builtin_scenario()),
        CollectorOptions(interval_seconds=1, hostname="node-a", counters=load_counters(counters)),
    )
    await collector.open_backend()
    await collector.collect_once()
    return collector.exposition.text


@pytest.mark.parametrize(
    "counters",
    [default_counters_path(), SHARED_REFERENCE / "dcgm-default-counters.csv"],
    ids=["bundled-counters", "dcgm-exporter-counters"],
)
def test_promtool_check_metrics(counters: Path) -> None:
    promtool = require_tool("promtool")
    body = asyncio.run(exposition(counters))
    result = subprocess.run([promtool, "check", "metrics"], input=body, capture_output=True,
                            timeout=60, check=False)
    output = (result.stdout + result.stderr).decode()
    assert result.returncode in (0, 3), output  # 1 would be a parse error
    assert "error" not in output.lower(), output
    problems = [line.split(" ", 1) for line in output.splitlines() if line.strip()]
    assert problems, "dcgm-exporter's names always draw some lint; none means promtool saw nothing"
    for name, message in problems:
        allowed = ALLOWED_BY_NAME.get(name, set()) | (
            ALLOWED_DCGM if name.startswith("DCGM_") else set())
        assert message in allowed, f"{name}: {message}"
