"""The NVML side of XID watching: one event set (`XidCriticalError`, every GPU that supports
it), its registrations, and the thread's loop that waits on it (`EventSetWatcher.run`).

`EventSetWatcher` runs on the event thread that nvml_events.XidSource starts and stops; what it
hands to the event loop (events, the watched GPUs, errors, whether a set is armed) goes through
`WatchState`, under its lock. nvml/events.py describes the recovery rules.
"""

import ctypes
import logging
import threading
from collections import deque
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any, Final

import pynvml

from .device import error_reason, text

log = logging.getLogger("gpu_enricher.nvml.events")
"""The thread's messages keep the logger (and so the `name` in the log lines) they always had."""

XID_EVENT: Final = pynvml.nvmlEventTypeXidCriticalError
NVML_GONE: Final = frozenset({
    pynvml.NVML_ERROR_UNINITIALIZED,
    pynvml.NVML_ERROR_DRIVER_NOT_LOADED,
    pynvml.NVML_ERROR_LIB_RM_VERSION_MISMATCH,
})
LOST: Final = frozenset({pynvml.NVML_ERROR_GPU_IS_LOST, pynvml.NVML_ERROR_GPU_NOT_FOUND})
BACKOFF_INITIAL_SECONDS: Final = 0.25
MAX_PENDING: Final = 100_000
"""Events waiting for a refresh; beyond, the oldest are dropped (and counted)."""


@dataclass(slots=True)
class WatchState:
    """What the event thread shares with the event loop; every field under `lock`."""

    lock: threading.Lock = field(default_factory=threading.Lock)
    pending: deque[tuple[str, int, float]] = field(default_factory=deque)
    """(GPU UUID, XID, monotonic seconds) received and not yet taken by a refresh."""
    dropped: int = 0
    watched: frozenset[str] = frozenset()
    armed: bool = False
    rearms: int = 0
    errors: dict[str, int] = field(default_factory=dict)

    def count(self, reason: str) -> None:
        with self.lock:
            self.errors[reason] = self.errors.get(reason, 0) + 1

    def push(self, uuid: str, xid: int, at: float) -> None:
        with self.lock:
            if len(self.pending) >= MAX_PENDING:
                self.pending.popleft()
                self.dropped += 1
            self.pending.append((uuid, xid, at))

    def take(self) -> tuple[list[tuple[str, int, float]], frozenset[str]]:
        """The pending events (now no longer pending) and the watched GPUs."""
        with self.lock:
            batch = list(self.pending)
            self.pending.clear()
            return batch, self.watched


def _address(handle: Any) -> int | None:
    value = ctypes.cast(handle, ctypes.c_void_p).value
    return None if value is None else int(value)


@dataclass(slots=True)
class _Watch:
    """The thread's own state: one event set and what is registered in it."""

    event_set: Any = None
    by_address: dict[int, str] = field(default_factory=dict)  # device handle → UUID
    handles: dict[str, Any] = field(default_factory=dict)  # UUID → device handle
    excluded: set[str] = field(default_factory=set)  # lost: not registered until retry_at
    retry_at: float = 0.0  # when unregistered GPUs (failed, lost, new) are tried again

    def forget_set(self) -> None:
        """No set, nothing registered; the lost GPUs stay excluded until retry_at."""
        self.event_set = None
        self.by_address.clear()
        self.handles.clear()


