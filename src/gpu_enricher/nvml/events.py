"""XIDs from NVML events: a dedicated thread waits on an event set (`XidCriticalError`, every
GPU that supports it) and the `xid` source hands out what it saw as an `XidSnapshot`. This
module is the source (the thread's lifecycle, counting, its metrics); the thread's NVML side
(the event set, registrations, the wait loop) is nvml/event_set.py.

The thread is a second NVML thread beside the backend's (NVML is thread-safe) and never
initialises NVML itself: it uses the backend's session, so a driver reload is the backend's
`nvmlShutdown` + `nvmlInit` and no extra reference keeps the old session alive. It waits at
most `wait_ms` per call, so `close()` is prompt, and it never stops on its own:
- NVML not initialised yet (the source starts before the backend opens), or gone (UNINITIALIZED,
  DRIVER_NOT_LOADED, RM version mismatch): drop the set, retry with capped backoff, and create
  a new set and register every GPU again when NVML answers (`rearms` counts it);
- a wait on a set of an earlier NVML session (INVALID_ARGUMENT): the same, at once;
- a lost GPU (GPU_IS_LOST from a wait): the GPUs that answer GPU_IS_LOST are left out of a new
  set, logged once, and registered again when they answer (every `retry_seconds`);
- a GPU whose registration fails is retried every `retry_seconds`; one without XID events
  in its supported mask (or NOT_SUPPORTED) is not watched, logged once.
On a real H100 (driver 580) the supported mask is 0xff9f and an idle wait returns Timeout.
"""

import asyncio
import logging
import threading
import time
from collections import deque
from collections.abc import Callable
from typing import Final

from prometheus_client.metrics_core import CounterMetricFamily, GaugeMetricFamily, Metric

from ..fields import names
from ..health.xid import EMPTY_XIDS, GpuXids, XidSnapshot
from ..health.xid_messages import xid_message
from ..model import NodeSnapshot, SourceHealth

# The thread's constants live with it in nvml/event_set.py; importable from here as before.
from .event_set import BACKOFF_INITIAL_SECONDS as BACKOFF_INITIAL_SECONDS
from .event_set import LOST as LOST
from .event_set import MAX_PENDING as MAX_PENDING
from .event_set import NVML_GONE as NVML_GONE
from .event_set import XID_EVENT as XID_EVENT
from .event_set import EventSetWatcher, WatchState

log = logging.getLogger(__name__)

DEFAULT_WAIT_MS: Final = 500
DEFAULT_RETRY_SECONDS: Final = 10.0
MAX_RECENT: Final = 100_000
"""Events kept per GPU for the window (an XID storm must not grow memory without bound)."""
LOG_EVERY_SECONDS: Final = 60.0


