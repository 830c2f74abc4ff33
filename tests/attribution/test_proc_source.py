"""ProcessSource and LogNameSource against real directories: a fake /proc and log root in
tmp_path (files on disk, no patched I/O), plus the live /proc for what only it can show."""

import asyncio
import contextlib
import logging
import os
import shutil
import subprocess
import sys
import threading
import time
from pathlib import Path

import pytest

from gpu_enricher.attribution.podlogs import LogNameSource
from gpu_enricher.attribution.proc_source import HINT, ProcessSource
from gpu_enricher.attribution.procfs import ProcReader
from gpu_enricher.model import (
    ContainerRef,
    DeviceIdentity,
    GpuSnapshot,
    HostProcess,
    NodeSnapshot,
    PodDirectory,
    PodMeta,
    ProcessSample,
    ProcessTable,
)
from gpu_enricher.sources import Source

ID_A = "40c03570b6f4c30bc8d69923d37ee698f5cfcced92c7b7df1c47f6f7887378a9"
ID_B = "f45298cd514d1930c4fe3afc4412e59547f7e3148fddd22ca33cefce046eb830"
UID_A = "dde1244b-5bb5-4297-b544-85f3bc0d80bf"
UID_B = "4a163a05-439d-484b-8e53-2968bc15824f"
CGROUP_A = ("0::/kubepods.slice/kubepods-burstable.slice/kubepods-burstable-poddde1244b_5bb5_"
            f"4297_b544_85f3bc0d80bf.slice/cri-containerd-{ID_A}.scope\n")
CGROUP_B = f"11:devices:/kubepods/besteffort/pod{UID_B}/{ID_B}\n0::/\n"
HOST_CGROUP = "0::/system.slice/containerd.service\n"


def put_process(root: Path, pid: int, start_time: int, comm: str, cgroup: str) -> None:
    """One `/proc/<pid>` as the kernel lays it out (the files the reader opens)."""
    directory = root / str(pid)
    directory.mkdir(parents=True, exist_ok=True)
    fields = " ".join(["S", "1", str(pid), str(pid)] + ["0"] * 15)
    (directory / "stat").write_text(f"{pid} ({comm}) {fields} {start_time} 0 0\n")
    (directory / "comm").write_text(comm + "\n")
    (directory / "cgroup").write_text(cgroup)


def node(*pids: int, mig_pids: tuple[int, ...] = (), lost_pids: tuple[int, ...] = ()
         ) -> NodeSnapshot:
    """GPU 0 runs `pids`, MIG GPU 1 `mig_pids` (instance 1), lost GPU 2 `lost_pids`."""
    def identity(index: int) -> DeviceIdentity:
        return DeviceIdentity(index, f"GPU-{index}", f"00000000:0{index}:00.0", "NVIDIA H100")

    def samples(pids: tuple[int, ...], gi: int | None = None) -> tuple[ProcessSample, ...]:
        return tuple(ProcessSample(pid, 1 << 20, gpu_instance_id=gi) for pid in pids)

    return NodeSnapshot((
        GpuSnapshot(identity(0), processes=samples(pids)),
        GpuSnapshot(identity(1), mig_enabled=True, processes=samples(mig_pids, 1)),
        GpuSnapshot(identity(2), healthy=False, error="GPU_IS_LOST",
                    processes=samples(lost_pids)),
    ))


@pytest.fixture
def proc(tmp_path: Path) -> Path:
    root = tmp_path / "proc"
    root.mkdir()
    put_process(root, 100, 5000, "python train.py", CGROUP_A)
    put_process(root, 200, 6000, "worker", CGROUP_B)
    put_process(root, 300, 7000, "Xorg", HOST_CGROUP)
    return root


def metric_values(source: Source[object]) -> dict[str, float]:
    return {s.name: s.value for family in source.families() for s in family.samples}


