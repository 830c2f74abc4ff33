"""What a pass reads: the counters lines in force (`CounterPlanner`), and the fields read every
Nth pass (`FieldCadence`).

The counters lines in force and what the backend can deliver of them (counters.CounterPlan):
a reloaded counters file (reload.py) is planned at the start of the next pass, so the
exposition in between is the old one, whole (issue 13: reload without a gap).

Fields read every Nth pass: dcgm-exporter's watch groups (`collection.watchGroups` of its
config file, fields/exporter_config.py) on our collection passes.

A field watched every I ms is read on every ceil(I / interval)-th pass, counted from the
start (and from every reload of the counters, where every field is read at once); in
between, each GPU and MIG instance repeats the value it last read, as the NVML backend's slow
fields do (nvml/cadence.py). A field that was due and absent (not supported, an error) is
absent until it is read again. A GPU with no reading yet (one that appeared since) shows the
field from its first pass where the field is due. Three kinds of field keep their own cadence
whatever their group says: the slow fields (read every --slow-fields-interval by the NVML
backend, which keeps their last values itself), the profiling fields (GPM ratios are a window
between two samples of consecutive passes; the backend frees a sample a pass did not take) and
the fields that are not a plain reading of the pass (XIDs, clock-event counts, health, P2P
status: fields/table.py's EVENT_FIELDS). Pure: the collector hands in each pass's snapshot.
"""

import dataclasses
import math
from collections.abc import Collection, Mapping

from ..backend import GpuBackend
from ..fields.counters import CounterLine, CounterPlan, plan_counters
from ..fields.table import EVENT_FIELDS, IMPLEMENTED, PROFILING_FIELDS
from ..model import FieldValue, NodeSnapshot
from .news import report_plan

_Key = tuple[str, str]  # (GPU UUID, MIG device UUID or "")


class FieldCadence:
    def __init__(self, interval_seconds: float) -> None:
        self._interval_ms = interval_seconds * 1000
        self._periods: dict[str, int] = {}
        self._pass = 0
        self._last: dict[_Key, dict[str, FieldValue]] = {}

    @property
    def periods(self) -> Mapping[str, int]:
        """Field → read every N passes (only fields with N > 1)."""
        return self._periods

    def use(self, intervals_ms: Mapping[str, int]) -> None:
        """New watch groups (field → interval in ms): every field is read on the next pass."""
        periods = {name: math.ceil(ms / self._interval_ms - 1e-9)
                   for name, ms in intervals_ms.items()
                   if name not in EVENT_FIELDS | PROFILING_FIELDS
                   and not (name in IMPLEMENTED and IMPLEMENTED[name].slow)}
        self._periods = {name: n for name, n in periods.items() if n > 1}
        self.restart()

    def restart(self) -> None:
        """Read every field on the next pass (a reload, a reopened backend)."""
        self._pass = 0
        self._last.clear()

    def skipped(self, fields: Collection[str]) -> frozenset[str]:
        """The fields of `fields` that are not due this pass."""
        return frozenset(name for name in fields
                         if self._pass % self._periods.get(name, 1) != 0)

    def carry(self, snapshot: NodeSnapshot, skipped: frozenset[str]) -> NodeSnapshot:
        """This pass's snapshot, the skipped fields repeated from their last reading; counts
        the pass."""
        self._pass += 1
        if not self._periods:
            return snapshot
        seen: set[_Key] = set()
        gpus = []
        for gpu in snapshot.gpus:
            if not gpu.healthy:
                gpus.append(gpu)  # a lost GPU is read in full when it answers again
                continue
            uuid = gpu.identity.uuid
            instances = tuple(
                dataclasses.replace(inst, values=self._merge((uuid, inst.uuid), inst.values,
                                                             skipped, seen))
                for inst in gpu.instances)
            gpus.append(dataclasses.replace(
                gpu, values=self._merge((uuid, ""), gpu.values, skipped, seen),
                instances=instances))
        for key in self._last.keys() - seen:  # gone GPUs and instances
            del self._last[key]
        return dataclasses.replace(snapshot, gpus=tuple(gpus))

    def _merge(self, key: _Key, values: Mapping[str, FieldValue], skipped: frozenset[str],
               seen: set[_Key]) -> Mapping[str, FieldValue]:
        seen.add(key)
        kept = self._last.setdefault(key, {})
        for name in self._periods:
            if name in skipped:
                continue
            if name in values:
                kept[name] = values[name]
            else:
                kept.pop(name, None)
        repeated = {name: kept[name] for name in skipped if name in kept}
        return {**values, **repeated} if repeated else values


class CounterPlanner:
    def __init__(self, counters: tuple[CounterLine, ...]) -> None:
        self.counters = counters
        self.plan: CounterPlan | None = None
        self._stale = False

    def replace(self, counters: tuple[CounterLine, ...]) -> None:
        self.counters, self._stale = counters, True

    def refresh(self, backend: GpuBackend, *, stale_only: bool = False) -> CounterPlan:
        """Plan for what `backend` delivers now (after an open); `stale_only`: only when the
        lines changed since."""
        if self.plan is not None and stale_only and not self._stale:
            return self.plan
        self._stale = False
        plan, warnings = plan_counters(self.counters, backend.deliverable_fields(), backend.name)
        if plan != self.plan:  # logged once, not again on every reopen
            report_plan(plan, warnings, self.counters, backend.name)
        self.plan = plan
        return plan
