"""Pod assignments from the kubelet, refreshed once per collection cycle, never per scrape.

A kubelet that is down, rate-limiting (its 100 qps / burst 10 budget is shared by every
client of the socket) or slow degrades the output: the last good assignments are kept for a
bounded time, then dropped rather than showing possibly wrong pod labels. GPU series flow
either way. Devices held through DRA ResourceClaims follow the same rules as the assignments:
they come from the same `List` answer, so they are kept and dropped together.

Only the device IDs that name a GPU or MIG instance of this node are kept (`selection`),
chosen on the client's parse thread against the GPUs of the last NVML pass: a node with
thousands of pods holding RDMA or SR-IOV devices (issue 13, defect 2), or a List of 250,000
IDs of GPUs elsewhere (issue 26), would otherwise have every collection pass match all of them
on the event loop and keep them between passes. The others are counted and logged once.

A `List` costs CPU in proportion to the answer (2-4 ms per MB received and parsed: 0.1-0.2 s for
the 50 MB of a node with tens of thousands of pods), taken from the core that also serves scrapes.
`list_cpu_budget` bounds it as a share of one core: after a List that cost C seconds the next
waits C / budget (capped), and passes in between use the last answer, so the exporter never
spends a whole core on a huge node ("exporters that eat whole cores"; issue 13, defect 2:
/metrics p99 under load while a 50 MB answer is processed).
"""

import logging
import random
import time
from collections import Counter
from collections.abc import Callable, Iterable
from dataclasses import dataclass
from typing import Final

from prometheus_client.metrics_core import Metric

from ..attribution.devices import NodeIndex, node_index
from ..exposition.selfmetrics import kubelet_families, kubelet_list_families, unmatched_family
from ..fields import names
from ..model import (
    AllocatableDevices,
    AssignmentSnapshot,
    ClaimAllocation,
    NodeSnapshot,
    PodAssignment,
    SourceHealth,
)
from ..rpc.answer import SOCKET_MISSING, CallError
from .answers import ListResult
from .client import PodResourcesClient
from .selection import NO_UNMATCHED, Select, UnmatchedIds, held_on, may_name_a_gpu

log = logging.getLogger(__name__)

SOURCE: Final = "kubelet"

@dataclass(frozen=True, slots=True)
class KubeletOptions:
    max_age_seconds: float  # keep the last good assignments this long after failures
    allocatable_every_seconds: float = 60.0
    extra_resources: frozenset[str] = frozenset()
    retry_max_seconds: float = 30.0
    list_cpu_budget: float = 0.0  # share of one core the Lists may take; 0: a List every pass
    list_max_wait_seconds: float = 60.0  # the longest the budget defers a List


