"""DCGM_EXP_GPU_HEALTH_STATUS built from NVML: the rules, and the bounded history they need. Pure.

dcgm-exporter 4.x (internal/pkg/collector/gpu_health_collector.go) asks DCGM's health watches
of every GPU and prints one series per GPU and watch: labels `health_watch` (PCIE, NVLINK, PMU,
MCU, MEM, SM, INFOROM, THERMAL, POWER, DRIVER) and `health_error_code` (`DCGM_FR_OK` or the
incident's `DCGM_FR_*` code), value the result: 0 PASS, 10 WARN, 20 FAIL.

DCGM's host engine is not here, so gpu-enricher decides each watch from what NVML gives: the
readings of each pass (ECC, retired pages, row remapping, PCIe replays, NVLink errors, clock-event
reasons, power) and the XIDs of the XID event thread. A condition that is a state (a volatile
double-bit error count above 0, a pending retirement, a failed row remap) holds while it lasts;
one that is an event (a counter rising, an XID) holds for the window (the XID count window,
`-x`, default 5 minutes) after it was seen. A watch with no incident is PASS with `DCGM_FR_OK`;
with several, the worst wins (the first rule of this table on ties). docs/health.md lists every
rule.
"""

from collections import deque
from collections.abc import Mapping
from dataclasses import dataclass
from enum import IntEnum
from typing import Final

from .event_counts import in_window

HEALTH_FIELD: Final = "DCGM_EXP_GPU_HEALTH_STATUS"
LABEL_WATCH: Final = "health_watch"
LABEL_ERROR_CODE: Final = "health_error_code"
OK_CODE: Final = "DCGM_FR_OK"


class HealthResult(IntEnum):
    """dcgmHealthWatchResult_t."""

    PASS = 0
    WARN = 10
    FAIL = 20


WATCHES: Final = ("PCIE", "NVLINK", "PMU", "MCU", "MEM", "SM", "INFOROM", "THERMAL", "POWER",
                  "DRIVER")
"""The watches dcgm-exporter prints, in its order (gpuHealthChecks)."""


@dataclass(frozen=True, slots=True)
class Incident:
    watch: str
    result: HealthResult
    code: str


# ---------------------------------------------------------------------------------------------
# Rules on readings

ECC_DBE_VOLATILE: Final = "DCGM_FI_DEV_ECC_DBE_VOL_TOTAL"
RETIRED_PENDING: Final = "DCGM_FI_DEV_RETIRED_PENDING"
RETIRED_SBE: Final = "DCGM_FI_DEV_RETIRED_SBE"
RETIRED_DBE: Final = "DCGM_FI_DEV_RETIRED_DBE"
ROW_REMAP_FAILURE: Final = "DCGM_FI_DEV_ROW_REMAP_FAILURE"
PCIE_REPLAYS: Final = "DCGM_FI_DEV_PCIE_REPLAY_COUNTER"
NVLINK_CRC_FLIT: Final = "DCGM_FI_DEV_NVLINK_CRC_FLIT_ERROR_COUNT_TOTAL"
NVLINK_CRC_DATA: Final = "DCGM_FI_DEV_NVLINK_CRC_DATA_ERROR_COUNT_TOTAL"
NVLINK_REPLAYS: Final = "DCGM_FI_DEV_NVLINK_REPLAY_ERROR_COUNT_TOTAL"
NVLINK_RECOVERIES: Final = "DCGM_FI_DEV_NVLINK_RECOVERY_ERROR_COUNT_TOTAL"
CLOCK_REASONS: Final = "DCGM_FI_DEV_CLOCKS_EVENT_REASONS"
POWER_USAGE: Final = "DCGM_FI_DEV_POWER_USAGE"

RISING: Final = (PCIE_REPLAYS, NVLINK_CRC_FLIT, NVLINK_CRC_DATA, NVLINK_REPLAYS,
                 NVLINK_RECOVERIES)
"""Counters judged by how much they rose within the window."""

INPUT_FIELDS: Final = frozenset({ECC_DBE_VOLATILE, RETIRED_PENDING, RETIRED_SBE, RETIRED_DBE,
                                 ROW_REMAP_FAILURE, CLOCK_REASONS, POWER_USAGE, *RISING})
