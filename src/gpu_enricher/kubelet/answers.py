"""The parse half of the kubelet client: `List` and `GetAllocatableResources` answers (v1 and
v1alpha1) → assignments, claims and allocatable devices; pure, meant for the client's thread.

A `List` answer is cut into its pods (`pod_spans`) and only the pods that may hold something of
use are parsed, one at a time (issue 13, defect 2): a 50 MB answer (tens of thousands of pods)
parsed in one call held the GIL ~150 ms, and parsing every pod alone still cost ~90 ms of
`FromString` calls. Which pods may matter is found by searching the answer's bytes
(`pods_to_parse`) in windows of whole pods, with `gil_pacer` pauses between them, so the event
loop gets the GIL back within about a millisecond.
"""

import importlib
import mmap
import re
from bisect import bisect_right
from collections.abc import Callable, Iterable, Iterator, Sequence
from dataclasses import dataclass
from typing import Any, Final

from ..model import AllocatableDevices, ClaimAllocation, PodAssignment
from ..rpc._generated.podresources.v1 import api_pb2 as v1_pb2
from ..rpc._generated.podresources.v1alpha1 import api_pb2 as v1alpha1_pb2
from ..rpc.gil import GIL_PAUSE_SECONDS, GIL_SLICE_SECONDS, gil_pacer
from .selection import NO_UNMATCHED, MayKeep, Select, UnmatchedIds, UnmatchedTally

# protobuf ships no type information (types-protobuf is not a dependency): imported by name.
DecodeError: type[Exception] = importlib.import_module("google.protobuf.message").DecodeError


@dataclass(frozen=True, slots=True)
class ListResult:
    assignments: tuple[PodAssignment, ...]
    api: str  # "v1" or "v1alpha1"
    claims: tuple[ClaimAllocation, ...] = ()  # always empty from v1alpha1
    pods: frozenset[tuple[str, str]] = frozenset()
    """(namespace, pod) of every pod that holds one of `assignments` or `claims`."""
    cpu_seconds: float = 0.0
    """CPU the client's thread spent receiving and parsing the answer (set by the client)."""
    answer_bytes: int = 0  # the answer's size (set by the client)
    unmatched: UnmatchedIds = NO_UNMATCHED
    """The GPU resources' device IDs the `Select` dropped: they name nothing on this node."""


@dataclass(frozen=True, slots=True)
class AllocatableResult:
    devices: tuple[AllocatableDevices, ...]
    unmatched: UnmatchedIds = NO_UNMATCHED

CLAIM_ON_WIRE: Final = re.compile(rb"\x2a[\x80-\xff]{0,9}[\x00-\x7f][\x0a\x12\x1a\x22]")
"""What a v1 `ContainerResources.dynamic_resources` entry (field 5) holding claimed devices
starts with: the tag 0x2a, a varint length, and the tag of its first field. Serializers write
fields in number order, so that is field 1 (`class_name`, from kubelets up to 1.30), 2
(`claim_name`), 3 or 4 (`claim_resources`, without which the entry claims nothing)."""

SCAN_BYTES: Final = 64 << 10
"""Bytes of whole pods searched per `pods_to_parse` step (~0.1 ms per pattern) before the
thread gives the GIL away."""
SELECT_IDS: Final = 256
"""Device IDs matched per `Select` call (~0.3 ms) before the thread may give the GIL away: a
container or an allocatable entry can list 250,000 of them (issue 26)."""


def _select(select: Select, resource: str, device_ids: Sequence[str],
            unmatched: UnmatchedTally | None, maybe_pause: Callable[[], None]) -> tuple[str, ...]:
    """The IDs `select` keeps, a slice of `SELECT_IDS` at a time, those it counts tallied."""
    kept: list[str] = []
    for at in range(0, len(device_ids), SELECT_IDS):
        part, dropped = select(resource, device_ids[at:at + SELECT_IDS])
        kept.extend(part)
        if dropped and unmatched is not None:
            unmatched.add(dropped)
        maybe_pause()
    return tuple(kept)


def parse_pod_resources(pods: Iterable[Any], select: Select | None = None,
                        unmatched: UnmatchedTally | None = None,
                        maybe_pause: Callable[[], None] = lambda: None,
                        ) -> tuple[PodAssignment, ...]:
    """`PodResources` messages (v1 or v1alpha1) → one assignment per container and resource,
    of the IDs `select` keeps (all without it; those it counts go to `unmatched`). The kubelet
    also lists containers that hold no device: they give no assignment, nor does a resource
    none of whose IDs is kept."""
    result: list[PodAssignment] = []
    for pod in pods:
        for container in pod.containers:
            for devices in container.devices:
                kept = tuple(devices.device_ids) if select is None else _select(
                    select, devices.resource_name, devices.device_ids, unmatched, maybe_pause)
                if kept:
                    result.append(PodAssignment(pod.namespace, pod.name, container.name,
                                                devices.resource_name, kept))
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


Wire = bytes | bytearray | mmap.mmap
"""A `List` answer's bytes, as `wire.UnaryChannel` received them."""


def _varint(wire: Wire, pos: int) -> tuple[int, int]:
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


def entry_spans(wire: Wire, maybe_pause: Callable[[], None] = lambda: None,
                ) -> Iterator[tuple[int, int]]:
    """Where each field-1 entry of an answer starts and ends (a `ListPodResourcesResponse`'s
    `PodResources`, v1 and v1alpha1 alike; an `AllocatableResourcesResponse`'s
    `ContainerDevices`), each to be parsed alone: no single parse holds the GIL for long.
    Other fields are skipped as a parser would. A generator: 250,000 allocatable entries held
    as two lists of ints were ~18 MB more at the answer's peak (issue 26)."""
    pos, end = 0, len(wire)
    while pos < end:
        if wire[pos] == 0x0A:  # field 1, length-delimited: every entry a kubelet writes
            key, pos = 0x0A, pos + 1
        else:
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
                yield pos, pos + size
                maybe_pause()
            pos += size
        else:  # groups (3, 4) are not in this proto; 6 and 7 do not exist
            raise DecodeError(f"unexpected wire type {wire_type}")
    if pos > end:
        raise DecodeError("truncated message")


