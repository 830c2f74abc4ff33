"""Readings that are costly on a real GPU and change slowly, on their own cadence.

On an H100 one pass costs 7-11 ms of CPU per GPU, most of it in a few calls (real-gpu-h100.md):
the total-energy counter (~4 ms, batched or not), PCIe replay and the MIG mode (~0.15 ms each).
Cumulative counters (energy, PCIe replay, ECC and remapped rows) are only ever used through
rate() over minutes, so they are read every `interval_seconds` (default 30 s) and repeated
in between: still exact and monotonic, at most one slow interval old. Everything else is read
every pass. Part of the NVML backend; runs only on the NVML thread.
"""

import time
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass, field

from ..fields.spec import FieldSpec
from ..model import FieldValue

DEFAULT_SLOW_INTERVAL_SECONDS = 30.0


@dataclass(slots=True)
class _Reading:
    read_at: float
    values: dict[str, FieldValue] = field(default_factory=dict)
    mig_mode: bool | None = None


class SlowReadings:
    """Per GPU (by UUID): the last slow readings and when they were taken."""

    def __init__(self, interval_seconds: float = DEFAULT_SLOW_INTERVAL_SECONDS,
                 clock: Callable[[], float] = time.monotonic) -> None:
        self.interval_seconds = interval_seconds
        self._clock = clock
        self._readings: dict[str, _Reading] = {}

    @staticmethod
    def split(specs: Iterable[FieldSpec]) -> tuple[list[FieldSpec], list[FieldSpec]]:
        """(read every pass, read on the slow cadence)."""
        fast: list[FieldSpec] = []
        slow: list[FieldSpec] = []
        for spec in specs:
            (slow if spec.slow else fast).append(spec)
        return fast, slow

    def due(self, uuid: str) -> bool:
        last = self._readings.get(uuid)
        return last is None or self._clock() - last.read_at >= self.interval_seconds

    def values(self, uuid: str) -> Mapping[str, FieldValue]:
        last = self._readings.get(uuid)
        return last.values if last is not None else {}

    def mig_mode(self, uuid: str) -> bool | None:
        last = self._readings.get(uuid)
        return last.mig_mode if last is not None else None

    def store(self, uuid: str, values: dict[str, FieldValue], mig_mode: bool | None, *,
              complete: bool = True, phase: float = 0.0) -> None:
        """`complete`: no call of this refresh failed for a passing reason. Otherwise the
        last values stand in for the missing ones (a counter never vanishes or goes back over
        a transient error) and the GPU is due again next pass. `phase` (0..1): a GPU read for
        the first time is next due after (1 - phase) intervals, so the GPUs of a node spread
        their costly refreshes over the interval instead of all landing in one pass."""
        now = self._clock()
        last = self._readings.get(uuid)
        if not complete:
            merged = {**(last.values if last is not None else {}), **values}
            self._readings[uuid] = _Reading(now - self.interval_seconds, merged, mig_mode)
            return
        started = now - phase * self.interval_seconds if last is None else now
        self._readings[uuid] = _Reading(started, values, mig_mode)

    def forget(self, uuid: str) -> None:
        """A GPU that failed is read in full when it answers again."""
        self._readings.pop(uuid, None)

    def clear(self) -> None:
        self._readings.clear()
