"""DCGM_EXP_CLOCK_EVENTS_COUNT/_TOTAL as a source: after each GPU pass it records every GPU's
clock-event reasons bitmask and hands out the counts. No I/O: its input is the pass itself,
so the collector only lists it among its sources."""

import time
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass, field

from ..model import NodeSnapshot
from .event_counts import CLOCK_REASONS_FIELD, ClockEventHistory
from .pass_source import PassDerivedSource
from .xid import CLOCK_EVENTS_COUNT, CLOCK_EVENTS_TOTAL

CLOCK_EVENT_FIELDS = frozenset({CLOCK_EVENTS_COUNT, CLOCK_EVENTS_TOTAL})


@dataclass(frozen=True, slots=True)
class ClockEventCounts:
    window: Mapping[str, Mapping[str, int] | None] = field(default_factory=dict)
    """GPU UUID → reason → passes in the window with it active (None: no sample there)."""
    totals: Mapping[str, Mapping[str, int]] = field(default_factory=dict)
    """GPU UUID → reason → activations since start."""


class ClockEventSource(PassDerivedSource[ClockEventCounts]):
    """A `Source[ClockEventCounts]`, refreshed after the GPU pass with its snapshot."""

    name = "clock_events"

    def __init__(self, window_seconds: float,
                 clock: Callable[[], float] = time.monotonic) -> None:
        super().__init__(ClockEventCounts(), clock)
        self._history = ClockEventHistory(window_seconds)

    def sampled_fields(self, planned: Iterable[str]) -> frozenset[str]:
        """What the GPU pass must read for the planned fields: the bitmask, when counted."""
        return (frozenset({CLOCK_REASONS_FIELD}) if CLOCK_EVENT_FIELDS & set(planned)
                else frozenset())

    def derive(self, gpus: NodeSnapshot, now: float) -> ClockEventCounts:
        self._history.record(gpus, now)
        return ClockEventCounts(self._history.window_counts(now), self._history.totals())
