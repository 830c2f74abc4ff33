"""`ResourceClaimSource`: which devices of the claims the kubelet reports are held with admin
access, read once per claim from the Kubernetes API.

The GPU Operator's DRA exporter claims every GPU with admin access (see `claims.py`); such a
claim monitors and must not put its pod's labels on the GPU series. The kubelet names the
claims a pod uses; each one is read when it first appears (in the pass whose List reported it:
the collector refreshes this source after the kubelet's), and kept while the kubelet reports
it: an allocation does not change while the claim is in use.

RBAC decides what can be read. The operator's Role lets its exporter read ResourceClaims of
its own namespace only: a workload's claim elsewhere answers 403, is logged once per namespace
and counts as an ordinary holder (retried every 10 minutes, in case RBAC is granted). Any
other failure is retried after 30 s, the claim an ordinary holder meanwhile, so an API server
outage never takes a workload's labels away. Only a claim never asked about (at start, while
the client library loads, about a second) labels nothing yet: it may be a monitor.
"""

import asyncio
import contextlib
import logging
import time
from collections import Counter
from collections.abc import Callable, Iterable
from dataclasses import dataclass
from typing import TYPE_CHECKING, Final

from prometheus_client.metrics_core import CounterMetricFamily, GaugeMetricFamily, Metric

from ..fields import names
from ..model import ClaimAccess, ClaimAllocation, NodeSnapshot, SourceHealth
from .claims import Device, admin_devices
from .client import FORBIDDEN, NOT_SERVED, TIMEOUT, KubeError
from .config import ConfigPlan, open_api_client, plan_from_environment
from .slice_client import LIBRARY, discover_version, read_claim
from .watch_source import import_library

if TYPE_CHECKING:
    from kubernetes_asyncio.client.api_client import ApiClient

log = logging.getLogger(__name__)

SOURCE: Final = "resourceclaims"
P: Final = f"{names.SELF_PREFIX}dra_"
ClaimName = tuple[str, str]  # (namespace, name)


@dataclass(frozen=True, slots=True)
class ClaimReadOptions:
    host: str | None = None
    """An API server URL used as it is, without authentication (the simulated node, tests)."""
    kubeconfig: str | None = None
    request_timeout_seconds: float = 2.0
    reads_per_pass: int = 64
    """New claims read in one pass at most (concurrently); the rest in the next passes."""
    retry_seconds: float = 30.0
    forbidden_retry_seconds: float = 600.0


