"""What a field is read from and how it is shown: the vocabulary of the field table.

Sources are data (an NVML function's name, a field id, a GPM metric id, …), so this module stays
pure; the NVML backend executes them (`nvml/device.py`), calling each distinct source once per
device per pass however many fields share it.
"""

from collections.abc import Callable
from dataclasses import dataclass
from enum import Enum
from typing import Any

from ..model import FieldValue


class ValueFormat(Enum):
    INT = "int"  # printed plain: 19762
    FLOAT = "float"  # printed with six decimals: 16.365000
    TEXT = "text"  # only usable as a `label` field


class MigScope(Enum):
    """How a field appears on the series of a MIG GPU instance."""

    PARENT = "parent"  # device-level (power, clocks, temperature): repeats the parent's value
    INSTANCE = "instance"  # read from the MIG device handle (memory) or per instance (profiling)
    GPU_ONLY = "gpu_only"  # NVML cannot give it per instance (GPU_UTIL): absent on instances


@dataclass(frozen=True, slots=True)
class DeviceCall:
    """`pynvml.<function>(handle, *args)`, then `pick` (attribute name or index) if set."""

    function: str
    args: tuple[int, ...] = ()
    pick: str | int | None = None


@dataclass(frozen=True, slots=True)
class MemoryInfo:
    """`nvmlDeviceGetMemoryInfo` v2 (v1 on old drivers), attribute `pick` in bytes."""

    pick: str


@dataclass(frozen=True, slots=True)
class NvmlFieldValue:
    """One id (and scope: a link, …) of `nvmlDeviceGetFieldValues`; all such fields of a
    device share one call."""

    field_id: int
    scope_id: int = 0


@dataclass(frozen=True, slots=True)
class NvlinkThroughput:
    """NVLink data throughput as DCGM gives it: the RX + TX KiB counters (NVML field values
    139 and 138, scope = the link, or all links) between two passes, a `convert.NvlinkDelta`
    (none on the first pass), which the field's conversion turns into DCGM's "MB/s"
    (int(ΔKiB / Δs / 1000)) or bytes/s. The last reading is per GPU in the backend
    (`nvml/fields.NvlinkRates`); the counters ride in the device's one field-value batch."""

    link: int | None  # None: all links (scope 0xFFFFFFFF)


@dataclass(frozen=True, slots=True)
class SystemCall:
    """`pynvml.<function>()`: node-wide, the same value on every GPU."""

    function: str


@dataclass(frozen=True, slots=True)
class GpmMetric:
    """An NVML GPM metric (Hopper and newer): DCGM's profiling fields."""

    metric_id: int


@dataclass(frozen=True, slots=True)
class EventCount:
    """Not a plain value of the NVML pass: counted from NVML events (the XID thread of
    `nvml/events.py`) or from each pass's DCGM_FI_DEV_CLOCKS_EVENT_REASONS
    (`health/event_counts.py`), or a status built from several readings (`health/rules.py`,
    `nvml/topology.py`); `health/event_families.py` and `health/status_families.py` build the
    families, whose labels a plain field's series do not have (`err_code`, `xid`,
    `clock_event`, `window_size_in_ms`, `health_watch`, `peer_gpu`, …)."""

    kind: str
    """xid_last, xid_window, xid_total, clock_events_window, clock_events_total, gpu_health,
    p2p_status"""


Source = (DeviceCall | MemoryInfo | NvmlFieldValue | NvlinkThroughput | SystemCall | GpmMetric
          | EventCount)


@dataclass(frozen=True, slots=True)
class FieldSpec:
    name: str
    source: Source
    convert: Callable[[Any], FieldValue | None]
    """The NVML answer in dcgm-exporter's unit; None: no value (the series is absent)."""
    fmt: ValueFormat
    mig: MigScope
    help: str
    prom_type: str = "gauge"
    slow: bool = False
    """Costly and slowly changing (a cumulative counter): read on the slow cadence."""
