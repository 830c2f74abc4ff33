"""The pace of pictures: passes at a fixed rate (slots a slow pass missed skipped, a pass at
once on request: a reloaded counters file, reload.py), and the pictures between them.

The first picture after a start, and every picture after news: true from the first scrape
(issue 32).

At start, `/ready` turned 200 with the first NVML pass while the sources that label series had
not answered yet: the kubelet's first `List` (GPUs held through the device plugin), the
ResourceSlices (GPUs held through DRA claims), the pod cache's first list (processes' pods, pod
labels), the claims' admin access (a claim not yet asked about labels nothing). Series went out
without their pod for up to an interval (30 s at dcgm-exporter's `-c 30000`), and Prometheus
stored them as series of their own. Waiting a little is cheap; a wrong picture is not.

- `first_picture`: the first render waits until the pass's source refreshes are done and no
  source is still without its first answer, or until the bound (`--startup-label-wait`), then
  renders with what it has; what was missing is said once.
- `NewsWait`: between passes, a change a source announces (a list or event of a watch, the
  claims' client loaded) is shown at once: the join and render run again on the snapshots in
  hand, no NVML pass, at most every `gap` seconds.
"""

import asyncio
import logging
import time
from collections.abc import Awaitable, Callable, Iterable
from typing import Any, Final

from ..sources import Initial, Source


async def wait_event(event: asyncio.Event, within: float | None) -> bool:
    """Whether `event` is set within `within` seconds (None: no limit). Not asyncio.wait_for: in
    Python 3.11 a cancellation that meets its timeout can come out as a TimeoutError, and a
    loop that suppresses that would never end (a collector or reloader task that ignored
    its cancel hung a test's clean-up)."""
    if event.is_set():
        return True
    waiter = asyncio.ensure_future(event.wait())
    try:
        done, _ = await asyncio.wait({waiter}, timeout=within)
    finally:
        waiter.cancel()
    return bool(done)


class PassSchedule:
    def __init__(self, interval_seconds: float) -> None:
        self.interval = interval_seconds
        self._due = time.monotonic()
        self._early = asyncio.Event()

    def now(self) -> None:
        """Run the next pass at once; the fixed rate goes on from it."""
        self._early.set()

    async def wait(self) -> None:
        """Until the next pass is due (or asked for)."""
        now = time.monotonic()
        self._due += self.interval
        if self._due < now:  # a slow pass: skip the missed slots, keep the phase
            self._due = now + self.interval - ((now - self._due) % self.interval)
        if await wait_event(self._early, self._due - now):
            self._early.clear()
            self._due = time.monotonic()


log = logging.getLogger(__name__)

NEWS_GAP_SECONDS: Final = 0.5
"""The least time between two renders that news (not a pass) asks for: a burst of pod events
is one render, and a node's churn costs at most two renders a second."""


def still_missing(sources: Iterable[Source[object]]) -> list[str]:
    """The sources whose view is still without its first answer."""
    return [s.name for s in sources if isinstance(s, Initial) and not s.listed]


async def first_picture(rest: "asyncio.Future[None]", missing: Callable[[], list[str]],
                        news: asyncio.Event, started: float, bound: float,
                        again: Callable[[], Awaitable[None]]) -> float:
    """Until `rest` (the first pass's source refreshes) is done and `missing()` names nothing,
    or `bound` seconds after `started` (the pass's `time.perf_counter()`: its NVML answer
    counts). `news` wakes it when a source answers; `again` re-reads what an answer that came
    after the pass's refresh may complete (the claims, once their client loaded). What was
    still missing at the bound is logged once. Returns the seconds since `started`."""
    while not (rest.done() and not missing()):
        remaining = started + bound - time.perf_counter()
        if remaining <= 0:
            lacking = [*([] if rest.done() else ["this pass's sources"]), *missing()]
            if bound > 0:
                log.warning("first picture after %.1f s without the first answer of: %s "
                            "(their labels follow as they come; --startup-label-wait)",
                            time.perf_counter() - started, ", ".join(lacking))
            break
        waiter: asyncio.Future[Any] = asyncio.ensure_future(news.wait())
        waiting = {waiter} if rest.done() else {rest, waiter}
        try:
            await asyncio.wait(waiting, timeout=remaining, return_when=asyncio.FIRST_COMPLETED)
        finally:
            waiter.cancel()
        if news.is_set():
            news.clear()
            if rest.done():  # else the pass's own refreshes, still running, read it
                await again()
    return time.perf_counter() - started


class NewsWait:
    """The wait between passes: returns when the next pass is due; meanwhile renders again
    (`render`) when a source announced a change, at most every `gap` seconds."""

    def __init__(self, news: asyncio.Event, render: Callable[[], Awaitable[None]],
                 gap: float = NEWS_GAP_SECONDS) -> None:
        self.news = news
        self._render = render
        self._gap = gap
        self.last_render = time.monotonic()
        self.renders = 0
        """Renders news asked for, between passes."""

    def rendered(self) -> None:
        """A render happened (a pass's): the news before it is in it."""
        self.news.clear()
        self.last_render = time.monotonic()

    async def until(self, pass_due: Awaitable[None]) -> None:
        due = asyncio.ensure_future(pass_due)
        try:
            while not due.done():
                waiter = asyncio.ensure_future(self.news.wait())
                try:
                    await asyncio.wait({due, waiter}, return_when=asyncio.FIRST_COMPLETED)
                finally:
                    waiter.cancel()
                if due.done() or not self.news.is_set():
                    continue
                wait = self.last_render + self._gap - time.monotonic()
                if wait > 0:  # a burst of events: one render for all of them
                    await asyncio.wait({due}, timeout=wait)
                    if due.done():
                        break
                self.renders += 1  # counted in the picture it paints
                await self._render()
                self.rendered()
            await due
        finally:
            if not due.done():
                due.cancel()
