"""The XID and clock-event families as dcgm-exporter 4.x exports them, plus our own XID counter.

What dcgm-exporter prints (internal/pkg/collector: gpu_collector.go `toMetric`, xid_errors.go,
expcollector.go, base_collector.go `createMetric`, xid_collector.go, clock_events_collector.go,
and main-branch xid_total_collector.go, clock_events_total_collector.go):

- `DCGM_FI_DEV_XID_ERRORS`: the last XID of the GPU (0 before any), with the attributes
  `err_code` (the XID) and `err_msg` (its text from `XID_MESSAGES`, "Unknown Error" past the
  table). Attributes are sorted together with the pod's (`container`, `err_code`, `err_msg`,
  `namespace`, `pod`, …) after the label map (label-type fields).
- `DCGM_EXP_XID_ERRORS_COUNT`: per XID seen within the window (`--xid-count-window-size` ms,
  default 300000) its count, labelled `window_size_in_ms` and `xid` (both in the sorted label
  map, with the label-type fields); a GPU without an XID in the window has one series of
  value 0 without `xid`.
- `DCGM_EXP_CLOCK_EVENTS_COUNT`: per reason active in some pass of the window
  (`--clock-events-count-window-size` ms) the number of such passes, labelled
  `window_size_in_ms` and `clock_event`; 0 without `clock_event` when the window holds no
  sample, and no series at all for a GPU whose samples have no known reason.
- `DCGM_EXP_XID_ERRORS_TOTAL` / `DCGM_EXP_CLOCK_EVENTS_TOTAL` (dcgm-exporter's main branch):
  since start, per XID (≠ 0) / per reason that became active, labelled `xid` / `clock_event`,
  no window label, no series before the first.
- Ours: `gpu_enricher_xid_errors_total{gpu,UUID,pci_bus_id,device,modelName,Hostname,xid}`,
  a real counter since the exporter started (dcgm-exporter's "last value forever" is its
  #500).

Every DCGM series starts `gpu, UUID, pci_bus_id, device, modelName`, then `GPU_I_PROFILE,
GPU_I_ID` on a MIG instance's series (a MIG-enabled GPU is represented by its instances, as
in exposition/join.py; they repeat the GPU's counts: XIDs are a GPU's), then the host label.
"""

from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass
from typing import Final, Protocol

from ..exposition.join import entity_labels, identity_pairs
from ..exposition.label_drop import kept
from ..exposition.render import Family, Sample, label_pairs
from ..exposition.shape import FLEX, PLAIN_STYLE, DeviceSelection, LabelStyle, monitored
from ..fields import names
from ..model import GpuInstance, GpuSnapshot, NodeSnapshot
from .event_counts import CLOCK_EVENT_NAMES
from .xid import (
    CLOCK_EVENTS_COUNT,
    CLOCK_EVENTS_TOTAL,
    DEFAULT_WINDOW_MS,
    HELP,
    LABEL_CLOCK_EVENT,
    LABEL_ERR_CODE,
    LABEL_ERR_MSG,
    LABEL_WINDOW,
    LABEL_XID,
    OWN_XID_COUNTER,
    XID_COUNT,
    XID_LAST,
    XID_TOTAL,
    XidSnapshot,
    xid_window_counts,
)
from .xid_messages import xid_message

# ---------------------------------------------------------------------------------------------
# Labels

Pairs = list[tuple[str, str]]


@dataclass(frozen=True, slots=True)
class SeriesCopy:
    """One copy of a device's series, as the join makes one per pod holding it: pod labels go
    into the sorted label map, `container`/`namespace`/`pod`/`pod_uid`/`vgpu`/`dra_*` are
    attributes."""

    labels: tuple[tuple[str, str], ...] = ()
    attributes: tuple[tuple[str, str], ...] = ()


PLAIN: Final = (SeriesCopy(),)

SeriesHook = Callable[[GpuSnapshot, GpuInstance | None], Sequence[SeriesCopy]]
"""The copies of one entity's series (pod attribution); at least one, else none are printed."""


@dataclass(frozen=True, slots=True)
class EventFamilyOptions:
    hostname: str | None = None
    """The host label's value (a `names.Hostname` carries the label's name); None: `-n`."""
    label_fields: tuple[tuple[str, str], ...] = ()
    """The plan's label-type fields, (label name, field), sorted, from each GPU's values, as
    exposition/join.py."""
    xid_window_ms: int = DEFAULT_WINDOW_MS
    clock_events_window_ms: int = DEFAULT_WINDOW_MS
    series: SeriesHook | None = None
    """Pod attribution; None: one copy without pod labels per entity."""
    drop: frozenset[str] = frozenset()
    """Label names left off (`--drop-labels`); the hook's copies come without them."""
    devices: DeviceSelection = FLEX
    """`-d`: the entities of the XID and clock-event families (dcgm-exporter's exporter
    collectors watch the `-d` entities; its health and P2P collectors every GPU)."""
    style: LabelStyle = PLAIN_STYLE
    """`-rbmn` and `-o`; the hook's copies come spelled so."""


