"""`--container-labels` against a real containerd (tests/runtime/containerd.py), asked over its
own gRPC API, and the exporter as a process over the fake libnvidia-ml. One socket flag: the
exporter finds that containerd answers there. Containers in two namespaces: one given GPU 0 by
UUID (`NVIDIA_VISIBLE_DEVICES`, named by nerdctl's name label), one given GPU 1 by index, one
given none whose process uses GPU 2 (found by its cgroup, `/<namespace>/<id>`: containerd's own
IDs are not 64-hex); a person's process on GPU 3 is named by its user. A task that stops is
unnamed; a containerd that stops costs its labels after a while, never /metrics."""

import asyncio
import subprocess
from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.app.fault_helpers import Process, nvml_env, until
from tests.app.test_process import Exporter
from tests.app.test_process import exporters as exporters  # the fixture
from tests.runtime.containerd import Containerd
from tests.runtime.test_docker import (
    COMPOSE,
    NOBODY_NAME,
    UUID0,
    copied,
    shown_at_once,
    slow_passes,
    stopped_runtime_costs_its_labels,
    temp,
)
from tests.runtime.test_docker import person as person  # the fixture
from tests.samples import value

TRAINER_ID = "9" * 64  # as nerdctl names a container: 64 hex digits, its name a label


@pytest.fixture
def containerd() -> Iterator[Containerd]:
    runtime = Containerd()
    try:
        runtime.start()
        yield runtime
    finally:
        runtime.stop()


async def test_containerd_tasks_name_their_series(
        exporters: list[Exporter], fake_nvml_path: Path, containerd: Containerd,
        person: subprocess.Popen[bytes]) -> None:
    counted_pid = await asyncio.to_thread(containerd.run, "lab", "counted")
    exp = Process(["-c", "200", "--container-labels", "--container-runtime-socket",
                   str(containerd.socket), "--process-metrics"],
                  nvml_env(fake_nvml_path, FAKE_NVML_GPU_COUNT="4",
                           FAKE_NVML_PROCESSES=f"2={counted_pid}:512::50:10;"
                                               f"3={person.pid}:256::20:5"))
    exporters.append(exp)
    await asyncio.to_thread(exp.wait_ready)
    await asyncio.to_thread(containerd.run, "default", TRAINER_ID,
                            [f"NVIDIA_VISIBLE_DEVICES={UUID0}"], ["nerdctl/name=trainer"])
    await asyncio.to_thread(containerd.run, "lab", "indexer", ["NVIDIA_VISIBLE_DEVICES=1"],
                            [f"{k}={v}" for k, v in COMPOSE.items()])
    body = await until(exp, lambda b: temp(b, 0, "trainer") and temp(b, 1, "indexer") and
                       temp(b, 2, "counted"))
    for gpu in range(4):
        assert temp(body, gpu), "each series is kept without a container too"
    assert value(body, "gpu_enricher_container_runtime_info", kind="containerd") == 1
    assert value(body, "gpu_enricher_runtime_containers", state="running") == 3
    assert value(body, "gpu_enricher_runtime_containers", state="with_gpus") == 2
    assert value(body, "gpu_enricher_container_info", container="indexer",
                 compose_project="search", compose_service="indexer") == 1, "nerdctl compose's"
    assert not temp(body, 2, "trainer") and not temp(body, 3, "indexer")
    assert value(body, "gpu_enricher_process_memory_used_bytes", pid=str(counted_pid),
                 container="counted") == 512 * 2**20, "its process is named with it"
    assert value(body, "gpu_enricher_process_memory_used_bytes", pid=str(person.pid),
                 user=NOBODY_NAME) == 256 * 2**20, "a person's process: its user, by name"
    assert value(body, "gpu_enricher_pod_gpu_seconds_total", container="counted") is not None, \
        "GPU time per container"

    await asyncio.to_thread(containerd.remove, "default", TRAINER_ID)
    body = await until(exp, lambda b: not copied(b, "trainer"))
    assert temp(body, 1, "indexer")

    await stopped_runtime_costs_its_labels(exp, containerd.stop, containerd.socket)


async def test_a_task_is_named_on_containerd_s_event_not_at_the_next_pass(
        exporters: list[Exporter], fake_nvml_path: Path, containerd: Containerd) -> None:
    """Passes every 30 s: a task that starts or stops between them is shown within a moment,
    told by containerd's event stream (`Events.Subscribe`, every namespace)."""
    exp = await slow_passes(exporters, fake_nvml_path, containerd.socket)
    await shown_at_once(
        exp, lambda: containerd.run("lab", "late", [f"NVIDIA_VISIBLE_DEVICES={UUID0}"]), "late")
    # As `nerdctl rename` does: its name label rewritten (/containers/update).
    await asyncio.to_thread(containerd.label, "lab", "late", "nerdctl/name=renamed")
    await until(exp, lambda b: temp(b, 0, "renamed") and not copied(b, "late"), within=5.0)
    await asyncio.to_thread(containerd.remove, "lab", "late")
    await until(exp, lambda b: not copied(b, "renamed"), within=5.0)
