"""Client of the kubelet's pod-resources API over its unix socket, for the event loop.

One persistent channel; a deadline on every call; a receive limit far above gRPC's 4 MiB
default (pod-dense nodes produce larger `List` answers: dcgm-exporter #509) but bounded
(`MAX_RECEIVE_BYTES`: a larger answer is refused as `TOO_LARGE`); `v1alpha1.List` when the
kubelet answers `UNIMPLEMENTED` for v1 (old kubelets). Devices held through DRA ResourceClaims
come only from v1 (`dynamic_resources`; v1alpha1 has no such field).

Calls run on a thread of the client's own, never on the event loop: a `List` answer is
received there as bytes and parsed there, one pod at a time. Received and parsed by grpc.aio on
the loop, a 50 MB answer (tens of thousands of pods) held the loop 0.36-0.5 s on a bench
machine, 2-2.6 s on the node of issue 13, defect 2; now the loop only waits for the GIL while
gRPC copies the received message (~0.5 ms per MB) and shares it with the parse in short slices.
One `List` runs at a time; a collection pass that gives up waiting leaves it running, and the
next pass collects its outcome instead of asking the kubelet again, so passes never pile them
up.
"""

import asyncio
import importlib
import logging
import re
import threading
import time
from collections.abc import Callable, Iterable, Iterator
from concurrent.futures import Future
from dataclasses import dataclass
from functools import partial
from pathlib import Path
from typing import Any, Final

import grpc

from ..model import AllocatableDevices, ClaimAllocation, PodAssignment
from ..worker import BlockingWorker
from ._generated.podresources.v1 import api_pb2 as v1_pb2
from ._generated.podresources.v1alpha1 import api_pb2 as v1alpha1_pb2

log = logging.getLogger(__name__)

# protobuf ships no type information (types-protobuf is not a dependency): imported by name.
DecodeError: type[Exception] = importlib.import_module("google.protobuf.message").DecodeError

MAX_RECEIVE_BYTES: Final = 64 << 20
"""The largest `List` answer accepted. A node with thousands of pods answers ~5 MB (110 pods:
~11 kB); a 50 MB answer costs ~0.4 s of a core to parse and ~200 MiB of RSS at its peak (gRPC
holds the message twice while it receives it)."""
SOCKET_MISSING: Final = "SOCKET_MISSING"  # reason labels next to gRPC's status code names
SOCKET_ERROR: Final = "SOCKET_ERROR"
TOO_LARGE: Final = "TOO_LARGE"
"""An answer above the receive limit (gRPC says RESOURCE_EXHAUSTED, as for the rate limit)."""

LIST_METHODS: Final = {"v1": "/v1.PodResourcesLister/List",
                       "v1alpha1": "/v1alpha1.PodResourcesLister/List"}
ALLOCATABLE_METHOD: Final = "/v1.PodResourcesLister/GetAllocatableResources"
_EMPTY_REQUEST: Final = b""  # both requests have no fields: their encoding is empty
_TOO_LARGE_DETAILS = re.compile(r"Received message larger than max \((\d+) vs\. (\d+)\)")

PARSE_SLICE_SECONDS: Final = 0.002
PARSE_PAUSE_SECONDS: Final = 0.0005
"""The parse thread sleeps this long after each slice of work: it holds the GIL only in short
slices, so the event loop (which needs the GIL for every callback) waits for it rarely and
briefly, instead of up to the 5 ms switch interval each time."""


class KubeletError(Exception):
    def __init__(self, code: str, message: str) -> None:
        super().__init__(message)
        self.code = code  # gRPC status name (UNAVAILABLE, RESOURCE_EXHAUSTED, …)


@dataclass(frozen=True, slots=True)
class ListResult:
    assignments: tuple[PodAssignment, ...]
    api: str  # "v1" or "v1alpha1"
    claims: tuple[ClaimAllocation, ...] = ()  # always empty from v1alpha1
    pods: frozenset[tuple[str, str]] = frozenset()
    """(namespace, pod) of every pod that holds one of `assignments` or `claims`."""


Keep = Callable[[str, tuple[str, ...]], bool]
"""Whether to keep a container's devices of one resource: (resource name, device IDs)."""


def parse_pod_resources(pods: Iterable[Any], keep: Keep | None = None,
                        ) -> tuple[PodAssignment, ...]:
    """`PodResources` messages (v1 or v1alpha1) → one assignment per container and resource
    (those `keep` accepts, when given). The kubelet also lists containers that hold no device:
    they give no assignment."""
    result: list[PodAssignment] = []
    for pod in pods:
        for container in pod.containers:
            for devices in container.devices:
                resource, ids = devices.resource_name, tuple(devices.device_ids)
                if keep is None or keep(resource, ids):
                    result.append(PodAssignment(pod.namespace, pod.name, container.name,
                                                resource, ids))
    return tuple(result)


