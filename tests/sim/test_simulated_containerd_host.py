"""`--simulate containerd-host`: a containerd host's containers in two namespaces, served by the
simulated node's fake containerd (a real grpc.aio server), asked through the same client and
source as a real containerd (tests/runtime/test_containerd.py): the socket's kind found by
itself; nerdctl's name label, ctr's IDs, a container found by its cgroup; and a scenario's
`runtime:` and containerd entries checked as the rest of a scenario is."""

import asyncio
import json
from pathlib import Path

import pytest

from gpu_enricher.sim.node import docker_id
from gpu_enricher.sim.scenario import builtin_scenario, load_scenario
from gpu_enricher.sim.scenario_values import ScenarioError
from tests.app.fault_helpers import fetch
from tests.app.test_process import Exporter
from tests.app.test_process import exporters as exporters  # the fixture
from tests.samples import value


def test_the_containerd_host_runs_nerdctl_and_ctr_containers() -> None:
    host = builtin_scenario("containerd-host")
    triton, finetune, batch = host.containers
    assert (triton.container_id, triton.namespace, triton.cgroup) == (
        docker_id("triton"), "default", f"/default/{docker_id('triton')}"), "nerdctl's"
    assert (finetune.container_id, finetune.namespace, finetune.env) == (
        "finetune", "lab", ("NVIDIA_VISIBLE_DEVICES=1",)), "ctr's: its ID is its name"
    assert (batch.env, batch.cgroup) == ((), "/lab/batch")
    assert [p.docker for p in host.gpus[2].processes] == ["batch"], "found by its cgroup"


async def test_simulate_containerd_host_labels_series_with_their_containers(
        exporters: list[Exporter]) -> None:
    exp = Exporter(["--simulate", "containerd-host", "-c", "200"], {})
    exporters.append(exp)
    await asyncio.to_thread(exp.wait_ready)
    status, body = await fetch(exp)
    assert status == 200
    temps = [line for line in body.splitlines() if line.startswith("DCGM_FI_DEV_GPU_TEMP{")]
    assert len(temps) == 8, "4 GPUs, and GPU 0's, GPU 1's and GPU 2's copies, and bob's"
    for gpu, who in ((0, 'container="triton"'), (1, 'container="finetune"'),
                     (2, 'container="batch"'), (3, 'user="bob"')):
        assert sum(f'gpu="{gpu}"' in t and f",{who}}}" in t for t in temps) == 1, who
    assert value(body, "gpu_enricher_container_runtime_info", kind="containerd") == 1
    assert value(body, "gpu_enricher_runtime_containers", state="running") == 3
    assert value(body, "gpu_enricher_runtime_containers", state="with_gpus") == 2
    assert value(body, "gpu_enricher_container_info", container="triton",
                 compose_project="serving", compose_service="triton") == 1
    assert value(body, "gpu_enricher_process_memory_used_bytes", pid="6500",
                 container="batch") == 15000 * 2**20
    status, answer = await fetch(exp, "/api/v1/gpus")
    gpus = json.loads(answer)["gpus"]
    assert [(g["containers"], g["users"]) for g in gpus] == [
        (["triton"], []), (["finetune"], []), (["batch"], []), ([], ["bob"])]


@pytest.mark.parametrize(("text", "problem"), [
    ("runtime: podman\ncontainers:\n  - {name: a}\n",
     "runtime: expected one of docker, containerd, got 'podman'"),
    ("runtime: containerd\ncontainers:\n  - {name: a, gpus: ['0']}\n",
     "containers[0]: unknown key 'gpus'"),
    ("runtime: containerd\ncontainers:\n  - {name: a, nerdctl: yes please}\n",
     "containers[0].nerdctl"),
    ("containers:\n  - {name: a, namespace: lab}\n", "containers[0]: unknown key 'namespace'"),
    ("containers:\n  - {name: a, compose: web}\n", "containers[0].compose: expected project/"),
])
def test_a_wrong_runtime_or_entry_is_named(tmp_path: Path, text: str, problem: str) -> None:
    path = tmp_path / "host.yaml"
    path.write_text("gpus:\n  - {}\n" + text)
    with pytest.raises(ScenarioError) as caught:
        load_scenario(path)
    assert str(caught.value).startswith(f"{path}:"), caught.value
    assert problem in str(caught.value), caught.value
