"""Client of the kubelet's pod-resources API over its unix socket, for the event loop.

A deadline on every call; a receive limit far above gRPC's 4 MiB default (pod-dense nodes
produce larger `List` answers: dcgm-exporter #509) but bounded (`MAX_RECEIVE_BYTES`: a larger
answer is refused as `TOO_LARGE`); `v1alpha1.List` when the kubelet answers `UNIMPLEMENTED`
for v1 (old kubelets). Devices held through DRA ResourceClaims come only from v1
(`dynamic_resources`; v1alpha1 has no such field).

Calls run on a thread of the client's own, never on the event loop (`wire`: HTTP/2 without
gRPC's C core, whose thread pool grew with the node's CPUs): a `List` answer is received there
and parsed there (`answers`), one pod at a time. Received and parsed by grpc.aio on the loop,
a 50 MB answer (tens of thousands of pods) held the loop 0.36-0.5 s on a bench machine,
2-2.6 s on the node of issue 13, defect 2. One `List` runs at a time; a collection pass that
gives up waiting leaves it running, and the next pass collects its outcome instead of asking
the kubelet again, so passes never pile them up.
"""

import asyncio
import dataclasses
import logging
import time
from concurrent.futures import Future
from functools import partial
from pathlib import Path
from typing import Final

from ..rpc.answer import SOCKET_ERROR, SOCKET_MISSING, CallError, Message, release
from ..rpc.wire import UnaryChannel
from ..worker import BlockingWorker
from .answers import AllocatableResult, DecodeError, ListResult, decode_allocatable, decode_list
from .selection import MayKeep, Select

log = logging.getLogger(__name__)

MAX_RECEIVE_BYTES: Final = 64 << 20
"""The largest `List` answer accepted. A node with thousands of pods answers ~5 MB (110 pods:
~11 kB); a 50 MB answer costs ~0.4 s of a core to parse, and is held once while parsed."""

LIST_METHODS: Final = {"v1": "/v1.PodResourcesLister/List",
                       "v1alpha1": "/v1alpha1.PodResourcesLister/List"}
ALLOCATABLE_METHOD: Final = "/v1.PodResourcesLister/GetAllocatableResources"
_EMPTY_REQUEST: Final = b""  # both requests have no fields: their encoding is empty


class PodResourcesClient:
    """Every call runs on one thread of the client's own (`wire`, blocking): the `List` answer
    is received and parsed there. The coroutines only wait for that thread."""

    def __init__(self, socket_path: Path, timeout_seconds: float,
                 max_receive_bytes: int = MAX_RECEIVE_BYTES) -> None:
        self.socket_path = socket_path
        self.timeout_seconds = timeout_seconds
        self._channel = UnaryChannel(socket_path, max_receive_bytes, "the kubelet")
        self._v1_unimplemented = False
        self._worker = BlockingWorker("kubelet")
        self._listing: Future[object] | None = None
        """The last `List` and its parse, until a `list` call has collected its outcome."""
        self._offering: Future[object] | None = None
        """The same for `GetAllocatableResources`."""

    # --- on the client's thread ----------------------------------------------------------

    def _unary(self, method: str) -> Message:
        """One call with the empty request both methods take: the answer's bytes."""
        try:
            present = self.socket_path.exists()
        except OSError as exc:  # e.g. a root-only directory and a non-root exporter
            raise CallError(SOCKET_ERROR, f"{self.socket_path}: {exc.strerror}") from None
        if not present:
            raise CallError(SOCKET_MISSING, f"{self.socket_path} does not exist")
        return self._channel.call(method, _EMPTY_REQUEST, self.timeout_seconds)

    def _fetch(self) -> tuple[Message, str]:
        """The answer of `List` as bytes (v1, else v1alpha1), and its API version."""
        if not self._v1_unimplemented:
            try:
                return self._unary(LIST_METHODS["v1"]), "v1"
            except CallError as exc:
                if exc.code != "UNIMPLEMENTED":
                    raise
                log.warning("the kubelet does not serve pod-resources v1; using v1alpha1")
                self._v1_unimplemented = True
        return self._unary(LIST_METHODS["v1alpha1"]), "v1alpha1"

    def _list_now(self, select: Select | None, may_keep: MayKeep | None) -> ListResult:
        # This thread's CPU only: the kubelet's time to answer and the GIL pacer's pauses do
        # not count against --kubelet-list-cpu-budget.
        started = time.thread_time()
        wire, api = self._fetch()
        try:
            result = decode_list(wire, api, select, may_keep)
            return dataclasses.replace(result, cpu_seconds=time.thread_time() - started,
                                       answer_bytes=len(wire))
        except DecodeError as exc:
            raise CallError("INTERNAL",
                               f"INTERNAL: the List answer does not parse: {exc}") from None
        finally:
            release(wire)

    def _allocatable_now(self, select: Select | None) -> AllocatableResult | None:
        if self._v1_unimplemented:
            return None
        try:
            wire = self._unary(ALLOCATABLE_METHOD)
        except CallError as exc:
            if exc.code == "UNIMPLEMENTED":
                return None
            raise
        try:
            return decode_allocatable(wire, select)
        except DecodeError as exc:
            raise CallError("INTERNAL", "INTERNAL: the GetAllocatableResources answer does "
                               f"not parse: {exc}") from None
        finally:
            release(wire)

    # --- on the event loop -----------------------------------------------------------------

    async def list(self, select: Select | None = None, may_keep: MayKeep | None = None,
                   ) -> ListResult:
        """The kubelet's `List` with the device IDs `select` keeps (all without it; `may_keep`
        rules out pods cheaply, see `decode_list`). A call
        cancelled (a collection pass that gives up waiting) leaves the `List` and its parse
        running: the next call returns their outcome instead of asking the kubelet again."""
        listing = self._listing
        if listing is None or listing.cancelled():  # cancelled: before the thread took it
            listing = self._listing = self._worker.submit(partial(self._list_now, select,
                                                                  may_keep))
        try:
            result = await asyncio.wrap_future(listing)
        finally:
            if listing.done() and self._listing is listing:
                self._listing = None
        assert isinstance(result, ListResult)
        return result

    async def allocatable(self, select: Select | None = None) -> AllocatableResult | None:
        """The devices the kubelet can allocate, of those `select` keeps (all without it);
        None when the kubelet cannot say (v1alpha1 only, or the method is off). A cancelled
        call leaves the call and its parse running, as `list` does: the next returns them."""
        offering = self._offering
        if offering is None or offering.cancelled():  # as `list`: an abandoned call's outcome
            offering = self._offering = self._worker.submit(partial(self._allocatable_now,
                                                                    select))
        try:
            result = await asyncio.wrap_future(offering)
        finally:
            if offering.done() and self._offering is offering:
                self._offering = None
        assert result is None or isinstance(result, AllocatableResult)
        return result

    async def close(self) -> None:
        """End a call in progress at once (as UNAVAILABLE) and let the thread end."""
        self._channel.close()
        self._worker.stop()
        self._worker = BlockingWorker("kubelet")
        self._listing = self._offering = None