def parse_claims(pods: Iterable[v1_pb2.PodResources]) -> tuple[ClaimAllocation, ...]:
    """v1 `PodResources` → one allocation per container, claim and claimed device.
    Every driver is kept: which ones count is the join's decision."""
    return tuple(
        ClaimAllocation(pod.namespace, pod.name, container.name, claim.claim_name,
                        claim.claim_namespace, device.driver_name, device.pool_name,
                        device.device_name,
                        # proto3 `optional`: unset (not shared) differs from "".
                        device.share_id if device.HasField("share_id") else None)
        for pod in pods
        for container in pod.containers
        for claim in container.dynamic_resources
        for device in claim.claim_resources
    )


def parse_allocatable(devices: Iterable[Any]) -> tuple[AllocatableDevices, ...]:
    merged: dict[str, list[str]] = {}
    for entry in devices:
        merged.setdefault(entry.resource_name, []).extend(entry.device_ids)
    return tuple(AllocatableDevices(r, tuple(ids)) for r, ids in sorted(merged.items()))


def _varint(wire: bytes, pos: int) -> tuple[int, int]:
    """The base-128 varint at `pos`, and the position after it."""
    result = shift = 0
    while shift < 64:
        if pos >= len(wire):
            raise DecodeError("truncated varint")
        byte = wire[pos]
        pos += 1
        result |= (byte & 0x7F) << shift
        if byte < 0x80:
            return result, pos
        shift += 7
    raise DecodeError("varint longer than 10 bytes")


def pod_messages(wire: bytes) -> Iterator[memoryview]:
    """The encoded `PodResources` entries of a `ListPodResourcesResponse` (field 1, v1 and
    v1alpha1 alike), each to be parsed alone: no single parse holds the GIL for long (a whole
    50 MB answer took ~150 ms in one call). Other fields are skipped as a parser would."""
    view = memoryview(wire)
    pos, end = 0, len(wire)
    while pos < end:
        key, pos = _varint(wire, pos)
        number, wire_type = key >> 3, key & 7
        if wire_type == 0:
            _, pos = _varint(wire, pos)
        elif wire_type == 1:
            pos += 8
        elif wire_type == 5:
            pos += 4
        elif wire_type == 2:
            size, pos = _varint(wire, pos)
            if pos + size > end:
                raise DecodeError("truncated message")
            if number == 1:
                yield view[pos:pos + size]
            pos += size
        else:  # groups (3, 4) are not in this proto; 6 and 7 do not exist
            raise DecodeError(f"unexpected wire type {wire_type}")
    if pos > end:
        raise DecodeError("truncated message")


def _pausing(slice_seconds: float, pause_seconds: float) -> Callable[[], None]:
    """A function to call between units of work: sleeps `pause_seconds` once
    `slice_seconds` of work have passed since the last pause."""
    resumed = time.perf_counter()

    def maybe_pause() -> None:
        nonlocal resumed
        if time.perf_counter() - resumed >= slice_seconds:
            time.sleep(pause_seconds)
            resumed = time.perf_counter()

    return maybe_pause


def decode_list(wire: bytes, api: str, keep: Keep | None = None,
                slice_seconds: float = PARSE_SLICE_SECONDS,
                pause_seconds: float = PARSE_PAUSE_SECONDS) -> ListResult:
    """A `List` answer's bytes → the assignments `keep` accepts (all without it), the claims
    (v1) and the pods holding either; meant for a thread."""
    parse: Callable[[memoryview], Any] = (
        v1_pb2.PodResources.FromString if api == "v1" else v1alpha1_pb2.PodResources.FromString)
    maybe_pause = _pausing(slice_seconds, pause_seconds)
    assignments: list[PodAssignment] = []
    claims: list[ClaimAllocation] = []
    pods: set[tuple[str, str]] = set()
    for encoded in pod_messages(wire):
        pod = parse(encoded)
        held = parse_pod_resources((pod,), keep)
        claimed = parse_claims((pod,)) if api == "v1" else ()
        if held or claimed:
            assignments.extend(held)
            claims.extend(claimed)
            pods.add((pod.namespace, pod.name))
        maybe_pause()
    return ListResult(tuple(assignments), api, tuple(claims), frozenset(pods))


def too_large(details: str | None, limit: int) -> str | None:
    """The message for gRPC's "message larger than max" failure; None for another one."""
    found = _TOO_LARGE_DETAILS.search(details or "")
    if found is None:
        return None
    return (f"the List answer ({int(found[1]):,} bytes) is larger than the {limit / (1 << 20):g}"
            f" MiB limit; the kubelet lists more pods and devices than this exporter accepts")


