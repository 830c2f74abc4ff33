"""How long the event loop is held while a pass runs: what a scrape arriving then waits for
before its handler starts (issue 33).

A probe thread posts a callback to the loop (`call_soon_threadsafe`, the self-pipe wakeup a
readable socket also causes) and waits until it ran; the time between is the loop's lag at
that moment, whether the loop was running our Python or waiting for the GIL held by another
thread. One post per `PERIOD_SECONDS`, only while a pass or a repaint runs, so an idle exporter
pays nothing; the longest lag of each pass is what the self-metric observes. Stdlib only:
`bench/pass_cost.py` loads this file into older trees to measure them the same way.
"""

import asyncio
import threading
import time
from typing import Final

PERIOD_SECONDS: Final = 0.001
"""Between one post's arrival and the next post: a hold longer than this is always seen."""


class LoopLagProbe:
    """Started and stopped on the loop; `stop` returns the longest lag seen since `start`."""

    def __init__(self, loop: asyncio.AbstractEventLoop,
                 period_seconds: float = PERIOD_SECONDS) -> None:
        self._loop = loop
        self._period = period_seconds
        self._running = threading.Event()
        self._arrived = threading.Event()
        self._wake = threading.Condition()
        self._longest = 0.0
        self._posted: float | None = None
        """When the post still on its way was made: at `stop`, a lag that has not ended."""
        self._closed = False
        self._thread: threading.Thread | None = None

    def start(self) -> None:
        if self._thread is None:
            self._thread = threading.Thread(target=self._probe, name="loop-lag-probe",
                                            daemon=True)
            self._thread.start()
        self._longest = 0.0
        with self._wake:
            self._running.set()
            self._wake.notify()

    def stop(self) -> float:
        """The longest lag since `start`, in seconds; the probe rests until the next one."""
        self._running.clear()
        posted = self._posted
        if posted is not None:  # still waiting: the pass's last stretch held the loop
            self._longest = max(self._longest, time.perf_counter() - posted)
        return self._longest

    def close(self) -> None:
        self._closed = True
        with self._wake:
            self._running.set()
            self._wake.notify()

    def _landed(self, posted: float) -> None:
        lag = time.perf_counter() - posted
        self._posted = None
        if lag > self._longest and self._running.is_set():
            self._longest = lag
        self._arrived.set()

    def _probe(self) -> None:
        while not self._closed:
            with self._wake:
                while not self._running.is_set():
                    self._wake.wait()
            if self._closed:
                return
            self._arrived.clear()
            self._posted = posted = time.perf_counter()
            try:
                self._loop.call_soon_threadsafe(self._landed, posted)
            except RuntimeError:  # the loop closed
                return
            # A loop that never runs it again (stopped) must not keep this thread for ever.
            self._arrived.wait(1.0)
            time.sleep(self._period)


LAG_BUCKETS: Final = (0.0005, 0.001, 0.002, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 1.0)
"""Seconds: fine below a millisecond, where a scrape should find the loop."""


class LagHistogram:
    """Each pass's (and repaint's) longest lag, counted in `LAG_BUCKETS`."""

    __slots__ = ("counts", "observed", "total")

    def __init__(self) -> None:
        self.counts = [0] * len(LAG_BUCKETS)
        """Cumulative, as Prometheus' buckets: observations at most each bound."""
        self.observed = 0
        self.total = 0.0

    def observe(self, seconds: float) -> None:
        for i, bound in enumerate(LAG_BUCKETS):
            if seconds <= bound:
                self.counts[i] += 1
        self.observed += 1
        self.total += seconds
