"""The implemented fields as one table: field → source → conversion → value format.

Adding a field is one `FieldSpec` entry: what to read (fields/spec.py's sources), how to turn the
answer into dcgm-exporter's unit (fields/convert.py), and how it is shown.
"""

import dataclasses
from collections.abc import Callable, Mapping
from types import MappingProxyType
from typing import Any, Final

from ..model import FieldValue
from . import convert as conv
from .namings import RENAMES, Rename, Scale
from .spec import (
    DeviceCall,
    EventCount,
    FieldSpec,
    GpmMetric,
    MemoryInfo,
    MigScope,
    NvlinkThroughput,
    NvmlFieldValue,
    Source,
    SystemCall,
    ValueFormat,
)


def _spec(
    name: str,
    source: Source,
    help_text: str,
    *,
    convert: Callable[[Any], FieldValue | None] = conv.as_int,
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
          "Driver Version", convert=conv.as_text, fmt=ValueFormat.TEXT, prom_type="label"),
    _spec("DCGM_FI_NVML_VERSION", SystemCall("nvmlSystemGetNVMLVersion"),
          "NVML Version", convert=conv.as_text, fmt=ValueFormat.TEXT, prom_type="label"),
    _spec("DCGM_FI_DEV_SERIAL", DeviceCall("nvmlDeviceGetSerial"),
          "Device Serial Number", convert=conv.as_text, fmt=ValueFormat.TEXT, prom_type="label"),
    _spec("DCGM_FI_DEV_VBIOS_VERSION", DeviceCall("nvmlDeviceGetVbiosVersion"),
          "VBIOS version of the device", convert=conv.as_text, fmt=ValueFormat.TEXT,
          prom_type="label"),
    _spec("DCGM_FI_DEV_SM_CLOCK", DeviceCall("nvmlDeviceGetClockInfo", (1,)),
          "SM clock frequency (in MHz)."),
    _spec("DCGM_FI_DEV_MEM_CLOCK", DeviceCall("nvmlDeviceGetClockInfo", (2,)),
          "Memory clock frequency (in MHz)."),
    _spec("DCGM_FI_DEV_GPU_TEMP", DeviceCall("nvmlDeviceGetTemperature", (0,)),
          "GPU temperature (in C)."),
    _spec("DCGM_FI_DEV_MEMORY_TEMP", NvmlFieldValue(82), "Memory temperature (in C)."),
    _spec("DCGM_FI_DEV_POWER_USAGE", DeviceCall("nvmlDeviceGetPowerUsage"),
          "Power draw (in W).", convert=conv.milli_to_unit, fmt=ValueFormat.FLOAT),
    _spec("DCGM_FI_DEV_TOTAL_ENERGY_CONSUMPTION",
          DeviceCall("nvmlDeviceGetTotalEnergyConsumption"),
          "Total energy consumption since boot (in mJ).", prom_type="counter", slow=True),
    _spec("DCGM_FI_DEV_PCIE_REPLAY_COUNTER", DeviceCall("nvmlDeviceGetPcieReplayCounter"),
          "Total number of PCIe retries.", prom_type="counter", slow=True),
    # Counted from events, not read in the pass (EventCount; families from
    # health/event_families.py).
    # XIDs: an NVML event set (XidCriticalError) waited on by a dedicated thread; clock events: each
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
    # Statuses built from several readings: health from the pass's readings and the XIDs
    # (health/rules.py), P2P from nvmlDeviceGetP2PStatus per pair of GPUs (nvml/topology.py); one
    # series per GPU and watch / peer, families from health/status_families.py.
    _spec("DCGM_EXP_GPU_HEALTH_STATUS", EventCount("gpu_health"),
          "DCGM reported health status"),
    _spec("DCGM_EXP_P2P_STATUS", EventCount("p2p_status"), "P2P NvLink status"),
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
          "Framebuffer memory total (in MiB).", convert=conv.bytes_to_mib, mig=MigScope.INSTANCE),
    _spec("DCGM_FI_DEV_FB_FREE", MemoryInfo("free"),
          "Framebuffer memory free (in MiB).", convert=conv.bytes_to_mib, mig=MigScope.INSTANCE),
    _spec("DCGM_FI_DEV_FB_USED", MemoryInfo("used"),
          "Framebuffer memory used (in MiB).", convert=conv.bytes_to_mib, mig=MigScope.INSTANCE),
    _spec("DCGM_FI_DEV_FB_RESERVED", MemoryInfo("reserved"),
          "Framebuffer memory reserved (in MiB).", convert=conv.bytes_to_mib,
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
          "Total number of retired pages due to single-bit errors.", convert=conv.count_of,
          prom_type="counter", slow=True),
    _spec("DCGM_FI_DEV_RETIRED_DBE", DeviceCall("nvmlDeviceGetRetiredPages", (1,)),
          "Total number of retired pages due to double-bit errors.", convert=conv.count_of,
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
          "Total number of NVLink bandwidth counters for all lanes.",
          convert=conv.nvlink_classic),
    *(_spec(f"DCGM_FI_DEV_NVLINK_BANDWIDTH_L{link}", NvlinkThroughput(link),
            f"NVLink bandwidth counter of link {link}: active rx and tx data including "
            "header and payload.", convert=conv.nvlink_classic)
      for link in range(NVLINK_MAX_DCGM_LINKS)),
    # vGPU licensing: NOT_SUPPORTED on a GPU without vGPU. ~0.18 ms per call on an H100 and
    # it changes only when a licence is granted or lost: slow cadence.
    _spec("DCGM_FI_DEV_VGPU_LICENSE_STATUS",
          DeviceCall("nvmlDeviceGetGridLicensableFeatures"), "vGPU License status",
          convert=conv.vgpu_license, slow=True),
    # Power limits in W as DCGM computes them (mW // 1000, a double). The requested limit
    # costs ~0.18 ms on an H100 and changes only when an administrator sets it: slow
    # cadence; the enforced one (1-10 µs) can move with other limiters: every pass.
    _spec("DCGM_FI_DEV_POWER_MGMT_LIMIT", DeviceCall("nvmlDeviceGetPowerManagementLimit"),
          "Power management limit (in W).", convert=conv.milli_to_whole_unit,
          fmt=ValueFormat.FLOAT, slow=True),
    _spec("DCGM_FI_DEV_POWER_MGMT_LIMIT_MIN",
          DeviceCall("nvmlDeviceGetPowerManagementLimitConstraints", pick=0),
          "Minimum power management limit (in W).", convert=conv.milli_to_whole_unit,
          fmt=ValueFormat.FLOAT),
    _spec("DCGM_FI_DEV_POWER_MGMT_LIMIT_MAX",
          DeviceCall("nvmlDeviceGetPowerManagementLimitConstraints", pick=1),
          "Maximum power management limit (in W).", convert=conv.milli_to_whole_unit,
          fmt=ValueFormat.FLOAT),
    _spec("DCGM_FI_DEV_POWER_MGMT_LIMIT_DEF",
          DeviceCall("nvmlDeviceGetPowerManagementDefaultLimit"),
          "Default power management limit (in W).", convert=conv.milli_to_whole_unit,
          fmt=ValueFormat.FLOAT),
    _spec("DCGM_FI_DEV_ENFORCED_POWER_LIMIT", DeviceCall("nvmlDeviceGetEnforcedPowerLimit"),
          "Effective power limit that the driver enforces after taking into account all "
          "limiters (in W).", convert=conv.milli_to_whole_unit, fmt=ValueFormat.FLOAT),
    _spec("DCGM_FI_DEV_FAN_SPEED", DeviceCall("nvmlDeviceGetFanSpeed"),
          "Fan speed for the device in percent 0-100."),
    _spec("DCGM_FI_DEV_PSTATE", DeviceCall("nvmlDeviceGetPerformanceState"),
          "Performance state (P-State) 0-15. 0=highest."),
    # Static strings, as labels. NVML_INFOROM_OEM = 0, ECC = 1, POWER = 2.
    _spec("DCGM_FI_DEV_BRAND", DeviceCall("nvmlDeviceGetBrand"), "Device Brand",
          convert=conv.brand_name, fmt=ValueFormat.TEXT, prom_type="label"),
    *(_spec(name, DeviceCall("nvmlDeviceGetInforomVersion", (inforom,)), help_text,
            convert=conv.as_text, fmt=ValueFormat.TEXT, prom_type="label")
      for inforom, (name, help_text) in enumerate((
          ("DCGM_FI_DEV_OEM_INFOROM_VER", "OEM inforom version"),
          ("DCGM_FI_DEV_ECC_INFOROM_VER", "ECC inforom version"),
          ("DCGM_FI_DEV_POWER_INFOROM_VER", "Power management object inforom version")))),
    _spec("DCGM_FI_DEV_INFOROM_IMAGE_VER", DeviceCall("nvmlDeviceGetInforomImageVersion"),
          "Inforom image version", convert=conv.as_text, fmt=ValueFormat.TEXT, prom_type="label"),
    _spec("DCGM_FI_PROF_GR_ENGINE_ACTIVE", GpmMetric(1),
          "Ratio of time the graphics engine is active.", convert=conv.percent_to_ratio,
          fmt=ValueFormat.FLOAT, mig=MigScope.INSTANCE),
    _spec("DCGM_FI_PROF_SM_ACTIVE", GpmMetric(2),
          "The ratio of cycles an SM has at least 1 warp assigned.",
          convert=conv.percent_to_ratio, fmt=ValueFormat.FLOAT, mig=MigScope.INSTANCE),
    _spec("DCGM_FI_PROF_SM_OCCUPANCY", GpmMetric(3),
          "The ratio of number of warps resident on an SM.", convert=conv.percent_to_ratio,
          fmt=ValueFormat.FLOAT, mig=MigScope.INSTANCE),
    _spec("DCGM_FI_PROF_PIPE_TENSOR_ACTIVE", GpmMetric(5),
          "Ratio of cycles the tensor (HMMA) pipe is active.", convert=conv.percent_to_ratio,
          fmt=ValueFormat.FLOAT, mig=MigScope.INSTANCE),
    _spec("DCGM_FI_PROF_DRAM_ACTIVE", GpmMetric(10),
          "Ratio of cycles the device memory interface is active sending or receiving data.",
          convert=conv.percent_to_ratio, fmt=ValueFormat.FLOAT, mig=MigScope.INSTANCE),
    _spec("DCGM_FI_PROF_PIPE_FP64_ACTIVE", GpmMetric(11),
          "Ratio of cycles the fp64 pipes are active.", convert=conv.percent_to_ratio,
          fmt=ValueFormat.FLOAT, mig=MigScope.INSTANCE),
    _spec("DCGM_FI_PROF_PIPE_FP32_ACTIVE", GpmMetric(12),
          "Ratio of cycles the fp32 pipes are active.", convert=conv.percent_to_ratio,
          fmt=ValueFormat.FLOAT, mig=MigScope.INSTANCE),
    _spec("DCGM_FI_PROF_PIPE_FP16_ACTIVE", GpmMetric(13),
          "Ratio of cycles the fp16 pipes are active.", convert=conv.percent_to_ratio,
          fmt=ValueFormat.FLOAT, mig=MigScope.INSTANCE),
    _spec("DCGM_FI_PROF_PCIE_TX_BYTES", GpmMetric(20),
          "The rate of data transmitted over the PCIe bus in bytes per second.",
          convert=conv.mib_per_s_to_bytes, fmt=ValueFormat.FLOAT, mig=MigScope.PARENT),
    _spec("DCGM_FI_PROF_PCIE_RX_BYTES", GpmMetric(21),
          "The rate of data received over the PCIe bus in bytes per second.",
          convert=conv.mib_per_s_to_bytes, fmt=ValueFormat.FLOAT, mig=MigScope.PARENT),
)