async def test_labels_host_processes_mig_and_unhealthy_gpus(proc: Path) -> None:
    put_process(proc, 400, 8000, "on-lost-gpu", CGROUP_A)
    source: Source[ProcessTable] = ProcessSource(proc)
    await source.refresh(node(100, 300, 999, mig_pids=(200,), lost_pids=(400,)))
    assert source.snapshot().processes == {
        100: HostProcess(100, 5000, "python train.py", ContainerRef(UID_A, ID_A)),
        200: HostProcess(200, 6000, "worker", ContainerRef(UID_B, ID_B)),
        300: HostProcess(300, 7000, "Xorg", None, cgroup="/system.slice/containerd.service"),
    }  # 999 vanished; 400 is on a GPU whose pass failed; a host process keeps its cgroup
    health = source.health()
    assert (health.up, health.collections, dict(health.errors)) == (True, 1, {})
    assert health.last_duration_seconds is not None
    assert metric_values(source) == {
        "gpu_enricher_proc_processes": 3, "gpu_enricher_proc_cache_entries": 3,
        "gpu_enricher_proc_vanished_processes_total": 1}


async def test_a_cached_process_costs_only_its_stat(proc: Path) -> None:
    source = ProcessSource(proc)
    await source.refresh(node(100))
    # Were comm or cgroup read again, the missing files would drop the process.
    (proc / "100" / "cgroup").unlink()
    (proc / "100" / "comm").unlink()
    await source.refresh(node(100))
    assert source.snapshot().processes[100].container == ContainerRef(UID_A, ID_A)
    assert source.vanished == 0


async def test_a_reused_pid_is_read_again(proc: Path) -> None:
    source = ProcessSource(proc)
    await source.refresh(node(100))
    put_process(proc, 100, 9999, "other", CGROUP_B)  # same PID, a new process
    await source.refresh(node(100))
    assert source.snapshot().processes[100] == HostProcess(100, 9999, "other",
                                                           ContainerRef(UID_B, ID_B))


async def test_gone_and_unlisted_pids_leave_the_cache(proc: Path) -> None:
    source = ProcessSource(proc)
    await source.refresh(node(100, 200, 300))
    assert source.reader.cache_entries == 3
    await source.refresh(node(100, 200))  # 300 still runs but left the GPU
    assert source.reader.cache_entries == 2
    shutil.rmtree(proc / "200")  # 200 exited
    await source.refresh(node(100, 200))
    assert source.reader.cache_entries == 1
    assert set(source.snapshot().processes) == {100}
    assert source.vanished == 1


def write_only_kernel_file() -> Path | None:
    """A sysfs attribute even root cannot open for reading (the kernel answers EACCES)."""
    for candidate in ("/sys/bus/pci/rescan", "/sys/kernel/mm/ksm/run"):
        path = Path(candidate)
        try:
            path.open("rb").close()
        except PermissionError:
            return path
        except OSError:
            continue
    return None


async def test_an_unreadable_cgroup_leaves_the_process_without_a_container(proc: Path) -> None:
    cgroup = proc / "200" / "cgroup"
    if os.geteuid() != 0:
        cgroup.chmod(0)
    else:  # root ignores file modes: point the file at one the kernel refuses to read
        target = write_only_kernel_file()
        if target is None:
            pytest.skip("running as root and no write-only kernel file to read")
        cgroup.unlink()
        cgroup.symlink_to(target)
    source = ProcessSource(proc)
    for _ in range(2):
        await source.refresh(node(200))
        assert source.snapshot().processes == {200: HostProcess(200, 6000, "worker", None)}
    assert source.health().errors == {"permission": 2}  # not cached: retried every pass
    assert source.reader.cache_entries == 0


async def test_other_unreadable_files(proc: Path) -> None:
    (proc / "100" / "cgroup").unlink()
    (proc / "100" / "cgroup").mkdir()  # reading it fails with EISDIR
    (proc / "200" / "stat").write_text("garbage")
    source = ProcessSource(proc)
    await source.refresh(node(100, 200))
    assert source.snapshot().processes == {100: HostProcess(100, 5000, "python train.py", None)}
    assert source.health().errors == {"unreadable": 1, "malformed": 1}


