"""`--simulate`'s MPS-shared A100 (issue 25), through the running exporter: its two pods'
processes are MPS clients with their pods, the MPS server runs in the device plugin's
control-daemon pod and is nobody's use, and `--kubernetes-virtual-gpus` splits the GPU by the
clients. Also the scenario key `type`."""

import json
import time
from pathlib import Path
from typing import Any

import pytest

from gpu_enricher.sim.scenario import ScenarioError, builtin_scenario, load_scenario
from tests.app.test_process import Exporter, exporters, get
from tests.samples import value

__all__ = ["exporters"]  # the fixture, used by name
DAEMON = "nvidia-device-plugin-mps-control-daemon-x7k2p"


def settled(exp: Exporter) -> tuple[dict[str, Any], str]:
    """/api/v1/gpus and /metrics once GPU 1's processes are attributed."""
    deadline = time.monotonic() + 20
    while True:
        _, doc = get(exp.base + "/api/v1/gpus")
        gpu1 = json.loads(doc)["gpus"][1] if doc.startswith("{\"") else {"processes": []}
        if all(p["pod"] for p in gpu1["processes"]) and gpu1["processes"] and gpu1["holders"]:
            break
        assert time.monotonic() < deadline, doc
        time.sleep(0.05)
    _, body = get(exp.base + "/metrics")
    return json.loads(doc), body


def test_the_builtin_node_shares_gpu_1_through_mps(exporters: list[Exporter]) -> None:
    exp = Exporter(["--simulate", "-c", "200", "--kubernetes-virtual-gpus"],
                   {"NODE_NAME": "sim-node"})
    exporters.append(exp)
    exp.wait_ready()
    doc, body = settled(exp)
    gpu1 = doc["gpus"][1]
    assert [h["replica"] for h in gpu1["holders"]] == ["0", "1"]
    assert [h["device_id"].endswith(f"::{h['replica']}") for h in gpu1["holders"]] == [True] * 2
    assert {p["pid"]: (p["type"], p["name"], p["pod"], p["allocated"])
            for p in gpu1["processes"]} == {
        4202: ("mps", "tritonserver", "chat-7d9f-abcde", True),
        4203: ("mps", "python3", "embed-5c4b-xyz12", True),
        3990: ("mps-server", "nvidia-cuda-mps", DAEMON, None),
    }
    # The daemon's pod: its process series, no pod series, not flagged, no DCGM series.
    assert value(body, "gpu_enricher_process_memory_used_bytes", pid="3990") == 320 << 20
    assert value(body, "gpu_enricher_pod_memory_used_bytes", pod=DAEMON) is None
    assert DAEMON not in "".join(ln for ln in body.splitlines()
                                 if ln.startswith(("gpu_enricher_unallocated", "DCGM_")))
    # The split by the clients: the chat pod's 24 GiB, the embedding pod's 2 GiB.
    assert value(body, "DCGM_FI_DEV_FB_USED", gpu="1", pod="chat-7d9f-abcde") == 24576
    assert value(body, "DCGM_FI_DEV_FB_USED", gpu="1", pod="embed-5c4b-xyz12") == 2048
    code, _ = exp.stop()
    assert code == 0


def test_process_types_of_a_scenario(tmp_path: Path) -> None:
    path = tmp_path / "node.yaml"
    path.write_text("gpus: [{processes: [{pid: 1, type: mps}, {pid: 2, type: graphics},"
                    " {pid: 3}]}]\n")
    assert [p.kind for p in load_scenario(path).gpus[0].processes] == [
        "mps", "graphics", "compute"]
    path.write_text("gpus: [{processes: [{pid: 1, type: mps-server}]}]\n")
    with pytest.raises(ScenarioError, match=r"node.yaml:1: gpus\[0\].processes\[0\].type: "
                                            r"one of compute, graphics, mps, got 'mps-server'"):
        load_scenario(path)
    kinds = {p.pid: p.kind for g in builtin_scenario().gpus for p in g.processes}
    assert (kinds[4202], kinds[4203], kinds[3990]) == ("mps", "mps", "compute")
