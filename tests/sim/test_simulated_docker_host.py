"""`--simulate docker-host`: a Docker host's containers served by the simulated node's fake
Engine API, asked through the same client and source as a real dockerd (tests/runtime), and a
scenario's `containers:` entries checked as the rest of a scenario is."""

import asyncio
import json
from pathlib import Path

import pytest

from gpu_enricher.sim.scenario import builtin_scenario, load_scenario
from gpu_enricher.sim.scenario_values import ScenarioError
from tests.app.fault_helpers import fetch, until
from tests.app.test_process import Exporter
from tests.app.test_process import exporters as exporters  # the fixture
from tests.samples import value


def test_the_docker_host_gives_gpus_each_way_docker_run_does() -> None:
    host = builtin_scenario("docker-host")
    assert [c.name for c in host.containers] == ["vllm-llama", "embedder", "notebook"]
    assert host.pods == (), "no kubelet holds anything: a host without Kubernetes"
    vllm, embedder, notebook = host.containers
    assert vllm.device_requests[0]["DeviceIDs"] == ["0"]
    assert embedder.env == ("NVIDIA_VISIBLE_DEVICES=1",)
    assert notebook.device_requests[0]["Count"] == 1
    assert [p.docker for p in host.gpus[2].processes] == ["notebook"], "named by its process"
    assert [p.user for p in host.gpus[3].processes] == ["alice"]


async def test_simulate_docker_host_labels_series_with_their_containers(
        exporters: list[Exporter]) -> None:
    exp = Exporter(["--simulate", "docker-host", "-c", "200"], {})
    exporters.append(exp)
    await asyncio.to_thread(exp.wait_ready)
    status, body = await fetch(exp)
    assert status == 200
    temps = [line for line in body.splitlines() if line.startswith("DCGM_FI_DEV_GPU_TEMP{")]
    assert len(temps) == 8, "4 GPUs, and GPU 0's, GPU 1's and GPU 2's copies, and alice's"
    assert sum('gpu="3"' in t and ',user="alice"}' in t for t in temps) == 1
    assert sum('gpu="0"' in t and ',container="vllm-llama"}' in t for t in temps) == 1
    assert sum('gpu="1"' in t and ',container="embedder"}' in t for t in temps) == 1
    assert sum('gpu="2"' in t and ',container="notebook"}' in t for t in temps) == 1
    assert value(body, "gpu_enricher_process_memory_used_bytes", pid="4100",
                 container="notebook") == 30000 * 2**20, "its process is named too"
    assert value(body, "gpu_enricher_process_memory_used_bytes", pid="5200",
                 user="alice") == 12000 * 2**20, "a person's process: its user"
    assert value(body, "gpu_enricher_source_up", source="containers") == 1
    assert value(body, "gpu_enricher_runtime_containers", state="running") == 3
    assert value(body, "gpu_enricher_container_info", container="vllm-llama",
                 compose_project="inference", compose_service="vllm") == 1
    # Chargeback per container and person: GPU time of what each occupies, energy of it.
    body = await until(exp, lambda b: (value(b, "gpu_enricher_pod_gpu_seconds_total",
                                             user="alice") or 0) > 0.2)
    for name in ("vllm-llama", "embedder", "notebook"):
        assert value(body, "gpu_enricher_pod_gpu_seconds_total", container=name) > 0
        assert value(body, "gpu_enricher_pod_energy_joules_total", container=name) is not None
    assert value(body, "gpu_enricher_pod_energy_joules_total", gpu="3", user="alice") \
        is not None
    status, answer = await fetch(exp, "/api/v1/gpus")
    gpus = json.loads(answer)["gpus"]
    assert [(g["containers"], g["users"]) for g in gpus] == [
        (["vllm-llama"], []), (["embedder"], []), (["notebook"], []), ([], ["alice"])]
    accounts = [[{k: v for k, v in a.items() if k in ("container", "user")} for a in g["accounts"]]
                for g in gpus]
    assert accounts == [[{"container": "vllm-llama"}], [{"container": "embedder"}],
                        [{"container": "notebook"}], [{"user": "alice"}]]
    assert all(a["gpu_seconds"] is not None for g in gpus for a in g["accounts"])
    assert [(p["pid"], p["container"], p["user"]) for g in gpus for p in g["processes"]] == [
        (3100, "vllm-llama", None), (3300, "embedder", None), (4100, "notebook", None),
        (5200, None, "alice")]


@pytest.mark.parametrize(("entry", "problem"), [
    ("{gpus: ['0']}", "containers[0].name: required"),
    ("{name: a, gpu: ['0']}", "containers[0]: unknown key 'gpu'"),
    ("{name: a}\n  - {name: a}", "containers[1]: a second container named 'a'"),
    ("{name: a, count: lots}", "containers[0].count"),
])
def test_a_wrong_container_entry_is_named(tmp_path: Path, entry: str, problem: str) -> None:
    path = tmp_path / "host.yaml"
    path.write_text(f"gpus:\n  - {{}}\ncontainers:\n  - {entry}\n")
    with pytest.raises(ScenarioError) as caught:
        load_scenario(path)
    assert str(caught.value).startswith(f"{path}:"), caught.value
    assert problem in str(caught.value), caught.value


def test_a_process_names_a_container_of_the_scenario(tmp_path: Path) -> None:
    path = tmp_path / "host.yaml"
    path.write_text("gpus:\n  - processes: [{pid: 7, docker: ghost}]\n"
                    "containers:\n  - {name: real, count: 1}\n")
    with pytest.raises(ScenarioError, match=r"gpus\[0\]\.processes\[0\]: docker: no container "
                                            r"'ghost' in containers:"):
        load_scenario(path)


def test_a_process_user_is_a_user_name(tmp_path: Path) -> None:
    path = tmp_path / "host.yaml"
    path.write_text("gpus:\n  - processes: [{pid: 7, user: 'Bad Name'}]\n")
    with pytest.raises(ScenarioError, match=r"gpus\[0\]\.processes\[0\]\.user: expected a user"):
        load_scenario(path)