@dataclass(frozen=True, slots=True)
class Entity:
    gpu: GpuSnapshot
    head: Pairs
    fields: Pairs
    copies: Sequence[SeriesCopy]


def _entities(node: NodeSnapshot, options: EventFamilyOptions) -> list[Entity]:
    """exposition/join.py's entities and labels: those `-d` selects."""
    result: list[Entity] = []
    for gpu, inst in monitored(node, options.devices):
        head, fields = entity_labels(gpu, inst, options.hostname, options.label_fields,
                                     gpu.values, options.drop, options.style)
        copies = PLAIN if options.series is None else options.series(gpu, inst)
        result.append(Entity(gpu, head, fields, copies))
    return result


def gpu_entities(node: NodeSnapshot, options: EventFamilyOptions) -> list[Entity]:
    """The healthy physical GPUs, MIG-enabled or not, without GPU_I_* labels: what
    dcgm-exporter's health and P2P collectors watch (DCGM's GPU entities)."""
    result: list[Entity] = []
    for gpu in node.gpus:
        if gpu.healthy:
            head, fields = entity_labels(gpu, None, options.hostname, options.label_fields,
                                         gpu.values, options.drop, options.style)
            copies = PLAIN if options.series is None else options.series(gpu, None)
            result.append(Entity(gpu, head, fields, copies))
    return result


def entity_samples(ent: Entity, value: str, labels: Sequence[tuple[str, str]] = (),
             attributes: Sequence[tuple[str, str]] = ()) -> list[Sample]:
    """dcgm-exporter's template: head, the sorted label map, the sorted attributes."""
    return [Sample(label_pairs([*ent.head,
                                *sorted([*ent.fields, *copy.labels, *labels]),
                                *sorted([*copy.attributes, *attributes])]), value)
            for copy in ent.copies]


# ---------------------------------------------------------------------------------------------
# Families


def xid_errors_family(node: NodeSnapshot, xids: XidSnapshot, options: EventFamilyOptions, *,
                      name: str = XID_LAST, prom_type: str = "gauge",
                      help_text: str = HELP[XID_LAST],
                      entities: Sequence[Entity] | None = None) -> Family:
    """DCGM_FI_DEV_XID_ERRORS: the last XID, `err_code` and `err_msg`."""
    samples: list[Sample] = []
    for ent in entities if entities is not None else _entities(node, options):
        last = xids.gpu(ent.gpu.identity.uuid).last
        samples += entity_samples(ent, str(last), attributes=[
            (LABEL_ERR_CODE, str(last)), (LABEL_ERR_MSG, xid_message(last))])
    return Family(name, prom_type, help_text, tuple(samples))


def xid_count_family(node: NodeSnapshot, xids: XidSnapshot, options: EventFamilyOptions,
                     now: float, *, name: str = XID_COUNT, prom_type: str = "gauge",
                     help_text: str = HELP[XID_COUNT],
                     entities: Sequence[Entity] | None = None) -> Family:
    """DCGM_EXP_XID_ERRORS_COUNT over `options.xid_window_ms` ending at `now`."""
    window = [(LABEL_WINDOW, str(options.xid_window_ms))]
    samples: list[Sample] = []
    for ent in entities if entities is not None else _entities(node, options):
        counts = xid_window_counts(xids.gpu(ent.gpu.identity.uuid), now, options.xid_window_ms)
        if not counts:
            samples += entity_samples(ent, "0", window)
        for xid in sorted(counts):
            samples += entity_samples(ent, str(counts[xid]), [*window, (LABEL_XID, str(xid))])
    return Family(name, prom_type, help_text, tuple(samples))


def xid_total_family(node: NodeSnapshot, xids: XidSnapshot, options: EventFamilyOptions, *,
                     name: str = XID_TOTAL, prom_type: str = "counter",
                     help_text: str = HELP[XID_TOTAL],
                     entities: Sequence[Entity] | None = None) -> Family:
    """DCGM_EXP_XID_ERRORS_TOTAL (dcgm-exporter main): per XID ≠ 0 since start."""
    samples: list[Sample] = []
    for ent in entities if entities is not None else _entities(node, options):
        totals = xids.gpu(ent.gpu.identity.uuid).totals
        for xid in sorted(x for x in totals if x != 0):
            samples += entity_samples(ent, str(totals[xid]), [(LABEL_XID, str(xid))])
    return Family(name, prom_type, help_text, tuple(samples))