class ResourceClaimSource:
    name = SOURCE
    after_gpus = True  # see the module docstring: the collector runs it after the kubelet's

    def __init__(self, options: ClaimReadOptions,
                 in_use: Callable[[], Iterable[ClaimAllocation]],
                 plan: Callable[[], ConfigPlan] | None = None,
                 clock: Callable[[], float] = time.monotonic) -> None:
        self.options = options
        self._in_use = in_use
        self._plan = plan or (lambda: plan_from_environment(options.host, options.kubeconfig))
        self._clock = clock
        self._api: ApiClient | None = None
        self._version = ""
        self._read: dict[ClaimName, frozenset[Device]] = {}
        self._retry_at: dict[ClaimName, float] = {}
        self._results: Counter[str] = Counter()
        self._errors: Counter[str] = Counter()
        self._failing = False
        self._forbidden_namespaces: set[str] = set()
        self._access = ClaimAccess()
        self._loading: asyncio.Task[None] | None = None
        self._last_duration: float | None = None
        self._last_success: float | None = None
        self._loaded: Callable[[], None] | None = None

    async def start(self) -> None:
        """Load the client library in a thread (about a second of CPU): passes go on
        meanwhile, the claims they report pending; once loaded, subscribers hear of it (the
        first picture after a start reads the pending claims then, issue 32)."""
        if self._loading is None:
            self._loading = asyncio.create_task(asyncio.to_thread(import_library, LIBRARY),
                                                name="ResourceClaim client import")
            self._loading.add_done_callback(lambda _: self._loaded and self._loaded())

    def subscribe(self, callback: Callable[[], None]) -> None:
        self._loaded = callback

    @property
    def listed(self) -> bool:
        """Every claim the kubelet's last `List` named was asked about (read, or refused and
        counted as an ordinary holder): none still labels nothing."""
        return not self._access.pending

    async def refresh(self, gpus: NodeSnapshot | None) -> None:
        wanted = {(c.claim_namespace, c.claim_name) for c in self._in_use()}
        now = self._clock()
        for key in [k for k in self._read if k not in wanted]:
            del self._read[key]
        self._retry_at = {k: t for k, t in self._retry_at.items() if k in wanted}
        due = sorted(k for k in wanted
                     if k not in self._read and self._retry_at.get(k, 0.0) <= now)
        if due and (self._loading is None or self._loading.done()):
            started = time.perf_counter()
            await self._read_all(due[:self.options.reads_per_pass], now)
            self._last_duration = time.perf_counter() - started
        admin = frozenset((namespace, name, *device) for (namespace, name), devices
                          in self._read.items() for device in devices)
        pending = frozenset(k for k in wanted if k not in self._read and k not in self._retry_at)
        if (admin, pending) != (self._access.admin, self._access.pending):
            self._access = ClaimAccess(admin, pending)

    async def _read_all(self, due: list[ClaimName], now: float) -> None:
        failures: list[KubeError | None]
        try:
            async with asyncio.timeout(self.options.request_timeout_seconds * 2):
                api = await self._client()
                failures = list(await asyncio.gather(*(self._read_one(api, k) for k in due)))
        except TimeoutError:
            failures = [KubeError(TIMEOUT, "the Kubernetes API did not answer in time")] * len(due)
            self._errors[TIMEOUT] += 1
        except KubeError as exc:  # no client or no resource.k8s.io: nothing was read
            failures = [exc] * len(due)
            self._errors[exc.reason] += 1
        for key, failure in zip(due, failures, strict=True):
            if failure is not None:
                self._retry_at[key] = now + (self.options.forbidden_retry_seconds
                                             if failure.reason == FORBIDDEN
                                             else self.options.retry_seconds)
        others = [f for f in failures if f is not None and f.reason != FORBIDDEN]
        if others and not self._failing:
            log.warning("cannot read ResourceClaims from the Kubernetes API (%s): their devices "
                        "count as held by their pods until they are read", others[0])
        elif not others and self._failing:
            log.warning("ResourceClaims are read from the Kubernetes API again")
        self._failing = bool(others)
        if not others:
            self._last_success = time.time()

    async def _client(self) -> "ApiClient":
        if self._api is None:
            self._api = await open_api_client(self._plan())
        if not self._version:
            self._version = await discover_version(self._api,
                                                   self.options.request_timeout_seconds)
        return self._api

    async def _read_one(self, api: "ApiClient", key: ClaimName) -> KubeError | None:
        namespace, name = key
        try:
            claim = await read_claim(api, self._version, namespace, name,
                                     self.options.request_timeout_seconds)
        except KubeError as exc:
            self._results[exc.reason] += 1
            self._errors[exc.reason] += 1
            if exc.reason == NOT_SERVED:  # the claim is gone, or the version (an upgrade):
                self._version = ""  # ask the server which one it serves before the next read
            if exc.reason == FORBIDDEN and namespace not in self._forbidden_namespaces:
                self._forbidden_namespaces.add(namespace)
                log.info("may not read ResourceClaims in namespace %s (%s): a claim there "
                         "counts as an ordinary holder of its devices, even with admin access "
                         "(the GPU Operator grants its exporter its own namespace only)",
                         namespace, exc)
            return exc
        self._results["read"] += 1
        self._read[key] = admin_devices(claim)
        return None

    def snapshot(self) -> ClaimAccess:
        return self._access

    def health(self) -> SourceHealth:
        return SourceHealth(up=not self._failing, collections=sum(self._results.values()),
                            errors=dict(self._errors),
                            last_duration_seconds=self._last_duration,
                            last_success_timestamp=self._last_success)

    def families(self) -> list[Metric]:
        reads = CounterMetricFamily(
            f"{P}claim_reads", "ResourceClaims read from the Kubernetes API to tell admin-access "
            "claims apart, by result: read, or why not (forbidden: no RBAC in that namespace; "
            "the claim then counts as an ordinary holder).", labels=["result"])
        for result, count in sorted(self._results.items()):
            reads.add_metric([result], count)
        admin = GaugeMetricFamily(
            f"{P}admin_access_devices", "Devices the kubelet reports under claims allocated "
            "with admin access: monitors, never holders of the device.",
            value=len(self._access.admin))
        return [reads, admin]

    async def close(self) -> None:
        loading, self._loading = self._loading, None
        if loading is not None and not loading.done():
            loading.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await loading
        api, self._api = self._api, None
        if api is not None:
            await api.close()