class KubeletSource:
    """A `Source[AssignmentSnapshot]`: refreshed concurrently with the GPU pass."""

    name = SOURCE
    after_gpus = False

    def __init__(self, client: PodResourcesClient, options: KubeletOptions,
                 clock: Callable[[], float] = time.monotonic) -> None:
        self.client = client
        self.options = options
        self._clock = clock
        self._may_keep = may_name_a_gpu(options.extra_resources)
        self._node: NodeIndex | None = None  # the GPUs of the last NVML pass
        self._select: Select | None = None
        self._listed_node: NodeIndex | None = None  # the GPUs the last good List kept
        self._offered_node: NodeIndex | None = None  # those of the last allocatable answer
        self.unmatched = NO_UNMATCHED  # of the last good List
        self.allocatable_unmatched: UnmatchedIds | None = None
        self._assignments: tuple[PodAssignment, ...] = ()
        self._claims: tuple[ClaimAllocation, ...] = ()
        self._fetched_at: float | None = None
        self._allocatable: tuple[AllocatableDevices, ...] | None = None
        self._allocatable_at: float | None = None
        self._api = ""
        self._lists = 0
        self._first_list: dict[tuple[str, str], int] = {}
        self._pod_age: dict[tuple[str, str], int] = {}
        self._up = False
        self._failures = 0
        self._retry_at = 0.0
        self._last_error: str | None = None
        self._budget_wait = 0.0  # after the last good List, how long the next waits
        self.deferred = 0
        self.last_list_cpu_seconds: float | None = None
        self.collections = 0
        self.errors: Counter[str] = Counter()
        self.last_duration: float | None = None
        self.last_success_wall: float | None = None

    async def start(self) -> None:
        """Nothing runs in the background: one `List` per cycle."""

    async def refresh(self, gpus: NodeSnapshot | None = None) -> None:
        """One attempt (skipped while backing off after failures); never raises. Without a
        GPU snapshot yet (`gpus` None and none before) nothing is asked: no device ID could be
        matched, and keeping them all unmatched is what issue 26 bounds. The collector hands
        the kubelet's refresh the GPUs of the pass before, and on its first pass those of the
        first NVML pass."""
        if gpus is not None:
            self._know(gpus)
        node, select = self._node, self._select
        now = self._clock()
        if select is None or now < self._retry_at:
            return
        if self._fetched_at is not None and now < self._fetched_at + self._budget_wait and \
                node == self._listed_node:  # GPUs changed: their holders at once
            # within the CPU budget: the last answer stands
            self.deferred += 1
        elif not await self._list(now, node, select):
            return
        await self._offer(now, node, select)

    async def _list(self, now: float, node: NodeIndex | None, select: Select) -> bool:
        """One `List`; False when it failed (recorded, backed off)."""
        started = time.perf_counter()
        try:
            result = await self.client.list(select, self._may_keep)
        except CallError as exc:
            self._failed(exc, now)
            return False
        self._listed_node = node
        self._report_unmatched("List", self.unmatched, result.unmatched)
        self.unmatched = result.unmatched
        self._assignments = result.assignments
        self._claims = result.claims
        self._track_pods(result.pods)
        self._api = result.api
        self._pace(result)
        self._fetched_at = now
        self._up = True
        self._failures = 0
        self._retry_at = 0.0
        self.collections += 1
        self.last_duration = time.perf_counter() - started
        self.last_success_wall = time.time()
        if self._last_error is not None:
            log.warning("kubelet pod-resources API answers again (%s)", result.api)
            self._last_error = None
        return True

    async def _offer(self, now: float, node: NodeIndex | None, select: Select) -> None:
        """`GetAllocatableResources` when due (every `allocatable_every_seconds`, and when the
        GPUs changed), on passes that List and passes the budget defers alike: an answer of
        ~50 MB (a plugin advertising 250,000 replicas) outlasts a pass's deadline, and the
        next pass collects it (the client keeps it) rather than never (issue 26)."""
        if self._allocatable_at is not None and node == self._offered_node and \
                now - self._allocatable_at < self.options.allocatable_every_seconds:
            return
        try:
            offered = await self.client.allocatable(select)
        except CallError as exc:  # retried next cycle; the assignments stand
            self.errors[exc.code] += 1
            return
        self._allocatable_at, self._offered_node = now, node
        self._allocatable = None if offered is None else offered.devices
        if offered is not None:
            self._report_unmatched("GetAllocatableResources", self.allocatable_unmatched,
                                   offered.unmatched)
        self.allocatable_unmatched = None if offered is None else offered.unmatched

    def _know(self, gpus: NodeSnapshot) -> None:
        """This node's GPUs and MIG instances, which the client's thread keeps the device IDs
        of: a new selection only when they change (a GPU bound or unbound, MIG changed)."""
        node = node_index(gpus.gpus)
        if node != self._node:
            self._node = node
            self._select = held_on(node, self.options.extra_resources)

    @staticmethod
    def _report_unmatched(call: str, before: UnmatchedIds | None, after: UnmatchedIds) -> None:
        """Logged when an answer's IDs that name nothing here appear, with a sample, and when
        they are gone: not once per ID (250,000 of them in issue 26); the gauge counts them."""
        had = before is not None and before.count > 0
        if after.count and not had:
            log.warning("the kubelet's %s answer lists %s device IDs of GPU resources that name "
                        "no GPU or MIG instance of this node, e.g. %s: dropped, counted in "
                        "gpu_enricher_kubelet_unmatched_device_ids", call, f"{after.count:,}",
                        ", ".join(map(repr, after.sample)))
        elif had and not after.count:
            log.info("every device ID of GPU resources in the kubelet's %s answer names a GPU "
                     "or MIG instance of this node again", call)

    def _pace(self, result: ListResult) -> None:
        """How long after this List the next may run, for the Lists to stay within the CPU
        budget."""
        cpu_seconds = self.last_list_cpu_seconds = result.cpu_seconds
        budget = self.options.list_cpu_budget
        wait = 0.0 if budget <= 0 else min(cpu_seconds / budget,
                                           self.options.list_max_wait_seconds)
        if (wait >= 1.0) != (self._budget_wait >= 1.0):  # log when the spacing starts or ends
            if wait >= 1.0:
                log.info("a kubelet List answer of %s bytes costs %.3f s of CPU: one List per "
                         "%.1f s at most, within --kubelet-list-cpu-budget %g%%",
                         f"{result.answer_bytes:,}", cpu_seconds, wait, 100 * budget)
            else:
                log.info("kubelet List cost back to %.3f s of CPU: a List every pass again",
                         cpu_seconds)
        self._budget_wait = wait

    def _track_pods(self, listed: Iterable[tuple[str, str]]) -> None:
        """Remember in which `List` answer each pod first appeared (forgotten once gone); a pod
        that holds only claims counts too, so "newest pod wins" sees it."""
        self._lists += 1
        self._first_list = {pod: self._first_list.get(pod, self._lists) for pod in listed}
        # Once per answer, not per snapshot (two per pass): thousands of pods cost milliseconds.
        self._pod_age = {pod: self._lists - first for pod, first in self._first_list.items()}

    def _failed(self, exc: CallError, now: float) -> None:
        self.errors[exc.code] += 1
        self._up = False
        self._failures += 1
        if exc.code != SOCKET_MISSING:  # a missing socket costs a stat: look every cycle
            # Back off (capped, jittered) so a rate-limited or restarting kubelet is not hammered.
            delay = min(0.5 * 2 ** (self._failures - 1), self.options.retry_max_seconds)
            self._retry_at = now + delay * random.uniform(0.8, 1.2)
        if self._last_error != exc.code:  # log when the failure starts or changes
            if exc.code == SOCKET_MISSING:
                log.warning("no kubelet pod-resources socket at %s: running without pod labels "
                            "until it appears", self.client.socket_path)
            else:
                log.warning("kubelet pod-resources API failed: %s; keeping the last pod labels "
                            "for up to %.0fs", exc, self.options.max_age_seconds)
            self._last_error = exc.code

    def snapshot(self) -> AssignmentSnapshot:
        now = self._clock()
        age = None if self._fetched_at is None else now - self._fetched_at
        if age is not None and age > self.options.max_age_seconds + self._budget_wait:
            # Better no pod labels than possibly wrong ones. A List the budget deferred is
            # not a failure: the age limit counts from when the next List was due.
            return AssignmentSnapshot((), None, self._up, self._allocatable, self._api, claims=())
        return AssignmentSnapshot(self._assignments, age, self._up, self._allocatable, self._api,
                                  self._pod_age, self._claims)

    def health(self) -> SourceHealth:
        return SourceHealth(up=self._up, collections=self.collections, errors=dict(self.errors),
                            last_duration_seconds=self.last_duration,
                            last_success_timestamp=self.last_success_wall)

    def families(self) -> list[Metric]:
        snapshot = self.snapshot()
        return [*kubelet_families(snapshot, self.options.extra_resources),
                *kubelet_list_families(self.last_list_cpu_seconds, self.deferred),
                unmatched_family(None if self._listed_node is None else self.unmatched.count,
                                 None if self.allocatable_unmatched is None
                                 else self.allocatable_unmatched.count),
                claim_devices_family(snapshot.claims)]

    async def close(self) -> None:
        await self.client.close()


def claim_devices_family(claims: Iterable[ClaimAllocation]) -> Metric:
    """Distinct claimed devices per driver: a device shared by several pods counts once."""
    per_driver: dict[str, set[tuple[str, str]]] = {}
    for claim in claims:
        per_driver.setdefault(claim.driver, set()).add((claim.pool, claim.device))
    name = f"{names.SELF_PREFIX}kubelet_allocated_claim_devices"
    family = Metric(name, "Devices held through DRA ResourceClaims, by driver, from the "
                    "kubelet's List.", "gauge")
    for driver, devices in sorted(per_driver.items()):
        family.add_sample(name, {"driver": driver}, len(devices))
    return family