def own_xid_counter_family(node: NodeSnapshot, xids: XidSnapshot,
                           hostname: str | None, drop: frozenset[str] = frozenset()) -> Family:
    """`gpu_enricher_xid_errors_total{<GPU identity>, Hostname, xid}`: XIDs since start, a
    real counter (per physical GPU, MIG or not; no pod labels). A GPU the pass does not list
    (gone) keeps no series."""
    samples: list[Sample] = []
    for gpu in node.gpus:
        totals = xids.gpu(gpu.identity.uuid).totals if gpu.identity.uuid else {}
        head = identity_pairs(gpu)
        if hostname is not None:
            head.extend(names.hostname_pairs(hostname))
        head = kept(head, drop)
        samples += [Sample(label_pairs([*head, (LABEL_XID, str(xid))]), str(totals[xid]),
                           "_total") for xid in sorted(totals)]
    return Family(OWN_XID_COUNTER, "counter",
                  "XID errors (NVML XidCriticalError events) since the exporter started, by "
                  "GPU and XID.", tuple(samples))


ClockCounts = Mapping[str, Mapping[str, int] | None]
"""GPU UUID → reason → passes within the window (None: no sample in it): what
`ClockEventHistory.window_counts` returns."""


def clock_events_count_family(node: NodeSnapshot, counts: ClockCounts,
                              options: EventFamilyOptions, *, name: str = CLOCK_EVENTS_COUNT,
                              prom_type: str = "gauge",
                              help_text: str = HELP[CLOCK_EVENTS_COUNT],
                              entities: Sequence[Entity] | None = None) -> Family:
    """DCGM_EXP_CLOCK_EVENTS_COUNT over `options.clock_events_window_ms`."""
    window = [(LABEL_WINDOW, str(options.clock_events_window_ms))]
    samples: list[Sample] = []
    for ent in entities if entities is not None else _entities(node, options):
        per_reason = counts.get(ent.gpu.identity.uuid)
        if per_reason is None:
            samples += entity_samples(ent, "0", window)
            continue
        for reason in CLOCK_EVENT_NAMES:
            if reason in per_reason:
                samples += entity_samples(ent, str(per_reason[reason]),
                                    [*window, (LABEL_CLOCK_EVENT, reason)])
    return Family(name, prom_type, help_text, tuple(samples))


def clock_events_total_family(node: NodeSnapshot, totals: Mapping[str, Mapping[str, int]],
                              options: EventFamilyOptions, *, name: str = CLOCK_EVENTS_TOTAL,
                              prom_type: str = "counter",
                              help_text: str = HELP[CLOCK_EVENTS_TOTAL],
                              entities: Sequence[Entity] | None = None) -> Family:
    """DCGM_EXP_CLOCK_EVENTS_TOTAL (dcgm-exporter main): activations since start."""
    samples: list[Sample] = []
    for ent in entities if entities is not None else _entities(node, options):
        per_reason = totals.get(ent.gpu.identity.uuid, {})
        for reason in CLOCK_EVENT_NAMES:
            if reason in per_reason:
                samples += entity_samples(ent, str(per_reason[reason]),
                                    [(LABEL_CLOCK_EVENT, reason)])
    return Family(name, prom_type, help_text, tuple(samples))


class PlannedMetric(Protocol):
    """A counters line's metric (counters.MetricField)."""

    @property
    def name(self) -> str: ...
    @property
    def prom_type(self) -> str: ...
    @property
    def help(self) -> str: ...
    @property
    def field(self) -> str: ...


def event_families(node: NodeSnapshot, metrics: Iterable[PlannedMetric], xids: XidSnapshot,
                   clock_counts: ClockCounts, clock_totals: Mapping[str, Mapping[str, int]],
                   options: EventFamilyOptions, now: float) -> list[Family]:
    """The families of the counters lines that name an event field, in their order, named,
    typed and described as the lines say. Lines of other fields are ignored."""
    families: list[Family] = []
    ents: list[Entity] | None = None  # built once, for the first line that needs them
    for metric in metrics:
        kw = {"name": metric.name, "prom_type": metric.prom_type, "help_text": metric.help}
        if metric.field not in (XID_LAST, XID_COUNT, XID_TOTAL, CLOCK_EVENTS_COUNT,
                                CLOCK_EVENTS_TOTAL):
            continue
        ents = ents if ents is not None else _entities(node, options)
        if metric.field == XID_LAST:
            families.append(xid_errors_family(node, xids, options, **kw, entities=ents))
        elif metric.field == XID_COUNT:
            families.append(xid_count_family(node, xids, options, now, **kw, entities=ents))
        elif metric.field == XID_TOTAL:
            families.append(xid_total_family(node, xids, options, **kw, entities=ents))
        elif metric.field == CLOCK_EVENTS_COUNT:
            families.append(clock_events_count_family(node, clock_counts, options, **kw,
                                                      entities=ents))
        else:
            families.append(clock_events_total_family(node, clock_totals, options, **kw,
                                                      entities=ents))
    return families
