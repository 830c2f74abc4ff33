"""The health watches' rules (health/rules.py) and their window, without NVML."""

from gpu_enricher.health.rules import (
    CLOCK_REASONS,
    ECC_DBE_VOLATILE,
    NVLINK_CRC_DATA,
    NVLINK_RECOVERIES,
    OK_CODE,
    PCIE_REPLAYS,
    POWER_USAGE,
    RETIRED_DBE,
    RETIRED_PENDING,
    RETIRED_SBE,
    ROW_REMAP_FAILURE,
    WATCHES,
    HealthHistory,
    HealthResult,
    Incident,
    verdicts,
    xid_incidents,
)

FAIL, WARN, PASS = HealthResult.FAIL, HealthResult.WARN, HealthResult.PASS
HEALTHY = {POWER_USAGE: 250.0, ECC_DBE_VOLATILE: 0, RETIRED_PENDING: 0, ROW_REMAP_FAILURE: 0,
           CLOCK_REASONS: 0x1, PCIE_REPLAYS: 3, NVLINK_CRC_DATA: 0, NVLINK_RECOVERIES: 0}


def by_watch(incidents: list[Incident]) -> dict[str, tuple[int, str]]:
    return {v.watch: (int(v.result), v.code) for v in verdicts(incidents)}


def test_a_healthy_gpu_passes_every_watch_in_dcgm_exporters_order() -> None:
    history = HealthHistory(window_seconds=300)
    found = history.record("GPU-a", HEALTHY, at=0.0)
    assert found == []
    result = verdicts(found)
    assert [v.watch for v in result] == list(WATCHES) == [
        "PCIE", "NVLINK", "PMU", "MCU", "MEM", "SM", "INFOROM", "THERMAL", "POWER", "DRIVER"]
    assert {(v.result, v.code) for v in result} == {(PASS, OK_CODE)}


def test_states_hold_while_they_last() -> None:
    history = HealthHistory(window_seconds=300)
    history.record("GPU-a", HEALTHY, at=0.0)
    sick = {**HEALTHY, ECC_DBE_VOLATILE: 2, RETIRED_PENDING: 1, CLOCK_REASONS: 0x40 | 0x80}
    got = by_watch(history.record("GPU-a", sick, at=5.0))
    # Two MEM incidents: the FAIL wins over the WARN.
    assert got["MEM"] == (20, "DCGM_FR_VOLATILE_DBE_DETECTED")
    assert got["THERMAL"] == (10, "DCGM_FR_CLOCK_THROTTLE_THERMAL")
    assert got["POWER"] == (10, "DCGM_FR_CLOCK_THROTTLE_POWER")
    assert got["PCIE"] == (0, OK_CODE)
    # Gone the next pass (a driver reload zeroes volatile counts): PASS again.
    assert history.record("GPU-a", HEALTHY, at=10.0) == []


def test_retired_pages_limit_and_row_remap_failure() -> None:
    history = HealthHistory(window_seconds=300)
    pages = by_watch(history.record("GPU-a", {**HEALTHY, RETIRED_SBE: 40, RETIRED_DBE: 23},
                                    at=0.0))
    assert pages["MEM"] == (0, OK_CODE), "63 retired pages: under DCGM's limit of 64"
    pages = by_watch(history.record("GPU-a", {**HEALTHY, RETIRED_SBE: 40, RETIRED_DBE: 24},
                                    at=1.0))
    assert pages["MEM"] == (20, "DCGM_FR_RETIRED_PAGES_LIMIT")
    remap = by_watch(history.record("GPU-a", {**HEALTHY, ROW_REMAP_FAILURE: 1}, at=2.0))
    assert remap["MEM"] == (20, "DCGM_FR_ROW_REMAP_FAILURE")


