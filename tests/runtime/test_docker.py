"""`--container-labels` against a real Docker Engine (tests/runtime/dockerd.py) and the exporter
as a process over the fake libnvidia-ml: a container given GPU 0 by UUID (the nvidia runtime's
variable) and one given GPU 1 by index (`--gpus device=1`) name their GPUs' series (dcgm-
exporter's rules); one started with a count (`--gpus 1`) names the GPU its process uses (found
through /proc/<pid>/cgroup); a container that stops is unnamed; a runtime that stops costs its
labels after a while, never /metrics; a person's process in no container is named by its user
(the host's passwd)."""

import asyncio
import os
import pwd
import subprocess
import time
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest

from tests.app.fault_helpers import Process, fetch, nvml_env, until
from tests.app.test_process import Exporter
from tests.app.test_process import exporters as exporters  # the fixture
from tests.runtime.dockerd import Dockerd, gpu_request
from tests.samples import value

UUID0 = "GPU-fa4e0000-7953-256e-8f33-1343419b1a1c"
NOBODY = 65534
NOBODY_NAME = pwd.getpwuid(NOBODY).pw_name  # the host's passwd, as the exporter reads it
SOURCE_UP = "gpu_enricher_source_up"
COMPOSE = {"com.docker.compose.project": "search", "com.docker.compose.service": "indexer"}


@pytest.fixture
def dockerd(tmp_path: Path) -> Iterator[Dockerd]:
    engine = Dockerd()
    try:
        engine.start()
        engine.import_image(tmp_path)
        yield engine
    finally:
        engine.stop()


@pytest.fixture
def person() -> Iterator[subprocess.Popen[bytes]]:
    """A person's process in no container (the fake library lists it on GPU 3)."""
    process = subprocess.Popen(["sleep", "300"], preexec_fn=lambda: os.setuid(NOBODY))
    yield process
    process.kill()
    process.wait()


def temp(body: str, gpu: int, container: str | None = None) -> bool:
    """Whether GPU `gpu`'s temperature series is there, with `container` or without one."""
    want = f',container="{container}"}}' if container else None
    for line in body.splitlines():
        if line.startswith(f'DCGM_FI_DEV_GPU_TEMP{{gpu="{gpu}",'):
            has = ',container="' in line
            if (want is None and not has) or (want is not None and want in line):
                return True
    return False


def copied(body: str, container: str) -> bool:
    """Whether a DCGM series is copied for `container` (its energy account may outlive it: a
    share owed until the GPU's counter next moves)."""
    return any(line.startswith("DCGM_") and f'container="{container}"' in line
               for line in body.splitlines())


async def test_containers_given_gpus_name_their_series(
        exporters: list[Exporter], fake_nvml_path: Path, dockerd: Dockerd,
        person: subprocess.Popen[bytes]) -> None:
    # Started with a count (`--gpus 1`): named through its process, which the fake library
    # lists on GPU 2 (its PID must be known before the library loads).
    _, counted_pid = await asyncio.to_thread(
        dockerd.run, "counted", device_requests=[gpu_request(count=1)])
    exp = Process(["-c", "200", "--container-labels", "--container-runtime-socket",
                   str(dockerd.socket), "--process-metrics"],
                  nvml_env(fake_nvml_path, FAKE_NVML_GPU_COUNT="4",
                           FAKE_NVML_PROCESSES=f"2={counted_pid}:512::50:10;"
                                               f"3={person.pid}:256::20:5"))
    exporters.append(exp)
    await _named(exp, dockerd, counted_pid, person.pid)


