"""The collection cycle: sample the backend → join → render once → swap the bytes in.

`/metrics` only reads `Collector.exposition`; it never waits on NVML. All blocking backend
calls of a pass go to one dedicated worker thread in one hop.
"""

import asyncio
import logging
import time
from collections.abc import Callable, Mapping, Sequence

from ..backend import BackendUnavailable, GpuBackend
from ..exposition.query import Document
from ..exposition.render import Exposition
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
from ..sources import Announcing, Source, SourceSet
from .accounts import PodAccounts
from .cycle import CycleInputs
from .dump import PassDump
from .first_picture import NewsWait, first_picture, still_missing
from .news import report_gpu_changes
from .options import CollectorOptions as CollectorOptions
from .pacing import PassSchedule
from .picture import Painter
from .planner import CounterPlanner
from .session import BackendSession
from .watch import FieldCadence

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
        dump: PassDump | None = None,
        wall_clock: Callable[[], float] = time.time,
    ) -> None:
        self.backend = backend
        self.assignments = assignments
        self.pods = pods
        self.logs = logs
        self.processes = processes
        self.slices = slices
        self.xids = xids
        self.claim_access = claim_access
        self.jobs = jobs
        self.dump = dump  # --dump-enabled: each pass's readings written to files
        # Clock-event counts and health verdicts come from the passes themselves: always kept
        # (cheap, no I/O).
        self.clock_events = ClockEventSource(options.clock_events_window_ms / 1000)
        self.gpu_health = HealthSource(options.xid_window_ms / 1000)
        # A source's refresh may take most of a pass, never more (the kubelet's own deadline
        # is shorter); a stuck one is abandoned and counted.
        self._sources = SourceSet((assignments, pods, logs, processes, slices, xids, jobs,
                                   claim_access, self.clock_events, self.gpu_health,
                                   # Read by others than the join (reload.py: the -m
                                   # ConfigMap): refreshed, health and self-metrics only.
                                   *others),
                                  max(1.0, options.interval_seconds))
        self.sources = self._sources.all
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
        self._painter = Painter(self._join, self._accounts, backend.name)
        self._news = NewsWait(asyncio.Event(), self._render_news)
        for source in self.sources:
            if isinstance(source, Announcing):
                source.subscribe(self._news.news.set)
        self.first_picture_seconds: float | None = None
        """How long the first render waited for the labelling sources (issue 32)."""
        self.document: Document = {}
        """The query API's view of the last pass (/api/v1/gpus)."""
        self.document_body = b"{}"
        """`document` encoded, once per pass: the unfiltered answer is bytes ready to serve."""
        self.exposition = self._render()

    # -- state -------------------------------------------------------------------------
    @property
    def plan(self) -> CounterPlan | None:
        return self._planner.plan

    def health(self) -> dict[str, SourceHealth]:
        """Per-source health: the GPU backend and every other source."""
        health = {self.backend.name: self._session.health()}
        health.update(self._sources.health())
        return health

    def _inputs(self) -> CycleInputs:
        return CycleInputs(
            self.snapshot, self.plan,
            self.assignments.snapshot() if self.assignments is not None else None,
            self.pods.snapshot() if self.pods is not None else None,
            self.logs.snapshot() if self.logs is not None else None,
            self.processes.snapshot() if self.processes is not None else None,
            self._session.last_success,
            self.slices.snapshot() if self.slices is not None else None,
            self.xids.snapshot() if self.xids is not None else None,
            self.clock_events.snapshot(), time.monotonic(), self.gpu_health.snapshot(),
            self.claim_access.snapshot() if self.claim_access is not None else None,
            self.jobs.snapshot() if self.jobs is not None else None)

    def _render(self) -> Exposition:
        """One picture of every source's snapshot (picture.py); the document swapped in with
        the bytes it goes with."""
        own = [*self._sources.families(),
               *picture_families(self.first_picture_seconds, self._news.renders)]
        picture = self._painter.paint(self._inputs(), self.health(), own)
        self.document, self.document_body = picture.document, picture.document_body
        return picture.exposition

    def _render_news(self) -> None:
        """Between passes, a source's news: the join and render again, no NVML pass."""
        if self.ready:
            self.exposition = self._render()

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
        together, then the sources that need the new GPU snapshot (/proc), one render."""
        plan = self._planner.refresh(self.backend, stale_only=True)
        planned = [m.field for m in plan.metrics]
        every_pass = self.clock_events.sampled_fields(planned).union(
            self.gpu_health.sampled_fields(planned), self._accounts.sampled_fields())
        skipped = self._cadence.skipped(plan.sampled_fields - every_pass)
        fields = plan.sampled_fields.union(every_pass) - skipped
        started = time.perf_counter()
        # The concurrent sources are handed the GPUs of the pass before; on the first pass,
        # after NVML's first answer, so the kubelet's thread never lists without knowing
        # which device IDs name this node's GPUs (issue 26).
        first = self.snapshot is None
        concurrent = [] if first else self._refresh_concurrent()
        rest: asyncio.Future[None] | None = None
        try:
            await self._sample(fields, skipped, started)
            if first:
                concurrent = self._refresh_concurrent()
            rest = asyncio.ensure_future(self._refresh_rest(concurrent))
            if not self.ready:  # the first picture: whole when it can be, bounded (issue 32)
                await self._first_picture(rest, started)
            await rest
        finally:
            for task in (*concurrent, rest):
                if task is not None and not task.done():
                    task.cancel()
        self._show()
        if self.dump is not None:
            self.dump.offer(self.snapshot)

    async def _refresh_rest(self, concurrent: list[asyncio.Future[None]]) -> None:
        """A pass's sources after its NVML answer: those derived from it, those that need it
        (/proc), the concurrent ones' end (the kubelet's List), then the claims it names."""
        derived: tuple[Source[object], ...] = (self.clock_events, self.gpu_health)
        for pure in derived:  # from the pass itself, no I/O
            await self._sources.refresh(pure, self.snapshot)
        last = (*derived, self.claim_access)
        for source in self.sources:
            if source.after_gpus and source not in last:
                await self._sources.refresh(source, self.snapshot)
        await asyncio.gather(*concurrent)  # each bounded by the source set's deadline
        await self._refresh_claims()

    async def _refresh_claims(self) -> None:
        if self.claim_access is not None:  # reads the claims of this pass's kubelet List
            await self._sources.refresh(self.claim_access, self.snapshot)

    async def _first_picture(self, rest: "asyncio.Future[None]", started: float) -> None:
        """Render and turn ready once every labelling source answered, or at the bound."""
        self.first_picture_seconds = await first_picture(
            rest, lambda: still_missing(self.sources), self._news.news, started,
            self.options.label_wait_seconds, self._refresh_claims)
        self._show()

    def _show(self) -> None:
        """Render, swap the bytes in, ready: what the sources said so far is in it."""
        self.exposition = self._render()
        self._news.rendered()
        self.ready = True

    def _refresh_concurrent(self) -> list[asyncio.Future[None]]:
        return [asyncio.ensure_future(self._sources.refresh(s, self.snapshot))
                for s in self.sources if not s.after_gpus]

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
            await self._sources.start()
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
            await self._sources.close()
            if self.dump is not None:
                await self.dump.close()
            await self._session.close()
