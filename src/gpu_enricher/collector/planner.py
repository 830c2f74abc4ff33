"""The counters lines in force and what the backend can deliver of them (counters.CounterPlan).
A reloaded counters file (reload.py) is planned at the start of the next pass, so the exposition
in between is the old one, whole (issue 13: reload without a gap)."""

from ..backend import GpuBackend
from ..fields.counters import CounterLine, CounterPlan, plan_counters
from .news import report_plan


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
