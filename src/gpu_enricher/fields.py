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
    """One id (and scope: a link, …) of `nvmlDeviceGetFieldValues`; all such fields of a
    device share one call."""

    field_id: int
    scope_id: int = 0


@dataclass(frozen=True, slots=True)
class NvlinkThroughput:
    """NVLink data throughput as DCGM gives it: the RX + TX KiB counters (NVML field values
    139 and 138, scope = the link, or all links) turned into a rate between two passes,
    int(ΔKiB / Δs / 1000), 0 on the first pass. The rate's state is per GPU in the backend
    (`nvml_fields.NvlinkRates`); the counters ride in the device's one field-value batch."""

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
    """Not read in the NVML pass: counted from NVML events (the XID thread of
    `nvml_events.py`) or from each pass's DCGM_FI_DEV_CLOCKS_EVENT_REASONS (`event_counts.py`);
    `xid.py` builds the families, whose labels a plain field's series do not have (`err_code`,
    `xid`, `clock_event`, `window_size_in_ms`)."""

    kind: str  # xid_last, xid_window, xid_total, clock_events_window, clock_events_total


Source = (DeviceCall | MemoryInfo | NvmlFieldValue | NvlinkThroughput | SystemCall | GpmMetric
          | EventCount)


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


def _count(raw: Any) -> FieldValue:
    return len(raw)


