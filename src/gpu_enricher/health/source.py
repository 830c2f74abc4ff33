"""DCGM_EXP_GPU_HEALTH_STATUS's readings side as a source: after each GPU pass it judges every
GPU's readings (`rules.py`) and hands out the incidents. No I/O: its input is the pass itself,
as `clock_events.py`'s. The XID side is added by the join (`status_families.py`), from the XID
source's snapshot."""

import time
from collections.abc import Callable, Iterable, Mapping
from types import MappingProxyType

from ..model import NodeSnapshot
from .pass_source import PassDerivedSource
from .rules import HEALTH_FIELD, INPUT_FIELDS, HealthHistory, Incident

HealthIncidents = Mapping[str, tuple[Incident, ...]]
"""GPU UUID → the incidents of its readings in the last pass (none: the GPU is healthy)."""

NO_INCIDENTS: HealthIncidents = MappingProxyType({})


class HealthSource(PassDerivedSource[HealthIncidents]):
    """A `Source[HealthIncidents]`, refreshed after the GPU pass with its snapshot."""

    name = "health"

    def __init__(self, window_seconds: float,
                 clock: Callable[[], float] = time.monotonic) -> None:
        super().__init__(NO_INCIDENTS, clock)
        self._history = HealthHistory(window_seconds)

    def sampled_fields(self, planned: Iterable[str]) -> frozenset[str]:
        """What the GPU pass must read for the planned fields: the rules' inputs, when the
        health field is planned."""
        return INPUT_FIELDS if HEALTH_FIELD in set(planned) else frozenset()

    def derive(self, gpus: NodeSnapshot, now: float) -> HealthIncidents:
        found: dict[str, tuple[Incident, ...]] = {}
        for gpu in gpus.gpus:
            if gpu.healthy and gpu.identity.uuid:
                found[gpu.identity.uuid] = tuple(
                    self._history.record(gpu.identity.uuid, gpu.values, now))
        self._history.forget_others({g.identity.uuid for g in gpus.gpus})
        return MappingProxyType(found)
