"""One list+watch loop, generic over the kind: list, watch from the list's resourceVersion,
resume after a normal end, re-list after 410 Gone, back off after errors.

A watch the server ends within `short_watch_seconds` without an event (client-go's "very
short watch": a proxy or server answering 200 with an empty body) is a failure too, or the
loop would re-watch as fast as the server answers. After one, the next watch is on probation:
it counts as a success only once it delivers an event or stays open that long.

The loop owns the current objects (an immutable uid → value map) and the bookkeeping the
source reports: whether the view is current, restarts by reason, errors by reason. The calls
come from `connect`, asked again after an `unauthorized` or `no_config` failure so a rotated
token or a newly mounted configuration is picked up (after any failure, for a kind whose API
version is discovered on connect: a cluster upgrade changes it). Calls for another API version
than the last ones start with a fresh list.

Where RBAC allows the list but forbids the watch (the GPU Operator's Role gives the exporter
`get, list` on configmaps, so `-m`'s ConfigMap), the view is kept by listing again every
`backoff_max_seconds` instead, and a watch is tried again every `WATCH_AGAIN_POLLS` lists.
"""

import asyncio
import logging
import random
import time
from collections import Counter
from collections.abc import Awaitable, Callable, Mapping
from types import MappingProxyType
from typing import Final, Generic, NoReturn, TypeVar

from .client import (
    BAD_RESPONSE,
    FORBIDDEN,
    GONE,
    NO_CONFIG,
    NOT_SERVED,
    STALLED,
    KubeError,
    ListWatchCalls,
    list_objects,
    stream_watch,
)
from .events import Parse, WatchEvent, apply_event, index_objects, resource_version
from .watch_kind import RECONNECT, ListWatchOptions, ResourceKind, backoff_delay

log = logging.getLogger(__name__)

T = TypeVar("T")

CLOSED: Final = "closed"
"""Restart reason: the server ended the watch at its timeout, the normal way."""
SHORT_WATCH: Final = "short_watch"
"""Restart and error reason: the server ended the watch at once, without an event."""
WATCH_AGAIN_POLLS: Final = 10
"""While polling (watch forbidden), every 10th list is followed by a watch: RBAC may be fixed."""

