"""GPUs bound to and unbound from the nvidia driver while the exporter runs: the driver's sysfs
directory (a temporary one here) says so, NVML starts over, and the GPU's series appear or
vanish at the next pass, without a restart. The fake libnvidia-ml.so.1 enumerates its GPUs at
each nvmlInit that takes its refcount from 0 (FAKE_NVML_GPU_COUNT), as NVML does."""

import asyncio
import logging
import time
from collections.abc import Callable
from pathlib import Path

import pytest

from gpu_enricher.collector.loop import Collector, CollectorOptions
from gpu_enricher.fields.counters import parse_counters
from gpu_enricher.nvml import backend as nvml_backend
from gpu_enricher.nvml.backend import NvmlBackend
from gpu_enricher.nvml.binding import BindingWatch, bound_devices, watch_bindings
from tests.fake_nvml.build import FakeNvml
from tests.samples import samples

CSV = "DCGM_FI_DEV_GPU_TEMP, gauge, temperature\n"
ADDRESSES = ("0000:18:00.0", "0000:28:00.0", "0000:38:00.0")


def test_the_bound_set_is_the_pci_addresses_in_the_drivers_directory(tmp_path: Path) -> None:
    for name in (*ADDRESSES[:2], "bind", "unbind", "new_id", "module", "0000:zz:00.0"):
        (tmp_path / name).touch()
    assert bound_devices(tmp_path) == frozenset(ADDRESSES[:2])
    assert bound_devices(tmp_path / "absent") is None  # no sysfs, no nvidia driver


def test_a_change_is_told_from_the_second_look_on_and_not_while_unreadable() -> None:
    watch = BindingWatch()
    two, three = frozenset(ADDRESSES[:2]), frozenset(ADDRESSES)
    assert watch.change(two) == (frozenset(), frozenset())  # the first look: a baseline
    assert watch.change(three) == ({ADDRESSES[2]}, frozenset())
    assert watch.change(None) == (frozenset(), frozenset())  # unreadable: the baseline stays
    assert watch.change(two) == (frozenset(), {ADDRESSES[2]})
    assert watch.change(two) == (frozenset(), frozenset())


def gpus(collector: Collector) -> set[str]:
    return {s.labels["gpu"] for s in samples(collector.exposition.text.decode(),
                                             "DCGM_FI_DEV_GPU_TEMP")}


async def test_a_gpu_bound_or_unbound_while_running_appears_or_vanishes(
        fake: FakeNvml, monkeypatch: pytest.MonkeyPatch, tmp_path: Path,
        caplog: pytest.LogCaptureFixture) -> None:
    monkeypatch.setattr(nvml_backend, "UNBIND_GRACE_SECONDS", 0.05)
    caplog.set_level(logging.INFO, logger="gpu_enricher")
    for address in ADDRESSES[:2]:
        (tmp_path / address).symlink_to(tmp_path)  # as sysfs: a link to the device
    monkeypatch.setenv("FAKE_NVML_GPU_COUNT", "2")
    fake.reset()
    collector = Collector(NvmlBackend(driver_dir=tmp_path), CollectorOptions(
        interval_seconds=1, hostname=None, counters=parse_counters(CSV, "t.csv")))
    await collector.open_backend()
    try:
        await collector.collect_once()
        assert gpus(collector) == {"0", "1"}
        await collector.collect_once()
        assert fake.calls("nvmlShutdown") == 0, "no change, no restart"

        (tmp_path / ADDRESSES[2]).symlink_to(tmp_path)  # bound: NVML would see it once restarted
        monkeypatch.setenv("FAKE_NVML_GPU_COUNT", "3")
        await collector.collect_once()
        assert gpus(collector) == {"0", "1", "2"}
        assert fake.calls("nvmlShutdown") == 1 and fake.init_refcount() == 1

        (tmp_path / ADDRESSES[2]).unlink()  # unbound: NVML lets go of it, then starts over
        monkeypatch.setenv("FAKE_NVML_GPU_COUNT", "2")
        await collector.collect_once()
        assert gpus(collector) == {"0", "1"}
        text = collector.exposition.text.decode()
        assert [s.labels["gpu"] for s in samples(text, "gpu_enricher_gpu_up")] == ["0", "1"]
        assert fake.calls("nvmlShutdown") == 2 and fake.init_refcount() == 1
    finally:
        collector.backend.close()
    changes = [r.getMessage() for r in caplog.records if "restarting NVML" in r.getMessage()]
    assert len(changes) == 2 and ADDRESSES[2] in changes[0] and ADDRESSES[2] in changes[1]
    # Gone on purpose: no "stopped answering" ERROR, no gpu_up 0 pass; one INFO line says so.
    ended = [r.getMessage() for r in caplog.records if "its series end" in r.getMessage()]
    assert len(ended) == 1 and ended[0].startswith("GPU 2 (GPU-fa4e0002-"), ended
    assert all(r.levelno == logging.INFO for r in caplog.records if r.name.startswith("gpu_"))


async def test_between_passes_a_bind_starts_a_pass_at_once(
        fake: FakeNvml, monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    """--gpu-bind-unbind-poll-interval: with a 60 s collection interval, a GPU bound is
    served within a poll or two, not at the next scheduled pass."""
    for address in ADDRESSES[:2]:
        (tmp_path / address).symlink_to(tmp_path)
    monkeypatch.setenv("FAKE_NVML_GPU_COUNT", "2")
    fake.reset()
    collector = Collector(NvmlBackend(driver_dir=tmp_path), CollectorOptions(
        interval_seconds=60, hostname=None, counters=parse_counters(CSV, "t.csv")))
    running = asyncio.create_task(collector.run())
    polling = asyncio.create_task(watch_bindings(tmp_path, 0.05, collector.request_pass))
    try:
        await until(lambda: collector.ready and gpus(collector) == {"0", "1"})
        (tmp_path / ADDRESSES[2]).symlink_to(tmp_path)
        monkeypatch.setenv("FAKE_NVML_GPU_COUNT", "3")
        await until(lambda: gpus(collector) == {"0", "1", "2"})
    finally:
        for task in (polling, running):
            task.cancel()
        await asyncio.gather(polling, running, return_exceptions=True)


async def until(condition: Callable[[], bool], within: float = 5.0) -> None:
    deadline = time.monotonic() + within
    while not condition():
        assert time.monotonic() < deadline, "not within the time"
        await asyncio.sleep(0.02)
