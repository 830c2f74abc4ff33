"""What the collector is told at start: the interval, the host label, the counters lines, and
the join's options (cycle.JoinOptions)."""

from collections.abc import Mapping
from dataclasses import dataclass, field

from ..attribution.podlabels import NO_POLICY, PodLabelPolicy
from ..exposition.shape import LabelStyle, parse_selection
from ..fields.counters import CounterLine
from ..health.xid import DEFAULT_WINDOW_MS
from .cycle import JoinOptions


@dataclass(frozen=True, slots=True)
class CollectorOptions:
    interval_seconds: float
    hostname: str | None
    counters: tuple[CounterLine, ...]
    retry_initial_seconds: float = 1.0
    retry_max_seconds: float = 60.0
    stall_seconds: float | None = None
    """A backend call running longer than this fails /health (a hung driver); default
    max(60 s, 10 intervals)."""
    virtual_gpus: bool = False
    extra_resources: frozenset[str] = frozenset()
    process_metrics: bool = False
    pod_policy: PodLabelPolicy = NO_POLICY
    dra_drivers: frozenset[str] = frozenset()
    xid_window_ms: int = DEFAULT_WINDOW_MS
    clock_events_window_ms: int = DEFAULT_WINDOW_MS
    drop_labels: frozenset[str] = frozenset()
    own_pod: tuple[str, str] | None = None
    devices: str = "f"
    """`-d` in dcgm-exporter's syntax, already checked by the CLI."""
    dashed_model_names: bool = False
    old_namespace: bool = False
    field_intervals_ms: Mapping[str, int] = field(default_factory=dict)
    """Watch groups of dcgm-exporter's config file: field → its interval (collector/watch.py)."""
    label_wait_seconds: float = 2.0
    """`--startup-label-wait`: how long the first render waits for the sources that label
    series (collector/pacing.py); 0: it renders right after the first NVML pass."""

    def join(self) -> JoinOptions:
        return JoinOptions(
            hostname=self.hostname, virtual_gpus=self.virtual_gpus,
            extra_resources=self.extra_resources, process_metrics=self.process_metrics,
            pod_policy=self.pod_policy, dra_drivers=self.dra_drivers,
            xid_window_ms=self.xid_window_ms, clock_events_window_ms=self.clock_events_window_ms,
            drop_labels=self.drop_labels, devices=parse_selection(self.devices),
            style=LabelStyle(self.dashed_model_names, self.old_namespace), own_pod=self.own_pod)
