"""The XID and clock-event fields' vocabulary, the XID source's snapshot, and its window count.

The field names, labels, HELP texts and window default of dcgm-exporter 4.x's XID and clock-event
families (health/event_families.py renders them), plus our own counter
`gpu_enricher_xid_errors_total`: a real counter since the exporter started (dcgm-exporter's "last
value forever" is its #500). `XidSnapshot` is what the `xid` source (nvml/events.py) hands out.
The `err_msg` table is data in health/xid_messages.py. Pure.
"""

from collections.abc import Mapping
from dataclasses import dataclass, field
from types import MappingProxyType
from typing import Final

from ..fields import names
from .event_counts import count_values

# The err_msg table lives in health/xid_messages.py; importable from here as before.
from .xid_messages import UNKNOWN_XID_MESSAGE as UNKNOWN_XID_MESSAGE
from .xid_messages import XID_MESSAGES as XID_MESSAGES
from .xid_messages import xid_message as xid_message

XID_LAST: Final = "DCGM_FI_DEV_XID_ERRORS"
XID_COUNT: Final = "DCGM_EXP_XID_ERRORS_COUNT"
XID_TOTAL: Final = "DCGM_EXP_XID_ERRORS_TOTAL"
CLOCK_EVENTS_COUNT: Final = "DCGM_EXP_CLOCK_EVENTS_COUNT"
CLOCK_EVENTS_TOTAL: Final = "DCGM_EXP_CLOCK_EVENTS_TOTAL"
OWN_XID_COUNTER: Final = f"{names.SELF_PREFIX}xid_errors"

LABEL_ERR_CODE: Final = "err_code"
LABEL_ERR_MSG: Final = "err_msg"
LABEL_XID: Final = "xid"
LABEL_CLOCK_EVENT: Final = "clock_event"
LABEL_WINDOW: Final = "window_size_in_ms"

DEFAULT_WINDOW_MS: Final = 300_000
"""dcgm-exporter's default for both windows: 5 minutes."""

HELP: Final[Mapping[str, str]] = MappingProxyType({
    XID_LAST: "Value of the last XID error encountered.",
    XID_COUNT: "Count of XID Errors within user-specified time window (see "
               "xid-count-window-size param).",
    XID_TOTAL: "Count of XID Errors since the exporter started, per XID.",
    CLOCK_EVENTS_COUNT: "Count of clock events within the user-specified time window (see "
                        "clock-events-count-window-size param).",
    CLOCK_EVENTS_TOTAL: "Count of clock events that became active since the exporter started.",
})


# ---------------------------------------------------------------------------------------------
# The XID source's snapshot


@dataclass(frozen=True, slots=True)
class GpuXids:
    """One GPU's XIDs since the exporter started."""

    last: int = 0
    """The last XID (0: none yet, as DCGM)."""
    totals: Mapping[int, int] = field(default_factory=dict)
    """XID → events since start."""
    recent: tuple[tuple[float, int], ...] = ()
    """(monotonic seconds, XID) of the events within the retention window, oldest first."""


NO_XIDS: Final = GpuXids()


@dataclass(frozen=True, slots=True)
class XidSnapshot:
    """Every GPU's XIDs, by GPU UUID, as of `at` (monotonic seconds)."""

    gpus: Mapping[str, GpuXids] = field(default_factory=dict)
    at: float = 0.0
    watched: frozenset[str] = frozenset()
    """UUIDs of the GPUs registered for XID events now."""
    events: int = 0
    """XID events received since start, all GPUs."""

    def gpu(self, uuid: str) -> GpuXids:
        return self.gpus.get(uuid, NO_XIDS)


EMPTY_XIDS: Final = XidSnapshot()


def xid_window_counts(gpu: GpuXids, now: float, window_ms: int) -> dict[int, int]:
    """XID → events within the window ending at `now`."""
    return count_values(gpu.recent, now, window_ms / 1000.0)
