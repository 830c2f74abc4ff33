"""The source set: a stuck or broken source costs at most its deadline, is counted under its
own name, and never stops the others."""

import asyncio
import time

import pytest
from prometheus_client.metrics_core import Metric

from gpu_enricher.model import NodeSnapshot, SourceHealth
from gpu_enricher.sources import Source, SourceSet


class Stuck:
    """A source whose refresh blocks until released (a /proc read stuck in the kernel)."""

    after_gpus = True

    def __init__(self, name: str, behaviour: str = "hang") -> None:
        self.name = name
        self.behaviour = behaviour
        self.release = asyncio.Event()
        self.refreshes = 0
        self.closed = False
        self.up = True

    async def start(self) -> None:
        pass

    async def refresh(self, gpus: NodeSnapshot | None) -> None:
        self.refreshes += 1
        if self.behaviour == "hang":
            await self.release.wait()
        elif self.behaviour == "raise":
            raise RuntimeError("bug in the source")

    def snapshot(self) -> int:
        return self.refreshes

    def health(self) -> SourceHealth:
        return SourceHealth(up=self.up, errors={"own": 1})

    def families(self) -> list[Metric]:
        return []

    async def close(self) -> None:
        self.closed = True
        if self.behaviour == "raise":
            raise RuntimeError("close failed too")


def typed(source: Stuck) -> Source[object]:
    return source


async def test_a_stuck_source_costs_its_deadline_and_is_counted(
        caplog: pytest.LogCaptureFixture) -> None:
    stuck, fine = Stuck("proc"), Stuck("logs", "ok")
    sources = SourceSet([typed(stuck), None, typed(fine)], deadline_seconds=0.2)
    started = time.monotonic()
    for _ in range(2):
        await sources.refresh(stuck, None)
        await sources.refresh(fine, None)
    assert time.monotonic() - started < 1.0, "two deadlines of 0.2 s, not a hang"
    health = sources.health()
    assert health["proc"].errors == {"own": 1, "timeout": 2}
    assert health["logs"].errors == {"own": 1}
    assert [r.getMessage() for r in caplog.records if r.name == "gpu_enricher.sources"] == [
        "the proc source did not answer within 0.2s; keeping its previous snapshot"]
    stuck.behaviour = "ok"
    stuck.up = False  # answers at once but is still down (busy): not a recovery yet
    await sources.refresh(stuck, None)
    assert "again" not in caplog.records[-1].getMessage()
    stuck.up = True
    await sources.refresh(stuck, None)
    assert "answers within its deadline again" in caplog.records[-1].getMessage()


async def test_a_refresh_ending_as_its_caller_is_cancelled_does_not_swallow_the_cancel(
) -> None:
    """The collector calls refresh in its own task; SIGTERM cancels that task. When the refresh
    finishes in the very step the cancellation arrives, Python 3.11's wait_for returned the
    result and the cancellation was lost: the collector ran on past shutdown."""
    source = Stuck("proc")
    sources = SourceSet([typed(source)], deadline_seconds=5.0)
    caller = asyncio.create_task(sources.refresh(typed(source), None))
    await asyncio.sleep(0.01)  # waiting inside the refresh
    assert source.refreshes == 1 and not caller.done()
    source.release.set()  # the refresh can finish...
    caller.cancel()  # ...in the same step as the cancellation
    with pytest.raises(asyncio.CancelledError):
        await caller


async def test_a_broken_source_is_counted_and_every_source_is_closed() -> None:
    broken, fine = Stuck("kubelet", "raise"), Stuck("logs", "ok")
    sources = SourceSet([typed(broken), typed(fine)], deadline_seconds=1)
    await sources.refresh(broken, None)
    assert sources.health()["kubelet"].errors == {"own": 1, "internal": 1}
    await sources.close()
    assert broken.closed and fine.closed, "a close that raises does not skip the others"


async def test_clock_event_counts_say_up_only_after_a_pass_with_an_answering_gpu() -> None:
    from gpu_enricher.health.clock_events import ClockEventSource
    from gpu_enricher.model import DeviceIdentity, GpuSnapshot

    source = ClockEventSource(60)
    assert not source.health().up, "no pass yet"
    gpu = DeviceIdentity(0, "GPU-0", "00000000:18:00.0", "NVIDIA H100")
    await source.refresh(NodeSnapshot((GpuSnapshot(gpu, values={
        "DCGM_FI_DEV_CLOCKS_EVENT_REASONS": 0x4}),)))
    assert source.health().up
    assert source.snapshot().window["GPU-0"] == {"power_cap": 1}
    await source.refresh(NodeSnapshot((GpuSnapshot(gpu, healthy=False),)))
    assert not source.health().up, "every GPU failed this pass"
