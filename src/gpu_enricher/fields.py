"""The implemented fields as one table: field → NVML source → conversion → value format.

Adding a field is one `FieldSpec` entry. Sources are described as data (the NVML function's
name, an NVML field id, …) so this module stays pure; `nvml.py` executes them, and calls
each distinct source once per device per pass however many fields share it (the four FB
fields share one `nvmlDeviceGetMemoryInfo`).
"""

from collections.abc import Callable, Mapping
from dataclasses import dataclass
from enum import Enum
from types import MappingProxyType
from typing import Any, Final

from .model import FieldValue

MIB: Final = 1 << 20


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
    """One id of `nvmlDeviceGetFieldValues`; all such fields of a device share one call."""

    field_id: int


@dataclass(frozen=True, slots=True)
class SystemCall:
    """`pynvml.<function>()`: node-wide, the same value on every GPU."""

    function: str


@dataclass(frozen=True, slots=True)
class GpmMetric:
    """An NVML GPM metric (Hopper and newer): DCGM's profiling fields."""

    metric_id: int


Source = DeviceCall | MemoryInfo | NvmlFieldValue | SystemCall | GpmMetric


def _as_int(raw: Any) -> FieldValue:
    return int(raw)


def _bytes_to_mib(raw: Any) -> FieldValue:
    return int(raw) // MIB


def _milli_to_unit(raw: Any) -> FieldValue:
    return int(raw) / 1000.0


def _percent_to_ratio(raw: Any) -> FieldValue:
    return float(raw) / 100.0


def _mib_per_s_to_bytes(raw: Any) -> FieldValue:
    return float(raw) * MIB


def _as_text(raw: Any) -> FieldValue:
    return raw.decode() if isinstance(raw, bytes) else str(raw)


@dataclass(frozen=True, slots=True)
class FieldSpec:
    name: str
    source: Source
    convert: Callable[[Any], FieldValue]
    fmt: ValueFormat
    mig: MigScope
    help: str
    prom_type: str = "gauge"
    slow: bool = False
    """Costly and slowly changing (a cumulative counter): read on the slow cadence."""


def _spec(
    name: str,
    source: Source,
    help_text: str,
    *,
    convert: Callable[[Any], FieldValue] = _as_int,
    fmt: ValueFormat = ValueFormat.INT,
    mig: MigScope = MigScope.PARENT,
    prom_type: str = "gauge",
    slow: bool = False,
) -> FieldSpec:
    return FieldSpec(name, source, convert, fmt, mig, help_text, prom_type, slow)


