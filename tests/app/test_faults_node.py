"""The node's own faults against the running exporter (issue 13): an NVML call that hangs, no
NVML library, a read-only disk, and the threads it runs. The kubelet's and the Kubernetes
API's faults are in test_faults.py.

Faults tested elsewhere at process level are not repeated: nvmlInit failing
(`test_process.py::test_without_usable_nvml_stays_up_not_ready_and_says_why`), SIGTERM while
NVML hangs (`test_shutdown.py`).
"""

import asyncio
import os
import shutil
import subprocess
import sys
import time
from pathlib import Path

import pytest

from gpu_enricher.sim.fake_kubelet.server import FakeKubelet
from tests.app.fault_helpers import (
    ERRORS,
    Process,
    fetch,
    foreign_lines,
    held,
    kubelet_args,
    nvml_env,
    threads,
    until,
)
from tests.app.fault_helpers import kubelet as kubelet  # the fixture
from tests.app.test_process import Exporter
from tests.app.test_process import exporters as exporters  # the fixture
from tests.conftest import require_tool
from tests.kubelet.test_kubelet import socket_dir as socket_dir  # the fixture
from tests.samples import value

# --- the driver ---------------------------------------------------------------------------

STALL_LIMIT = 1.5
STALLING = [sys.executable, "-c",
            "import sys; from gpu_enricher.collector import loop as collector; "
            f"collector.Collector.stall_limit_seconds = property(lambda self: {STALL_LIMIT}); "
            "from gpu_enricher.cli.main import main; sys.exit(main())"]
"""The exporter with /health's stall limit at 1.5 s instead of max(60 s, 10 intervals): the
one thing changed, so the test need not wait a minute."""


def nvml_stamp(body: str) -> float | None:
    return value(body, "gpu_enricher_last_collection_timestamp_seconds", source="nvml")


async def test_an_nvml_call_that_hangs_freezes_the_last_snapshot_on_one_thread(
        exporters: list[Exporter], fake_nvml_path: Path, tmp_path: Path) -> None:
    hang = tmp_path / "hang"  # while it exists, every NVML device call blocks
    exp = Process(["-c", "100"], nvml_env(fake_nvml_path, FAKE_NVML_HANG_FILE=str(hang)),
                  command=STALLING)
    exporters.append(exp)
    await asyncio.to_thread(exp.wait_ready)
    first = nvml_stamp(await until(exp, lambda b: nvml_stamp(b) is not None))
    await until(exp, lambda b: nvml_stamp(b) != first)  # passes come
    before = threads(exp)
    hang.touch()
    hung_at = time.monotonic()
    await asyncio.sleep(0.3)  # the pass in progress ends; the next one's first call hangs
    _, frozen = await fetch(exp)
    samples = []
    while time.monotonic() - hung_at < STALL_LIMIT + 2.0:
        status, body = await fetch(exp)
        health = await fetch(exp, "/health")
        samples.append((time.monotonic() - hung_at, status, body == frozen, health[0],
                        threads(exp)))
        await asyncio.sleep(0.1)
    assert all(status == 200 and same for _, status, same, _, _ in samples), \
        "/metrics serves the last pass, unchanged"
    assert "DCGM_FI_DEV_GPU_TEMP{" in frozen and nvml_stamp(frozen) is not None
    assert [n for *_, n in samples] == [before] * len(samples), "no thread added"
    assert {h for t, _, _, h, _ in samples if t < STALL_LIMIT - 0.3} == {200}
    # The call hangs from the pass after the file appeared (<= 0.1 s), or later on a busy
    # machine: the margin.
    assert {h for t, _, _, h, _ in samples if t > STALL_LIMIT + 0.7} == {503}
    assert (await fetch(exp, "/health"))[1].startswith("a nvml call has been running for")
    assert (await fetch(exp, "/ready"))[0] == 200
    hang.unlink()  # the call returns: collection resumes
    await until(exp, lambda b: (nvml_stamp(b) or 0) > (nvml_stamp(frozen) or 0), within=3.0)
    assert (await fetch(exp, "/health"))[0] == 200
    assert threads(exp) == before
    code, err = exp.stop()
    assert code == 0, err
    assert foreign_lines(err) == []


async def test_without_the_nvml_library_serves_not_ready_until_it_is_installed(
        exporters: list[Exporter], fake_nvml_path: Path, tmp_path: Path) -> None:
    drivers = tmp_path / "drivers"  # on the loader's path, empty: no libnvidia-ml.so.1
    drivers.mkdir()
    exp = Process(["-c", "200"], nvml_env(fake_nvml_path, LD_LIBRARY_PATH=str(drivers)))
    exporters.append(exp)
    await asyncio.to_thread(exp.wait_listening)
    missing = await until(exp, lambda b: (value(
        b, ERRORS, source="nvml", reason="LibraryNotFound") or 0) >= 1)
    status, text = await fetch(exp, "/ready")
    assert status == 503 and text.startswith("not ready: nvml backend unavailable, retrying")
    assert text.rstrip().endswith("NVML initialisation failed: NVML Shared Library Not Found")
    assert (await fetch(exp, "/health"))[0] == 200, "alive: a restart would not help"
    assert value(missing, "gpu_enricher_source_up", source="nvml") == 0
    assert "DCGM_FI_" not in missing
    shutil.copy(fake_nvml_path, drivers)  # the driver is installed (the GPU Operator's pod)
    ready = await until(exp, lambda b: 'DCGM_FI_DEV_GPU_TEMP{gpu="1",' in b, within=8.0)
    assert value(ready, "gpu_enricher_source_up", source="nvml") == 1
    assert (await fetch(exp, "/ready"))[0] == 200
    code, err = exp.stop()
    assert code == 0, err
    assert err.count("NVML initialisation failed") == 1, "one line, not one per retry"
    assert err.count("nvml backend available again") == 1, err
    assert foreign_lines(err) == []


