"""What every Kubernetes API source shares: options, the background list+watch task, its API
client, health, staleness and the watch's self-metrics. The pod and ResourceSlice sources add
only their calls, their snapshot and their counts.

When is a view `synced`? From the first complete list on, while the watch is open, and for
`stale_after_seconds` after the view was last known current (a list answered, a watch opened,
a line read). The objects are kept and used through an outage either way: they rarely change
and labels flapping in and out would split every series. The default bound, max(60 s, 3 watch
timeouts), rides out an API server upgrade without a false alarm.
"""

import asyncio
import contextlib
import importlib
import logging
import threading
import time
from abc import ABC, abstractmethod
from collections.abc import Callable
from dataclasses import dataclass
from typing import TYPE_CHECKING, Final, Generic, TypeVar

from prometheus_client.metrics_core import CounterMetricFamily, GaugeMetricFamily, Metric

from ..model import NodeSnapshot, SourceHealth
from .client import ListWatchCalls
from .config import ConfigPlan, open_api_client, plan_from_environment
from .events import Parse
from .listwatch import ListWatch
from .watch_kind import ListWatchOptions, ResourceKind

if TYPE_CHECKING:
    from kubernetes_asyncio.client.api_client import ApiClient

log = logging.getLogger(__name__)

T = TypeVar("T")


@dataclass(frozen=True, slots=True)
class WatchOptions:
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


@dataclass(frozen=True, slots=True)
class WatchTexts:
    """The words one source's log lines and metric help use."""

    objects: str  # plural: `pods`, `ResourceSlices`
    stale_note: str  # what happens to the objects while stale


# Imports are process-wide, so this lock is too: two sources (pods, ResourceSlices) importing
# kubernetes_asyncio on two threads at once trip Python's import deadlock detection.
_IMPORT_LOCK: Final = threading.Lock()


def import_library(modules: tuple[str, ...]) -> None:
    with _IMPORT_LOCK:
        for module in modules:
            importlib.import_module(module)


class ApiWatchSource(ABC, Generic[T]):
    """One list+watch task and its API client; subclasses say what to call and expose."""

    after_gpus = False

    def __init__(self, options: WatchOptions, kind: ResourceKind, parse: Parse[T],
                 texts: WatchTexts, library: tuple[str, ...],
                 plan: Callable[[], ConfigPlan] | None = None,
                 clock: Callable[[], float] = time.monotonic, *,
                 reconnect_after_failures: bool = False) -> None:
        """`plan` decides the configuration on each connect (default: options, then the
        environment; see `config.py`). `library`: the kubernetes_asyncio modules to import
        (in a thread) before the first connect."""
        self.options = options
        self.texts = texts
        self._plan = plan or (lambda: plan_from_environment(options.host, options.kubeconfig))
        self._clock = clock
        self._library = library
        self._watch = ListWatch(kind, self._connect, parse, options.list_watch(), clock,
                                reconnect_after_failures=reconnect_after_failures)
        self._api: ApiClient | None = None
        self._task: asyncio.Task[None] | None = None
        self._connects = 0
        self._stale_logged = False

    @abstractmethod
    async def _calls(self, api: "ApiClient", plan: ConfigPlan) -> ListWatchCalls:
        """The list and watch calls through a freshly opened `api` (may raise KubeError)."""

    async def start(self) -> None:
        if self._task is None:
            self._task = asyncio.create_task(self._watch.run(),
                                             name=f"{self.texts.objects} watch")

    async def _connect(self) -> ListWatchCalls:
        await self._close_api()
        plan = self._plan()
        # The import takes about a second of CPU: done in a thread, /metrics keeps answering.
        await asyncio.to_thread(import_library, self._library)
        self._api = await open_api_client(plan)
        self._connects += 1
        return await self._calls(self._api, plan)

    def _log_connect(self, what: str) -> None:
        """Logs the first connect at INFO, reconnects at DEBUG."""
        log.log(logging.INFO if self._connects == 1 else logging.DEBUG, "%s", what)

    @property
    def synced(self) -> bool:
        return self._watch.current_within(self.options.stale_after)

    @property
    def listed(self) -> bool:
        """The first complete list is in: the view says what the API server said, not
        nothing yet (the collector's first picture waits for it, bounded: issue 32)."""
        return self._watch.listed

    def subscribe(self, callback: Callable[[], None]) -> None:
        """`callback` after every list or event that changed the objects."""
        self._watch.on_change = callback

    async def refresh(self, gpus: NodeSnapshot | None) -> None:
        """Bookkeeping only: logs when the listed objects turn stale, and when current again."""
        synced = self.synced
        if self._watch.listed and not synced and not self._stale_logged:
            log.warning("%s from the Kubernetes API not confirmed for over %.0fs: marked not "
                        "synced (%s)", self.texts.objects, self.options.stale_after,
                        self.texts.stale_note)
            self._stale_logged = True
        elif synced and self._stale_logged:
            log.warning("%s from the Kubernetes API are current again (%d objects)",
                        self.texts.objects, len(self._watch.objects))
            self._stale_logged = False

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

    def watch_families(self, prefix: str) -> list[Metric]:
        """`<prefix>synced`, `lists_total`, `watch_restarts_total{reason}` and, once an
        event came, `last_event_age_seconds`."""
        watch, texts = self._watch, self.texts
        synced = GaugeMetricFamily(
            f"{prefix}synced", f"Whether the {texts.objects} from the Kubernetes API are "
            "current (1) or not (0).", value=1 if self.synced else 0)
        lists = CounterMetricFamily(
            f"{prefix}lists", f"Complete lists of {texts.objects} (one more per 410 Gone).",
            value=watch.lists)
        restarts = CounterMetricFamily(
            f"{prefix}watch_restarts", f"Watches of {texts.objects} ended, by reason: closed (the "
            "server's timeout, normal), gone (410: re-listed), stalled (silent too long), "
            "short_watch (ended at once without an event: backed off), or an error reason.",
            labels=["reason"])
        for reason, count in sorted(watch.restarts.items()):
            restarts.add_metric([reason], count)
        families: list[Metric] = [synced, lists, restarts]
        if watch.last_event_at is not None:
            families.append(GaugeMetricFamily(
                f"{prefix}last_event_age_seconds",
                f"Seconds since the watch of {texts.objects} last delivered an event or "
                "bookmark.", value=self._clock() - watch.last_event_at))
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
