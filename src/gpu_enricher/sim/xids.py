"""The simulated node's XID errors: the XIDs its scenario gives each GPU, raised once at start,
so `DCGM_FI_DEV_XID_ERRORS`, `DCGM_EXP_XID_ERRORS_COUNT` and `gpu_enricher_xid_errors_total`
have data without a GPU. The same `Source[XidSnapshot]` shape as the NVML event thread."""

import time
from collections.abc import Callable

from prometheus_client.metrics_core import Metric

from ..health.xid import GpuXids, XidSnapshot
from ..model import NodeSnapshot, SourceHealth
from .node import Scenario


class SimulatedXids:
    name = "xid"
    after_gpus = False

    def __init__(self, scenario: Scenario, clock: Callable[[], float] = time.monotonic) -> None:
        self._scenario = scenario
        self._clock = clock
        self._snapshot = XidSnapshot()

    async def start(self) -> None:
        at = self._clock()
        gpus = {gpu.uuid: GpuXids(gpu.xids[-1], {x: gpu.xids.count(x) for x in gpu.xids},
                                  tuple((at, x) for x in gpu.xids))
                for gpu in self._scenario.gpus if gpu.xids}
        self._snapshot = XidSnapshot(gpus, at, frozenset(g.uuid for g in self._scenario.gpus),
                                     sum(len(g.xids) for g in self._scenario.gpus))

    async def refresh(self, gpus: NodeSnapshot | None) -> None:
        pass

    def snapshot(self) -> XidSnapshot:
        return self._snapshot

    def health(self) -> SourceHealth:
        return SourceHealth(up=True)

    def families(self) -> list[Metric]:
        return []

    async def close(self) -> None:
        pass
