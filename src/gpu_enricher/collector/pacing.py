"""The collection loop's pace: passes at a fixed rate, slots a slow pass missed skipped, and a
pass at once on request (a reloaded counters file, reload.py)."""

import asyncio
import time


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
