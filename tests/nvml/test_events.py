"""The XID event thread (nvml_events.XidSource) through the real pynvml against the fake
libnvidia-ml: XIDs injected while the thread blocks in nvmlEventSetWait_v2, counts and windows,
a GPU lost during a wait, shutdown while waiting, a driver reload (nvmlShutdown + nvmlInit)."""

import asyncio
import threading
import time
from collections.abc import AsyncIterator, Callable, Iterator

import pynvml
import pytest

from gpu_enricher.health.xid import XidSnapshot, xid_window_counts
from gpu_enricher.nvml.events import XidSource
from tests.fake_nvml.build import FakeNvml

UUID0 = "GPU-fa4e0000-7953-256e-8f33-1343419b1a1c"
UUID1 = "GPU-fa4e0001-7953-256e-8f33-1343419b1a1c"
DEADLINE = 5.0


@pytest.fixture
def nvml(fake: FakeNvml, monkeypatch: pytest.MonkeyPatch) -> Iterator[FakeNvml]:
    """NVML initialised as the backend would (one reference), shut down afterwards."""
    monkeypatch.setenv("FAKE_NVML_GPU_COUNT", "2")
    monkeypatch.delenv("FAKE_NVML_XIDS", raising=False)
    fake.reset()
    pynvml.nvmlInit()
    yield fake
    while fake.init_refcount() > 0:
        pynvml.nvmlShutdown()


@pytest.fixture
async def source() -> AsyncIterator[XidSource]:
    src = XidSource(window_seconds=300.0, wait_ms=200, retry_seconds=0.3)
    yield src
    await src.close()


async def until(what: str, check: Callable[[], bool]) -> None:
    deadline = time.monotonic() + DEADLINE
    while not check():
        if time.monotonic() > deadline:
            pytest.fail(f"timed out waiting for {what}")
        await asyncio.sleep(0.01)


async def snapshot_until(src: XidSource, what: str,
                         check: Callable[[XidSnapshot], bool]) -> XidSnapshot:
    async def refreshed() -> bool:
        await src.refresh(None)
        return check(src.snapshot())

    deadline = time.monotonic() + DEADLINE
    while not await refreshed():
        if time.monotonic() > deadline:
            pytest.fail(f"timed out waiting for {what}: {src.snapshot()}")
        await asyncio.sleep(0.01)
    return src.snapshot()


async def armed(src: XidSource, fake: FakeNvml, *gpus: int) -> None:
    await until(f"GPUs {gpus} registered", lambda: all(
        fake.event_registrations(i) == 1 for i in gpus))


def waiting(fake: FakeNvml) -> int:
    return fake.calls("nvmlEventSetWait_v2")


async def test_injected_xid_reaches_a_blocked_waiter(nvml: FakeNvml, source: XidSource) -> None:
    await source.start()
    await armed(source, nvml, 0, 1)
    calls = waiting(nvml)
    await until("the thread blocked in a wait", lambda: waiting(nvml) > calls)
    started = time.monotonic()
    assert nvml.inject_xid(1, 79) == 1
    snap = await snapshot_until(source, "XID 79", lambda s: s.gpu(UUID1).last == 79)
    assert time.monotonic() - started < 0.15  # woken by the event, not by the wait timeout
    assert snap.gpu(UUID1).totals == {79: 1}
    assert snap.gpu(UUID0).last == 0 and snap.gpu(UUID0).totals == {}
    assert snap.watched == {UUID0, UUID1} and snap.events == 1
    assert source.health().up
    assert nvml.calls("nvmlDeviceRegisterEvents") == 2


async def test_counts_per_xid_and_window_expiry(nvml: FakeNvml) -> None:
    src = XidSource(window_seconds=0.5, wait_ms=200, retry_seconds=0.3)
    try:
        await src.start()
        await armed(src, nvml, 0, 1)
        for xid in (13, 13, 79):
            nvml.inject_xid(0, xid)
        nvml.inject_xid(1, 48)
        snap = await snapshot_until(src, "four events", lambda s: s.events == 4)
        assert snap.gpu(UUID0).totals == {13: 2, 79: 1}
        assert snap.gpu(UUID0).last == 79 and snap.gpu(UUID1).last == 48
        assert xid_window_counts(snap.gpu(UUID0), snap.at, 500) == {13: 2, 79: 1}
        await asyncio.sleep(0.6)
        nvml.inject_xid(0, 13)
        snap = await snapshot_until(src, "a fifth event", lambda s: s.events == 5)
        # The window forgot the first three; the totals did not.
        assert xid_window_counts(snap.gpu(UUID0), snap.at, 500) == {13: 1}
        assert snap.gpu(UUID0).totals == {13: 3, 79: 1}
        assert [x for _, x in snap.gpu(UUID0).recent] == [13]
        assert snap.gpu(UUID1).recent == () and snap.gpu(UUID1).totals == {48: 1}
    finally:
        await src.close()


