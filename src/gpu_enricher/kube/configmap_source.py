"""`ConfigMapSource`: the ConfigMap of `-m/--configmap-data NAMESPACE:NAME`, kept current by
one list+watch (the loop the pod watch uses), so a change to its `metrics` key reloads the
counters without a restart (dcgm-exporter reads it once, at start).

`read_config_map` is the one-shot read at start: a ConfigMap or key that is missing then stops
the exporter with a clear error, as dcgm-exporter does. Afterwards a deleted ConfigMap, a
removed key or a bad list keeps the last good counters (reload.py logs and counts it).
"""

import asyncio
import functools
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Final, cast

import aiohttp
from prometheus_client.metrics_core import Metric

from ..fields import names
from .client import KubeError, ListWatchCalls, generated_calls, get_json
from .config import ConfigPlan, open_api_client
from .configmaps import ConfigMapRef, ParsedConfigMap, parse_config_map
from .watch_kind import ResourceKind
from .watch_source import ApiWatchSource, WatchOptions, WatchTexts, import_library

if TYPE_CHECKING:
    from kubernetes_asyncio.client.api_client import ApiClient

SOURCE: Final = "configmap"
P: Final = f"{names.SELF_PREFIX}configmap_"
LIBRARY: Final = ("kubernetes_asyncio.client.api.core_v1_api", "kubernetes_asyncio.config")
_TEXTS: Final = WatchTexts("ConfigMaps", "the counters read from the last one stay in force")


@dataclass(frozen=True, slots=True)
class ConfigMapOptions(WatchOptions):
    ref: ConfigMapRef = field(default_factory=lambda: ConfigMapRef("", ""))


@dataclass(frozen=True, slots=True)
class ConfigMapSnapshot:
    config_map: ParsedConfigMap | None
    """None: not there (once `listed`), or not known yet."""
    listed: bool


class ConfigMapSource(ApiWatchSource[ParsedConfigMap]):
    name = SOURCE

    def __init__(self, options: ConfigMapOptions,
                 plan: Callable[[], ConfigPlan] | None = None,
                 clock: Callable[[], float] = time.monotonic) -> None:
        ref = options.ref
        kind = ResourceKind("configmaps", "", f"{ref} (-m)", namespace=ref.namespace,
                            when_absent="the counters read at start stay in force")
        super().__init__(options, kind, parse_config_map, _TEXTS, LIBRARY, plan, clock)
        self.ref = ref

    async def _calls(self, api: "ApiClient", plan: ConfigPlan) -> ListWatchCalls:
        from kubernetes_asyncio.client.api.core_v1_api import CoreV1Api

        self._log_connect(f"watching ConfigMap {self.ref} (-m) through the Kubernetes API "
                          f"({plan.kind} {plan.location})")
        method = functools.partial(CoreV1Api(api).list_namespaced_config_map, self.ref.namespace)
        return generated_calls(method, f"metadata.name={self.ref.name}",
                               self.options.request_timeout_seconds, "v1")

    def snapshot(self) -> ConfigMapSnapshot:
        found = next((c for c in self._watch.objects.values() if c.name == self.ref.name), None)
        return ConfigMapSnapshot(found, self._watch.listed)

    def families(self) -> list[Metric]:
        return self.watch_families(P)


async def read_config_map(plan: ConfigPlan, ref: ConfigMapRef,
                          timeout_seconds: float = 30.0) -> ParsedConfigMap | None:
    """One read of `ref` (None: it does not exist); KubeError for anything else."""
    await asyncio.to_thread(import_library, LIBRARY)
    from kubernetes_asyncio.client.api.core_v1_api import CoreV1Api

    api = await open_api_client(plan)
    try:
        method = CoreV1Api(api).read_namespaced_config_map
        timeout = aiohttp.ClientTimeout(total=timeout_seconds)

        async def call() -> aiohttp.ClientResponse:
            answer = await method(ref.name, ref.namespace, _preload_content=False,
                                  _request_timeout=timeout)
            return cast(aiohttp.ClientResponse, answer)  # unpreloaded: the raw response

        try:
            return parse_config_map(await get_json(call))
        except KubeError as exc:
            if exc.status == 404:
                return None
            raise
    finally:
        await api.close()
