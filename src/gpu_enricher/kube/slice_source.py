"""`ResourceSliceSource`: the DRA devices of this node, from its ResourceSlices, kept current
by one list+watch (the same loop as the pod watch, see `watch_source.py`).

On every connect (the first, and after any failure: a cluster upgrade may change it) the source
asks the server which `resource.k8s.io` version it serves and reads the best one. A cluster
without the group, no RBAC for resourceslices, an API server that is down: each is logged once
and counted, the loop backs off, and the GPU series simply go without DRA labels.
"""

import logging
import time
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import TYPE_CHECKING, Final

from prometheus_client.metrics_core import GaugeMetricFamily, Metric

from ..fields import names
from ..model import SliceDevice, SliceDirectory
from ..sources import Source
from .client import ListWatchCalls
from .config import ConfigPlan
from .slice_client import LIBRARY, discover_version, slice_calls
from .slices import (
    API_GROUP,
    NVIDIA_DRIVER,
    ParsedSlice,
    current_slices,
    parse_slice,
    slice_devices,
)
from .watch_kind import ResourceKind
from .watch_source import ApiWatchSource, WatchOptions, WatchTexts

if TYPE_CHECKING:
    from kubernetes_asyncio.client.api_client import ApiClient

log = logging.getLogger(__name__)

SOURCE: Final = "resourceslices"
P: Final = f"{names.SELF_PREFIX}dra_"
_TEXTS: Final = WatchTexts("ResourceSlices", "their devices are still used")
DEVICE_GRACE_SECONDS: Final = 300.0
"""How long a device whose slice went stays resolvable (docs/dra.md)."""


def _key(device: SliceDevice) -> tuple[str, str, str]:
    return device.driver, device.pool, device.name


@dataclass(frozen=True, slots=True)
class ResourceSliceOptions(WatchOptions):
    drivers: frozenset[str] = frozenset({NVIDIA_DRIVER})
    """The DRA drivers whose devices count; other drivers' slices are ignored."""


class ResourceSliceSource(ApiWatchSource[ParsedSlice]):
    name = SOURCE

    def __init__(self, options: ResourceSliceOptions,
                 plan: Callable[[], ConfigPlan] | None = None,
                 clock: Callable[[], float] = time.monotonic) -> None:
        kind = ResourceKind("resourceslices", API_GROUP, f"on node {options.node_name}",
                            when_absent="DRA labels off")
        super().__init__(options, kind, parse_slice, _TEXTS, LIBRARY, plan, clock,
                         reconnect_after_failures=True)
        self.slice_options = options
        self._api_version = ""
        # Derived from the watch's object map, which is replaced (never changed) on each
        # event: recomputed only when it was.
        self._derived: tuple[Mapping[str, ParsedSlice], tuple[ParsedSlice, ...],
                             tuple[SliceDevice, ...]] | None = None
        self._vanished: dict[tuple[str, str, str], tuple[SliceDevice, float]] = {}
        """Devices whose slice went (a driver republishing its pool), and when."""

    @property
    def api_version(self) -> str:
        """The `resource.k8s.io` version in use; "" before one was discovered."""
        return self._api_version

    async def _calls(self, api: "ApiClient", plan: ConfigPlan) -> ListWatchCalls:
        options = self.slice_options
        version = await discover_version(api, options.request_timeout_seconds)
        if version != self._api_version:
            log.log(logging.INFO if not self._api_version else logging.WARNING,
                    "watching the ResourceSlices of node %s (drivers %s) through the "
                    "Kubernetes API (%s %s) as %s/%s%s", options.node_name,
                    ", ".join(sorted(options.drivers)), plan.kind, plan.location, API_GROUP,
                    version, f" (was {self._api_version})" if self._api_version else "")
            self._api_version = version
        else:
            self._log_connect(f"watching ResourceSlices again as {API_GROUP}/{version}")
        return slice_calls(api, version, options.node_name, options.request_timeout_seconds)

    def _current(self) -> tuple[tuple[ParsedSlice, ...], tuple[SliceDevice, ...]]:
        objects = self._watch.objects
        if self._derived is None or self._derived[0] is not objects:
            slices = current_slices(objects.values(), self.options.node_name,
                                    self.slice_options.drivers)
            devices = slice_devices(slices)
            self._note_vanished(() if self._derived is None else self._derived[2], devices)
            self._derived = (objects, slices, devices)
        return self._derived[1], self._derived[2]

    def _note_vanished(self, before: tuple[SliceDevice, ...],
                       now_published: tuple[SliceDevice, ...]) -> None:
        published = {_key(d) for d in now_published}
        for key in published & self._vanished.keys():
            del self._vanished[key]
        at = self._clock()
        for device in before:
            if _key(device) not in published:
                self._vanished[_key(device)] = (device, at)

    def _kept(self) -> list[SliceDevice]:
        """Devices whose slice went less than `DEVICE_GRACE_SECONDS` ago: a driver that
        republishes its pool (deletes and creates its slices, or publishes a new generation
        slice by slice) never takes a claimed GPU's holder away meanwhile (issue 32). Who
        holds it is still the kubelet's word; only the device's name stays resolvable."""
        now = self._clock()
        for key in [k for k, (_, at) in self._vanished.items()
                    if now - at > DEVICE_GRACE_SECONDS]:
            del self._vanished[key]
        return [device for device, _ in self._vanished.values()]

    def snapshot(self) -> SliceDirectory:
        _, devices = self._current()
        return SliceDirectory(devices, self.synced, self._api_version, tuple(self._kept()))

    def families(self) -> list[Metric]:
        slices, devices = self._current()
        families: list[Metric] = [
            GaugeMetricFamily(f"{P}slices", "ResourceSlices of this node's DRA drivers "
                              "(each pool's current generation).", value=len(slices)),
            GaugeMetricFamily(f"{P}devices", "Devices in those ResourceSlices.",
                              value=len(devices)),
            GaugeMetricFamily(f"{P}devices_skipped", "Devices in those ResourceSlices left "
                              "out: no name or no uuid attribute.",
                              value=sum(s.skipped for s in slices)),
            GaugeMetricFamily(f"{P}devices_kept", "Devices whose ResourceSlice went in the "
                              f"last {DEVICE_GRACE_SECONDS:.0f} s (a driver republishing its "
                              "pool): still resolved for the claims that name them.",
                              value=len(self._kept())),
        ]
        if self._api_version:
            info = GaugeMetricFamily(f"{P}api_version_info", "The resource.k8s.io version "
                                     "the ResourceSlices are read as.", labels=["version"])
            info.add_metric([self._api_version], 1)
            families.append(info)
        return [*families, *self.watch_families(P)]


def make_slice_source(options: ResourceSliceOptions) -> Source[SliceDirectory]:
    """The ResourceSlice source; kubernetes_asyncio is imported only once it is started."""
    return ResourceSliceSource(options)
