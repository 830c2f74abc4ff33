"""The one shape every source has, so the collector stays a thin cycle.

A source owns its I/O (a fetch half) and hands out immutable snapshots (built by a pure parse
half). The collector starts every source, refreshes each once per cycle (bounded, never
raising), joins their snapshots and renders; `/metrics` never reaches a source.
"""

import asyncio
import dataclasses
import logging
from collections import Counter
from collections.abc import Callable, Iterable
from typing import Protocol, TypeVar, runtime_checkable

from prometheus_client.metrics_core import Metric

from .model import NodeSnapshot, SourceHealth

CLOSE_SECONDS = 1.0
"""How long shutdown waits for the sources to close."""

log = logging.getLogger(__name__)

SnapshotT_co = TypeVar("SnapshotT_co", covariant=True)


class Source(Protocol[SnapshotT_co]):
    name: str
    """Short and fixed: the `source` label of the exporter's own metrics."""
    after_gpus: bool
    """True: refreshed after the GPU pass, with its snapshot (the /proc reader needs the
    PIDs NVML reported); False: refreshed concurrently with the GPU pass."""

    async def start(self) -> None:
        """Begin background work (a watch); return at once."""

    async def refresh(self, gpus: NodeSnapshot | None) -> None:
        """One bounded attempt per collection cycle; failures are recorded, never raised."""

    def snapshot(self) -> SnapshotT_co:
        """The current immutable view; cheap, no I/O."""

    def health(self) -> SourceHealth: ...

    def families(self) -> list[Metric]:
        """The source's own self-metrics beyond the common `source_*` families."""

    async def close(self) -> None: ...


@runtime_checkable
class Announcing(Protocol):
    """A source whose view changes between passes (a watch, a client library that finished
    loading): it says so, and the collector shows the change at once (issue 32)."""

    def subscribe(self, callback: Callable[[], None]) -> None:
        """`callback` (cheap, on the event loop) after each change of the view."""


@runtime_checkable
class Initial(Protocol):
    """A source whose view starts empty until its first answer (a list+watch): the first
    picture after a start waits for it, bounded (collector/pacing.py)."""

    @property
    def listed(self) -> bool:
        """The first answer is in."""


class SourceSet:
    """The collector's sources besides the GPU backend: started, refreshed within a deadline,
    their health merged with what the collector saw of them, closed.

    A refresh that overruns its deadline (a /proc read stuck in the kernel, an NFS log
    directory) is abandoned: the pass goes on with that source's previous snapshot, the
    timeout is counted under the source (`reason="timeout"`) and logged when it starts.
    """

    def __init__(self, sources: Iterable[Source[object] | None], deadline_seconds: float) -> None:
        self.all: tuple[Source[object], ...] = tuple(s for s in sources if s is not None)
        self.deadline_seconds = deadline_seconds
        self._errors: dict[str, Counter[str]] = {s.name: Counter() for s in self.all}
        self._failing: set[str] = set()

    async def start(self) -> None:
        for source in self.all:
            await source.start()

    async def refresh(self, source: Source[object], gpus: NodeSnapshot | None) -> None:
        """Never raises, never waits past the deadline."""
        try:
            # Not wait_for: in Python 3.11 it returns the refresh's result when the refresh ends
            # just as the collector is cancelled, and the cancellation is lost: the collector
            # ran on past SIGTERM (1 shutdown in ~15 of test_http_limits' pipelined test).
            async with asyncio.timeout(self.deadline_seconds):
                await source.refresh(gpus)
        except TimeoutError:
            self._failed(source.name, "timeout", f"did not answer within "
                         f"{self.deadline_seconds:.1f}s; keeping its previous snapshot")
            return
        except Exception:  # a bug in one source must not freeze the GPU series
            log.exception("%s refresh failed", source.name)
            self._failed(source.name, "internal", "failed (see the exception above)")
            return
        # Answering in time is not recovery while the source itself says it is down (a /proc
        # reader still stuck in the kernel answers "busy" at once).
        if source.name in self._failing and source.health().up:
            self._failing.discard(source.name)
            log.warning("the %s source answers within its deadline again", source.name)

    def _failed(self, name: str, reason: str, what: str) -> None:
        self._errors[name][reason] += 1
        if name not in self._failing:  # log when it starts, not on every pass
            self._failing.add(name)
            log.warning("the %s source %s", name, what)

    def health(self) -> dict[str, SourceHealth]:
        merged: dict[str, SourceHealth] = {}
        for source in self.all:
            health = source.health()
            extra = self._errors[source.name]
            if extra:
                errors = Counter(health.errors)
                errors.update(extra)
                health = dataclasses.replace(health, errors=dict(errors))
            merged[source.name] = health
        return merged

    def families(self) -> list[Metric]:
        return [family for source in self.all for family in source.families()]

    async def close(self, timeout_seconds: float = CLOSE_SECONDS) -> None:
        """Close every source together, whatever one of them raises, and give up on those
        still closing after `timeout_seconds` (SIGTERM must exit within 2 s)."""
        async def close_one(source: Source[object]) -> None:
            try:
                await source.close()
            except Exception:
                log.exception("closing the %s source failed", source.name)

        tasks = {asyncio.ensure_future(close_one(s)): s.name for s in self.all}
        if not tasks:
            return
        _, pending = await asyncio.wait(tasks, timeout=timeout_seconds)
        for task in pending:
            log.warning("the %s source did not close within %g s; leaving it", tasks[task],
                        timeout_seconds)
            task.cancel()