async def test_a_missing_proc_root_is_logged_once_with_the_hint(
        tmp_path: Path, caplog: pytest.LogCaptureFixture) -> None:
    root = tmp_path / "absent"
    source = ProcessSource(root)
    with caplog.at_level(logging.WARNING):
        await source.refresh(node(100))
        await source.refresh(node(100))
    assert [r.getMessage().count(HINT) for r in caplog.records] == [1]
    health = source.health()
    assert (health.up, dict(health.errors), health.collections) == (False, {"no_proc_root": 2}, 0)
    caplog.clear()
    put_process(root, 100, 5000, "python", CGROUP_A)
    with caplog.at_level(logging.WARNING):
        await source.refresh(node(100))
    assert source.health().up
    assert "again" in caplog.text
    assert set(source.snapshot().processes) == {100}


async def test_no_host_pids_hints_at_hostpid(proc: Path, caplog: pytest.LogCaptureFixture
                                             ) -> None:
    source = ProcessSource(proc)
    with caplog.at_level(logging.WARNING):
        for _ in range(3):
            await source.refresh(node(11, 12))
    assert [r.getMessage().count(HINT) for r in caplog.records] == [1]
    assert source.health().up  # the root is readable; the PIDs are not in it


async def test_an_unexpected_failure_is_counted_not_raised(
        proc: Path, caplog: pytest.LogCaptureFixture) -> None:
    class Broken(ProcReader):
        def read(self, pids: object) -> ProcessTable:
            raise RuntimeError("bug")

    source = ProcessSource(proc, Broken(proc))
    with caplog.at_level(logging.WARNING):
        await source.refresh(node(100))
        await source.refresh(node(100))
    assert source.health().errors == {"internal": 2}
    assert not source.health().up
    assert len(caplog.records) == 1
    assert source.snapshot() == ProcessTable()


async def test_no_gpu_pass_means_no_processes(proc: Path) -> None:
    source = ProcessSource(proc)
    await source.refresh(node(100))
    await source.refresh(None)
    assert source.snapshot() == ProcessTable()


async def test_idle_gpus_cost_no_thread(proc: Path, tmp_path: Path,
                                        monkeypatch: pytest.MonkeyPatch) -> None:
    source = ProcessSource(proc)
    await source.refresh(node(100))

    def no_thread(*args: object) -> None:
        raise AssertionError("a thread hop with no GPU process to read")

    monkeypatch.setattr(asyncio, "to_thread", no_thread)
    await source.refresh(node())
    assert source.snapshot() == ProcessTable() and source.reader.cache_entries == 0
    health = source.health()
    assert (health.up, health.collections, dict(health.errors)) == (True, 2, {})
    absent = ProcessSource(tmp_path / "absent")  # a wrong root is still reported
    await absent.refresh(node())
    assert absent.health().errors == {"no_proc_root": 1}


async def test_a_stuck_read_is_not_joined_by_more_threads(
        proc: Path, caplog: pytest.LogCaptureFixture) -> None:
    put_process(proc, 500, 9000, "stuck", CGROUP_B)
    cgroup = proc / "500" / "cgroup"
    cgroup.unlink()
    os.mkfifo(cgroup)  # opening it for reading blocks until a writer comes, like a stuck read
    stuck = True

    def unstick() -> None:
        nonlocal stuck
        if stuck:  # the blocked reader counts: a non-blocking writer may open the FIFO
            fd = os.open(cgroup, os.O_WRONLY | os.O_NONBLOCK)
            os.write(fd, CGROUP_B.encode())
            os.close(fd)
            stuck = False

    source = ProcessSource(proc)
    try:
        await source.refresh(node(100))  # a table to keep
        with pytest.raises(TimeoutError):  # the collector's deadline on a refresh
            await asyncio.wait_for(source.refresh(node(100, 500)), 0.2)
        threads = threading.active_count()
        with caplog.at_level(logging.WARNING):
            for _ in range(2):
                started = time.perf_counter()
                await asyncio.wait_for(source.refresh(node(100, 500)), 1.0)
                assert time.perf_counter() - started < 0.1, "returned at once"
        assert threading.active_count() == threads, "no thread started behind the stuck one"
        assert dict(source.health().errors) == {"busy": 2} and not source.health().up
        assert set(source.snapshot().processes) == {100}, "the last table is kept"
        assert [r.getMessage().count("still running") for r in caplog.records] == [1]

        unstick()
        deadline = time.monotonic() + 3.0
        while source.reader.busy:
            assert time.monotonic() < deadline, "the released read did not end"
            await asyncio.sleep(0.01)
        cgroup.unlink()
        cgroup.write_text(CGROUP_B)
        await asyncio.wait_for(source.refresh(node(100, 500)), 1.0)
        assert source.snapshot().processes == {
            100: HostProcess(100, 5000, "python train.py", ContainerRef(UID_A, ID_A)),
            500: HostProcess(500, 9000, "stuck", ContainerRef(UID_B, ID_B)),
        }
        assert source.health().up
    finally:
        with contextlib.suppress(OSError):  # never leave a thread blocked on the FIFO
            unstick()


