"""DCGM_EXP_CLOCK_EVENTS_COUNT/_TOTAL as a source: after each GPU pass it records every GPU's
clock-event reasons bitmask and hands out the counts. No I/O: its input is the pass itself,
so the collector only lists it among its sources."""

import time
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass, field

from prometheus_client.metrics_core import Metric

from .event_counts import CLOCK_REASONS_FIELD, ClockEventHistory
from .model import NodeSnapshot, SourceHealth
from .xid import CLOCK_EVENTS_COUNT, CLOCK_EVENTS_TOTAL

CLOCK_EVENT_FIELDS = frozenset({CLOCK_EVENTS_COUNT, CLOCK_EVENTS_TOTAL})


@dataclass(frozen=True, slots=True)
class ClockEventCounts:
    window: Mapping[str, Mapping[str, int] | None] = field(default_factory=dict)
    """GPU UUID → reason → passes in the window with it active (None: no sample there)."""
    totals: Mapping[str, Mapping[str, int]] = field(default_factory=dict)
    """GPU UUID → reason → activations since start."""


class ClockEventSource:
    """A `Source[ClockEventCounts]`, refreshed after the GPU pass with its snapshot."""

    name = "clock_events"
    after_gpus = True

    def __init__(self, window_seconds: float,
                 clock: Callable[[], float] = time.monotonic) -> None:
        self._history = ClockEventHistory(window_seconds)
        self._clock = clock
        self._counts = ClockEventCounts()
        self._passes = 0
        self._up = False  # a pass with at least one answering GPU was recorded

    @staticmethod
    def sampled_fields(planned: Iterable[str]) -> frozenset[str]:
        """What the GPU pass must read for the planned fields: the bitmask, when counted."""
        return (frozenset({CLOCK_REASONS_FIELD}) if CLOCK_EVENT_FIELDS & set(planned)
                else frozenset())

    async def start(self) -> None:
        pass

    async def refresh(self, gpus: NodeSnapshot | None) -> None:
        self._up = gpus is not None and any(g.healthy for g in gpus.gpus)
        if gpus is None:
            return
        now = self._clock()
        self._history.record(gpus, now)
        self._counts = ClockEventCounts(self._history.window_counts(now),
                                        self._history.totals())
        self._passes += 1

    def snapshot(self) -> ClockEventCounts:
        return self._counts

    def health(self) -> SourceHealth:
        return SourceHealth(up=self._up, collections=self._passes)

    def families(self) -> list[Metric]:
        return []

    async def close(self) -> None:
        pass
