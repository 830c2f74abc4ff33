"""Which device IDs of a kubelet answer are kept: those naming a GPU or MIG instance of this
node, chosen on the client's thread; the rest are counted and sampled, never carried to the
join. Pure.

A node has at most a few hundred pods and 8 GPUs, but a `List` answer is whatever the kubelet
sends: 250,000 IDs in GPU form naming no GPU here (a broken device plugin advertising replicas,
a kubelet bug) were kept, matched on the event loop every pass and held between passes:
/metrics p99 1.24 s and RSS +100 MB (issue 26). Matched against this node's identifiers
(`attribution.devices.held_here`, the join's own parse and match), what is kept is bounded by
what the node has: its GPUs and MIG instances and their holders.
"""

import re
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Final

from ..attribution.devices import NodeIndex, held_here, is_gpu_resource

SAMPLE_SIZE: Final = 5
"""Unmatched IDs named in the log line: enough to recognise a device plugin's pattern."""


@dataclass(frozen=True, slots=True)
class UnmatchedIds:
    """The device IDs of GPU resources in one answer that name nothing on this node."""

    count: int = 0
    sample: tuple[str, ...] = ()
    """The first `SAMPLE_SIZE` of them, in the answer's order."""


NO_UNMATCHED: Final = UnmatchedIds()


class UnmatchedTally:
    """Counts unmatched IDs while an answer is parsed; keeps only the first few."""

    def __init__(self) -> None:
        self.count = 0
        self.sample: list[str] = []

    def add(self, device_ids: Sequence[str]) -> None:
        self.count += len(device_ids)
        if len(self.sample) < SAMPLE_SIZE:
            self.sample.extend(device_ids[:SAMPLE_SIZE - len(self.sample)])

    def result(self) -> UnmatchedIds:
        return UnmatchedIds(self.count, tuple(self.sample)) if self.count else NO_UNMATCHED


Select = Callable[[str, Sequence[str]], tuple[tuple[str, ...], Sequence[str]]]
"""A container's device IDs of one resource → the IDs to keep, and the IDs to count as
unmatched (a GPU resource's IDs that name nothing here; another resource's are just dropped)."""


def held_on(node: NodeIndex, extra_resources: frozenset[str]) -> Select:
    """Keeps, of any resource, the IDs that name a GPU or MIG instance of `node` (processes on a
    GPU some other resource hands out count as allocated); counts the rest of a GPU resource's
    (`nvidia.com/gpu`, `nvidia.com/mig-*`, `--nvidia-resource-names`) as unmatched."""
    def select(resource: str, device_ids: Sequence[str]) -> tuple[tuple[str, ...], list[str]]:
        kept: list[str] = []
        unmatched: list[str] = []
        for device_id in device_ids:
            (kept if held_here(device_id, node) is not None else unmatched).append(device_id)
        if unmatched and not is_gpu_resource(resource, extra_resources):
            unmatched = []  # an RDMA or SR-IOV device: nothing of ours to report
        return tuple(kept), unmatched

    return select


# On the wire a device ID (`ContainerDevices` field 2, v1 and v1alpha1) is the byte 0x12, its
# length (a varint) and its UTF-8: one that `held_here` may keep starts (after whitespace)
# with `GPU-`, `MIG-`, `nvidia` or a bare UUID's first group (`parse_device_id`'s forms), so
# it shows as that tag, a length, whitespace and one of those. Whitespace is taken broadly
# (every byte of a multi-byte UTF-8 character, the information separators `str.strip`
# removes): a false match costs only a pod's parse, a missed one an assignment.
_MAY_NAME_GPU_ON_WIRE = re.compile(rb"\x12[\x80-\xff]{0,9}[\x00-\x7f][\s\x1c-\x1f\x80-\xff]*"
                                   rb"(?:GPU-|MIG-|nvidia|[0-9a-fA-F]{8}-)")

# NVIDIA_GPU and every NVIDIA_MIG_PREFIX resource, written with their common prefix in front so
# that the search is a substring search.
_GPU_RESOURCES_ON_WIRE = re.compile(rb"nvidia\.com/(?:gpu|mig-)")


MayKeep = Sequence[re.Pattern[bytes]]
"""Byte patterns, one of which matches inside the encoded `PodResources` of every pod that holds
a device a `Select` keeps or counts: a pod none of them matches is not parsed. A match
elsewhere costs only a parse."""


def may_name_a_gpu(extra_resources: frozenset[str]) -> MayKeep:
    """The cheap test before `held_on`, searched in the answer's bytes: a pod none of these
    patterns matches inside holds no GPU resource and no device ID in a GPU form. One pattern
    per resource name, each a plain substring search: an alternation of them is tried at
    every byte, ten times slower."""
    return (_GPU_RESOURCES_ON_WIRE, _MAY_NAME_GPU_ON_WIRE,
            *(re.compile(re.escape(r.encode())) for r in sorted(extra_resources)))
