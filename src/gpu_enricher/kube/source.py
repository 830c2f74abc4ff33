"""`PodWatchSource`: this node's pods from the Kubernetes API, kept current by one watch.

One background task lists the pods bound to this node and watches them (see `listwatch.py`);
`refresh()` only does bookkeeping, so a collection cycle never waits on the API server.

`synced` (see `watch_source.py`) only drives the `gpu_enricher_kubernetes_synced` metric and
the log lines: the join always asks these pods first and the log directory after them (for any
container they do not know), synced or not.
"""

import time
from collections.abc import Callable
from dataclasses import dataclass
from typing import TYPE_CHECKING, Final

from prometheus_client.metrics_core import GaugeMetricFamily, Metric

from ..fields import names
from ..model import PodDirectory, PodMeta
from ..sources import Source
from .client import ListWatchCalls, pod_calls
from .config import ConfigPlan
from .pods import parse_pod
from .watch_kind import ResourceKind
from .watch_source import ApiWatchSource, WatchOptions, WatchTexts

if TYPE_CHECKING:
    from kubernetes_asyncio.client.api_client import ApiClient

SOURCE: Final = "kubernetes"
P: Final = f"{names.SELF_PREFIX}kubernetes_"
_LIBRARY: Final = ("kubernetes_asyncio.client.api.core_v1_api", "kubernetes_asyncio.config")
_TEXTS: Final = WatchTexts("pods", "still used; the log directory names the containers they "
                                   "do not know")


@dataclass(frozen=True, slots=True)
class PodWatchOptions(WatchOptions):
    """The pod watch's options: all shared (see `WatchOptions`)."""


class PodWatchSource(ApiWatchSource[PodMeta]):
    name = SOURCE

    def __init__(self, options: PodWatchOptions,
                 plan: Callable[[], ConfigPlan] | None = None,
                 clock: Callable[[], float] = time.monotonic) -> None:
        kind = ResourceKind("pods", "", f"on node {options.node_name}")
        super().__init__(options, kind, parse_pod, _TEXTS, _LIBRARY, plan, clock)

    async def _calls(self, api: "ApiClient", plan: ConfigPlan) -> ListWatchCalls:
        self._log_connect(f"watching pods on node {self.options.node_name} through the "
                          f"Kubernetes API ({plan.kind} {plan.location})")
        return pod_calls(api, self.options.node_name, self.options.request_timeout_seconds)

    def snapshot(self) -> PodDirectory:
        pods: tuple[PodMeta, ...] = tuple(self._watch.objects.values())
        return PodDirectory(pods, self.synced)

    def families(self) -> list[Metric]:
        pods = GaugeMetricFamily(f"{P}pods", "Pods on this node known from the Kubernetes API.",
                                 value=len(self._watch.objects))
        return [pods, *self.watch_families(P)]


def make_pod_source(options: PodWatchOptions) -> Source[PodDirectory]:
    """The pod source; kubernetes_asyncio is imported only once it is started."""
    return PodWatchSource(options)