def test_rising_counters_count_within_the_window_only() -> None:
    history = HealthHistory(window_seconds=300)
    history.record("GPU-a", HEALTHY, at=0.0)
    # 40 PCIe replays in 5 minutes: 8 per minute is the limit, not above it.
    assert by_watch(history.record("GPU-a", {**HEALTHY, PCIE_REPLAYS: 43}, at=60.0))["PCIE"] \
        == (0, OK_CODE)
    got = by_watch(history.record("GPU-a", {**HEALTHY, PCIE_REPLAYS: 44,
                                             NVLINK_CRC_DATA: 5}, at=120.0))
    assert got["PCIE"] == (10, "DCGM_FR_PCI_REPLAY_RATE")
    assert got["NVLINK"] == (10, "DCGM_FR_NVLINK_ERROR_THRESHOLD")
    got = by_watch(history.record("GPU-a", {**HEALTHY, PCIE_REPLAYS: 44, NVLINK_CRC_DATA: 5,
                                             NVLINK_RECOVERIES: 1}, at=200.0))
    assert got["NVLINK"] == (20, "DCGM_FR_NVLINK_ERROR_CRITICAL")
    # Past the window with no new errors: the counters are high but no longer rising.
    assert history.record("GPU-a", {**HEALTHY, PCIE_REPLAYS: 44, NVLINK_CRC_DATA: 5,
                                     NVLINK_RECOVERIES: 1}, at=600.0) == []


def test_a_counter_that_goes_back_starts_over_instead_of_rising() -> None:
    history = HealthHistory(window_seconds=300)
    history.record("GPU-a", {**HEALTHY, PCIE_REPLAYS: 5000}, at=0.0)
    # A driver reload reset the counter: no negative rise, no false alarm after it.
    assert history.record("GPU-a", {**HEALTHY, PCIE_REPLAYS: 2}, at=10.0) == []
    assert history.record("GPU-a", {**HEALTHY, PCIE_REPLAYS: 4}, at=20.0) == []


def test_power_unreadable_only_after_it_was_readable() -> None:
    history = HealthHistory(window_seconds=300)
    no_power = {k: v for k, v in HEALTHY.items() if k != POWER_USAGE}
    assert history.record("GPU-a", no_power, at=0.0) == [], "never readable: not supported"
    history.record("GPU-a", HEALTHY, at=1.0)
    assert by_watch(history.record("GPU-a", no_power, at=2.0))["POWER"] == (
        10, "DCGM_FR_POWER_UNREADABLE")
    history.forget_others(set())  # the GPU left: its history goes
    assert history.record("GPU-a", no_power, at=3.0) == []


def test_xids_map_to_watches_for_the_window() -> None:
    recent = ((10.0, 13), (20.0, 48), (30.0, 79), (40.0, 119), (50.0, 63))
    got = by_watch(xid_incidents(recent, now=60.0, window_seconds=300))
    assert got["MEM"] == (20, "DCGM_FR_XID_ERROR"), "48 (DBE) is a FAIL, 63 only a WARN"
    assert got["PCIE"] == (20, "DCGM_FR_XID_ERROR"), "79: fallen off the bus"
    assert got["MCU"] == (20, "DCGM_FR_XID_ERROR"), "119: GSP RPC timeout"
    assert got["SM"] == (0, OK_CODE), "13 is an application's fault, not the GPU's"
    later = by_watch(xid_incidents(recent, now=345.0, window_seconds=300))
    assert later["MEM"] == (10, "DCGM_FR_XID_ERROR"), "48 left the window, 63 has not"
    assert later["PCIE"] == (0, OK_CODE)
    assert xid_incidents(((0.0, 95),), 1.0, 300) == [
        Incident("MEM", FAIL, "DCGM_FR_UNCONTAINED_ERROR")]


def test_worst_incident_wins_and_the_first_on_ties() -> None:
    incidents = [Incident("MEM", WARN, "DCGM_FR_PENDING_PAGE_RETIREMENTS"),
                 Incident("MEM", WARN, "DCGM_FR_XID_ERROR"),
                 Incident("POWER", WARN, "DCGM_FR_CLOCK_THROTTLE_POWER"),
                 Incident("POWER", FAIL, "DCGM_FR_XID_ERROR")]
    got = by_watch(incidents)
    assert got["MEM"] == (10, "DCGM_FR_PENDING_PAGE_RETIREMENTS")
    assert got["POWER"] == (20, "DCGM_FR_XID_ERROR")
