"""A pass's sources besides the GPU backend: who they are, the order a pass refreshes them in,
and the inputs of the join their snapshots make.

The kubelet's `List`, the API's watches and the job files run beside the NVML pass (handed the
GPUs of the pass before, or on the first pass those of NVML's first answer, so the kubelet never
lists without knowing which device IDs name this node's GPUs: issue 26); the sources derived
from the pass (clock events, health), then those that need its GPU snapshot (/proc needs
NVML's PIDs), then the claims the kubelet's `List` named.
"""

import asyncio
import time
from dataclasses import dataclass

from ..attribution.containers import RuntimeContainers
from ..fields.counters import CounterPlan
from ..health.clock_events import ClockEventSource
from ..health.source import HealthSource
from ..health.xid import XidSnapshot
from ..model import (
    AssignmentSnapshot,
    ClaimAccess,
    JobMapping,
    NodeSnapshot,
    PodDirectory,
    ProcessTable,
    SliceDirectory,
)
from ..sources import Source, SourceSet
from .cycle import CycleInputs


@dataclass(frozen=True, slots=True)
class LabelSources:
    """The sources the join reads, by their role; None: that feature is off."""

    assignments: Source[AssignmentSnapshot] | None = None
    pods: Source[PodDirectory] | None = None
    logs: Source[PodDirectory] | None = None
    processes: Source[ProcessTable] | None = None
    slices: Source[SliceDirectory] | None = None
    xids: Source[XidSnapshot] | None = None
    claim_access: Source[ClaimAccess] | None = None
    jobs: Source[JobMapping] | None = None
    containers: Source[RuntimeContainers] | None = None


class PassSources:
    def __init__(self, labels: LabelSources, others: tuple[Source[object], ...],
                 clock_events: ClockEventSource, gpu_health: HealthSource,
                 deadline_seconds: float) -> None:
        self.labels = labels
        self.clock_events = clock_events
        self.gpu_health = gpu_health
        # A source's refresh may take most of a pass, never more (the kubelet's own deadline
        # is shorter); a stuck one is abandoned and counted.
        self.set = SourceSet((labels.assignments, labels.pods, labels.logs, labels.processes,
                              labels.slices, labels.xids, labels.jobs, labels.claim_access,
                              labels.containers,
                              clock_events, gpu_health, *others), deadline_seconds)

    def inputs(self, node: NodeSnapshot | None, plan: CounterPlan | None,
               collected_at: float | None) -> CycleInputs:
        """Every source's latest snapshot, as the join takes them."""
        x = self.labels
        return CycleInputs(
            node, plan,
            x.assignments.snapshot() if x.assignments is not None else None,
            x.pods.snapshot() if x.pods is not None else None,
            x.logs.snapshot() if x.logs is not None else None,
            x.processes.snapshot() if x.processes is not None else None,
            collected_at,
            x.slices.snapshot() if x.slices is not None else None,
            x.xids.snapshot() if x.xids is not None else None,
            self.clock_events.snapshot(), time.monotonic(), self.gpu_health.snapshot(),
            x.claim_access.snapshot() if x.claim_access is not None else None,
            x.jobs.snapshot() if x.jobs is not None else None,
            x.containers.snapshot() if x.containers is not None else None)

    def refresh_concurrent(self, node: NodeSnapshot | None) -> list[asyncio.Future[None]]:
        return [asyncio.ensure_future(self.set.refresh(s, node))
                for s in self.set.all if not s.after_gpus]

    async def refresh_rest(self, node: NodeSnapshot | None,
                           concurrent: list[asyncio.Future[None]]) -> None:
        """A pass's sources after its NVML answer: those derived from it, those that need it
        (/proc), the concurrent ones' end (the kubelet's List), then the claims it names."""
        derived: tuple[Source[object], ...] = (self.clock_events, self.gpu_health)
        for pure in derived:  # from the pass itself, no I/O
            await self.set.refresh(pure, node)
        last = (*derived, self.labels.claim_access)
        for source in self.set.all:
            if source.after_gpus and source not in last:
                await self.set.refresh(source, node)
        await asyncio.gather(*concurrent)  # each bounded by the source set's deadline
        await self.refresh_claims(node)

    async def refresh_claims(self, node: NodeSnapshot | None) -> None:
        if self.labels.claim_access is not None:  # the claims of this pass's kubelet List
            await self.set.refresh(self.labels.claim_access, node)
