"""DCGM_EXP_GPU_HEALTH_STATUS and DCGM_EXP_P2P_STATUS as dcgm-exporter 4.x prints them.

Both are per physical GPU (DCGM's GPU entities: a MIG-enabled GPU is one series set, without
GPU_I_* labels), with the template of the other DCGM_EXP_* families (health/event_families.py): the
GPU's head labels, then the label-type fields and these families' own labels sorted together,
then pod attributes.

- Health (gpu_health_collector.go): one series per GPU and watch, `health_watch` and
  `health_error_code`, value 0 PASS / 10 WARN / 20 FAIL (health/rules.py decides).
- P2P (p2p_status_collector.go): one series per ordered pair of different GPUs, `peer_gpu`
  (the peer's index) and `link_status`, value nvmlGpuP2PStatus_t: 0 OK, 1 ChipsetNotSupported,
  2 GPUNotSupported, 3 TopologyNotSupported, 4 DisabledByRegKey, 5 NotSupported, 6 Unknown.
"""

from collections.abc import Iterable, Mapping
from typing import Final

from ..exposition.render import Family, Sample
from ..fields.table import P2P_FIELD
from ..model import NodeSnapshot
from .event_families import EventFamilyOptions, PlannedMetric, entity_samples, gpu_entities
from .rules import (
    HEALTH_FIELD,
    LABEL_ERROR_CODE,
    LABEL_WATCH,
    Incident,
    verdicts,
    xid_incidents,
)
from .xid import XidSnapshot

LABEL_PEER: Final = "peer_gpu"
LABEL_LINK_STATUS: Final = "link_status"
LINK_STATUS: Final = ("OK", "ChipsetNotSupported", "GPUNotSupported", "TopologyNotSupported",
                      "DisabledByRegKey", "NotSupported", "Unknown")
"""dcgm-exporter's `link_status` per status value; anything past the table is Unknown."""


def link_status(value: int) -> str:
    return LINK_STATUS[value] if 0 <= value < len(LINK_STATUS) else LINK_STATUS[-1]


def health_family(node: NodeSnapshot, readings: Mapping[str, tuple[Incident, ...]],
                  xids: XidSnapshot, options: EventFamilyOptions, now: float,
                  metric: PlannedMetric) -> Family:
    """Every watch of every GPU: the readings' incidents of the last pass and the XIDs of
    the XID window."""
    window = options.xid_window_ms / 1000.0
    samples: list[Sample] = []
    for ent in gpu_entities(node, options):
        uuid = ent.gpu.identity.uuid
        found = [*readings.get(uuid, ()), *xid_incidents(xids.gpu(uuid).recent, now, window)]
        for verdict in verdicts(found):
            samples += entity_samples(ent, str(int(verdict.result)), [
                (LABEL_WATCH, verdict.watch), (LABEL_ERROR_CODE, verdict.code)])
    return Family(metric.name, metric.prom_type, metric.help, tuple(samples))


def p2p_family(node: NodeSnapshot, options: EventFamilyOptions,
               metric: PlannedMetric) -> Family:
    """Every peer of every GPU that was read (a pair whose call failed has no series)."""
    samples: list[Sample] = []
    for ent in gpu_entities(node, options):
        row = ent.gpu.p2p_nvlink
        for peer in sorted(row):
            samples += entity_samples(ent, str(row[peer]), [
                (LABEL_PEER, str(peer)), (LABEL_LINK_STATUS, link_status(row[peer]))])
    return Family(metric.name, metric.prom_type, metric.help, tuple(samples))


def status_families(node: NodeSnapshot, metrics: Iterable[PlannedMetric],
                    readings: Mapping[str, tuple[Incident, ...]], xids: XidSnapshot,
                    options: EventFamilyOptions, now: float) -> list[Family]:
    """The families of the counters lines naming a status field, in their order."""
    families: list[Family] = []
    for metric in metrics:
        if metric.field == HEALTH_FIELD:
            families.append(health_family(node, readings, xids, options, now, metric))
        elif metric.field == P2P_FIELD:
            families.append(p2p_family(node, options, metric))
    return families