def _milli_to_whole_unit(raw: Any) -> FieldValue:
    """DCGM's power limits: mW / 1000 in integer arithmetic, then a double (699999 → 699.0)."""
    return float(int(raw) // 1000)


# nvmlBrandType_t → DCGM_FI_DEV_BRAND's text, as DCGM writes it (its names from nvidia-smi);
# an id DCGM does not name (DLA, vGameDev, NPU, future ones) is "Unknown" there too.
BRAND_NAMES: Final[Mapping[int, str]] = MappingProxyType({
    0: "Unknown", 1: "Quadro", 2: "Tesla", 3: "NVS", 4: "Grid", 5: "GeForce", 6: "Titan",
    7: "NVIDIA Virtual Applications", 8: "NVIDIA Virtual PC",
    9: "NVIDIA Virtual Compute Server", 10: "NVIDIA RTX Virtual Workstation",
    11: "NVIDIA vGaming", 12: "Quadro RTX", 13: "NVIDIA RTX", 14: "NVIDIA", 15: "GeForce RTX",
    16: "Titan RTX",
})


def _brand_name(raw: Any) -> FieldValue:
    return BRAND_NAMES.get(int(raw), "Unknown")


_GRID_LICENSE_FEATURE_CODE_VGPU: Final = 1


def _vgpu_license(raw: Any) -> FieldValue | None:
    """As DCGM: 0 when the GPU has no vGPU licensing, else 1 if the vGPU feature is licensed
    (featureState > 0), 0 if not; no value when no vGPU feature is listed."""
    if not raw.isGridLicenseSupported:
        return 0
    for feature in raw.gridLicensableFeatures[:raw.licensableFeaturesCount]:
        if feature.featureCode == _GRID_LICENSE_FEATURE_CODE_VGPU:
            return 1 if feature.featureState > 0 else 0
    return None


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


def _spec(
    name: str,
    source: Source,
    help_text: str,
    *,
    convert: Callable[[Any], FieldValue | None] = _as_int,
    fmt: ValueFormat = ValueFormat.INT,
    mig: MigScope = MigScope.PARENT,
    prom_type: str = "gauge",
    slow: bool = False,
) -> FieldSpec:
    return FieldSpec(name, source, convert, fmt, mig, help_text, prom_type, slow)


NVLINK_MAX_DCGM_LINKS: Final = 18
"""DCGM names per-link NVLink fields L0 … L17."""

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
    # Counted from events, not read in the pass (EventCount; families from xid.py). XIDs: an
    # NVML event set (XidCriticalError) waited on by a dedicated thread; clock events: each
    # pass's DCGM_FI_DEV_CLOCKS_EVENT_REASONS bitmask. The *_TOTAL two are dcgm-exporter
    # main-branch counters (since start, no window).
    _spec("DCGM_FI_DEV_XID_ERRORS", EventCount("xid_last"),
          "Value of the last XID error encountered."),
    _spec("DCGM_EXP_XID_ERRORS_COUNT", EventCount("xid_window"),
          "Count of XID Errors within user-specified time window (see xid-count-window-size "
          "param)."),
    _spec("DCGM_EXP_XID_ERRORS_TOTAL", EventCount("xid_total"),
          "Count of XID Errors since the exporter started, per XID.", prom_type="counter"),
    _spec("DCGM_EXP_CLOCK_EVENTS_COUNT", EventCount("clock_events_window"),
          "Count of clock events within the user-specified time window (see "
          "clock-events-count-window-size param)."),
    _spec("DCGM_EXP_CLOCK_EVENTS_TOTAL", EventCount("clock_events_total"),
          "Count of clock events that became active since the exporter started.",
          prom_type="counter"),
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
    # Throttling: time (ns) each policy held the clocks down, nvmlDeviceGetViolationStatus
    # (NVML_PERF_POLICY_POWER = 0 … RELIABILITY = 5) `.violationTime`; ~0.7 ms per policy on
    # an H100, so on the slow cadence.
    *(_spec(name, DeviceCall("nvmlDeviceGetViolationStatus", (policy,), pick="violationTime"),
            f"Throttling duration due to {why} (in ns).", prom_type="counter", slow=True)
      for policy, (name, why) in enumerate((
          ("DCGM_FI_DEV_POWER_VIOLATION", "power constraints"),
          ("DCGM_FI_DEV_THERMAL_VIOLATION", "thermal constraints"),
          ("DCGM_FI_DEV_SYNC_BOOST_VIOLATION", "sync-boost constraints"),
          ("DCGM_FI_DEV_BOARD_LIMIT_VIOLATION", "board limit constraints"),
          ("DCGM_FI_DEV_LOW_UTIL_VIOLATION", "low utilization"),
          ("DCGM_FI_DEV_RELIABILITY_VIOLATION", "reliability constraints")))),
    # The bitmask of nvmlClocksEventReason* (DCGM_CLOCKS_EVENT_REASON_*), an integer gauge;
    # CLOCK_THROTTLE_REASONS is the same field's pre-4.x name.
    *(_spec(name, DeviceCall("nvmlDeviceGetCurrentClocksEventReasons"),
            "Current clock event reasons (bitmask of DCGM_CLOCKS_EVENT_REASON_*).")
      for name in ("DCGM_FI_DEV_CLOCKS_EVENT_REASONS", "DCGM_FI_DEV_CLOCK_THROTTLE_REASONS")),
    # Retired pages (pre-Ampere; row remapping replaced them: NOT_SUPPORTED on an H100).
    # NVML_PAGE_RETIREMENT_CAUSE_MULTIPLE_SINGLE_BIT_ECC_ERRORS = 0, DOUBLE_BIT_ECC_ERROR = 1.
    _spec("DCGM_FI_DEV_RETIRED_SBE", DeviceCall("nvmlDeviceGetRetiredPages", (0,)),
          "Total number of retired pages due to single-bit errors.", convert=_count,
          prom_type="counter", slow=True),
    _spec("DCGM_FI_DEV_RETIRED_DBE", DeviceCall("nvmlDeviceGetRetiredPages", (1,)),
          "Total number of retired pages due to double-bit errors.", convert=_count,
          prom_type="counter", slow=True),
    _spec("DCGM_FI_DEV_RETIRED_PENDING", DeviceCall("nvmlDeviceGetRetiredPagesPendingStatus"),
          "Total number of pages pending retirement.", prom_type="counter", slow=True),
    # NVLink error counters, all links: NVML_FI_DEV_NVLINK_*_ERROR_COUNT_TOTAL in the slow
    # field-value batch. A GPU without NVLink answers NOT_SUPPORTED per field: absent.
    _spec("DCGM_FI_DEV_NVLINK_CRC_FLIT_ERROR_COUNT_TOTAL", NvmlFieldValue(38),
          "Total number of NVLink flow-control CRC errors.", prom_type="counter", slow=True),
    _spec("DCGM_FI_DEV_NVLINK_CRC_DATA_ERROR_COUNT_TOTAL", NvmlFieldValue(45),
          "Total number of NVLink data CRC errors.", prom_type="counter", slow=True),
    _spec("DCGM_FI_DEV_NVLINK_REPLAY_ERROR_COUNT_TOTAL", NvmlFieldValue(52),
          "Total number of NVLink retries.", prom_type="counter", slow=True),
    _spec("DCGM_FI_DEV_NVLINK_RECOVERY_ERROR_COUNT_TOTAL", NvmlFieldValue(59),
          "Total number of NVLink recovery errors.", prom_type="counter", slow=True),
    # NVLink throughput as DCGM computes it (see NvlinkThroughput), every pass.
    _spec("DCGM_FI_DEV_NVLINK_BANDWIDTH_TOTAL", NvlinkThroughput(None),
          "Total number of NVLink bandwidth counters for all lanes."),
    *(_spec(f"DCGM_FI_DEV_NVLINK_BANDWIDTH_L{link}", NvlinkThroughput(link),
            f"NVLink bandwidth counter of link {link}: active rx and tx data including "
            "header and payload.")
      for link in range(NVLINK_MAX_DCGM_LINKS)),
    # vGPU licensing: NOT_SUPPORTED on a GPU without vGPU. ~0.18 ms per call on an H100 and
    # it changes only when a licence is granted or lost: slow cadence.
    _spec("DCGM_FI_DEV_VGPU_LICENSE_STATUS",
          DeviceCall("nvmlDeviceGetGridLicensableFeatures"), "vGPU License status",
          convert=_vgpu_license, slow=True),
    # Power limits in W as DCGM computes them (mW // 1000, a double). The requested limit
    # costs ~0.18 ms on an H100 and changes only when an administrator sets it: slow
    # cadence; the enforced one (1-10 µs) can move with other limiters: every pass.
    _spec("DCGM_FI_DEV_POWER_MGMT_LIMIT", DeviceCall("nvmlDeviceGetPowerManagementLimit"),
          "Power management limit (in W).", convert=_milli_to_whole_unit,
          fmt=ValueFormat.FLOAT, slow=True),
    _spec("DCGM_FI_DEV_POWER_MGMT_LIMIT_MIN",
          DeviceCall("nvmlDeviceGetPowerManagementLimitConstraints", pick=0),
          "Minimum power management limit (in W).", convert=_milli_to_whole_unit,
          fmt=ValueFormat.FLOAT),
    _spec("DCGM_FI_DEV_POWER_MGMT_LIMIT_MAX",
          DeviceCall("nvmlDeviceGetPowerManagementLimitConstraints", pick=1),
          "Maximum power management limit (in W).", convert=_milli_to_whole_unit,
          fmt=ValueFormat.FLOAT),
    _spec("DCGM_FI_DEV_POWER_MGMT_LIMIT_DEF",
          DeviceCall("nvmlDeviceGetPowerManagementDefaultLimit"),
          "Default power management limit (in W).", convert=_milli_to_whole_unit,
          fmt=ValueFormat.FLOAT),
    _spec("DCGM_FI_DEV_ENFORCED_POWER_LIMIT", DeviceCall("nvmlDeviceGetEnforcedPowerLimit"),
          "Effective power limit that the driver enforces after taking into account all "
          "limiters (in W).", convert=_milli_to_whole_unit, fmt=ValueFormat.FLOAT),
    _spec("DCGM_FI_DEV_FAN_SPEED", DeviceCall("nvmlDeviceGetFanSpeed"),
          "Fan speed for the device in percent 0-100."),
    _spec("DCGM_FI_DEV_PSTATE", DeviceCall("nvmlDeviceGetPerformanceState"),
          "Performance state (P-State) 0-15. 0=highest."),
    # Static strings, as labels. NVML_INFOROM_OEM = 0, ECC = 1, POWER = 2.
    _spec("DCGM_FI_DEV_BRAND", DeviceCall("nvmlDeviceGetBrand"), "Device Brand",
          convert=_brand_name, fmt=ValueFormat.TEXT, prom_type="label"),
    *(_spec(name, DeviceCall("nvmlDeviceGetInforomVersion", (inforom,)), help_text,
            convert=_as_text, fmt=ValueFormat.TEXT, prom_type="label")
      for inforom, (name, help_text) in enumerate((
          ("DCGM_FI_DEV_OEM_INFOROM_VER", "OEM inforom version"),
          ("DCGM_FI_DEV_ECC_INFOROM_VER", "ECC inforom version"),
          ("DCGM_FI_DEV_POWER_INFOROM_VER", "Power management object inforom version")))),
    _spec("DCGM_FI_DEV_INFOROM_IMAGE_VER", DeviceCall("nvmlDeviceGetInforomImageVersion"),
          "Inforom image version", convert=_as_text, fmt=ValueFormat.TEXT, prom_type="label"),
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

EVENT_FIELDS: Final = frozenset(s.name for s in _SPECS if isinstance(s.source, EventCount))
"""Fields counted from events (XIDs, clock-event reasons): not sampled by a backend pass."""
