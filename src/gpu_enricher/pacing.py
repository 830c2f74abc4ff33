"""The collection loop's pace: passes at a fixed rate, slots a slow pass missed skipped, and a
pass at once on request (a reloaded counters file, reload.py)."""

import asyncio
import contextlib
import time


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
        with contextlib.suppress(TimeoutError):
            await asyncio.wait_for(self._early.wait(), self._due - now)
        if self._early.is_set():
            self._early.clear()
            self._due = time.monotonic()