# --- the disk -----------------------------------------------------------------------------

READ_ONLY_MOUNT = ["sh", "-c", 'mount --bind "$0" "$0" && mount -o remount,bind,ro "$0" && '
                   '! touch "$0/probe" 2>/dev/null && exec "$@"']
"""Root ignores file modes: in a mount namespace of its own, the directory is mounted
read-only over itself, checked, and the exporter run."""


async def test_a_read_only_cwd_home_and_tmpdir_are_no_matter_it_writes_no_files(
        exporters: list[Exporter], fake_nvml_path: Path, kubelet: FakeKubelet,
        tmp_path: Path) -> None:
    place = tmp_path / "read-only"
    place.mkdir()
    exporter = [sys.executable, "-m", "gpu_enricher"]
    if os.geteuid() == 0:
        command = [require_tool("unshare"), "--mount", *READ_ONLY_MOUNT, str(place), *exporter]
    else:
        place.chmod(0o555)
        command = exporter
    env = {"HOME": str(place), "TMPDIR": str(place), "TMP": str(place), "TEMP": str(place)}
    exp = Process(kubelet_args(kubelet), nvml_env(fake_nvml_path, **env), command=command,
                  cwd=place)
    exporters.append(exp)
    try:
        await asyncio.to_thread(exp.wait_ready)
        body = await until(exp, held)
        assert value(body, "gpu_enricher_source_up", source="nvml") == 1
        for path in ("/metrics", "/health", "/ready", "/api/v1/gpus", "/api/v1/gpus?pod=x"):
            assert (await fetch(exp, path))[0] == 200, path
        code, err = exp.stop()
    finally:
        place.chmod(0o755)
    assert code == 0, err
    assert foreign_lines(err) == []
    assert list(place.iterdir()) == []


# --- threads ------------------------------------------------------------------------------

CORES_SHIM = r"""
#include <stdlib.h>
#include <unistd.h>
#include <dlfcn.h>
/* sysconf with the CPU count from FAKE_CORES: what gRPC's C core sized its pool by. */
long sysconf(int name) {
    static long (*real)(int);
    const char *cores = getenv("FAKE_CORES");
    if (cores && (name == _SC_NPROCESSORS_CONF || name == _SC_NPROCESSORS_ONLN))
        return atol(cores);
    if (!real)
        real = (long (*)(int))dlsym(RTLD_NEXT, "sysconf");
    return real(name);
}
"""
OWN_THREADS = 5
"""The main thread (event loop), the NVML worker, the NVML event (XID) thread, the painter
and the loop's lag probe (issue 33: the join and render off the loop, and a probe that
measures how long it was held)."""
KUBELET_THREADS = 1
"""The kubelet client's own thread, with -k: nothing else. gRPC's C core, when it was the
client, added clamp(sysconf CPUs, 4, 16) + 2 threads: 22 on a 192-CPU node (issue 13)."""


@pytest.fixture
def cores_shim(tmp_path: Path) -> Path:
    """An LD_PRELOAD library: the process believes it has $FAKE_CORES CPUs."""
    shim, source = tmp_path / "cores.so", tmp_path / "cores.c"
    source.write_text(CORES_SHIM)
    subprocess.run([require_tool("gcc"), "-shared", "-fPIC", "-O2", "-o", str(shim),
                    str(source), "-ldl"], check=True, timeout=60)
    return shim


def loaded_libraries(exp: Exporter) -> str:
    return Path(f"/proc/{exp.proc.pid}/maps").read_text()


async def test_threads_after_start_up_with_the_kubelet_are_the_same_on_any_node(
        exporters: list[Exporter], fake_nvml_path: Path, kubelet: FakeKubelet,
        cores_shim: Path) -> None:
    args = kubelet_args(kubelet)
    runs = {
        "no -k": Process(["-c", "200"], nvml_env(fake_nvml_path)),
        "-k": Process(args, nvml_env(fake_nvml_path)),
        "-k, 192 cores": Process(args, nvml_env(fake_nvml_path, LD_PRELOAD=str(cores_shim),
                                                FAKE_CORES="192")),
    }
    exporters.extend(runs.values())
    for name, exp in runs.items():
        await asyncio.to_thread(exp.wait_ready)
        if name != "no -k":
            await until(exp, held)
    await asyncio.sleep(1.0)  # start-up over: every source has run several passes
    counts = {name: threads(exp) for name, exp in runs.items()}
    assert counts == {
        "no -k": OWN_THREADS,
        "-k": OWN_THREADS + KUBELET_THREADS,
        "-k, 192 cores": OWN_THREADS + KUBELET_THREADS,
    }, (os.sysconf("SC_NPROCESSORS_CONF"), counts)
    assert "cores.so" in loaded_libraries(runs["-k, 192 cores"]), "the shim was in force"
    for exp in runs.values():
        assert "cygrpc" not in loaded_libraries(exp), "gRPC's C core is not even loaded"
        code, err = exp.stop()
        assert code == 0, err


def test_grpc_logs_only_its_errors_unless_the_operator_says_otherwise() -> None:
    show = "import os, gpu_enricher.sim.fake_kubelet; print(os.environ['GRPC_VERBOSITY'])"
    env = {k: v for k, v in os.environ.items() if not k.startswith("GRPC_")}
    for given, expected in ((None, "ERROR"), ("DEBUG", "DEBUG")):
        run_env = env if given is None else {**env, "GRPC_VERBOSITY": given}
        shown = subprocess.run([sys.executable, "-c", show], env=run_env, capture_output=True,
                               text=True, check=True, timeout=60).stdout.strip()
        assert shown == expected
