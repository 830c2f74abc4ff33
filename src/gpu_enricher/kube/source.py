"""`PodWatchSource`: this node's pods from the Kubernetes API, kept current by one watch.

One background task lists the pods bound to this node and watches them (see `listwatch.py`);
`refresh()` only does bookkeeping, so a collection cycle never waits on the API server.

When is the view `synced`? From the first complete list on, while the watch is open, and for
`stale_after_seconds` after the view was last known current (a list answered, a watch opened,
a line read). The pods are kept and used through an outage either way: pods rarely change and
their labels flapping in and out would split every series. `synced` only drives the
`gpu_enricher_kubernetes_synced` metric and the log lines: the join always asks these pods
first and the log directory after them (for any container they do not know), synced or not.
The default bound, max(60 s, 3 watch timeouts), rides out an API server upgrade without a
false alarm.
"""

import asyncio
import contextlib
import importlib
import logging
import time
from collections.abc import Callable
from dataclasses import dataclass
from typing import TYPE_CHECKING, Final

from prometheus_client.metrics_core import CounterMetricFamily, GaugeMetricFamily, Metric

from .. import names
from ..model import NodeSnapshot, PodDirectory, PodMeta, SourceHealth
from ..sources import Source
from .client import ListWatchCalls, pod_calls
from .config import ConfigPlan, open_api_client, plan_from_environment
from .listwatch import ListWatch, ListWatchOptions, ResourceKind
from .pods import parse_pod

if TYPE_CHECKING:
    from kubernetes_asyncio.client.api_client import ApiClient

log = logging.getLogger(__name__)

SOURCE: Final = "kubernetes"
P: Final = f"{names.SELF_PREFIX}kubernetes_"
_LIBRARY: Final = ("kubernetes_asyncio.client.api.core_v1_api", "kubernetes_asyncio.config")


@dataclass(frozen=True, slots=True)
class PodWatchOptions:
    node_name: str
    host: str | None = None
    """An API server URL used as it is, without authentication (the simulated node, tests)."""
    kubeconfig: str | None = None
    watch_timeout_seconds: int = 300
    stall_margin_seconds: float = 30.0
    stale_after_seconds: float | None = None
    """None: max(60 s, 3 watch timeouts)."""
    request_timeout_seconds: float = 30.0
    backoff_initial_seconds: float = 1.0
    backoff_max_seconds: float = 60.0
    short_watch_seconds: float = 1.0
    """A watch ended sooner, without an event, is a failure and is retried with backoff."""

    @property
    def stale_after(self) -> float:
        if self.stale_after_seconds is not None:
            return self.stale_after_seconds
        return max(60.0, 3.0 * self.watch_timeout_seconds)

    def list_watch(self) -> ListWatchOptions:
        return ListWatchOptions(self.watch_timeout_seconds, self.stall_margin_seconds,
                                self.backoff_initial_seconds, self.backoff_max_seconds,
                                self.short_watch_seconds)


def _load_library() -> None:
    for module in _LIBRARY:
        importlib.import_module(module)


class PodWatchSource:
    name = SOURCE
    after_gpus = False

    def __init__(self, options: PodWatchOptions,
                 plan: Callable[[], ConfigPlan] | None = None,
                 clock: Callable[[], float] = time.monotonic) -> None:
        """`plan` decides the configuration on each connect (default: options, then the
        environment; see `config.py`)."""
        self.options = options
        self._plan = plan or (lambda: plan_from_environment(options.host, options.kubeconfig))
        self._clock = clock
        kind = ResourceKind("pods", "", f"on node {options.node_name}")
        self._watch = ListWatch(kind, self._connect, parse_pod, options.list_watch(), clock)
        self._api: ApiClient | None = None
        self._task: asyncio.Task[None] | None = None
        self._connects = 0
        self._stale_logged = False

    async def start(self) -> None:
        if self._task is None:
            self._task = asyncio.create_task(self._run(), name=f"{SOURCE} pod watch")

    async def _run(self) -> None:
        await self._watch.run()

    async def _connect(self) -> ListWatchCalls:
        await self._close_api()
        plan = self._plan()
        # The import takes about a second of CPU: done in a thread, /metrics keeps answering.
        await asyncio.to_thread(_load_library)
        self._api = await open_api_client(plan)
        self._connects += 1
        log.log(logging.INFO if self._connects == 1 else logging.DEBUG,
                "watching pods on node %s through the Kubernetes API (%s %s)",
                self.options.node_name, plan.kind, plan.location)
        return pod_calls(self._api, self.options.node_name, self.options.request_timeout_seconds)

    async def refresh(self, gpus: NodeSnapshot | None) -> None:
        """Bookkeeping only: logs when the listed pods turn stale, and when current again."""
        synced = self._watch.current_within(self.options.stale_after)
        if self._watch.listed and not synced and not self._stale_logged:
            log.warning("pods from the Kubernetes API not confirmed for over %.0fs: marked "
                        "not synced (still used; the log directory names the containers "
                        "they do not know)", self.options.stale_after)
            self._stale_logged = True
        elif synced and self._stale_logged:
            log.warning("pods from the Kubernetes API are current again (%d pods)",
                        len(self._watch.objects))
            self._stale_logged = False

    def snapshot(self) -> PodDirectory:
        pods: tuple[PodMeta, ...] = tuple(self._watch.objects.values())
        return PodDirectory(pods, self._watch.current_within(self.options.stale_after))

    def health(self) -> SourceHealth:
        watch = self._watch
        return SourceHealth(up=watch.up, collections=watch.lists + watch.watches,
                            errors=dict(watch.errors),
                            last_duration_seconds=watch.last_list_seconds,
                            last_success_timestamp=watch.last_success_wall)

    @property
    def resource_version(self) -> str | None:
        """Where the next watch starts (None: a list comes first)."""
        return self._watch.resource_version

    def families(self) -> list[Metric]:
        watch = self._watch
        pods = GaugeMetricFamily(f"{P}pods", "Pods on this node known from the Kubernetes API.",
                                 value=len(watch.objects))
        synced = GaugeMetricFamily(
            f"{P}synced", "Whether the pods from the Kubernetes API are current (1) or not (0).",
            value=1 if watch.current_within(self.options.stale_after) else 0)
        lists = CounterMetricFamily(f"{P}lists", "Complete pod lists (one more per 410 Gone).",
                                    value=watch.lists)
        restarts = CounterMetricFamily(
            f"{P}watch_restarts", "Pod watches ended, by reason: closed (the server's timeout, "
            "normal), gone (410: re-listed), stalled (silent too long), short_watch (ended at "
            "once without an event: backed off), or an error reason.",
            labels=["reason"])
        for reason, count in sorted(watch.restarts.items()):
            restarts.add_metric([reason], count)
        families: list[Metric] = [pods, synced, lists, restarts]
        if watch.last_event_at is not None:
            families.append(GaugeMetricFamily(
                f"{P}last_event_age_seconds",
                "Seconds since the pod watch last delivered an event or bookmark.",
                value=self._clock() - watch.last_event_at))
        return families

    async def _close_api(self) -> None:
        api, self._api = self._api, None
        if api is not None:
            await api.close()

    async def close(self) -> None:
        task, self._task = self._task, None
        if task is not None:
            task.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await task
        await self._close_api()


def make_pod_source(options: PodWatchOptions) -> Source[PodDirectory]:
    """The pod source; kubernetes_asyncio is imported only once it is started."""
    return PodWatchSource(options)