class XidSource:
    """`Source[XidSnapshot]`: XID events of every GPU, counted since start.

    `window_seconds`: how long events are kept for DCGM_EXP_XID_ERRORS_COUNT (its
    `--xid-count-window-size`); `wait_ms`: the longest NVML wait, hence `close()`'s latency;
    `retry_seconds`: how often GPUs that are not registered (failed, lost, new) are tried."""

    name = "xid"
    after_gpus = False

    def __init__(self, window_seconds: float = 300.0, *, wait_ms: int = DEFAULT_WAIT_MS,
                 retry_seconds: float = DEFAULT_RETRY_SECONDS,
                 clock: Callable[[], float] = time.monotonic,
                 wall_clock: Callable[[], float] = time.time) -> None:
        if window_seconds < 0 or wait_ms <= 0 or retry_seconds <= 0:
            raise ValueError("window_seconds >= 0, wait_ms > 0 and retry_seconds > 0")
        self.window_seconds = window_seconds
        self.wait_ms = wait_ms
        self.retry_seconds = retry_seconds
        self._clock = clock
        self._wall_clock = wall_clock
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None
        self._shared = WatchState()  # shared with the thread, under its lock
        self._watcher = EventSetWatcher(self._shared, self._stop, wait_ms=wait_ms,
                                        retry_seconds=retry_seconds, clock=clock)
        # The event loop's side (refresh).
        self._totals: dict[str, dict[int, int]] = {}
        self._last: dict[str, int] = {}
        self._recent: dict[str, deque[tuple[float, int]]] = {}
        self._events = 0
        self._snapshot = EMPTY_XIDS
        self._refreshes = 0
        self._last_duration: float | None = None
        self._last_success: float | None = None
        self._logged_at: dict[tuple[str, int], tuple[float, int]] = {}

    # -- Source ---------------------------------------------------------------------------

    async def start(self) -> None:
        if self._thread is not None and self._thread.is_alive():
            return
        self._stop.clear()
        self._thread = threading.Thread(target=self._watcher.run, name="nvml-events", daemon=True)
        self._thread.start()

    async def refresh(self, gpus: NodeSnapshot | None) -> None:
        started = time.perf_counter()
        batch, watched = self._shared.take()
        now = self._clock()
        for uuid, xid, at in batch:
            self._totals.setdefault(uuid, {})
            self._totals[uuid][xid] = self._totals[uuid].get(xid, 0) + 1
            self._last[uuid] = xid
            recent = self._recent.get(uuid)
            if recent is None:
                recent = self._recent[uuid] = deque(maxlen=MAX_RECENT)
            recent.append((at, xid))
        self._events += len(batch)
        self._log_events(batch, now)
        horizon = now - self.window_seconds
        for recent in self._recent.values():
            while recent and recent[0][0] < horizon:
                recent.popleft()
        self._snapshot = XidSnapshot(
            gpus={uuid: GpuXids(self._last[uuid], dict(totals),
                                tuple(self._recent.get(uuid, ())))
                  for uuid, totals in self._totals.items()},
            at=now, watched=watched, events=self._events)
        self._refreshes += 1
        self._last_duration = time.perf_counter() - started
        self._last_success = self._wall_clock()

    def snapshot(self) -> XidSnapshot:
        return self._snapshot

    def health(self) -> SourceHealth:
        with self._shared.lock:
            armed, errors = self._shared.armed, dict(self._shared.errors)
        alive = self._thread is not None and self._thread.is_alive()
        return SourceHealth(up=alive and armed, collections=self._refreshes, errors=errors,
                            last_duration_seconds=self._last_duration,
                            last_success_timestamp=self._last_success)

    def families(self) -> list[Metric]:
        p = names.SELF_PREFIX
        shared = self._shared
        with shared.lock:
            watched, rearms, dropped = len(shared.watched), shared.rearms, shared.dropped
        events = CounterMetricFamily(f"{p}xid_events", "XID events received from NVML since "
                                     "start, all GPUs.", value=self._events)
        gpus = GaugeMetricFamily(f"{p}xid_watched_gpus",
                                 "GPUs registered for NVML XID events now.", value=watched)
        rearmed = CounterMetricFamily(f"{p}xid_event_set_rearms", "Times the NVML event set "
                                      "was created again (NVML restarted, a GPU lost).",
                                      value=rearms)
        lost = CounterMetricFamily(f"{p}xid_events_dropped", "XID events dropped because no "
                                   "collection pass took them in time.", value=dropped)
        # Failed calls by NVML error are the common gpu_enricher_collection_errors{source="xid"}.
        return [events, gpus, rearmed, lost]

    async def close(self) -> None:
        thread = self._thread
        if thread is None:
            return
        self._stop.set()
        # A healthy thread ends within one wait; one hung in a driver call is abandoned (a
        # daemon) rather than holding SIGTERM up.
        await asyncio.to_thread(thread.join, 0.2 + self.wait_ms / 1000.0)
        if thread.is_alive():
            log.warning("the NVML event thread did not stop; leaving it (a daemon thread)")
        self._thread = None

    # -- logging (event loop) -------------------------------------------------------------

    def _log_events(self, batch: list[tuple[str, int, float]], now: float) -> None:
        """One warning per (GPU, XID) and minute, with the count since the last one."""
        for uuid, xid, _ in batch:
            key = (uuid, xid)
            logged, unlogged = self._logged_at.get(key, (float("-inf"), 0))
            self._logged_at[key] = (logged, unlogged + 1)
        for key, (logged, unlogged) in list(self._logged_at.items()):
            if unlogged and now - logged >= LOG_EVERY_SECONDS:
                uuid, xid = key
                log.warning("XID %d (%s) on GPU %s: %d event(s)", xid, xid_message(xid), uuid,
                            unlogged)
                self._logged_at[key] = (now, 0)
