"""Field values of the NVML backend: which (id, scope) pairs a source needs from the device's
one `nvmlDeviceGetFieldValues` batch, and the per-GPU state that turns NVLink's cumulative
throughput counters into DCGM's bandwidth rate.

Part of the NVML backend (the backend owns one `NvlinkRates`); no pynvml import, so the rate
arithmetic is testable on its own. Runs only on the NVML thread.
"""

from typing import Final

from ..fields.convert import NvlinkDelta
from ..fields.spec import NvlinkThroughput, NvmlFieldValue, Source

NVML_FI_DEV_NVLINK_THROUGHPUT_DATA_TX: Final = 138  # KiB, cumulative, per link (scope)
NVML_FI_DEV_NVLINK_THROUGHPUT_DATA_RX: Final = 139
ALL_LINKS_SCOPE: Final = 0xFFFFFFFF
"""The scope DCGM passes for "all NVLinks of the GPU" (UINT_MAX, given verbatim to NVML)."""

NO_THROUGHPUT: Final = NvlinkDelta(0, 1)

FieldKey = tuple[int, int]
"""(NVML field id, scope id) of one entry of a field-value batch."""


def throughput_keys(source: NvlinkThroughput) -> tuple[FieldKey, FieldKey]:
    """(RX, TX) counters of the link DCGM reads for this bandwidth field."""
    scope = ALL_LINKS_SCOPE if source.link is None else source.link
    return ((NVML_FI_DEV_NVLINK_THROUGHPUT_DATA_RX, scope),
            (NVML_FI_DEV_NVLINK_THROUGHPUT_DATA_TX, scope))


def field_value_keys(source: Source) -> tuple[FieldKey, ...]:
    """The field-value entries a source is computed from; () for other kinds of source."""
    if isinstance(source, NvmlFieldValue):
        return ((source.field_id, source.scope_id),)
    if isinstance(source, NvlinkThroughput):
        return throughput_keys(source)
    return ()


class NvlinkRates:
    """The last RX + TX KiB total and its timestamp per (GPU UUID, scope): DCGM's
    `ReadAndCacheNvLinkBandwidth`, which turns the counters into a rate between two readings
    (fields/convert.py gives it in DCGM's "MB/s" or in bytes/s from the same delta).

    As DCGM: no throughput (a zero delta) for the first reading of a link, for a zero total and
    for two readings with the same timestamp. A total that went down (a driver reload reset the
    counters) starts over with 0 instead of DCGM's negative figure.
    """

    def __init__(self) -> None:
        self._last: dict[tuple[str, int], tuple[int, int]] = {}

    def rate(self, uuid: str, scope: int, total_kib: int, stamp_us: int) -> NvlinkDelta:
        key = (uuid, scope)
        previous = self._last.get(key)
        self._last[key] = (total_kib, stamp_us)
        if previous is None or total_kib == 0:
            return NO_THROUGHPUT
        delta_kib = total_kib - previous[0]
        elapsed_us = stamp_us - previous[1]
        if delta_kib < 0 or elapsed_us <= 0:
            return NO_THROUGHPUT
        return NvlinkDelta(delta_kib, elapsed_us)
