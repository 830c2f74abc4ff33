"""The collection cycle: sample the backend → join → render once → swap the bytes in.

`/metrics` only reads `Collector.exposition`; it never waits on NVML or on the pass. All
blocking backend calls of a pass go to one dedicated worker thread in one hop; the join and
render to another (`painting.py`); the sources' refresh order is `refresh.py`'s.
"""

import asyncio
import logging
import time
from collections.abc import Callable, Mapping, Sequence

from prometheus_client.metrics_core import Metric

from ..attribution.containers import RuntimeContainers
from ..backend import BackendUnavailable, GpuBackend
from ..exposition.query import Document, encode
from ..exposition.render import Exposition, Variant
from ..exposition.selfmetrics import picture_families
from ..fields.counters import CounterLine, CounterPlan
from ..health.clock_events import ClockEventSource
from ..health.source import HealthSource
from ..health.xid import XidSnapshot
from ..model import (
    AssignmentSnapshot,
    ClaimAccess,
    GpuSnapshot,
    JobMapping,
    NodeSnapshot,
    PodDirectory,
    ProcessTable,
    SliceDirectory,
    SourceHealth,
)
from ..sources import Announcing, Source
from .accounts import PodAccounts
from .cycle import CycleInputs
from .dump import PassDump
from .news import report_gpu_changes
from .options import CollectorOptions as CollectorOptions
from .pacing import NewsWait, PassSchedule, first_picture, still_missing
from .painting import PaintingThread, prefer_the_loop
from .picture import Painter, Picture
from .refresh import LabelSources, PassSources
from .session import BackendSession
from .watch import CounterPlanner, FieldCadence

log = logging.getLogger(__name__)

WAITING_FOR_FIRST_PASS = "waiting for the first collection pass"