# DCGM 4.6.1/4.7's fields in a base unit (fields/namings.py): new DCGM ids, each read from its
# classic field's NVML answer (the same source, so one call serves both names in a pass) and
# converted at full precision (bytes from NVML's byte counts, not MiB * 2^20).
_BASE_UNIT: Final[Mapping[Scale, tuple[Callable[[Any], FieldValue | None], ValueFormat]]] = (
    MappingProxyType({
        Scale.HERTZ: (conv.mhz_to_hz, ValueFormat.INT),
        Scale.JOULES: (conv.milli_to_whole, ValueFormat.INT),
        Scale.RATIO: (conv.percent_to_ratio, ValueFormat.FLOAT),
        Scale.BYTES: (conv.as_int, ValueFormat.INT),
        Scale.BYTES_PER_SECOND: (conv.nvlink_bytes_per_second, ValueFormat.INT),
        Scale.SECONDS: (conv.nanos_to_seconds, ValueFormat.FLOAT),
    }))


def _in_base_unit(rename: Rename, classic: FieldSpec) -> FieldSpec:
    convert, fmt = _BASE_UNIT[rename.scale]
    return dataclasses.replace(classic, name=rename.current, convert=convert, fmt=fmt,
                               help=rename.help, prom_type=rename.prom_type)


_CLASSIC: Final = {s.name: s for s in _SPECS}
IMPLEMENTED: Final[Mapping[str, FieldSpec]] = MappingProxyType({
    **_CLASSIC,
    **{r.current: _in_base_unit(r, _CLASSIC[r.classic]) for r in RENAMES if r.new_field},
})
"""Every field gpu-enricher can export, by DCGM name: the classic ones and DCGM 4.7's in a base
unit. (Other DCGM 4.6/4.7 spellings of an implemented id resolve to it: counters.value_field.)"""

PROFILING_FIELDS: Final = frozenset(
    s.name for s in IMPLEMENTED.values() if isinstance(s.source, GpmMetric)
)

P2P_FIELD: Final = "DCGM_EXP_P2P_STATUS"
"""Read by the NVML backend's own path (nvml/topology.py) when planned."""

EVENT_FIELDS: Final = frozenset(s.name for s in IMPLEMENTED.values()
                                if isinstance(s.source, EventCount))
"""Fields counted from events (XIDs, clock-event reasons) or built from several readings (health,
P2P): not a plain value of a backend pass."""
