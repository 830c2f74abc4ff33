"""The simulated node's GPU bind and unbind (`unbound_every_seconds`): the GPU is left out of
the passes while unbound, reported once as gone on purpose (`rebound`), and back when bound."""

import logging
from pathlib import Path

import pytest

from gpu_enricher.fields.table import IMPLEMENTED
from gpu_enricher.sim.backend import SimulatedBackend
from gpu_enricher.sim.scenario import ScenarioError, load_scenario
from tests.sim.test_simulated import FakeClock


def test_a_gpu_unbound_in_turn_leaves_the_passes_and_comes_back(
        tmp_path: Path, caplog: pytest.LogCaptureFixture) -> None:
    path = tmp_path / "node.yaml"
    path.write_text("gpus:\n"
                    "  - {model: NVIDIA H100 80GB HBM3}\n"
                    "  - {model: NVIDIA H100 80GB HBM3, unbound_every_seconds: 10}\n")
    caplog.set_level(logging.INFO, logger="gpu_enricher")
    clock = FakeClock()
    sim = SimulatedBackend(load_scenario(path), clock)
    sim.open()
    second = sim.scenario.gpus[1].uuid
    seen = []
    for at in (0, 9, 10, 15, 20, 30):
        clock.now = 1000.0 + at
        snap = sim.sample(frozenset(IMPLEMENTED))
        seen.append(([g.identity.index for g in snap.gpus], sorted(snap.rebound)))
    assert seen == [([0, 1], []), ([0, 1], []), ([0], [second]), ([0], []), ([0, 1], []),
                    ([0], [second])]
    changes = [r.getMessage() for r in caplog.records if "bound to the driver" in r.getMessage()]
    assert len(changes) == 3, changes


def test_the_period_is_at_least_a_second(tmp_path: Path) -> None:
    path = tmp_path / "node.yaml"
    path.write_text("gpus: [{unbound_every_seconds: 0.5}]\n")
    with pytest.raises(ScenarioError, match=r"gpus\[0\].unbound_every_seconds: at least 1"):
        load_scenario(path)
