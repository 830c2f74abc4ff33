"""The exporter's own exposition, collected through prometheus_client once per cycle and
rendered in its bytes by `client_format.py`.

Besides the `gpu_enricher_*` families it carries prometheus_client's standard collectors
(`process_*` from /proc, `python_info`, `python_gc_*`), so the usual exporter dashboards and
alerts (memory, CPU, restarts) work on gpu-enricher. They are read when the cycle renders, not
per scrape: a scrape stays a hand-out of ready bytes, and `process_*` is at most one collection
interval old.
"""

from collections import Counter
from collections.abc import Iterable, Sequence
from typing import Final

from prometheus_client import (
    GCCollector,
    PlatformCollector,
    ProcessCollector,
)
from prometheus_client.metrics_core import Metric
from prometheus_client.registry import Collector as ClientCollector
from prometheus_client.registry import CollectorRegistry

from .client_format import render_client_families
from .selfmetrics import (
    AUTH_FAILURE_REASONS,
    CONFIG_FILES,
    TIMEOUT_PHASES,
    config_families,
    http_families,
)


class _Families(ClientCollector):
    """A fixed list of families: what one cycle collected, rendered in both formats."""

    def __init__(self, families: Sequence[Metric] = ()) -> None:
        self.families = families

    def collect(self) -> Iterable[Metric]:
        return self.families


class HttpCounts:
    """What the HTTP server counts (web/server.py), read when a cycle renders. Process-wide, as
    `process_*` is: one server per process, and aiohttp's connection handlers, which count,
    know no collector."""

    __slots__ = ("auth_failures", "bad_requests", "connections", "connections_refused",
                 "requests", "timeouts")

    def __init__(self) -> None:
        self.bad_requests = 0
        # web/connguard.py's: open now, refused over the limit, timed out by phase.
        self.connections = 0
        self.connections_refused = 0
        self.timeouts = dict.fromkeys(TIMEOUT_PHASES, 0)
        # Basic auth's 401s by reason (--web-config-file), every reason present from the start.
        self.auth_failures = dict.fromkeys(AUTH_FAILURE_REASONS, 0)
        # Requests by (handler, status code), counted with --enable-exporter-metrics only.
        self.requests: Counter[tuple[str, str]] = Counter()


HTTP: Final = HttpCounts()


class _Http(ClientCollector):
    def collect(self) -> Iterable[Metric]:
        return http_families(HTTP.bad_requests, HTTP.auth_failures,
                             connections=HTTP.connections, refused=HTTP.connections_refused,
                             timeouts=HTTP.timeouts, requests=HTTP.requests)


class ConfigStatus:
    """How the configuration's reloads went (reload.py), read when a cycle renders.
    Process-wide like HTTP: one configuration per process."""

    __slots__ = ("failures", "last_success", "reload_ok")

    def __init__(self) -> None:
        self.reload_ok = True
        self.last_success: float | None = None  # set at start by the reloader
        self.failures = dict.fromkeys(CONFIG_FILES, 0)


CONFIG: Final = ConfigStatus()


class _Config(ClientCollector):
    def collect(self) -> Iterable[Metric]:
        return config_families(CONFIG.reload_ok, CONFIG.last_success, CONFIG.failures)


class OwnMetrics:
    def __init__(self) -> None:
        # A private registry, not prometheus_client's process-global REGISTRY: a test may
        # build many collectors in one process.
        self._registry = CollectorRegistry(auto_describe=False)
        self._cycle = _Families()
        self._registry.register(self._cycle)
        ProcessCollector(registry=self._registry)
        PlatformCollector(registry=self._registry)
        GCCollector(registry=self._registry)
        self._registry.register(_Http())
        self._registry.register(_Config())

    def render(self, families: Sequence[Metric]) -> tuple[bytes, bytes]:
        """(text 0.0.4, OpenMetrics ending in `# EOF`) of this cycle's `families` followed by
        the standard ones, each collector asked once for both formats."""
        self._cycle.families = [f for f in families if f.samples]  # absent, not a bare header
        return render_client_families(self._registry.collect())
