"""MIG GPU instances' profiles (name, placement, compute slices) from NVML's profile table,
asked once per GPU, and DCGM's entity ids of the instances (what `-d i:IDS` names).

Runs on the collector's NVML thread, as the backend does.
"""

from collections.abc import Mapping
from typing import Any, NamedTuple

import pynvml

from ..model import SampleError
from .device import GPU_FATAL, SOURCE, error_reason, text


class InstanceProfile(NamedTuple):
    name: str
    start: int | None
    rank: int  # the profile's index in NVML's table: DCGM numbers instances in this order
    slices: int | None = None
    gpu_slices: int | None = None


ProfileTable = dict[int, tuple[int, str, int]]
"""Profile id → (its index, its name without `MIG `, its compute slices)."""


class MigProfiles:
    """Each GPU's profile table, kept once it answered: profiles are fixed per GPU."""

    def __init__(self) -> None:
        self._tables: dict[str, ProfileTable] = {}

    def _table(self, parent: Any, parent_uuid: str) -> ProfileTable:
        table = self._tables.get(parent_uuid)
        if table is not None:
            return table
        table = {}
        for profile in range(pynvml.NVML_GPU_INSTANCE_PROFILE_COUNT):
            try:
                p = pynvml.nvmlDeviceGetGpuInstanceProfileInfo(parent, profile, version=2)
            except pynvml.NVMLError:
                continue
            table[int(p.id)] = (profile, text(p.name).removeprefix("MIG "), int(p.sliceCount))
        if table:  # an empty answer is retried next time
            self._tables[parent_uuid] = table
        return table

    def profile(self, parent: Any, parent_uuid: str, gi: int,
                errors: list[SampleError], index: int) -> InstanceProfile:
        """`nvmlGpuInstanceGetInfo` gives the profile id (the profile table gives its name,
        index and compute slices) and the placement."""
        try:
            info = pynvml.nvmlGpuInstanceGetInfo(pynvml.nvmlDeviceGetGpuInstanceById(parent, gi))
        except pynvml.NVMLError as exc:
            if exc.value in GPU_FATAL:
                raise
            errors.append(SampleError(SOURCE, error_reason(exc), index))
            return InstanceProfile("", None, pynvml.NVML_GPU_INSTANCE_PROFILE_COUNT)
        table = self._table(parent, parent_uuid)
        rank, name, slices = table.get(int(info.profileId),
                                       (pynvml.NVML_GPU_INSTANCE_PROFILE_COUNT, "", 0))
        # The whole GPU's compute slices: its largest profile's (the 7g or 4g one).
        whole = max((entry[2] for entry in table.values()), default=0)
        return InstanceProfile(name, int(info.placement.start), rank, slices or None,
                               whole or None)


def entity_ids(index: int, slots: int, ranks: Mapping[int, int]) -> dict[int, int]:
    """GI id → DCGM's entity id (DcgmCacheManager: gpuId * maxGpcs + the count so far,
    walking the profiles by index and each profile's instances)."""
    ordered = sorted(ranks, key=lambda gi: (ranks[gi], gi))
    return {gi: index * slots + rank for rank, gi in enumerate(ordered)}