def test_the_live_proc() -> None:
    """This process reads as itself; an exited child is simply absent."""
    child = subprocess.run([sys.executable, "-c", "import os; print(os.getpid())"],
                           capture_output=True, text=True, check=True)
    reader = ProcReader(Path("/proc"))
    table = reader.read([os.getpid(), int(child.stdout)])
    me = table.processes[os.getpid()]
    assert me.start_time > 0
    assert me.name == Path("/proc/self/comm").read_text().strip()
    assert set(table.processes) == {os.getpid()}
    assert reader.last.vanished == 1


# --- LogNameSource --------------------------------------------------------------------------

async def test_log_names(tmp_path: Path) -> None:
    (tmp_path / "containers").mkdir()
    (tmp_path / "containers" / f"train-0_ml_worker-{ID_A}.log").symlink_to("/nonexistent")
    (tmp_path / "pods" / f"ml_train-0_{UID_A}" / "worker").mkdir(parents=True)
    source: Source[PodDirectory] = LogNameSource(tmp_path)
    await source.refresh(None)
    snapshot = source.snapshot()
    assert snapshot.pods == (PodMeta(UID_A, "ml", "train-0", containers={ID_A: "worker"}),)
    assert snapshot.synced
    assert source.health().up


async def test_log_names_with_one_directory(tmp_path: Path) -> None:
    (tmp_path / "pods" / f"ml_train-0_{UID_A}").mkdir(parents=True)
    source = LogNameSource(tmp_path)
    await source.refresh(None)
    assert source.snapshot().pods == (PodMeta(UID_A, "ml", "train-0"),)
    assert source.snapshot().synced
    assert metric_values(source) == {"gpu_enricher_logs_pods": 1,
                                     "gpu_enricher_logs_containers": 0}


async def test_log_root_without_either_directory(tmp_path: Path,
                                                 caplog: pytest.LogCaptureFixture) -> None:
    source = LogNameSource(tmp_path)
    with caplog.at_level(logging.WARNING):
        await source.refresh(None)
        await source.refresh(None)
    assert [r.getMessage().count("--kubelet-log-root") for r in caplog.records] == [1]
    health = source.health()
    assert (health.up, dict(health.errors)) == (False, {"no_log_dirs": 2})
    assert not source.snapshot().synced


async def test_an_unlistable_directory_is_counted(tmp_path: Path) -> None:
    (tmp_path / "containers").symlink_to(tmp_path / "containers")  # ELOOP, even for root
    (tmp_path / "pods" / f"ml_train-0_{UID_A}").mkdir(parents=True)
    source = LogNameSource(tmp_path)
    await source.refresh(None)
    assert source.snapshot().pods == (PodMeta(UID_A, "ml", "train-0"),)
    assert source.health().errors == {"unreadable": 1}
    assert source.health().up


async def test_log_names_kept_but_not_current_after_the_root_goes(tmp_path: Path) -> None:
    (tmp_path / "pods" / f"ml_train-0_{UID_A}").mkdir(parents=True)
    source = LogNameSource(tmp_path)
    await source.refresh(None)
    shutil.rmtree(tmp_path / "pods")
    await source.refresh(None)
    assert source.snapshot().pods == (PodMeta(UID_A, "ml", "train-0"),)
    assert not source.snapshot().synced
