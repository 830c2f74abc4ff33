"""Log lines that report a change once, not on every pass: a GPU that stops or resumes
answering, a kubelet device ID or a DRA claimed device that matches nothing on this node."""

import logging
from collections.abc import Iterable, Mapping

from .model import NodeSnapshot

log = logging.getLogger("gpu_enricher.collector")

MAX_REMEMBERED = 1000  # IDs reported once each; bounded, so a flood of new IDs cannot grow it


def report_gpu_changes(before: NodeSnapshot | None, after: NodeSnapshot) -> None:
    was_healthy = {g.identity.index: g.healthy for g in before.gpus} if before else {}
    for gpu in after.gpus:
        was = was_healthy.get(gpu.identity.index, True)
        if was and not gpu.healthy:
            log.error("GPU %d (%s) stopped answering: %s", gpu.identity.index,
                      gpu.identity.uuid or "uuid unknown", gpu.error)
        elif not was and gpu.healthy:
            log.warning("GPU %d (%s) answers again", gpu.identity.index, gpu.identity.uuid)


class Unmatched:
    """Device IDs and claimed devices that name nothing on this node: news once each."""

    def __init__(self) -> None:
        self._seen: set[str] = set()

    def report(self, device_ids: Iterable[str], claims: Mapping[str, str]) -> None:
        for item, what, hint in [
            *((d, "kubelet device ID", "") for d in device_ids),
            *((c, "DRA claimed device", f" ({why}): its GPU's series flow without DRA labels")
              for c, why in claims.items()),
        ]:
            if item not in self._seen and len(self._seen) < MAX_REMEMBERED:
                self._seen.add(item)
                log.warning("%s %r matches no GPU or MIG instance of this node%s", what, item,
                            hint)
