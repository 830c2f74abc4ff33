"""dcgm-exporter's two field namings as data: the classic names (up to 4.8) and the DCGM 4.6/4.7
names dcgm-exporter 4.9 serves instead, with how each one's unit relates to the classic one's.

dcgm-exporter 4.9 (DCGM 4.7) renamed the fields of its default and profiling lists that DCGM 4.7
deprecates; eleven changed unit (clocks MHz → Hz, energy mJ → J, utilization % → 0..1, memory
MiB → bytes, NVLink "MB/s" → bytes/s), and the driver-version label became
`DCGM_FI_SYSTEM_DRIVER_VERSION`. A name of the same unit is the same DCGM field id (the catalog
maps both spellings to it); a name in a base unit is a new id, read from the same NVML answer
(fields/table.py builds its spec from the classic one). docs/namings.md cites the source of
each row. Pure: the recording rules and the simulated node use the PromQL and Python
conversions below.
"""

from collections.abc import Callable, Mapping
from dataclasses import dataclass
from enum import Enum
from types import MappingProxyType
from typing import Final, NamedTuple

from ..model import FieldValue
from .convert import MIB, NVLINK_BYTES_PER_CLASSIC_UNIT

# The fields the join splits per pod and the query document reads, under either naming.
FB_TOTAL, FB_CAPACITY_BYTES = "DCGM_FI_DEV_FB_TOTAL", "DCGM_FI_DEV_FB_CAPACITY_BYTES"
FB_USED, FB_USED_BYTES = "DCGM_FI_DEV_FB_USED", "DCGM_FI_DEV_FB_USED_BYTES"
GPU_UTIL, GPU_UTIL_RATIO = "DCGM_FI_DEV_GPU_UTIL", "DCGM_FI_DEV_GPU_UTIL_RATIO"


class Scale(Enum):
    """How a DCGM 4.7 name's unit relates to its classic name's."""

    SAME = "same unit"
    HERTZ = "MHz → Hz"
    JOULES = "mJ → whole J"
    RATIO = "% → ratio 0..1"
    BYTES = "MiB → bytes"
    BYTES_PER_SECOND = "KiB/s ÷ 1000 (DCGM's MB/s) → bytes/s"
    SECONDS = "ns → s"


class Conversion(NamedTuple):
    """One unit relation, both ways, in PromQL (`{}`: the other name's selector) and in Python.
    Where the classic unit is the coarser, the classic figure is recovered exactly (floor,
    round); the other way is within one classic unit (a MiB, a joule, 1000 KiB/s), as the
    classic reading itself is."""

    to_current_promql: str
    to_classic_promql: str
    to_current: Callable[[float], FieldValue]
    to_classic: Callable[[float], FieldValue]


