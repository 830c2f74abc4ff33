"""Pictures painted off the event loop: the loop answers scrapes, it does not compute (issue 33).

The join, both renders, the gzip bodies scrapers ask for and the JSON document run on one
daemon thread of their own (`worker.BlockingWorker`, as NVML's calls do); the loop awaits the
finished picture and swaps it in with one assignment. A thread alone is not enough under the
GIL: a loop thread woken by a scrape waits for the painter to let go of the interpreter, by
default up to 5 ms (`sys.getswitchinterval`). `SWITCH_INTERVAL_SECONDS` makes that wait 0.2 ms;
the painter holds no lock for long otherwise (its JSON is encoded in pieces, zlib lets go of
the GIL). docs/architecture.md says how the designs compared (bench/pass_cost.py).

Every pass and repaint runs `lag.LoopLagProbe`, whose longest lag per pass goes to
`gpu_enricher_event_loop_lag_seconds`.
"""

import asyncio
import contextlib
import os
import sys
import threading
from collections.abc import Callable, Mapping
from typing import Final

from prometheus_client.metrics_core import Metric

from ..exposition.render import Variant
from ..exposition.selfmetrics import lag_family
from ..model import SourceHealth
from ..worker import BlockingWorker
from .cycle import CycleInputs
from .lag import LAG_BUCKETS, LagHistogram, LoopLagProbe
from .picture import Painter, Picture

SWITCH_INTERVAL_SECONDS: Final = 0.0002
"""How long the painter may keep the GIL from a loop thread that wants it (CPython: 5 ms).
Only threads that contend pay for the shorter slices; the others wait in the kernel."""

PAINTER_NICE: Final = 10
"""The painter thread's niceness (Linux, the thread alone): on a core it shares with the loop,
the loop's thread runs first when both can (CFS weights 1024 against 110)."""


def prefer_the_loop(seconds: float = SWITCH_INTERVAL_SECONDS) -> None:
    """Shorten the interpreter's switch interval (process-wide; never lengthens it)."""
    if sys.getswitchinterval() > seconds:
        sys.setswitchinterval(seconds)


class PaintingThread:
    """One picture at a time, on its own thread; how long each pass held the loop."""

    def __init__(self, painter: Painter) -> None:
        self.painter = painter
        self._worker = BlockingWorker("painter")
        self._lock = threading.Lock()  # a picture painted here and one on the loop at start
        self.lag = LagHistogram()
        self._probe: LoopLagProbe | None = None
        self._niced = False

    def paint_here(self, inputs: CycleInputs, health: Mapping[str, SourceHealth],
                   own: list[Metric], asked: frozenset[Variant] = frozenset(),
                   document: bool = False) -> Picture:
        """On the calling thread: the picture before the loop runs, and a backend that is
        unavailable (rare, and nothing else to show meanwhile). `asked`: the bodies to
        compress now; `document`: encode the query API's document now."""
        with self._lock:
            picture = self.painter.paint(inputs, health, own, document)
            picture.exposition.compress(asked)
            return picture

    async def paint(self, inputs: CycleInputs, health: Mapping[str, SourceHealth],
                    own: list[Metric], asked: frozenset[Variant], document: bool) -> Picture:
        future = self._worker.submit(self._yielding(
            lambda: self.paint_here(inputs, health, own, asked, document)))
        picture = await asyncio.wrap_future(future)
        assert isinstance(picture, Picture)
        return picture

    def _yielding(self, job: Callable[[], Picture]) -> Callable[[], Picture]:
        """`job`, on a painter thread that yields the CPU to the loop's thread: one core shared
        by both (a CPU limit of one) otherwise gives the painter its full share while a scrape
        waits. Set once, from the painter's thread itself (Linux: a thread's own niceness)."""
        def run() -> Picture:
            if not self._niced:
                self._niced = True
                with contextlib.suppress(OSError, AttributeError):  # not Linux, or refused
                    os.setpriority(os.PRIO_PROCESS, threading.get_native_id(), PAINTER_NICE)
            return job()
        return run

    # -- the loop's lag while a pass runs ------------------------------------------------
    def watch_the_loop(self) -> None:
        """From now until `loop_held`, the probe watches the loop (a pass or a repaint)."""
        if self._probe is None:
            self._probe = LoopLagProbe(asyncio.get_running_loop())
        self._probe.start()

    def loop_held(self) -> None:
        if self._probe is not None:
            self.lag.observe(self._probe.stop())

    def families(self) -> list[Metric]:
        if not self.lag.observed:
            return []
        return [lag_family(LAG_BUCKETS, self.lag.counts, self.lag.observed, self.lag.total)]

    def close(self) -> None:
        self._worker.stop()
        if self._probe is not None:
            self._probe.close()