async def test_scripted_xids_and_gpus_without_xid_events(
        nvml: FakeNvml, source: XidSource, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("FAKE_NVML_XIDS", "0:31,0:43")
    nvml.reset()
    nvml.set_event_types(1, 0x7)  # no XidCriticalError (0x8)
    await source.start()
    snap = await snapshot_until(source, "the script", lambda s: s.events == 2)
    assert snap.gpu(UUID0).totals == {31: 1, 43: 1} and snap.gpu(UUID0).last == 43
    assert snap.watched == {UUID0}
    assert nvml.event_registrations(1) == 0
    assert source.health().up and source.health().errors == {}


async def test_gpu_lost_during_a_wait_then_back(nvml: FakeNvml, source: XidSource) -> None:
    await source.start()
    await armed(source, nvml, 0, 1)
    calls = waiting(nvml)
    await until("a blocked wait", lambda: waiting(nvml) > calls)
    nvml.inject_xid(1, 79)
    nvml.set_lost(1)  # the blocked waiter gets XID 79, then GPU_IS_LOST
    snap = await snapshot_until(source, "GPU 1 unwatched",
                                lambda s: s.gpu(UUID1).last == 79 and s.watched == {UUID0})
    assert nvml.event_sets() == 1 and nvml.event_registrations(0) == 1
    nvml.inject_xid(0, 13)  # GPU 0 is still watched
    snap = await snapshot_until(source, "GPU 0's XID", lambda s: s.gpu(UUID0).last == 13)
    assert source.health().errors.get("GpuIsLost", 0) >= 1
    nvml.set_lost(1, False)
    await armed(source, nvml, 1)  # within retry_seconds
    nvml.inject_xid(1, 48)
    snap = await snapshot_until(source, "GPU 1 back", lambda s: s.gpu(UUID1).last == 48)
    assert snap.watched == {UUID0, UUID1}
    assert snap.gpu(UUID1).totals == {79: 1, 48: 1}


async def test_close_while_waiting_is_prompt(nvml: FakeNvml) -> None:
    src = XidSource(wait_ms=1000)
    calls = waiting(nvml)
    await src.start()
    await armed(src, nvml, 0, 1)
    await until("a blocked wait", lambda: waiting(nvml) > calls)
    await asyncio.sleep(0.05)
    started = time.monotonic()
    await src.close()
    assert time.monotonic() - started < 1.5
    assert not any(t.name == "nvml-events" for t in threading.enumerate())
    assert nvml.event_sets() == 0  # the set was freed
    assert not src.health().up


async def test_driver_reload_rearms(nvml: FakeNvml, source: XidSource) -> None:
    await source.start()
    await armed(source, nvml, 0, 1)
    calls = waiting(nvml)
    await until("a blocked wait", lambda: waiting(nvml) > calls)
    pynvml.nvmlShutdown()  # the backend's close: the session (and its set) ends
    await until("the thread noticed", lambda: not source.health().up)
    assert nvml.event_sets() == 0
    await asyncio.sleep(0.3)  # NVML stays down a while; the thread backs off
    pynvml.nvmlInit()  # the backend's open
    await armed(source, nvml, 0, 1)
    nvml.inject_xid(0, 119)
    snap = await snapshot_until(source, "an XID after the reload",
                                lambda s: s.gpu(UUID0).last == 119)
    assert snap.watched == {UUID0, UUID1}
    assert nvml.event_sets() == 1
    families = {m.name: m for m in source.families()}
    assert families["gpu_enricher_xid_event_set_rearms"].samples[0].value == 1
    assert families["gpu_enricher_xid_watched_gpus"].samples[0].value == 2


async def test_fast_reload_between_waits_rearms(nvml: FakeNvml, source: XidSource) -> None:
    """Shutdown and init back to back: the old set answers INVALID_ARGUMENT, not UNINIT."""
    await source.start()
    await armed(source, nvml, 0, 1)
    pynvml.nvmlShutdown()
    pynvml.nvmlInit()
    await until("re-armed", lambda: nvml.event_sets() == 1 and source.health().up
                and nvml.event_registrations(0) == 1)
    nvml.inject_xid(1, 94)
    await snapshot_until(source, "XID 94", lambda s: s.gpu(UUID1).last == 94)


async def test_started_before_nvml_waits_quietly(
        fake: FakeNvml, monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture) -> None:
    """The collector starts its sources before opening the backend."""
    monkeypatch.setenv("FAKE_NVML_GPU_COUNT", "1")
    fake.reset()
    assert fake.init_refcount() == 0
    src = XidSource(wait_ms=200, retry_seconds=0.3)
    try:
        await src.start()
        await asyncio.sleep(0.3)
        assert not src.health().up and src.health().errors == {}
        assert not [r for r in caplog.records if r.levelname == "WARNING"]
        pynvml.nvmlInit()
        await armed(src, fake, 0)
        fake.inject_xid(0, 79)
        await snapshot_until(src, "XID 79", lambda s: s.gpu(UUID0).last == 79)
    finally:
        await src.close()
        pynvml.nvmlShutdown()