"""What the GPU pass reads for the health watches, whether or not the counters file lists it."""

RETIRED_PAGES_LIMIT: Final = 64
"""Retired pages (both causes) at which a GPU should be replaced: DCGM's limit."""
PCIE_REPLAYS_PER_MINUTE_LIMIT: Final = 8
"""PCIe replays per minute above which DCGM's PCIe watch warns."""
HW_THERMAL_SLOWDOWN: Final = 0x40
HW_POWER_BRAKE: Final = 0x80

Values = Mapping[str, int | float | str]


def _int(values: Values, name: str) -> int | None:
    value = values.get(name)
    return int(value) if isinstance(value, int | float) else None


def state_incidents(values: Values, power_expected: bool) -> list[Incident]:
    """Conditions that hold while they last, from one pass's readings. `power_expected`: the
    GPU answered the power call before, so a missing reading means it became unreadable."""
    found: list[Incident] = []
    if (_int(values, ECC_DBE_VOLATILE) or 0) > 0:
        found.append(Incident("MEM", HealthResult.FAIL, "DCGM_FR_VOLATILE_DBE_DETECTED"))
    if (_int(values, ROW_REMAP_FAILURE) or 0) > 0:
        found.append(Incident("MEM", HealthResult.FAIL, "DCGM_FR_ROW_REMAP_FAILURE"))
    retired = (_int(values, RETIRED_SBE) or 0) + (_int(values, RETIRED_DBE) or 0)
    if retired >= RETIRED_PAGES_LIMIT:
        found.append(Incident("MEM", HealthResult.FAIL, "DCGM_FR_RETIRED_PAGES_LIMIT"))
    if (_int(values, RETIRED_PENDING) or 0) > 0:
        found.append(Incident("MEM", HealthResult.WARN, "DCGM_FR_PENDING_PAGE_RETIREMENTS"))
    reasons = _int(values, CLOCK_REASONS) or 0
    if reasons & HW_THERMAL_SLOWDOWN:
        found.append(Incident("THERMAL", HealthResult.WARN, "DCGM_FR_CLOCK_THROTTLE_THERMAL"))
    if reasons & HW_POWER_BRAKE:
        found.append(Incident("POWER", HealthResult.WARN, "DCGM_FR_CLOCK_THROTTLE_POWER"))
    if power_expected and POWER_USAGE not in values:
        found.append(Incident("POWER", HealthResult.WARN, "DCGM_FR_POWER_UNREADABLE"))
    return found


def rise_incidents(rises: Mapping[str, int], window_seconds: float) -> list[Incident]:
    """Counters that rose within the window (`rises`: field → increase)."""
    found: list[Incident] = []
    if rises.get(NVLINK_RECOVERIES, 0) > 0:
        found.append(Incident("NVLINK", HealthResult.FAIL, "DCGM_FR_NVLINK_ERROR_CRITICAL"))
    if any(rises.get(f, 0) > 0 for f in (NVLINK_CRC_FLIT, NVLINK_CRC_DATA, NVLINK_REPLAYS)):
        found.append(Incident("NVLINK", HealthResult.WARN, "DCGM_FR_NVLINK_ERROR_THRESHOLD"))
    minutes = max(window_seconds, 60.0) / 60.0
    if rises.get(PCIE_REPLAYS, 0) > PCIE_REPLAYS_PER_MINUTE_LIMIT * minutes:
        found.append(Incident("PCIE", HealthResult.WARN, "DCGM_FR_PCI_REPLAY_RATE"))
    return found


# ---------------------------------------------------------------------------------------------
# Rules on XIDs (NVIDIA's XID catalogue: what each XID says about the hardware). Application
# faults (13, 31, 43, 45, …) say nothing about the GPU's health and are left out.