class PodResourcesClient:
    """Every call runs on one thread of the client's own with gRPC's blocking API: the `List`
    answer is received there too (grpc.aio copies a received message on the event loop,
    without releasing the GIL; the blocking API's final copy releases it), then parsed there.
    The coroutines only wait for that thread."""

    def __init__(self, socket_path: Path, timeout_seconds: float,
                 max_receive_bytes: int = MAX_RECEIVE_BYTES) -> None:
        self.socket_path = socket_path
        self.timeout_seconds = timeout_seconds
        self.max_receive_bytes = max_receive_bytes
        self._lock = threading.Lock()  # the channel: made on the thread, closed from the loop
        self._channel: Any = None  # grpc.Channel
        self._v1_unimplemented = False
        self._worker = BlockingWorker("kubelet")
        self._listing: Future[object] | None = None
        """The last `List` and its parse, until a `list` call has collected its outcome."""

    # --- on the client's thread ----------------------------------------------------------

    def _connect(self) -> Any:
        with self._lock:
            if self._channel is None:
                self._channel = grpc.insecure_channel(
                    f"unix://{self.socket_path}",
                    options=[
                        ("grpc.max_receive_message_length", self.max_receive_bytes),
                        # A restarted kubelet should be found within a cycle, not gRPC's 2 min.
                        ("grpc.initial_reconnect_backoff_ms", 200),
                        ("grpc.max_reconnect_backoff_ms", 2000),
                    ],
                )
            return self._channel

    def _close_channel(self) -> None:
        with self._lock:
            channel, self._channel = self._channel, None
        if channel is not None:
            channel.close()

    def _unary(self, method: str, request: bytes,
               parse: Callable[[bytes], Any] | None = None) -> Any:
        """One call: the answer parsed by `parse`, or its bytes without it."""
        try:
            present = self.socket_path.exists()
        except OSError as exc:  # e.g. a root-only directory and a non-root exporter
            raise KubeletError(SOCKET_ERROR, f"{self.socket_path}: {exc.strerror}") from None
        if not present:
            raise KubeletError(SOCKET_MISSING, f"{self.socket_path} does not exist")
        call = self._connect().unary_unary(method, request_serializer=None,
                                           response_deserializer=parse,
                                           _registered_method=True)
        try:
            return call(request, timeout=self.timeout_seconds)
        except grpc.RpcError as exc:
            code = exc.code()
            if code in (grpc.StatusCode.UNAVAILABLE, grpc.StatusCode.DEADLINE_EXCEEDED):
                self._close_channel()  # a fresh channel finds a replaced socket at once
            if code == grpc.StatusCode.RESOURCE_EXHAUSTED and \
                    (message := too_large(exc.details(), self.max_receive_bytes)) is not None:
                raise KubeletError(TOO_LARGE, message) from None
            raise KubeletError(code.name, f"{code.name}: {exc.details()}") from None

    def _fetch(self) -> tuple[bytes, str]:
        """The answer of `List` as bytes (v1, else v1alpha1), and its API version."""
        if not self._v1_unimplemented:
            try:
                return self._unary(LIST_METHODS["v1"], _EMPTY_REQUEST), "v1"
            except KubeletError as exc:
                if exc.code != grpc.StatusCode.UNIMPLEMENTED.name:
                    raise
                log.warning("the kubelet does not serve pod-resources v1; using v1alpha1")
                self._v1_unimplemented = True
        return self._unary(LIST_METHODS["v1alpha1"], _EMPTY_REQUEST), "v1alpha1"

    def _list_now(self, keep: Keep | None) -> ListResult:
        wire, api = self._fetch()
        try:
            return decode_list(wire, api, keep)
        except DecodeError as exc:
            raise KubeletError(grpc.StatusCode.INTERNAL.name,
                               f"INTERNAL: the List answer does not parse: {exc}") from None

    def _allocatable_now(self) -> tuple[AllocatableDevices, ...] | None:
        if self._v1_unimplemented:
            return None
        try:
            response = self._unary(ALLOCATABLE_METHOD, _EMPTY_REQUEST,
                                   v1_pb2.AllocatableResourcesResponse.FromString)
        except KubeletError as exc:
            if exc.code == grpc.StatusCode.UNIMPLEMENTED.name:
                return None
            raise
        return parse_allocatable(response.devices)

    # --- on the event loop -----------------------------------------------------------------

    async def list(self, keep: Keep | None = None) -> ListResult:
        """The kubelet's `List` with the assignments `keep` accepts (all without it). A call
        cancelled (a collection pass that gives up waiting) leaves the `List` and its parse
        running: the next call returns their outcome instead of asking the kubelet again."""
        listing = self._listing
        if listing is None or listing.cancelled():  # cancelled: before the thread took it
            listing = self._listing = self._worker.submit(partial(self._list_now, keep))
        try:
            result = await asyncio.wrap_future(listing)
        finally:
            if listing.done() and self._listing is listing:
                self._listing = None
        assert isinstance(result, ListResult)
        return result

    async def allocatable(self) -> tuple[AllocatableDevices, ...] | None:
        """None when the kubelet cannot say (v1alpha1 only, or the method is off)."""
        result = await asyncio.wrap_future(self._worker.submit(self._allocatable_now))
        assert result is None or isinstance(result, tuple)
        return result

    async def close(self) -> None:
        """Close the channel (a call in progress fails at once) and let the thread end."""
        self._close_channel()
        self._worker.stop()
        self._worker = BlockingWorker("kubelet")  # started again only if used again
        self._listing = None