class ListWatch(Generic[T]):
    def __init__(self, kind: ResourceKind, connect: Callable[[], Awaitable[ListWatchCalls]],
                 parse: Parse[T], options: ListWatchOptions,
                 clock: Callable[[], float] = time.monotonic, *,
                 reconnect_after_failures: bool = False) -> None:
        self.kind = kind
        self.options = options
        self._connect = connect
        self._parse = parse
        self._clock = clock
        self._reconnect_after_failures = reconnect_after_failures
        self._calls: ListWatchCalls | None = None
        self._served_as: str | None = None
        self.objects: Mapping[str, T] = MappingProxyType({})
        self.resource_version: str | None = None
        """Where the next watch starts; None: list first."""
        self.listed = False
        self.watching = False
        self.current_at: float | None = None
        """Monotonic time the view was last known current: a list answered, a watch opened,
        read a line, or ended (an open watch is current until it ends or goes silent)."""
        self.last_event_at: float | None = None
        self.last_success_wall: float | None = None
        self.last_list_seconds: float | None = None
        self.failures = 0  # in a row; 0 while healthy
        self._unexpected_logged = False
        self.lists = 0
        self.watches = 0
        self.restarts: Counter[str] = Counter()
        self.errors: Counter[str] = Counter()
        self._failing: str | None = None
        self._gone_in_a_row = 0
        self._watch_events = 0  # events (bookmarks too) of the current watch
        self._probation: asyncio.TimerHandle | None = None
        self.polling = False
        """Listing allowed, watching forbidden: listed again every `backoff_max_seconds`."""
        self._polls = 0
        self.on_change: Callable[[], None] | None = None
        """Called after a list or an event changed `objects` (the collector re-renders with
        them at once, not at the next pass: issue 32)."""

    @property
    def stall_seconds(self) -> float:
        return self.options.watch_timeout_seconds + self.options.stall_margin_seconds

    @property
    def up(self) -> bool:
        """Listed once and no failure since the last success: watching, or about to."""
        return self.listed and self.failures == 0

    def current_within(self, seconds: float) -> bool:
        """Listed, and watching now or known current in the last `seconds`."""
        if not self.listed or self.current_at is None:
            return False
        return self.watching or self._clock() - self.current_at <= seconds

    async def run(self) -> NoReturn:
        """List and watch until cancelled; never raises anything else."""
        while True:
            try:
                if await self._cycle():
                    self.restarts[CLOSED] += 1
                self._gone_in_a_row = 0
            except KubeError as exc:
                if exc.reason == GONE:
                    # The resourceVersion is compacted away: list again, at once; but a
                    # server that answers 410 right after every list is failing, not busy.
                    self.resource_version = None
                    self._gone_in_a_row += 1
                    if self._gone_in_a_row == 1:
                        self.restarts[GONE] += 1
                        continue
                else:  # another failure ends a run of 410s: one after an outage is news
                    self._gone_in_a_row = 0
                await self._failed(exc)
            except Exception as exc:  # a bug must not end the watch for the process's life
                if not self._unexpected_logged:  # the traceback once per failure streak
                    self._unexpected_logged = True
                    log.exception("%s watch failed unexpectedly", self.kind.resource)
                await self._failed(KubeError(BAD_RESPONSE, repr(exc)))
            finally:
                self.watching = False

    async def _cycle(self) -> bool:
        """Connect if needed, list if needed, then one watch to its end (True), or, while
        polling, the wait until the next list (False)."""
        if self._calls is None:
            self._calls = await self._connect()
            if self._served_as not in (None, self._calls.served_as):
                # Versions are compared only for equality, and only within one API version.
                self.resource_version = None
            self._served_as = self._calls.served_as
        calls = self._calls
        if self.resource_version is None:
            started = time.perf_counter()
            answer = await list_objects(calls.list)
            self.objects = index_objects(answer.items, self._parse)
            self.resource_version = answer.resource_version
            self.last_list_seconds = time.perf_counter() - started
            self.lists += 1
            self.listed = True
            self._succeeded()
            self._changed()
        if self.polling and self._polls % WATCH_AGAIN_POLLS:
            await self._poll_wait()
            return False
        # Timed from the request, as client-go does: a watch that lasted the server's whole
        # timeout is never mistaken for a short one, however long the headers took.
        started = time.monotonic()
        try:
            await stream_watch(calls.watch, self.resource_version,
                               self.options.watch_timeout_seconds, self.stall_seconds,
                               self._watch_opened, self._event)
        except KubeError as exc:
            if exc.reason != FORBIDDEN:
                raise
            self._poll_instead(exc)  # the list just went through: only the watch is refused
            await self._poll_wait()
            return False
        finally:
            self._end_probation()  # before any backoff: it must not fire while waiting
        lasted = time.monotonic() - started
        if self._watch_events == 0 and lasted < self.options.short_watch_seconds:
            raise KubeError(SHORT_WATCH, f"the server ended the watch after {lasted:.3f}s "
                                         "without an event")
        if self._failing == SHORT_WATCH:
            self._succeeded()  # it lasted: on probation no longer
        self.current_at = self._clock()  # an open watch, silent or not, was current till now
        return True

    def _poll_instead(self, exc: KubeError) -> None:
        self.errors[FORBIDDEN] += 1
        if not self.polling:
            log.warning("Kubernetes API lets the exporter list %s %s but forbids watching them "
                        "(%s): listing them again every %gs instead; %s",
                        self.kind.resource, self.kind.scope, exc,
                        self.options.backoff_max_seconds, self.kind.rbac_hint())
            self.polling, self._polls = True, 0

    async def _poll_wait(self) -> None:
        self._polls += 1
        self.resource_version = None  # the next cycle lists
        await asyncio.sleep(self.options.backoff_max_seconds * random.uniform(0.9, 1.1))

    def _watch_opened(self) -> None:
        if self.polling:
            log.warning("Kubernetes API lets the exporter watch %s %s again",
                        self.kind.resource, self.kind.scope)
            self.polling = False
        self.watches += 1
        self.watching = True
        self._watch_events = 0
        if self._failing == SHORT_WATCH:
            # Opening proves nothing when the last watches ended at once: succeed (reset the
            # backoff, call the view current) only once this one has lasted, or on an event.
            self._probation = asyncio.get_running_loop().call_later(
                self.options.short_watch_seconds, self._succeeded)
        else:
            self._succeeded()

    def _end_probation(self) -> None:
        if self._probation is not None:
            self._probation.cancel()
            self._probation = None

    def _changed(self) -> None:
        if self.on_change is not None:
            self.on_change()

    def _event(self, event: WatchEvent) -> None:
        before = self.objects
        self.objects = apply_event(self.objects, event, self._parse)
        if self.objects is not before:
            self._changed()
        self._gone_in_a_row = 0
        self._watch_events += 1
        if self._probation is not None:
            self._succeeded()
        version = resource_version(event.object)
        if version is not None:  # bookmarks carry nothing else
            self.resource_version = version
        now = self._clock()
        self.current_at = self.last_event_at = now
        self.last_success_wall = time.time()

    def _succeeded(self) -> None:
        self._end_probation()
        self.current_at = self._clock()
        self.last_success_wall = time.time()
        self.failures = 0
        self._unexpected_logged = False
        if self._failing is not None:
            log.warning("Kubernetes API answers again: %s %s listed and watched",
                        self.kind.resource, self.kind.scope)
            self._failing = None

    async def _failed(self, exc: KubeError) -> None:
        self.errors[exc.reason] += 1
        if self.watching:  # a watch that opened and then broke (or went silent): a restart
            self.restarts[exc.reason] += 1
            # It was current until it broke; a silent one was not, nor one that ended at once.
            if exc.reason not in (STALLED, SHORT_WATCH):
                self.current_at = self._clock()
        self.watching = False
        self.failures += 1
        if exc.reason in RECONNECT or self._reconnect_after_failures:
            self._calls = None
        if self._failing != exc.reason:  # log when a failure starts or changes, not each one
            self._log_failure(exc)
            self._failing = exc.reason
        await asyncio.sleep(backoff_delay(self.failures, exc.reason, self.options))

    def _log_failure(self, exc: KubeError) -> None:
        what = f"{self.kind.resource} {self.kind.scope}".strip()
        if exc.reason == FORBIDDEN:
            log.warning("Kubernetes API forbids listing/watching %s (%s): %s; retrying slowly",
                        what, exc, self.kind.rbac_hint())
        elif exc.reason == SHORT_WATCH:
            log.warning("the Kubernetes API server ends every watch of %s at once, without "
                        "an event (%s); keeping the last %d objects and watching again with "
                        "backoff", what, exc, len(self.objects))
        elif exc.reason == NOT_SERVED:
            log.warning("%s%s; checking again, backing off to every %.3gs", exc,
                        f": {self.kind.when_absent}" if self.kind.when_absent else "",
                        self.options.backoff_max_seconds)
        elif exc.reason == NO_CONFIG:
            log.warning("cannot watch %s: %s; pass --kubeconfig, or run in a pod with a "
                        "service account token; retrying slowly", what, exc)
        else:
            log.warning("Kubernetes %s watch failed (%s: %s); keeping the last %d objects "
                        "and retrying with backoff", what, exc.reason, exc, len(self.objects))
