"""Log lines that report a change once, not on every pass: a GPU that stops or resumes
answering, a kubelet device ID, a DRA claimed device or a `-d` id that matches nothing on this
node, the counters plan (once, not again on every NVML reopen)."""

import dataclasses
import logging
from collections.abc import Iterable, Mapping

from ..fields.counters import CounterLine, CounterPlan
from ..model import GpuSnapshot, NodeSnapshot

log = logging.getLogger("gpu_enricher.collector.loop")

MAX_REMEMBERED = 1000  # IDs reported once each; bounded, so a flood of new IDs cannot grow it


GONE_FROM_DRIVER = "no longer listed by the driver"
"""The error of a GPU kept for one pass after the driver stopped listing it."""


def with_gone_gpus(before: NodeSnapshot | None, after: NodeSnapshot) -> NodeSnapshot:
    """`after`, plus every GPU of `before` that it no longer lists (the GPU count shrank, or
    the GPUs were renumbered) as down: its `gpu_enricher_gpu_up` series reads 0 for one pass
    before it goes, instead of vanishing at once (issue 13, defect 9). Pure."""
    if before is None:
        return after
    listed = {g.identity for g in after.gpus}
    gone = tuple(GpuSnapshot(g.identity, healthy=False, error=GONE_FROM_DRIVER)
                 for g in before.gpus
                 if g.identity not in listed and g.error != GONE_FROM_DRIVER  # once only
                 and g.identity.uuid not in after.rebound)  # gone on purpose: just gone
    return dataclasses.replace(after, gpus=after.gpus + gone) if gone else after


def report_gpu_changes(before: NodeSnapshot | None, after: NodeSnapshot) -> NodeSnapshot:
    """Logs each GPU that stops or resumes answering; returns the pass to serve,
    `with_gone_gpus`."""
    after = with_gone_gpus(before, after)
    was_healthy = {g.identity.index: g.healthy for g in before.gpus} if before else {}
    for gpu in before.gpus if before else ():
        if gpu.identity.uuid in after.rebound:
            log.info("GPU %d (%s): its series end, the GPUs bound to the driver changed",
                     gpu.identity.index, gpu.identity.uuid)
    for gpu in after.gpus:
        was = was_healthy.get(gpu.identity.index, True)
        if was and not gpu.healthy:
            log.error("GPU %d (%s) stopped answering: %s", gpu.identity.index,
                      gpu.identity.uuid or "uuid unknown", gpu.error)
        elif not was and gpu.healthy:
            log.warning("GPU %d (%s) answers again", gpu.identity.index, gpu.identity.uuid)
    return after


class Unmatched:
    """Device IDs and claimed devices that name nothing on this node: news once each."""

    def __init__(self) -> None:
        self._seen: set[str] = set()

    def report(self, device_ids: Iterable[str], claims: Mapping[str, str],
               selected: Iterable[str] = ()) -> None:
        for item, what, hint in [
            *((d, "kubelet device ID", "") for d in device_ids),
            *((s, "-d/--devices id", ": nothing is exported for it (dcgm-exporter would not "
                   "start)") for s in selected),
            *((c, "DRA claimed device", f" ({why}): its GPU's series flow without DRA labels")
              for c, why in claims.items()),
        ]:
            if item not in self._seen and len(self._seen) < MAX_REMEMBERED:
                self._seen.add(item)
                log.warning("%s %r matches no GPU or MIG instance of this node%s", what, item,
                            hint)


def report_plan(plan: CounterPlan, warnings: Iterable[str], counters: Iterable[CounterLine],
                backend: str) -> None:
    for warning in warnings:
        log.warning("%s", warning)
    if not plan.metrics and not plan.label_fields:
        files = sorted({line.path for line in counters})
        log.error("none of the fields in %s can be delivered by the %s backend on this host: "
                  "/metrics carries only the exporter's own metrics", ", ".join(files), backend)
    log.info("collecting %d metric fields and %d label fields from the %s backend",
             len(plan.metrics), len(plan.label_fields), backend)
