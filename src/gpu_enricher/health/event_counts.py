"""Counting events in a sliding window and since start, as dcgm-exporter's DCGM_EXP_* fields.

dcgm-exporter 4.x (internal/pkg/collector/expcollector.go, xid_collector.go,
clock_events_collector.go) asks DCGM for every sample of one field newer than now - window
(`GetValuesSince`) and counts, per GPU, how often each value occurs:
- DCGM_EXP_XID_ERRORS_COUNT: one sample per XID event, so the count of each XID in the window;
- DCGM_EXP_CLOCK_EVENTS_COUNT: one DCGM_FI_DEV_CLOCKS_EVENT_REASONS bitmask per collection
  pass, so per reason the number of passes in the window during which it was active.
Its main branch adds cumulative counters: DCGM_EXP_XID_ERRORS_TOTAL (every XID ≠ 0 since start)
and DCGM_EXP_CLOCK_EVENTS_TOTAL (a reason counted when it becomes active; the first sample of a
GPU only sets the baseline).

Pure functions of (time, value) samples; `ClockEventHistory` is the small bounded state the
collector keeps between passes. Times are seconds on one monotonic clock.
"""

from collections import deque
from collections.abc import Iterable, Mapping
from typing import Final

from ..model import NodeSnapshot

CLOCK_EVENT_REASONS: Final[tuple[tuple[int, str], ...]] = (
    (0x001, "gpu_idle"),
    (0x002, "clocks_setting"),
    (0x004, "power_cap"),
    (0x008, "hw_slowdown"),
    (0x010, "sync_boost"),
    (0x020, "sw_thermal"),
    (0x040, "hw_thermal"),
    (0x080, "hw_power_brake"),
    (0x100, "display_clocks"),
)
"""DCGM_CLOCKS_EVENT_REASON_* bits (= NVML's nvmlClocksEventReason*) and the `clock_event`
label value dcgm-exporter gives each (dcgmi's names). Other bits are not counted."""

CLOCK_EVENT_NAMES: Final = tuple(name for _, name in CLOCK_EVENT_REASONS)
CLOCK_REASONS_FIELD: Final = "DCGM_FI_DEV_CLOCKS_EVENT_REASONS"


def clock_event_names(bitmask: int) -> tuple[str, ...]:
    """The reasons set in a bitmask, in bit order."""
    return tuple(name for bit, name in CLOCK_EVENT_REASONS if bitmask & bit)


def in_window(at: float, now: float, window_seconds: float) -> bool:
    """dcgm-exporter's `GetValuesSince(now - window)`: the boundary sample counts."""
    return at >= now - window_seconds


def count_values(samples: Iterable[tuple[float, int]], now: float,
                 window_seconds: float) -> dict[int, int]:
    """How often each value occurs among the samples of the window (XIDs per XID)."""
    counts: dict[int, int] = {}
    for at, value in samples:
        if in_window(at, now, window_seconds):
            counts[value] = counts.get(value, 0) + 1
    return counts


def clock_event_counts(samples: Iterable[tuple[float, int]], now: float,
                       window_seconds: float) -> dict[str, int] | None:
    """Per reason, the samples of the window in which it was set; None when the window holds
    no sample at all. `{}` (samples, but none with a known reason: full clocks) is not None:
    dcgm-exporter then prints no series for the GPU, where for None it prints one 0."""
    counts: dict[str, int] | None = None
    for at, bitmask in samples:
        if not in_window(at, now, window_seconds):
            continue
        if counts is None:
            counts = {}
        for name in clock_event_names(bitmask):
            counts[name] = counts.get(name, 0) + 1
    if counts is None:
        return None
    return {name: counts[name] for name in CLOCK_EVENT_NAMES if name in counts}


def newly_active(previous: int | None, current: int) -> tuple[str, ...]:
    """The reasons that became active between two samples (none for a GPU's first sample)."""
    if previous is None:
        return ()
    return clock_event_names(current & ~previous)


class ClockEventHistory:
    """Each GPU's DCGM_FI_DEV_CLOCKS_EVENT_REASONS of the passes within the window, and the
    per-reason activations since start, keyed by GPU UUID. Feed it every pass's snapshot
    (`record`); a GPU without the field that pass (lost, NOT_SUPPORTED) adds nothing.

    Bounded: samples older than the window are dropped as new ones arrive, and at most
    `max_samples` are kept per GPU (a window of days at a sub-second interval)."""

    def __init__(self, window_seconds: float, max_samples: int = 100_000) -> None:
        if window_seconds < 0:
            raise ValueError(f"window must be >= 0 seconds, got {window_seconds}")
        self.window_seconds = window_seconds
        self._max = max_samples
        self._samples: dict[str, deque[tuple[float, int]]] = {}
        self._last: dict[str, int] = {}
        self._totals: dict[str, dict[str, int]] = {}

    def record(self, snapshot: NodeSnapshot, at: float) -> None:
        for gpu in snapshot.gpus:
            value = gpu.values.get(CLOCK_REASONS_FIELD) if gpu.healthy else None
            if isinstance(value, int) and gpu.identity.uuid:
                self.record_bitmask(gpu.identity.uuid, at, value)

    def record_bitmask(self, uuid: str, at: float, bitmask: int) -> None:
        samples = self._samples.get(uuid)
        if samples is None:
            samples = self._samples[uuid] = deque(maxlen=self._max)
        samples.append((at, bitmask))
        self._prune(samples, at)
        became = newly_active(self._last.get(uuid), bitmask)
        self._last[uuid] = bitmask
        if became:
            totals = self._totals.setdefault(uuid, {})
            for name in became:
                totals[name] = totals.get(name, 0) + 1

    def _prune(self, samples: deque[tuple[float, int]], now: float) -> None:
        while samples and not in_window(samples[0][0], now, self.window_seconds):
            samples.popleft()

    def window_counts(self, now: float) -> dict[str, dict[str, int] | None]:
        """UUID → `clock_event_counts` of its samples (None: none in the window); GPUs never
        seen are absent."""
        return {uuid: clock_event_counts(samples, now, self.window_seconds)
                for uuid, samples in self._samples.items()}

    def totals(self) -> Mapping[str, Mapping[str, int]]:
        """UUID → reason → activations since start (only reasons seen becoming active)."""
        return {uuid: dict(t) for uuid, t in self._totals.items()}
