"""DCGM_EXP_GPU_HEALTH_STATUS's readings side as a source: after each GPU pass it judges every
GPU's readings (health.py's rules) and hands out the incidents. No I/O: its input is the pass
itself, as clock_events.py's. The XID side is added by the join (status_families.py), from the
XID source's snapshot."""

import time
from collections.abc import Callable, Iterable, Mapping
from types import MappingProxyType

from prometheus_client.metrics_core import Metric

from .health import HEALTH_FIELD, INPUT_FIELDS, HealthHistory, Incident
from .model import NodeSnapshot, SourceHealth

HealthIncidents = Mapping[str, tuple[Incident, ...]]
"""GPU UUID → the incidents of its readings in the last pass (none: the GPU is healthy)."""

NO_INCIDENTS: HealthIncidents = MappingProxyType({})


class HealthSource:
    """A `Source[HealthIncidents]`, refreshed after the GPU pass with its snapshot."""

    name = "health"
    after_gpus = True

    def __init__(self, window_seconds: float,
                 clock: Callable[[], float] = time.monotonic) -> None:
        self._history = HealthHistory(window_seconds)
        self._clock = clock
        self._incidents: HealthIncidents = NO_INCIDENTS
        self._passes = 0
        self._up = False

    @staticmethod
    def sampled_fields(planned: Iterable[str]) -> frozenset[str]:
        """What the GPU pass must read for the planned fields: the rules' inputs, when the
        health field is planned."""
        return INPUT_FIELDS if HEALTH_FIELD in set(planned) else frozenset()

    async def start(self) -> None:
        pass

    async def refresh(self, gpus: NodeSnapshot | None) -> None:
        self._up = gpus is not None and any(g.healthy for g in gpus.gpus)
        if gpus is None:
            return
        now = self._clock()
        found: dict[str, tuple[Incident, ...]] = {}
        for gpu in gpus.gpus:
            if gpu.healthy and gpu.identity.uuid:
                found[gpu.identity.uuid] = tuple(
                    self._history.record(gpu.identity.uuid, gpu.values, now))
        self._history.forget_others({g.identity.uuid for g in gpus.gpus})
        self._incidents = MappingProxyType(found)
        self._passes += 1

    def snapshot(self) -> HealthIncidents:
        return self._incidents

    def health(self) -> SourceHealth:
        return SourceHealth(up=self._up, collections=self._passes)

    def families(self) -> list[Metric]:
        return []

    async def close(self) -> None:
        pass