def pod_spans(wire: Wire, maybe_pause: Callable[[], None] = lambda: None,
              ) -> tuple[list[int], list[int]]:
    """`entry_spans` of a `List` answer as lists of starts and ends, for `pods_to_parse`'s
    bisection."""
    starts: list[int] = []
    ends: list[int] = []
    for start, end in entry_spans(wire, maybe_pause):
        starts.append(start)
        ends.append(end)
    return starts, ends


def pods_to_parse(wire: Wire, starts: Sequence[int], ends: Sequence[int],
                  patterns: Sequence[re.Pattern[bytes]],
                  maybe_pause: Callable[[], None] = lambda: None,
                  scan_bytes: int = SCAN_BYTES) -> list[int]:
    """The indices (ascending) of the pods inside which one of `patterns` matches, and maybe a
    few more: a match that starts in a pod and runs past its end counts too. The answer is
    searched a window of whole pods at a time; after a match the search goes on from the end
    of its pod, so each pod is found once, at the cost of one search per pod at most."""
    chosen: list[int] = []
    count = len(starts)
    first = 0
    while first < count:
        last = first
        while last + 1 < count and ends[last + 1] - starts[first] <= scan_bytes:
            last += 1
        window_end = ends[last]
        found: set[int] = set()
        for pattern in patterns:
            pos = starts[first]
            while (match := pattern.search(wire, pos, window_end)) is not None:
                at = match.start()
                pod = bisect_right(starts, at, first, last + 1) - 1
                if at < ends[pod]:
                    found.add(pod)
                    pos = ends[pod]
                else:  # between two pods (a field's tag and length): not inside one
                    pos = at + 1
        chosen.extend(sorted(found))
        maybe_pause()
        first = last + 1
    return chosen


def decode_list(wire: Wire, api: str, select: Select | None = None,
                may_keep: MayKeep | None = None,
                slice_seconds: float = GIL_SLICE_SECONDS,
                pause_seconds: float = GIL_PAUSE_SECONDS,
                scan_bytes: int = SCAN_BYTES) -> ListResult:
    """A `List` answer's bytes → the device IDs `select` keeps (all without it) as assignments,
    the claims (v1) and the pods holding either, and the IDs `select` counted; meant for a
    thread. With `may_keep`, only the pods it or `CLAIM_ON_WIRE` (v1) finds are parsed:
    parsing every pod and going through every device ID in Python was nine tenths of a 50 MB
    answer's parse (issue 13, defect 2)."""
    parse: Callable[[memoryview], Any] = (
        v1_pb2.PodResources.FromString if api == "v1" else v1alpha1_pb2.PodResources.FromString)
    maybe_pause = gil_pacer(slice_seconds, pause_seconds)
    starts, ends = pod_spans(wire, maybe_pause)
    chosen: Iterable[int] = range(len(starts))
    if may_keep is not None:
        patterns = (*may_keep, CLAIM_ON_WIRE) if api == "v1" else tuple(may_keep)
        chosen = pods_to_parse(wire, starts, ends, patterns, maybe_pause, scan_bytes)
    assignments: list[PodAssignment] = []
    claims: list[ClaimAllocation] = []
    pods: set[tuple[str, str]] = set()
    unmatched = UnmatchedTally()
    with memoryview(wire) as view:  # released on the way out: the caller unmaps `wire`
        for index in chosen:
            pod = parse(view[starts[index]:ends[index]])
            held = parse_pod_resources((pod,), select, unmatched, maybe_pause)
            claimed = parse_claims((pod,)) if api == "v1" else ()
            if held or claimed:
                assignments.extend(held)
                claims.extend(claimed)
                pods.add((pod.namespace, pod.name))
            maybe_pause()
    return ListResult(tuple(assignments), api, tuple(claims), frozenset(pods),
                      unmatched=unmatched.result())


def decode_allocatable(wire: Wire, select: Select | None = None,
                       slice_seconds: float = GIL_SLICE_SECONDS,
                       pause_seconds: float = GIL_PAUSE_SECONDS) -> AllocatableResult:
    """A `GetAllocatableResources` answer's bytes → the IDs `select` keeps (all without it) per
    resource, a resource none of whose IDs is kept left out; meant for a thread. Its
    `ContainerDevices` (field 1, one per device from a kubelet) are parsed one at a time, with
    the GIL given back between: a device plugin advertising 250,000 replicas answers ~50 MB
    here too (issue 26)."""
    maybe_pause = gil_pacer(slice_seconds, pause_seconds)
    merged: dict[str, list[str]] = {}
    unmatched = UnmatchedTally()
    with memoryview(wire) as view:  # released on the way out: the caller unmaps `wire`
        for start, end in entry_spans(wire, maybe_pause):
            entry = v1_pb2.ContainerDevices.FromString(view[start:end])
            kept = tuple(entry.device_ids) if select is None else _select(
                select, entry.resource_name, entry.device_ids, unmatched, maybe_pause)
            if kept:
                merged.setdefault(entry.resource_name, []).extend(kept)
            maybe_pause()
    return AllocatableResult(tuple(AllocatableDevices(r, tuple(ids))
                                   for r, ids in sorted(merged.items())), unmatched.result())