CONVERSIONS: Final[Mapping[Scale, Conversion]] = MappingProxyType({
    Scale.SAME: Conversion("{}", "{}", lambda v: v, lambda v: v),
    Scale.HERTZ: Conversion("{} * 1e6", "{} / 1e6",
                            lambda v: int(v) * 1_000_000, lambda v: int(v) // 1_000_000),
    Scale.JOULES: Conversion("floor({} / 1000)", "{} * 1000",
                             lambda v: int(v) // 1000, lambda v: int(v) * 1000),
    Scale.RATIO: Conversion("{} / 100", "round({} * 100)",
                            lambda v: float(v) / 100, lambda v: round(float(v) * 100)),
    Scale.BYTES: Conversion(f"{{}} * {MIB}", f"floor({{}} / {MIB})",
                            lambda v: int(v) * MIB, lambda v: int(v) // MIB),
    Scale.BYTES_PER_SECOND: Conversion(
        f"{{}} * {NVLINK_BYTES_PER_CLASSIC_UNIT}", f"floor({{}} / {NVLINK_BYTES_PER_CLASSIC_UNIT})",
        lambda v: int(v) * NVLINK_BYTES_PER_CLASSIC_UNIT,
        lambda v: int(v) // NVLINK_BYTES_PER_CLASSIC_UNIT),
    Scale.SECONDS: Conversion("{} / 1e9", "{} * 1e9",
                              lambda v: float(v) / 1e9, lambda v: round(float(v) * 1e9)),
})


@dataclass(frozen=True, slots=True)
class Rename:
    """One field under both namings."""

    classic: str
    """The name dcgm-exporter's lists used up to 4.8, which gpu-enricher implements."""
    current: str
    """DCGM 4.6/4.7's name, which dcgm-exporter 4.9's lists use."""
    prom_type: str
    """What the current name is: gauge, counter or label (a counters line naming it with
    another type is an error)."""
    scale: Scale
    since: str
    """Where the current name comes from: DCGM 4.6.0, DCGM 4.6.1 or DCGM 4.7."""
    default: bool = False
    """A row of dcgm-exporter 4.9's default list (its 4.8.3 default row, renamed)."""
    help: str = ""
    """The help text of the bundled DCGM 4.7 list and of docs/fields.md."""

    @property
    def new_field(self) -> bool:
        """A new DCGM field id in a base unit (else the same id under a new name)."""
        return self.scale is not Scale.SAME

    def to_current_promql(self, selector: str) -> str:
        return CONVERSIONS[self.scale].to_current_promql.format(selector)

    def to_classic_promql(self, selector: str) -> str:
        return CONVERSIONS[self.scale].to_classic_promql.format(selector)


def from_classic(scale: Scale, value: FieldValue) -> FieldValue:
    """A classic value in the current name's unit, for a node that has only classic values
    (the simulated one): what NVML's own answer gives within one classic unit."""
    return value if isinstance(value, str) else CONVERSIONS[scale].to_current(value)


def to_classic(scale: Scale, value: FieldValue) -> FieldValue:
    """The classic figure a current-unit value stands for (the relation the tests hold)."""
    return value if isinstance(value, str) else CONVERSIONS[scale].to_classic(value)


def _r(classic: str, current: str, prom_type: str, scale: Scale, since: str, help_text: str,
       *, default: bool = False) -> Rename:
    return Rename(f"DCGM_FI_{classic}", f"DCGM_FI_{current}", prom_type, scale, since, default,
                  help_text)


G, C = "gauge", "counter"
V460, V461, V47 = "DCGM 4.6.0", "DCGM 4.6.1", "DCGM 4.7"

RENAMES: Final[tuple[Rename, ...]] = (
    # dcgm-exporter's default list, in its order: 22 renamed rows, the label, and the
    # framebuffer capacity that 4.9 collects by default.
    _r("DEV_SM_CLOCK", "DEV_SM_CLOCK_HERTZ", G, Scale.HERTZ, V461,
       "SM clock for the device in hertz.", default=True),
    _r("DEV_MEM_CLOCK", "DEV_MEMORY_CLOCK_HERTZ", G, Scale.HERTZ, V461,
       "Memory clock for the device in hertz.", default=True),
    _r("DEV_MEMORY_TEMP", "DEV_MEMORY_TEMP_CELSIUS", G, Scale.SAME, V460,
       "Memory temperature (in C).", default=True),
    _r("DEV_GPU_TEMP", "DEV_GPU_TEMP_CELSIUS", G, Scale.SAME, V460,
       "GPU temperature (in C).", default=True),
    _r("DEV_POWER_USAGE", "DEV_BOARD_POWER_WATTS", G, Scale.SAME, V460,
       "Power draw (in W).", default=True),
    _r("DEV_TOTAL_ENERGY_CONSUMPTION", "DEV_GPU_ENERGY_JOULES_TOTAL", C, Scale.JOULES, V461,
       "Total GPU energy consumption in joules since the driver was last reloaded.",
       default=True),
    _r("DEV_PCIE_REPLAY_COUNTER", "DEV_PCIE_REPLAY_TOTAL", C, Scale.SAME, V460,
       "Total number of PCIe retries.", default=True),
    _r("DEV_GPU_UTIL", "DEV_GPU_UTIL_RATIO", G, Scale.RATIO, V47,
       "GPU utilization (ratio 0-1).", default=True),
    _r("DEV_MEM_COPY_UTIL", "DEV_MEMORY_UTIL_RATIO", G, Scale.RATIO, V47,
       "Memory utilization (ratio 0-1).", default=True),
    _r("DEV_ENC_UTIL", "DEV_ENC_UTIL_RATIO", G, Scale.RATIO, V47,
       "Encoder utilization (ratio 0-1).", default=True),
    _r("DEV_DEC_UTIL", "DEV_DEC_UTIL_RATIO", G, Scale.RATIO, V47,
       "Decoder utilization (ratio 0-1).", default=True),
    _r("DEV_XID_ERRORS", "DEV_XID_ERROR", G, Scale.SAME, V460,
       "Value of the last XID error encountered.", default=True),
    _r("DEV_FB_FREE", "DEV_FB_FREE_BYTES", G, Scale.BYTES, V47,
       "Framebuffer memory free (in bytes).", default=True),
    _r("DEV_FB_USED", "DEV_FB_USED_BYTES", G, Scale.BYTES, V47,
       "Framebuffer memory used (in bytes).", default=True),
    _r("DEV_FB_RESERVED", "DEV_FB_RESERVED_BYTES", G, Scale.BYTES, V47,
       "Framebuffer memory reserved (in bytes).", default=True),
    _r("DEV_FB_TOTAL", "DEV_FB_CAPACITY_BYTES", G, Scale.BYTES, V47,
       "Framebuffer memory capacity (in bytes).", default=True),
    _r("DEV_NVLINK_BANDWIDTH_TOTAL", "DEV_NVLINK_THROUGHPUT_BYTES_PER_SECOND", G,
       Scale.BYTES_PER_SECOND, V47,
       "NVLink data throughput of all links, rx and tx, in bytes per second.", default=True),
    _r("DEV_UNCORRECTABLE_REMAPPED_ROWS", "DEV_ROW_REMAP_UNCORRECTABLE_TOTAL", C, Scale.SAME,
       V460, "Number of remapped rows for uncorrectable errors.", default=True),
    _r("DEV_CORRECTABLE_REMAPPED_ROWS", "DEV_ROW_REMAP_CORRECTABLE_TOTAL", C, Scale.SAME, V460,
       "Number of remapped rows for correctable errors.", default=True),
    _r("DEV_ROW_REMAP_FAILURE", "DEV_ROW_REMAP_FAILED", G, Scale.SAME, V460,
       "Whether remapping of rows has failed.", default=True),
    _r("DRIVER_VERSION", "SYSTEM_DRIVER_VERSION", "label", Scale.SAME, V460,
       "Driver Version", default=True),
    _r("PROF_GR_ENGINE_ACTIVE", "PROF_GR_ENGINE_UTIL_RATIO", G, Scale.SAME, V460,
       "Ratio of time the graphics engine is active.", default=True),
    _r("PROF_PIPE_TENSOR_ACTIVE", "PROF_TENSOR_UTIL_RATIO", G, Scale.SAME, V460,
       "Ratio of cycles the tensor (HMMA) pipe is active.", default=True),
    _r("PROF_DRAM_ACTIVE", "PROF_DRAM_UTIL_RATIO", G, Scale.SAME, V460,
       "Ratio of cycles the device memory interface is active sending or receiving data.",
       default=True),
    # Implemented beyond the default list: SM activity (gpu-enricher's bundled lists carry it),
    # the other profiling ratios, the power limits, and the fields in a new unit.
    _r("PROF_SM_ACTIVE", "PROF_SM_UTIL_RATIO", G, Scale.SAME, V460,
       "The ratio of cycles an SM has at least 1 warp assigned."),
    _r("PROF_SM_OCCUPANCY", "PROF_SM_OCCUPANCY_RATIO", G, Scale.SAME, V460,
       "The ratio of number of warps resident on an SM."),
    _r("PROF_PIPE_FP64_ACTIVE", "PROF_FP64_UTIL_RATIO", G, Scale.SAME, V460,
       "Ratio of cycles the fp64 pipes are active."),
    _r("PROF_PIPE_FP32_ACTIVE", "PROF_FP32_UTIL_RATIO", G, Scale.SAME, V460,
       "Ratio of cycles the fp32 pipes are active."),
    _r("PROF_PIPE_FP16_ACTIVE", "PROF_FP16_UTIL_RATIO", G, Scale.SAME, V460,
       "Ratio of cycles the fp16 pipes are active."),
    _r("DEV_POWER_MGMT_LIMIT", "DEV_BOARD_POWER_LIMIT_REQUESTED_WATTS", G, Scale.SAME, V460,
       "Power management limit (in W)."),
    _r("DEV_ENFORCED_POWER_LIMIT", "DEV_BOARD_POWER_LIMIT_ENFORCED_WATTS", G, Scale.SAME, V460,
       "Effective power limit that the driver enforces (in W)."),
    _r("DEV_FAN_SPEED", "DEV_FAN_SPEED_RATIO", G, Scale.RATIO, V461,
       "Fan speed for the device as a ratio of maximum noise-tolerance fan speed (0.0-1.0+)."),
    _r("DEV_POWER_VIOLATION", "DEV_GPU_POWER_THROTTLE_SECONDS_TOTAL", C, Scale.SECONDS, V47,
       "Throttling duration due to power constraints (in s)."),
    *(_r(f"DEV_NVLINK_BANDWIDTH_L{link}", f"DEV_NVLINK_THROUGHPUT_L{link}_BYTES_PER_SECOND", G,
         Scale.BYTES_PER_SECOND, V47,
         f"NVLink data throughput of link {link}, rx and tx, in bytes per second.")
      for link in range(18)),
)

BY_CURRENT: Final[Mapping[str, Rename]] = MappingProxyType({r.current: r for r in RENAMES})
BY_CLASSIC: Final[Mapping[str, Rename]] = MappingProxyType({r.classic: r for r in RENAMES})


def with_base_units(values: Mapping[str, FieldValue]) -> dict[str, FieldValue]:
    """`values` and, for each classic reading that has a base-unit name, that name's value
    (`from_classic`): for a backend whose readings are classic figures (the simulated node)."""
    derived = {r.current: from_classic(r.scale, values[r.classic])
               for r in _NEW_FIELDS if r.classic in values}
    return {**values, **derived}


_NEW_FIELDS: Final = tuple(r for r in RENAMES if r.new_field)