class EventSetWatcher:
    """The event thread's logic; `run` is its body. One per source, kept across threads (so a
    set armed by a later thread counts as a re-arm, and a condition is logged once)."""

    def __init__(self, shared: WatchState, stop: threading.Event, *, wait_ms: int,
                 retry_seconds: float, clock: Callable[[], float]) -> None:
        self._shared = shared
        self._stop = stop
        self.wait_ms = wait_ms
        self.retry_seconds = retry_seconds
        self._clock = clock
        # Logging and re-arm pacing.
        self._reported: set[tuple[str, str]] = set()
        self._was_armed = False
        self._invalid_streak = 0
        self._unblamed = 0.0  # the last backoff after a GPU_IS_LOST no GPU owned up to

    def run(self) -> None:
        """The thread's body: until `stop` is set, keep a set armed and wait on it."""
        watch = _Watch()
        backoff = BACKOFF_INITIAL_SECONDS
        try:
            while not self._stop.is_set():
                if watch.event_set is None:
                    if not self._arm(watch):
                        self._stop.wait(backoff)
                        backoff = min(backoff * 2, self.retry_seconds)
                        continue
                    backoff = BACKOFF_INITIAL_SECONDS
                elif self._clock() >= watch.retry_at:
                    watch.excluded.clear()
                    self._register_all(watch)
                    if watch.event_set is None:
                        continue
                self._wait(watch)
        except Exception:  # a bug must not kill XID watching silently
            log.exception("the NVML event thread failed; XIDs are no longer watched")
            self._shared.count("internal")
        finally:
            self._drop(watch)

    def _once(self, key: tuple[str, str], level: int, message: str, *args: object) -> None:
        if key not in self._reported:
            self._reported.add(key)
            log.log(level, message, *args)

    def _arm(self, watch: _Watch) -> bool:
        """A new event set with every GPU registered; False when NVML is not usable."""
        try:
            count = pynvml.nvmlDeviceGetCount()
            event_set = pynvml.nvmlEventSetCreate()
        except pynvml.NVMLError as exc:
            self._not_usable(exc)
            return False
        watch.event_set = event_set
        self._register_all(watch)
        if watch.event_set is None:
            return False
        with self._shared.lock:
            self._shared.armed = True
            if self._was_armed:
                self._shared.rearms += 1
        if self._was_armed:  # once per change of the watched set, not on every re-arm
            self._once(("rearmed", str(len(watch.handles))), logging.INFO,
                       "XID events watched again (%d GPUs of %d)", len(watch.handles), count)
        self._was_armed = True
        self._reported.discard(("nvml", "gone"))
        return True

    def _not_usable(self, exc: pynvml.NVMLError) -> None:
        if exc.value in NVML_GONE:
            if self._was_armed:  # before the first arm, waiting for the backend is normal
                self._once(("nvml", "gone"), logging.WARNING,
                           "NVML is not available (%s): XIDs are not watched until it is back",
                           exc)
        else:
            self._shared.count(error_reason(exc))
            self._once(("nvml", error_reason(exc)), logging.WARNING,
                       "creating the NVML event set failed: %s; retrying", exc)

    def _register_all(self, watch: _Watch) -> None:
        """Register every GPU not registered yet (nor excluded); drop the set if NVML went."""
        try:
            count = pynvml.nvmlDeviceGetCount()
        except pynvml.NVMLError as exc:
            self._gone_or_count(watch, exc)
            return
        for index in range(count):
            try:
                self._register(watch, index)
            except pynvml.NVMLError as exc:
                if exc.value in NVML_GONE:
                    self._gone_or_count(watch, exc)
                    return
                self._shared.count(error_reason(exc))
                # A lost GPU is the backend's news (gpu_up 0); say it quietly here.
                self._once((str(index), error_reason(exc)),
                           logging.INFO if exc.value in LOST else logging.WARNING,
                           "GPU %d: registering for XID events failed: %s; retrying every "
                           "%.0fs", index, exc, self.retry_seconds)
        watch.retry_at = self._clock() + self.retry_seconds
        self._publish(watch)

    def _register(self, watch: _Watch, index: int) -> None:
        handle = pynvml.nvmlDeviceGetHandleByIndex(index)
        uuid = text(pynvml.nvmlDeviceGetUUID(handle))
        if uuid in watch.handles or uuid in watch.excluded:
            return
        try:
            supported = pynvml.nvmlDeviceGetSupportedEventTypes(handle)
            if not supported & XID_EVENT:
                raise pynvml.NVMLError(pynvml.NVML_ERROR_NOT_SUPPORTED)
            pynvml.nvmlDeviceRegisterEvents(handle, XID_EVENT, watch.event_set)
        except pynvml.NVMLError as exc:
            if exc.value != pynvml.NVML_ERROR_NOT_SUPPORTED:
                raise
            self._once((uuid, "unsupported"), logging.INFO,
                       "GPU %s does not report XID events: not watched", uuid)
            return
        address = _address(handle)
        if address is not None:
            watch.by_address[address] = uuid
        watch.handles[uuid] = handle
        if any(key[0] in (uuid, str(index)) for key in self._reported):
            log.info("GPU %s: XID events watched again", uuid)
            self._reported = {k for k in self._reported if k[0] not in (uuid, str(index))}

    def _publish(self, watch: _Watch) -> None:
        with self._shared.lock:
            self._shared.watched = frozenset(watch.handles)

    def _gone_or_count(self, watch: _Watch, exc: pynvml.NVMLError) -> None:
        if exc.value in NVML_GONE:
            self._not_usable(exc)
            self._drop(watch)
        else:
            watch.retry_at = self._clock() + self.retry_seconds
            self._shared.count(error_reason(exc))

    def _drop(self, watch: _Watch) -> None:
        """Forget the set (freeing it if NVML still knows it)."""
        if watch.event_set is not None:
            try:
                pynvml.nvmlEventSetFree(watch.event_set)
            except pynvml.NVMLError as exc:
                log.debug("freeing the NVML event set: %s", exc)
        watch.forget_set()
        with self._shared.lock:
            self._shared.armed = False
            self._shared.watched = frozenset()

    def _wait(self, watch: _Watch) -> None:
        try:
            data = pynvml.nvmlEventSetWait_v2(watch.event_set, self.wait_ms)
        except pynvml.NVMLError as exc:
            self._wait_failed(watch, exc)
            return
        self._invalid_streak = 0
        if not data.eventType & XID_EVENT:
            return
        at = self._clock()
        address = _address(data.device)
        uuid = watch.by_address.get(address) if address is not None else None
        if uuid is None:
            try:
                uuid = text(pynvml.nvmlDeviceGetUUID(data.device))
            except pynvml.NVMLError as exc:
                log.debug("an XID event of an unknown device: %s", exc)
                self._shared.count("unknown_device")
                return
        self._shared.push(uuid, int(data.eventData), at)

    def _wait_failed(self, watch: _Watch, exc: pynvml.NVMLError) -> None:
        if exc.value == pynvml.NVML_ERROR_TIMEOUT:
            self._invalid_streak = 0
            return
        if exc.value in NVML_GONE:
            self._not_usable(exc)
            self._drop(watch)
        elif exc.value == pynvml.NVML_ERROR_INVALID_ARGUMENT:
            # The set belongs to an NVML session that ended (the backend restarted NVML). Paced,
            # in case a driver answers so for another reason: 0, 0.1 s, 0.2 s … retry_seconds.
            log.info("the NVML event set is no longer valid (NVML restarted): re-arming")
            self._drop(watch)
            if self._invalid_streak:
                self._stop.wait(min(0.05 * 2 ** self._invalid_streak, self.retry_seconds))
            self._invalid_streak = min(self._invalid_streak + 1, 16)
        elif exc.value in LOST:
            self._lost(watch)
        else:
            self._shared.count(error_reason(exc))
            self._once(("wait", error_reason(exc)), logging.WARNING,
                       "waiting for NVML events failed: %s; retrying", exc)
            self._stop.wait(BACKOFF_INITIAL_SECONDS)

    def _lost(self, watch: _Watch) -> None:
        """Some registered GPU is lost: a new set without the GPUs that say so."""
        lost: set[str] = set()
        for uuid, handle in watch.handles.items():
            try:
                pynvml.nvmlDeviceGetUUID(handle)
            except pynvml.NVMLError as exc:
                if exc.value in LOST:
                    lost.add(uuid)
        self._shared.count("GpuIsLost")
        for uuid in sorted(lost):
            self._once((uuid, "GpuIsLost"), logging.WARNING,
                       "GPU %s is lost: its XIDs are not watched until it answers again", uuid)
        if not lost:
            # Nobody owns up (a driver may answer GetUUID from its cache for a GPU that fell
            # off the bus): back off, doubling up to retry_seconds, rather than re-arm at once.
            self._unblamed = min(self.retry_seconds, max(BACKOFF_INITIAL_SECONDS,
                                                         2 * self._unblamed))
            self._stop.wait(self._unblamed)
        else:
            self._unblamed = 0.0
        self._drop(watch)
        watch.excluded = lost
        watch.retry_at = self._clock() + self.retry_seconds
