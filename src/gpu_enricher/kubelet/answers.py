"""The parse half of the kubelet client: `List` and `GetAllocatableResources` answers (v1 and
v1alpha1) → assignments, claims and allocatable devices; pure, meant for the client's thread.

A `List` answer is parsed one pod at a time (`pod_messages`): a 50 MB answer (tens of
thousands of pods) parsed in one call held the GIL ~150 ms; pod by pod, with `gil_pacer`
pauses, the event loop gets it back within milliseconds (issue 13, defect 2).
"""

import importlib
from collections.abc import Callable, Iterable, Iterator, Sequence
from dataclasses import dataclass
from typing import Any

from ..model import AllocatableDevices, ClaimAllocation, PodAssignment
from ..worker import GIL_PAUSE_SECONDS, GIL_SLICE_SECONDS, gil_pacer
from ._generated.podresources.v1 import api_pb2 as v1_pb2
from ._generated.podresources.v1alpha1 import api_pb2 as v1alpha1_pb2

# protobuf ships no type information (types-protobuf is not a dependency): imported by name.
DecodeError: type[Exception] = importlib.import_module("google.protobuf.message").DecodeError


@dataclass(frozen=True, slots=True)
class ListResult:
    assignments: tuple[PodAssignment, ...]
    api: str  # "v1" or "v1alpha1"
    claims: tuple[ClaimAllocation, ...] = ()  # always empty from v1alpha1
    pods: frozenset[tuple[str, str]] = frozenset()
    """(namespace, pod) of every pod that holds one of `assignments` or `claims`."""


Keep = Callable[[str, Sequence[str]], bool]
"""Whether to keep a container's devices of one resource: (resource name, device IDs)."""
MayKeep = Callable[[bytes], bool]
"""A cheap test of one pod's encoded `PodResources`: False only when `Keep` would refuse
every device it holds, so its devices need not be looked at one by one."""


def parse_pod_resources(pods: Iterable[Any], keep: Keep | None = None,
                        ) -> tuple[PodAssignment, ...]:
    """`PodResources` messages (v1 or v1alpha1) → one assignment per container and resource
    (those `keep` accepts, when given). The kubelet also lists containers that hold no device:
    they give no assignment."""
    result: list[PodAssignment] = []
    for pod in pods:
        for container in pod.containers:
            for devices in container.devices:
                # A tuple only for what is kept: most of a large answer is not.
                if keep is None or keep(devices.resource_name, devices.device_ids):
                    result.append(PodAssignment(pod.namespace, pod.name, container.name,
                                                devices.resource_name,
                                                tuple(devices.device_ids)))
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


def _varint(wire: bytes | bytearray, pos: int) -> tuple[int, int]:
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


def pod_messages(wire: bytes | bytearray) -> Iterator[memoryview]:
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


def decode_list(wire: bytes | bytearray, api: str, keep: Keep | None = None,
                may_keep: MayKeep | None = None,
                slice_seconds: float = GIL_SLICE_SECONDS,
                pause_seconds: float = GIL_PAUSE_SECONDS) -> ListResult:
    """A `List` answer's bytes → the assignments `keep` accepts (all without it), the claims
    (v1) and the pods holding either; meant for a thread. Pods `may_keep` rules out are only
    looked at for claims: going through every device ID in Python was two thirds of a 50 MB
    answer's parse (issue 13, defect 2)."""
    parse: Callable[[memoryview], Any] = (
        v1_pb2.PodResources.FromString if api == "v1" else v1alpha1_pb2.PodResources.FromString)
    maybe_pause = gil_pacer(slice_seconds, pause_seconds)
    assignments: list[PodAssignment] = []
    claims: list[ClaimAllocation] = []
    pods: set[tuple[str, str]] = set()
    for encoded in pod_messages(wire):
        pod = parse(encoded)
        held = parse_pod_resources((pod,), keep) \
            if may_keep is None or may_keep(bytes(encoded)) else ()
        claimed = parse_claims((pod,)) if api == "v1" else ()
        if held or claimed:
            assignments.extend(held)
            claims.extend(claimed)
            pods.add((pod.namespace, pod.name))
        maybe_pause()
    return ListResult(tuple(assignments), api, tuple(claims), frozenset(pods))