async def _named(exp: Exporter, dockerd: Dockerd, counted_pid: int, person_pid: int) -> None:
    await asyncio.to_thread(exp.wait_ready)
    await asyncio.to_thread(dockerd.run, "trainer", [f"NVIDIA_VISIBLE_DEVICES={UUID0}"])
    await asyncio.to_thread(dockerd.run, "indexer", device_requests=[gpu_request("1")],
                            labels=COMPOSE)
    body = await until(exp, lambda b: temp(b, 0, "trainer") and temp(b, 1, "indexer") and
                       value(b, "gpu_enricher_runtime_containers", state="running") == 3)
    for gpu in range(4):
        assert temp(body, gpu), "each series is kept without a container too"
    assert temp(body, 2, "counted"), "found through its process on GPU 2"
    dcgm = "\n".join(line for line in body.splitlines() if line.startswith("DCGM_"))
    assert dcgm.count('container="trainer"') == dcgm.count('container="indexer"') == \
        dcgm.count('container="counted"') > 1, "every DCGM series of the GPU is copied"
    assert not temp(body, 2, "trainer") and not temp(body, 3, "indexer")
    assert not temp(body, 3, "counted"), "a count alone names no GPU by itself (dcgm-exporter)"
    assert value(body, "gpu_enricher_process_memory_used_bytes", pid=str(counted_pid),
                 container="counted") == 512 * 2**20, "its process is named with it"
    assert value(body, "gpu_enricher_process_memory_used_bytes", pid=str(person_pid),
                 user=NOBODY_NAME) == 256 * 2**20, "a person's process: its user, by name"
    assert sum(line.startswith('DCGM_FI_DEV_GPU_TEMP{gpu="3",') and
               f',user="{NOBODY_NAME}"}}' in line for line in body.splitlines()) == 1, \
        "GPU 3's series are copied for the person using it"
    assert value(body, "gpu_enricher_runtime_containers", state="with_gpus") == 2
    assert value(body, "gpu_enricher_container_info", container="indexer",
                 compose_project="search", compose_service="indexer") == 1, "Compose's labels"
    assert value(body, "gpu_enricher_container_info", container="trainer",
                 compose_project="", compose_service="") == 1

    await asyncio.to_thread(dockerd.remove, "trainer")
    body = await until(exp, lambda b: not copied(b, "trainer"))
    assert temp(body, 1, "indexer")

    await stopped_runtime_costs_its_labels(exp, dockerd.stop, dockerd.socket)


async def stopped_runtime_costs_its_labels(exp: Exporter, stop: Callable[[], None],
                                           socket: Path) -> None:
    """The runtime stopped: the source is down and says why, `indexer`'s copies go after the
    bound, /metrics keeps answering with every GPU, and the log says so once."""
    await asyncio.to_thread(stop)
    body = await until(exp, lambda b: value(b, SOURCE_UP, source="containers") == 0)
    assert value(body, "gpu_enricher_collection_errors_total", source="containers",
                 reason="unavailable")
    body = await until(exp, lambda b: not copied(b, "indexer"))
    status, body = await fetch(exp)
    assert status == 200 and temp(body, 0) and temp(body, 1)
    code, err = exp.stop()
    assert code == 0, err
    assert f"the container runtime at {socket} cannot be asked" in err, err


async def test_a_container_is_named_on_its_runtime_s_event_not_at_the_next_pass(
        exporters: list[Exporter], fake_nvml_path: Path, dockerd: Dockerd) -> None:
    """Passes every 30 s: a container that starts or stops between them is shown within a
    moment, told by the runtime's event stream (`GET /events`), not half a minute later."""
    exp = await slow_passes(exporters, fake_nvml_path, dockerd.socket)
    await shown_at_once(exp, lambda: dockerd.run("late", [f"NVIDIA_VISIBLE_DEVICES={UUID0}"]),
                        "late")
    await asyncio.to_thread(dockerd.remove, "late")
    await until(exp, lambda b: not copied(b, "late"), within=5.0)


async def slow_passes(exporters: list[Exporter], fake_nvml_path: Path, socket: Path) -> Exporter:
    """The exporter on two fake GPUs, passes every 30 s, once it has asked the runtime."""
    exp = Process(["-c", "30000", "--container-labels", "--container-runtime-socket",
                   str(socket)], nvml_env(fake_nvml_path, FAKE_NVML_GPU_COUNT="2"))
    exporters.append(exp)
    await asyncio.to_thread(exp.wait_ready)
    await until(exp, lambda b: value(b, SOURCE_UP, source="containers") == 1)
    return exp


async def shown_at_once(exp: Exporter, start: Callable[[], object], name: str) -> None:
    """`start` runs a container given GPU 0: its copies show within 5 s, told by an event."""
    started = time.monotonic()
    await asyncio.to_thread(start)
    body = await until(exp, lambda b: temp(b, 0, name), within=5.0)
    assert time.monotonic() - started < 5.0
    assert (value(body, "gpu_enricher_runtime_events_total") or 0) >= 1