# NVML constants written out so this module needs no pynvml import:
# NVML_CLOCK_SM = 1, NVML_CLOCK_MEM = 2, NVML_TEMPERATURE_GPU = 0, NVML_FI_* and
# NVML_GPM_METRIC_* ids as in nvml.h.
_SPECS: Final = (
    _spec("DCGM_FI_DRIVER_VERSION", SystemCall("nvmlSystemGetDriverVersion"),
          "Driver Version", convert=_as_text, fmt=ValueFormat.TEXT, prom_type="label"),
    _spec("DCGM_FI_NVML_VERSION", SystemCall("nvmlSystemGetNVMLVersion"),
          "NVML Version", convert=_as_text, fmt=ValueFormat.TEXT, prom_type="label"),
    _spec("DCGM_FI_DEV_SERIAL", DeviceCall("nvmlDeviceGetSerial"),
          "Device Serial Number", convert=_as_text, fmt=ValueFormat.TEXT, prom_type="label"),
    _spec("DCGM_FI_DEV_VBIOS_VERSION", DeviceCall("nvmlDeviceGetVbiosVersion"),
          "VBIOS version of the device", convert=_as_text, fmt=ValueFormat.TEXT,
          prom_type="label"),
    _spec("DCGM_FI_DEV_SM_CLOCK", DeviceCall("nvmlDeviceGetClockInfo", (1,)),
          "SM clock frequency (in MHz)."),
    _spec("DCGM_FI_DEV_MEM_CLOCK", DeviceCall("nvmlDeviceGetClockInfo", (2,)),
          "Memory clock frequency (in MHz)."),
    _spec("DCGM_FI_DEV_GPU_TEMP", DeviceCall("nvmlDeviceGetTemperature", (0,)),
          "GPU temperature (in C)."),
    _spec("DCGM_FI_DEV_MEMORY_TEMP", NvmlFieldValue(82), "Memory temperature (in C)."),
    _spec("DCGM_FI_DEV_POWER_USAGE", DeviceCall("nvmlDeviceGetPowerUsage"),
          "Power draw (in W).", convert=_milli_to_unit, fmt=ValueFormat.FLOAT),
    _spec("DCGM_FI_DEV_TOTAL_ENERGY_CONSUMPTION",
          DeviceCall("nvmlDeviceGetTotalEnergyConsumption"),
          "Total energy consumption since boot (in mJ).", prom_type="counter", slow=True),
    _spec("DCGM_FI_DEV_PCIE_REPLAY_COUNTER", DeviceCall("nvmlDeviceGetPcieReplayCounter"),
          "Total number of PCIe retries.", prom_type="counter", slow=True),
    _spec("DCGM_FI_DEV_GPU_UTIL", DeviceCall("nvmlDeviceGetUtilizationRates", pick="gpu"),
          "GPU utilization (in %).", mig=MigScope.GPU_ONLY),
    _spec("DCGM_FI_DEV_MEM_COPY_UTIL",
          DeviceCall("nvmlDeviceGetUtilizationRates", pick="memory"),
          "Memory utilization (in %).", mig=MigScope.GPU_ONLY),
    _spec("DCGM_FI_DEV_ENC_UTIL", DeviceCall("nvmlDeviceGetEncoderUtilization", pick=0),
          "Encoder utilization (in %)."),
    _spec("DCGM_FI_DEV_DEC_UTIL", DeviceCall("nvmlDeviceGetDecoderUtilization", pick=0),
          "Decoder utilization (in %)."),
    _spec("DCGM_FI_DEV_FB_TOTAL", MemoryInfo("total"),
          "Framebuffer memory total (in MiB).", convert=_bytes_to_mib, mig=MigScope.INSTANCE),
    _spec("DCGM_FI_DEV_FB_FREE", MemoryInfo("free"),
          "Framebuffer memory free (in MiB).", convert=_bytes_to_mib, mig=MigScope.INSTANCE),
    _spec("DCGM_FI_DEV_FB_USED", MemoryInfo("used"),
          "Framebuffer memory used (in MiB).", convert=_bytes_to_mib, mig=MigScope.INSTANCE),
    _spec("DCGM_FI_DEV_FB_RESERVED", MemoryInfo("reserved"),
          "Framebuffer memory reserved (in MiB).", convert=_bytes_to_mib,
          mig=MigScope.INSTANCE),
    _spec("DCGM_FI_DEV_ECC_SBE_VOL_TOTAL", NvmlFieldValue(3),
          "Total number of single-bit volatile ECC errors.", prom_type="counter",
          slow=True),
    _spec("DCGM_FI_DEV_ECC_DBE_VOL_TOTAL", NvmlFieldValue(4),
          "Total number of double-bit volatile ECC errors.", prom_type="counter",
          slow=True),
    _spec("DCGM_FI_DEV_ECC_SBE_AGG_TOTAL", NvmlFieldValue(5),
          "Total number of single-bit persistent ECC errors.", prom_type="counter",
          slow=True),
    _spec("DCGM_FI_DEV_ECC_DBE_AGG_TOTAL", NvmlFieldValue(6),
          "Total number of double-bit persistent ECC errors.", prom_type="counter",
          slow=True),
    _spec("DCGM_FI_DEV_CORRECTABLE_REMAPPED_ROWS", NvmlFieldValue(142),
          "Number of remapped rows for correctable errors", prom_type="counter",
          slow=True),
    _spec("DCGM_FI_DEV_UNCORRECTABLE_REMAPPED_ROWS", NvmlFieldValue(143),
          "Number of remapped rows for uncorrectable errors", prom_type="counter",
          slow=True),
    _spec("DCGM_FI_DEV_ROW_REMAP_FAILURE", NvmlFieldValue(145),
          "Whether remapping of rows has failed"),
    _spec("DCGM_FI_PROF_GR_ENGINE_ACTIVE", GpmMetric(1),
          "Ratio of time the graphics engine is active.", convert=_percent_to_ratio,
          fmt=ValueFormat.FLOAT, mig=MigScope.INSTANCE),
    _spec("DCGM_FI_PROF_SM_ACTIVE", GpmMetric(2),
          "The ratio of cycles an SM has at least 1 warp assigned.",
          convert=_percent_to_ratio, fmt=ValueFormat.FLOAT, mig=MigScope.INSTANCE),
    _spec("DCGM_FI_PROF_SM_OCCUPANCY", GpmMetric(3),
          "The ratio of number of warps resident on an SM.", convert=_percent_to_ratio,
          fmt=ValueFormat.FLOAT, mig=MigScope.INSTANCE),
    _spec("DCGM_FI_PROF_PIPE_TENSOR_ACTIVE", GpmMetric(5),
          "Ratio of cycles the tensor (HMMA) pipe is active.", convert=_percent_to_ratio,
          fmt=ValueFormat.FLOAT, mig=MigScope.INSTANCE),
    _spec("DCGM_FI_PROF_DRAM_ACTIVE", GpmMetric(10),
          "Ratio of cycles the device memory interface is active sending or receiving data.",
          convert=_percent_to_ratio, fmt=ValueFormat.FLOAT, mig=MigScope.INSTANCE),
    _spec("DCGM_FI_PROF_PIPE_FP64_ACTIVE", GpmMetric(11),
          "Ratio of cycles the fp64 pipes are active.", convert=_percent_to_ratio,
          fmt=ValueFormat.FLOAT, mig=MigScope.INSTANCE),
    _spec("DCGM_FI_PROF_PIPE_FP32_ACTIVE", GpmMetric(12),
          "Ratio of cycles the fp32 pipes are active.", convert=_percent_to_ratio,
          fmt=ValueFormat.FLOAT, mig=MigScope.INSTANCE),
    _spec("DCGM_FI_PROF_PIPE_FP16_ACTIVE", GpmMetric(13),
          "Ratio of cycles the fp16 pipes are active.", convert=_percent_to_ratio,
          fmt=ValueFormat.FLOAT, mig=MigScope.INSTANCE),
    _spec("DCGM_FI_PROF_PCIE_TX_BYTES", GpmMetric(20),
          "The rate of data transmitted over the PCIe bus in bytes per second.",
          convert=_mib_per_s_to_bytes, fmt=ValueFormat.FLOAT, mig=MigScope.PARENT),
    _spec("DCGM_FI_PROF_PCIE_RX_BYTES", GpmMetric(21),
          "The rate of data received over the PCIe bus in bytes per second.",
          convert=_mib_per_s_to_bytes, fmt=ValueFormat.FLOAT, mig=MigScope.PARENT),
)

IMPLEMENTED: Final[Mapping[str, FieldSpec]] = MappingProxyType({s.name: s for s in _SPECS})
"""Every field gpu-enricher can export, by DCGM name."""

PROFILING_FIELDS: Final = frozenset(
    s.name for s in _SPECS if isinstance(s.source, GpmMetric)
)