class Collector:
    def __init__(
        self,
        backend: GpuBackend,
        options: CollectorOptions,
        *,
        assignments: Source[AssignmentSnapshot] | None = None,
        pods: Source[PodDirectory] | None = None,
        logs: Source[PodDirectory] | None = None,
        processes: Source[ProcessTable] | None = None,
        slices: Source[SliceDirectory] | None = None,
        xids: Source[XidSnapshot] | None = None,
        claim_access: Source[ClaimAccess] | None = None,
        others: Sequence[Source[object]] = (),
        jobs: Source[JobMapping] | None = None,
        containers: Source[RuntimeContainers] | None = None,
        dump: PassDump | None = None,
        wall_clock: Callable[[], float] = time.time,
    ) -> None:
        self.backend, self.slices = backend, slices
        self.assignments, self.pods, self.processes = assignments, pods, processes  # for tests
        self.dump = dump  # --dump-enabled: each pass's readings written to files
        # Clock-event counts and health verdicts come from the passes themselves: always kept
        # (cheap, no I/O). `others` are read by others than the join (reload.py: the -m
        # ConfigMap): refreshed, health and self-metrics only.
        self.clock_events = ClockEventSource(options.clock_events_window_ms / 1000)
        self.gpu_health = HealthSource(options.xid_window_ms / 1000)
        self._feeds = PassSources(
            LabelSources(assignments, pods, logs, processes, slices, xids, claim_access, jobs,
                         containers),
            tuple(others), self.clock_events, self.gpu_health,
            max(1.0, options.interval_seconds))
        self.sources = self._feeds.set.all
        self.options = options
        self._join = options.join()
        self._session = BackendSession(backend, options, wall_clock)
        self._planner = CounterPlanner(options.counters)
        self._schedule = PassSchedule(options.interval_seconds)
        self._cadence = FieldCadence(options.interval_seconds)
        self._cadence.use(options.field_intervals_ms)
        self.snapshot: NodeSnapshot | None = None
        self.ready = False
        self.not_ready_reason = WAITING_FOR_FIRST_PASS
        """Why /ready says 503: the same words as the log line that reported it."""
        self.running = False
        self._accounts = PodAccounts(options.interval_seconds, options.process_metrics,
                                     self._join.drop_labels, options.hostname)
        self._painting = PaintingThread(Painter(self._join, self._accounts, backend.name))
        self._news = NewsWait(asyncio.Event(), self._repaint)
        for source in self.sources:
            if isinstance(source, Announcing):
                source.subscribe(self._news.news.set)
        self.first_picture_seconds: float | None = None
        """How long the first render waited for the labelling sources (issue 32)."""
        self.document: Document = {}
        """The query API's view of the last pass (/api/v1/gpus)."""
        self._document_body: bytes | None = b"{}"
        self._document_asked = False
        self.exposition = self._render()

    # -- state -------------------------------------------------------------------------
    @property
    def plan(self) -> CounterPlan | None:
        return self._planner.plan

    def health(self) -> dict[str, SourceHealth]:
        """Per-source health: the GPU backend and every other source."""
        health = {self.backend.name: self._session.health()}
        health.update(self._feeds.set.health())
        return health

    # -- pictures (painting.py) ----------------------------------------------------------
    def _sitting(self, asked: frozenset[Variant]) -> tuple[
            CycleInputs, dict[str, SourceHealth], list[Metric], frozenset[Variant]]:
        """What a picture is painted from, gathered on the loop (the sources' state is the
        loop's): the snapshots, health, our own families; `asked`: the variants scrapers took
        of the picture before, which this one compresses in advance."""
        own = [*self._feeds.set.families(), *self._painting.families(),
               *picture_families(self.first_picture_seconds, self._news.renders)]
        return (self._feeds.inputs(self.snapshot, self.plan, self._session.last_success),
                self.health(), own, asked)

    @property
    def document_body(self) -> bytes:
        """`document` encoded: the unfiltered answer, bytes ready to serve. Encoded by the
        painter while the query API is asked; the first ask after none encodes it here."""
        self._document_asked = True
        if self._document_body is None:
            self._document_body = encode(self.document)
        return self._document_body

    def _swap(self, picture: Picture) -> Exposition:
        """The document swapped in with the bytes it goes with (the caller assigns those)."""
        self.document, self._document_body = picture.document, picture.document_body
        self._document_asked = False
        return picture.exposition

    def _render(self) -> Exposition:
        """A picture painted here, on the loop: before it runs, and a backend unavailable."""
        return self._swap(self._painting.paint_here(*self._sitting(frozenset())))

    async def _repaint(self) -> None:
        """A picture painted on the painter's thread, then swapped in; between passes, on a
        source's news, without an NVML pass (issue 32)."""
        if self.ready:
            self._painting.watch_the_loop()
            try:
                await self._paint()
            finally:
                self._painting.loop_held()

    async def _paint(self) -> None:
        sitting = self._sitting(frozenset(self.exposition.asked))
        self.exposition = self._swap(
            await self._painting.paint(*sitting, document=self._document_asked))

    # -- backend lifecycle (session.py) -------------------------------------------------
    @property
    def stall_limit_seconds(self) -> float:
        if self.options.stall_seconds is not None:
            return self.options.stall_seconds
        return max(60.0, 10 * self.options.interval_seconds)

    def stalled_for(self) -> float:
        """How long the backend call in progress has been running (0 when none is)."""
        return self._session.stalled_for()

    def _unavailable(self, reason: str) -> None:
        self.not_ready_reason = reason
        self.exposition = self._render()

    async def open_backend(self) -> None:
        """Open the backend, retrying with capped exponential backoff and jitter."""
        if await self._session.open(self._unavailable):
            self.not_ready_reason = WAITING_FOR_FIRST_PASS
        self._planner.refresh(self.backend)

    def request_pass(self) -> None:
        """A pass at once (a GPU bound or unbound: nvml/binding.py); the rate goes on from it."""
        self._schedule.now()

    def use_counters(self, counters: tuple[CounterLine, ...],
                     field_intervals_ms: Mapping[str, int] | None = None) -> None:
        """A reloaded counters file and watch groups (reload.py): planned by a pass that runs
        at once, which reads every field."""
        self._planner.replace(counters)
        self._cadence.use(field_intervals_ms or {})
        self._schedule.now()

    async def collect_once(self) -> None:
        """One pass: NVML on its thread and the concurrent sources (the kubelet's `List`)
        together, then the sources that need the new GPU snapshot (/proc), one picture; the
        loop's lag watched throughout (issue 33)."""
        self._painting.watch_the_loop()
        try:
            await self._pass()
        finally:
            self._painting.loop_held()
        if self.dump is not None:
            self.dump.offer(self.snapshot)

    async def _pass(self) -> None:
        plan = self._planner.refresh(self.backend, stale_only=True)
        planned = [m.field for m in plan.metrics]
        every_pass = self.clock_events.sampled_fields(planned).union(
            self.gpu_health.sampled_fields(planned), self._accounts.sampled_fields())
        skipped = self._cadence.skipped(plan.sampled_fields - every_pass)
        fields = plan.sampled_fields.union(every_pass) - skipped
        started = time.perf_counter()
        first = self.snapshot is None  # the kubelet waits for NVML's first answer (refresh.py)
        concurrent = [] if first else self._feeds.refresh_concurrent(self.snapshot)
        rest: asyncio.Future[None] | None = None
        try:
            await self._sample(fields, skipped, started)
            if first:
                concurrent = self._feeds.refresh_concurrent(self.snapshot)
            rest = asyncio.ensure_future(self._feeds.refresh_rest(self.snapshot, concurrent))
            if not self.ready:  # the first picture: whole when it can be, bounded (issue 32)
                await self._first_picture(rest, started)
            await rest
        finally:
            for task in (*concurrent, rest):
                if task is not None and not task.done():
                    task.cancel()
        await self._show()

    async def _first_picture(self, rest: "asyncio.Future[None]", started: float) -> None:
        """Render and turn ready once every labelling source answered, or at the bound."""
        self.first_picture_seconds = await first_picture(
            rest, lambda: still_missing(self.sources), self._news.news, started,
            self.options.label_wait_seconds, lambda: self._feeds.refresh_claims(self.snapshot))
        await self._show()

    async def _show(self) -> None:
        """Paint, swap the bytes in, ready: what the sources said so far is in it."""
        await self._paint()
        self._news.rendered()
        self.ready = True

    async def _sample(self, fields: frozenset[str], skipped: frozenset[str],
                      started: float) -> None:
        snapshot = await self._session.sample(fields, started)
        snapshot = self._cadence.carry(snapshot, skipped)  # watch groups read every Nth pass
        snapshot = report_gpu_changes(self.snapshot, snapshot)  # a GPU gone: 0 for one pass
        self.snapshot = snapshot

    async def _reopen(self, exc: BackendUnavailable) -> None:
        """The backend went away mid-run: every GPU reports down (its DCGM series vanish,
        `gpu_enricher_gpu_up` goes 0) until a pass answers again."""
        self._session.lost(exc)
        self._cadence.restart()  # a new driver session: every field read at once
        if self.snapshot is not None:
            self.snapshot = NodeSnapshot(
                tuple(GpuSnapshot(g.identity, healthy=False, error=exc.message)
                      for g in self.snapshot.gpus),
                self.snapshot.driver_version)
        self.exposition = self._render()
        await self._session.reopen(self._unavailable)
        self._planner.refresh(self.backend)

    async def run(self) -> None:
        """Start the sources, open the backend, then collect at a fixed rate, skipping slots a
        slow pass missed."""
        self.running = True
        try:
            prefer_the_loop()  # the painter's thread lets a scrape in within 0.2 ms
            await self._feeds.set.start()
            await self.open_backend()
            while True:
                try:
                    await self.collect_once()
                except BackendUnavailable as exc:  # e.g. a driver reload: start NVML over
                    await self._reopen(exc)
                except Exception as exc:  # a bug in one pass must not end collection for good
                    log.exception("collection pass failed")
                    self._session.errors["internal"] += 1
                    if not self.ready:
                        self.not_ready_reason = f"collection pass failed: {exc!r}"
                # A change a source announces meanwhile is shown at once (issue 32).
                await self._news.until(self._schedule.wait())
        finally:
            self.running = False
            self._painting.close()
            await self._feeds.set.close()
            if self.dump is not None:
                await self.dump.close()
            await self._session.close()
