"""`--container-labels` against a real Podman (tests/runtime/podman.py) through its Docker-
compatible socket, one flag as for Docker: a container given GPU 0 by UUID and one given GPU 1
by index (the nvidia runtime's variable, as Podman passes it) name their series; one given none
names the GPU its process uses, found by Podman's cgroup (`libpod-<id>`); a person's process
by their user; a container that starts or stops between passes shows within a moment (Podman's
event stream); a Podman that stops costs its labels, never /metrics."""

import asyncio
import subprocess
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.app.fault_helpers import Process, fetch, nvml_env, until
from tests.app.test_process import Exporter
from tests.app.test_process import exporters as exporters  # the fixture
from tests.runtime.podman import Podman
from tests.runtime.test_docker import NOBODY_NAME, SOURCE_UP, UUID0, copied, temp
from tests.runtime.test_docker import person as person  # the fixture
from tests.samples import value


@pytest.fixture
def podman(tmp_path: Path) -> Iterator[Podman]:
    runtime = Podman()
    try:
        runtime.start()
        runtime.import_image(tmp_path)
        yield runtime
    finally:
        runtime.stop()


async def test_podman_containers_name_their_series(
        exporters: list[Exporter], fake_nvml_path: Path, podman: Podman,
        person: subprocess.Popen[bytes]) -> None:
    _, counted_pid = await asyncio.to_thread(podman.run, "counted")
    exp = Process(["-c", "30000", "--container-labels", "--container-runtime-socket",
                   str(podman.socket), "--process-metrics"],
                  nvml_env(fake_nvml_path, FAKE_NVML_GPU_COUNT="4",
                           FAKE_NVML_PROCESSES=f"2={counted_pid}:512::50:10;"
                                               f"3={person.pid}:256::20:5"))
    exporters.append(exp)
    await asyncio.to_thread(exp.wait_ready)
    await until(exp, lambda b: temp(b, 2, "counted"))
    started = time.monotonic()  # passes every 30 s: the events show what follows
    await asyncio.to_thread(podman.run, "trainer", [f"NVIDIA_VISIBLE_DEVICES={UUID0}"])
    await asyncio.to_thread(podman.run, "indexer", ["NVIDIA_VISIBLE_DEVICES=1"])
    body = await until(exp, lambda b: temp(b, 0, "trainer") and temp(b, 1, "indexer"),
                       within=5.0)
    assert time.monotonic() - started < 5.0
    assert value(body, "gpu_enricher_container_runtime_info", kind="engine") == 1
    assert value(body, "gpu_enricher_process_memory_used_bytes", pid=str(counted_pid),
                 container="counted") == 512 * 2**20
    assert value(body, "gpu_enricher_process_memory_used_bytes", pid=str(person.pid),
                 user=NOBODY_NAME) == 256 * 2**20
    assert not temp(body, 2, "trainer") and not temp(body, 3, "counted")

    await asyncio.to_thread(podman.remove, "trainer")
    body = await until(exp, lambda b: not copied(b, "trainer"), within=5.0)
    assert temp(body, 1, "indexer")

    await asyncio.to_thread(podman.stop)
    # Seen when its event stream breaks; at the latest at the next pass (a Podman shutting down
    # gracefully may still answer a read after its stream ended).
    await until(exp, lambda b: value(b, SOURCE_UP, source="containers") == 0, within=40.0)
    status, body = await fetch(exp)
    assert status == 200 and temp(body, 0) and temp(body, 1)
