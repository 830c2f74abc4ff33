"""The common shape of a source whose only input is the GPU pass itself (clock-event counts,
health verdicts): refreshed after the pass, no I/O, nothing to start or close, no own metrics.
A subclass says what the pass must read (`sampled_fields`) and turns a snapshot into its
result (`derive`)."""

import time
from collections.abc import Callable, Iterable
from typing import Generic, TypeVar

from prometheus_client.metrics_core import Metric

from ..model import NodeSnapshot, SourceHealth

T = TypeVar("T")


class PassDerivedSource(Generic[T]):
    after_gpus = True
    name = "pass"

    def __init__(self, initial: T, clock: Callable[[], float] = time.monotonic) -> None:
        self._result = initial
        self._clock = clock
        self._passes = 0
        self._up = False  # a pass with at least one answering GPU was recorded

    def sampled_fields(self, planned: Iterable[str]) -> frozenset[str]:
        raise NotImplementedError

    def derive(self, gpus: NodeSnapshot, now: float) -> T:
        raise NotImplementedError

    async def start(self) -> None:
        pass

    async def refresh(self, gpus: NodeSnapshot | None) -> None:
        self._up = gpus is not None and any(g.healthy for g in gpus.gpus)
        if gpus is None:
            return
        self._result = self.derive(gpus, self._clock())
        self._passes += 1

    def snapshot(self) -> T:
        return self._result

    def health(self) -> SourceHealth:
        return SourceHealth(up=self._up, collections=self._passes)

    def families(self) -> list[Metric]:
        return []

    async def close(self) -> None:
        pass