XID_RULES: Final[Mapping[int, Incident]] = {
    48: Incident("MEM", HealthResult.FAIL, "DCGM_FR_XID_ERROR"),  # double-bit ECC error
    63: Incident("MEM", HealthResult.WARN, "DCGM_FR_XID_ERROR"),  # retirement/remap recorded
    64: Incident("MEM", HealthResult.FAIL, "DCGM_FR_XID_ERROR"),  # ... recording failed
    92: Incident("MEM", HealthResult.WARN, "DCGM_FR_XID_ERROR"),  # high single-bit ECC rate
    94: Incident("MEM", HealthResult.WARN, "DCGM_FR_XID_ERROR"),  # contained ECC error
    95: Incident("MEM", HealthResult.FAIL, "DCGM_FR_UNCONTAINED_ERROR"),  # uncontained ECC
    74: Incident("NVLINK", HealthResult.FAIL, "DCGM_FR_XID_ERROR"),  # NVLink error
    79: Incident("PCIE", HealthResult.FAIL, "DCGM_FR_XID_ERROR"),  # fallen off the bus
    61: Incident("PMU", HealthResult.WARN, "DCGM_FR_XID_ERROR"),  # micro-controller breakpoint
    62: Incident("PMU", HealthResult.FAIL, "DCGM_FR_XID_ERROR"),  # micro-controller halt
    119: Incident("MCU", HealthResult.FAIL, "DCGM_FR_XID_ERROR"),  # GSP RPC timeout
    120: Incident("MCU", HealthResult.FAIL, "DCGM_FR_XID_ERROR"),  # GSP error
    38: Incident("DRIVER", HealthResult.FAIL, "DCGM_FR_XID_ERROR"),  # driver firmware error
    54: Incident("POWER", HealthResult.FAIL, "DCGM_FR_XID_ERROR"),  # auxiliary power missing
}


def xid_incidents(recent: tuple[tuple[float, int], ...], now: float,
                  window_seconds: float) -> list[Incident]:
    """The incidents of the XIDs seen within the window (each XID once)."""
    seen = sorted({xid for at, xid in recent if in_window(at, now, window_seconds)})
    return [XID_RULES[xid] for xid in seen if xid in XID_RULES]


def verdicts(incidents: list[Incident]) -> list[Incident]:
    """One incident per watch, in dcgm-exporter's order: the worst (first on ties), else PASS."""
    worst: dict[str, Incident] = {}
    for incident in incidents:
        known = worst.get(incident.watch)
        if known is None or incident.result > known.result:
            worst[incident.watch] = incident
    return [worst.get(watch) or Incident(watch, HealthResult.PASS, OK_CODE) for watch in WATCHES]


# ---------------------------------------------------------------------------------------------
# History


class HealthHistory:
    """Per GPU (by UUID): the rising counters' samples within the window, whether power was
    ever readable, and the state and rise incidents of the last pass. Bounded: samples older
    than the window are dropped, at most `max_samples` kept per counter."""

    def __init__(self, window_seconds: float, max_samples: int = 10_000) -> None:
        self.window_seconds = window_seconds
        self._max = max_samples
        self._samples: dict[tuple[str, str], deque[tuple[float, int]]] = {}
        self._power_seen: set[str] = set()

    def record(self, uuid: str, values: Values, at: float) -> list[Incident]:
        """This pass's readings in; the GPU's state and rise incidents out."""
        expected = uuid in self._power_seen
        if POWER_USAGE in values:
            self._power_seen.add(uuid)
        rises: dict[str, int] = {}
        for name in RISING:
            value = _int(values, name)
            if value is None:
                continue
            samples = self._samples.get((uuid, name))
            if samples is None or (samples and value < samples[-1][1]):  # reset: start over
                samples = self._samples[(uuid, name)] = deque(maxlen=self._max)
            samples.append((at, value))
            while samples and not in_window(samples[0][0], at, self.window_seconds):
                samples.popleft()
            rises[name] = value - samples[0][1] if samples else 0
        return state_incidents(values, expected) + rise_incidents(rises, self.window_seconds)

    def forget_others(self, uuids: set[str]) -> None:
        """Drop GPUs that are gone (a GPU that is down keeps its history)."""
        for key in [k for k in self._samples if k[0] not in uuids]:
            del self._samples[key]
        self._power_seen &= uuids
