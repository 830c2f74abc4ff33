"""The GPU backend's session for the collector: every blocking call on one worker thread, the
open retried with capped backoff and jitter, the reopen after the backend is lost mid-run, and
what /health, /ready and the self-metrics say about it. The collector (loop.py) decides what a
pass does; this decides when the backend may be asked.
"""

import asyncio
import logging
import random
import time
from collections import Counter
from collections.abc import Callable

from ..backend import BackendUnavailable, GpuBackend
from ..model import NodeSnapshot, SourceHealth
from ..worker import BlockingWorker
from .options import CollectorOptions

log = logging.getLogger(__name__)

MAX_REOPEN_DELAY_SECONDS = 300.0
CLOSE_SECONDS = 0.5
"""The longest shutdown waits for the backend's close: SIGTERM exits within 2 s."""


class BackendSession:
    def __init__(self, backend: GpuBackend, options: CollectorOptions,
                 wall_clock: Callable[[], float] = time.time) -> None:
        self.backend = backend
        self.options = options
        self._wall_clock = wall_clock
        self._worker = BlockingWorker("nvml")
        self.opened = False
        self.error: str | None = None
        """Why the backend is unavailable now (the last open or pass that failed)."""
        self.lost_streak = 0  # reopens since the backend last answered a pass
        self.errors: Counter[str] = Counter()
        self.collections = 0
        self.last_duration: float | None = None
        self.last_success: float | None = None

    @property
    def name(self) -> str:
        return self.backend.name

    def health(self) -> SourceHealth:
        return SourceHealth(up=self.opened and self.error is None,
                            collections=self.collections, errors=dict(self.errors),
                            last_duration_seconds=self.last_duration,
                            last_success_timestamp=self.last_success)

    def stalled_for(self) -> float:
        """How long the backend call in progress has been running (0 when none is)."""
        started = self._worker.running_since
        return 0.0 if started is None else time.monotonic() - started

    async def call(self, fn: Callable[[], object]) -> object:
        return await asyncio.wrap_future(self._worker.submit(fn))

    async def open(self, unavailable: Callable[[str], None]) -> bool:
        """Open the backend, retrying with capped exponential backoff and jitter;
        `unavailable(reason)` after each failed try (the collector renders and says why).
        Whether it recovered: it had failed, and this was no reopen after a loss."""
        delay = self.options.retry_initial_seconds
        while True:
            try:
                await self.call(self.backend.open)
            except BackendUnavailable as exc:
                self.errors[exc.reason] += 1
                reason = (f"{self.name} backend unavailable, retrying with backoff up "
                          f"to {self.options.retry_max_seconds:.0f}s: {exc.message}")
                if self.error != exc.message:  # log on change, not on every retry
                    log.error("%s", reason)
                self.error = exc.message
                unavailable(reason)
                await asyncio.sleep(delay * random.uniform(0.8, 1.2))
                delay = min(delay * 2, self.options.retry_max_seconds)
                continue
            recovered = self.error is not None and not self.lost_streak
            if recovered:
                log.warning("%s backend available again", self.name)
            if not self.lost_streak:  # after a reopen: up once a pass answers (`sample`)
                self.error = None
            self.opened = True
            return recovered

    async def sample(self, fields: frozenset[str], started: float) -> NodeSnapshot:
        snapshot = await self.call(lambda: self.backend.sample(fields))
        assert isinstance(snapshot, NodeSnapshot)
        for error in snapshot.errors:
            self.errors[error.reason] += 1
        if self.lost_streak:
            log.warning("%s backend answers again after %d reopen(s)", self.name,
                        self.lost_streak)
            self.lost_streak, self.error = 0, None
        self.collections += 1
        self.last_success = self._wall_clock()
        self.last_duration = time.perf_counter() - started
        return snapshot

    def lost(self, exc: BackendUnavailable) -> None:
        """The backend went away mid-run; `reopen` follows once the collector has shown it."""
        self.lost_streak += 1
        (log.error if self.lost_streak == 1 else log.debug)(
            "%s backend lost: %s; reopening", self.name, exc.message)
        self.errors[exc.reason] += 1
        self.opened = False
        self.error = exc.message

    async def reopen(self, unavailable: Callable[[str], None]) -> bool:
        """A driver that keeps failing after a reopen is retried with backoff doubling from one
        interval to 32 (at most 5 minutes) and logged once, not every pass (issue 13,
        defect 7)."""
        await self.call(self.backend.close)
        if self.lost_streak > 1:
            interval = self.options.interval_seconds
            await asyncio.sleep(min(interval * 2 ** (self.lost_streak - 2), interval * 32,
                                    MAX_REOPEN_DELAY_SECONDS))
        return await self.open(unavailable)

    async def close(self) -> None:
        # A call still running (hung in the driver) would hold the close up behind it: it
        # is abandoned with its daemon thread (issue 13, defect 1).
        if self._worker.running_since is None:
            try:
                async with asyncio.timeout(CLOSE_SECONDS):  # not wait_for: see SourceSet
                    await self.call(self.backend.close)
            except TimeoutError:
                log.warning("closing the %s backend did not finish within %g s; leaving it",
                            self.name, CLOSE_SECONDS)
        else:
            log.warning("exiting with a %s call still running", self.name)
        self._worker.stop()
