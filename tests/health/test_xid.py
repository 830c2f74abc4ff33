"""XID and clock-event counting and families, as dcgm-exporter 4.x prints them (health/xid.py,
health/event_families.py, health/event_counts.py). Pure: no NVML, no clock."""

import pytest

from gpu_enricher.exposition.render import render_text
from gpu_enricher.fields.counters import MetricField
from gpu_enricher.fields.names import Hostname
from gpu_enricher.fields.spec import EventCount
from gpu_enricher.fields.table import EVENT_FIELDS, IMPLEMENTED
from gpu_enricher.health.event_counts import (
    CLOCK_EVENT_NAMES,
    ClockEventHistory,
    clock_event_counts,
    clock_event_names,
    count_values,
    newly_active,
)
from gpu_enricher.health.event_families import (
    EventFamilyOptions,
    SeriesCopy,
    clock_events_count_family,
    clock_events_total_family,
    event_families,
    own_xid_counter_family,
    xid_count_family,
    xid_errors_family,
    xid_total_family,
)
from gpu_enricher.health.xid import (
    EMPTY_XIDS,
    GpuXids,
    XidSnapshot,
    xid_message,
    xid_window_counts,
)
from gpu_enricher.model import DeviceIdentity, GpuInstance, GpuSnapshot, NodeSnapshot

UUID0 = "GPU-00000000-0000-0000-0000-000000000000"
UUID1 = "GPU-11111111-1111-1111-1111-111111111111"
HEAD0 = ('gpu="0",UUID="GPU-00000000-0000-0000-0000-000000000000",pci_bus_id="00000000:18:00.0",'
         'device="nvidia0",modelName="NVIDIA H100 80GB HBM3"')
HEAD1 = ('gpu="1",UUID="GPU-11111111-1111-1111-1111-111111111111",pci_bus_id="00000000:28:00.0",'
         'device="nvidia1",modelName="NVIDIA H100 80GB HBM3"')


def gpu(index: int, uuid: str, **values: int | str) -> GpuSnapshot:
    return GpuSnapshot(DeviceIdentity(index, uuid, f"00000000:{0x18 + 16 * index:02X}:00.0",
                                      "NVIDIA H100 80GB HBM3"), values=values)


NODE = NodeSnapshot((gpu(0, UUID0, DCGM_FI_DRIVER_VERSION="580.105.08"),
                     gpu(1, UUID1, DCGM_FI_DRIVER_VERSION="580.105.08")), "580.105.08")
OPTS = EventFamilyOptions(hostname="node-a")


def lines(family: object) -> list[str]:
    from gpu_enricher.exposition.render import Family
    assert isinstance(family, Family)
    return [f"{family.name}{s.suffix}{{{s.labels}}} {s.value}" for s in family.samples]


# -- messages and bit names ----------------------------------------------------------------


def test_err_msg_texts_are_dcgm_exporters() -> None:
    assert xid_message(0) == "No Error"
    assert xid_message(13) == "Graphics Engine Exception"
    assert xid_message(48) == "Double Bit ECC Error"
    assert xid_message(79) == "GPU has fallen off the bus"
    assert xid_message(172) == "Uncorrectable SRAM Error"
    assert xid_message(173) == xid_message(100_000) == xid_message(-1) == "Unknown Error"


def test_clock_event_names_are_dcgm_exporters_in_bit_order() -> None:
    assert CLOCK_EVENT_NAMES == ("gpu_idle", "clocks_setting", "power_cap", "hw_slowdown",
                                 "sync_boost", "sw_thermal", "hw_thermal", "hw_power_brake",
                                 "display_clocks")
    assert clock_event_names(0x1 | 0x4 | 0x40) == ("gpu_idle", "power_cap", "hw_thermal")
    assert clock_event_names(0) == ()
    assert clock_event_names(0x200 | 0x8000) == ()  # bits dcgm-exporter does not name


# -- windows ----------------------------------------------------------------------------------


def test_count_values_counts_the_window_boundary_included() -> None:
    samples = [(0.0, 79), (10.0, 79), (20.0, 13), (30.0, 79)]
    assert count_values(samples, now=30.0, window_seconds=20.0) == {79: 2, 13: 1}
    assert count_values(samples, now=30.0, window_seconds=100.0) == {79: 3, 13: 1}
    assert count_values(samples, now=100.0, window_seconds=10.0) == {}
    assert count_values(samples, now=30.0, window_seconds=0.0) == {79: 1}


def test_xid_window_counts_expire() -> None:
    g = GpuXids(last=79, totals={13: 1, 79: 2}, recent=((1.0, 13), (5.0, 79), (9.0, 79)))
    assert xid_window_counts(g, now=10.0, window_ms=10_000) == {13: 1, 79: 2}
    assert xid_window_counts(g, now=10.0, window_ms=6_000) == {79: 2}
    assert xid_window_counts(g, now=20.0, window_ms=6_000) == {}


def test_clock_event_counts_none_empty_and_counts() -> None:
    assert clock_event_counts([], 10.0, 5.0) is None
    assert clock_event_counts([(1.0, 0x1)], 10.0, 5.0) is None  # expired
    assert clock_event_counts([(9.0, 0x0)], 10.0, 5.0) == {}  # samples, no reason
    got = clock_event_counts([(6.0, 0x1), (7.0, 0x5), (8.0, 0x4), (9.0, 0x0)], 10.0, 5.0)
    assert got == {"gpu_idle": 2, "power_cap": 2}
    assert list(got) == ["gpu_idle", "power_cap"]


def test_newly_active_primes_on_the_first_sample() -> None:
    assert newly_active(None, 0x5) == ()
    assert newly_active(0x1, 0x5) == ("power_cap",)
    assert newly_active(0x5, 0x1) == ()


def test_clock_event_history_window_and_totals() -> None:
    history = ClockEventHistory(window_seconds=3.0)
    passes = [0x1, 0x1, 0x4, 0x0, 0x4 | 0x40]  # idle, idle, power cap, none, cap + thermal
    for t, mask in enumerate(passes):
        history.record(NodeSnapshot((gpu(0, UUID0, DCGM_FI_DEV_CLOCKS_EVENT_REASONS=mask),
                                     gpu(1, UUID1))), at=float(t))
    # Passes t=1..4 (the boundary counts); UUID1 never had the field: absent, not None.
    assert history.window_counts(4.0) == {UUID0: {"gpu_idle": 1, "power_cap": 2,
                                                  "hw_thermal": 1}}
    assert history.window_counts(100.0) == {UUID0: None}
    # power_cap became active twice (t=2 and t=4), hw_thermal once; gpu_idle was the baseline.
    assert history.totals() == {UUID0: {"power_cap": 2, "hw_thermal": 1}}


def test_clock_event_history_is_bounded_and_skips_lost_gpus() -> None:
    history = ClockEventHistory(window_seconds=1e9, max_samples=3)
    for t in range(10):
        history.record_bitmask(UUID0, float(t), 0x1)
    assert history.window_counts(10.0) == {UUID0: {"gpu_idle": 3}}
    lost = GpuSnapshot(DeviceIdentity(1, UUID1, "", ""), healthy=False,
                       values={"DCGM_FI_DEV_CLOCKS_EVENT_REASONS": 1})
    history.record(NodeSnapshot((lost,)), 11.0)
    assert UUID1 not in history.window_counts(11.0)
    with pytest.raises(ValueError):
        ClockEventHistory(-1.0)


# -- families ---------------------------------------------------------------------------------


XIDS = XidSnapshot(
    gpus={UUID0: GpuXids(last=79, totals={13: 1, 79: 2}, recent=((50.0, 13), (95.0, 79),
                                                                   (99.0, 79)))},
    at=100.0, watched=frozenset({UUID0, UUID1}), events=3)


def test_last_xid_with_err_code_and_err_msg() -> None:
    assert lines(xid_errors_family(NODE, XIDS, OPTS)) == [
        f'DCGM_FI_DEV_XID_ERRORS{{{HEAD0},Hostname="node-a",err_code="79",'
        f'err_msg="GPU has fallen off the bus"}} 79',
        f'DCGM_FI_DEV_XID_ERRORS{{{HEAD1},Hostname="node-a",err_code="0",'
        f'err_msg="No Error"}} 0',
    ]


DRIVER_LABEL = (("DCGM_FI_DRIVER_VERSION", "DCGM_FI_DRIVER_VERSION"),)
"""A counters file's `DCGM_FI_DRIVER_VERSION, label` line: (label name, field)."""


def test_label_fields_then_attributes_sorted_with_the_pods() -> None:
    """As dcgm-exporter's published output: `…,Hostname,DCGM_FI_DRIVER_VERSION,container,
    err_code,err_msg,namespace,pod,pod_uid`."""
    def pods(g: GpuSnapshot, inst: GpuInstance | None) -> list[SeriesCopy]:
        if g.identity.index != 0:
            return [SeriesCopy()]
        return [SeriesCopy(attributes=(("container", "cuda"), ("namespace", "default"),
                                       ("pod", "cuda-1"), ("pod_uid", "")))]
    opts = EventFamilyOptions(hostname="node-a", label_fields=DRIVER_LABEL,
                              series=pods)
    assert lines(xid_errors_family(NODE, EMPTY_XIDS, opts))[0] == (
        f'DCGM_FI_DEV_XID_ERRORS{{{HEAD0},Hostname="node-a",'
        'DCGM_FI_DRIVER_VERSION="580.105.08",container="cuda",err_code="0",'
        'err_msg="No Error",namespace="default",pod="cuda-1",pod_uid=""} 0')


def test_xid_count_window_labels_and_zero_series() -> None:
    opts = EventFamilyOptions(hostname=None, label_fields=DRIVER_LABEL,
                              xid_window_ms=10_000)
    assert lines(xid_count_family(NODE, XIDS, opts, now=100.0)) == [
        f'DCGM_EXP_XID_ERRORS_COUNT{{{HEAD0},DCGM_FI_DRIVER_VERSION="580.105.08",'
        'window_size_in_ms="10000",xid="79"} 2',
        f'DCGM_EXP_XID_ERRORS_COUNT{{{HEAD1},DCGM_FI_DRIVER_VERSION="580.105.08",'
        'window_size_in_ms="10000"} 0',
    ]
    wide = EventFamilyOptions(hostname=None, xid_window_ms=300_000)
    assert [s.value for s in xid_count_family(NODE, XIDS, wide, now=100.0).samples] == [
        "1", "2", "0"]  # XID 13 then 79 (sorted), then GPU 1's zero
    # Later, the window is empty again: back to one 0 per GPU.
    assert [s.value for s in xid_count_family(NODE, XIDS, opts, now=200.0).samples] == [
        "0", "0"]


def test_totals_dcgm_and_ours() -> None:
    assert lines(xid_total_family(NODE, XIDS, OPTS)) == [
        f'DCGM_EXP_XID_ERRORS_TOTAL{{{HEAD0},Hostname="node-a",xid="13"}} 1',
        f'DCGM_EXP_XID_ERRORS_TOTAL{{{HEAD0},Hostname="node-a",xid="79"}} 2',
    ]
    own = own_xid_counter_family(NODE, XIDS, Hostname("node-a", ("hostname",)))
    assert lines(own) == [
        f'gpu_enricher_xid_errors_total{{{HEAD0},hostname="node-a",xid="13"}} 1',
        f'gpu_enricher_xid_errors_total{{{HEAD0},hostname="node-a",xid="79"}} 2',
    ]
    text = render_text([own]).decode()
    assert "# TYPE gpu_enricher_xid_errors_total counter\n" in text


def test_mig_instances_repeat_the_gpus_xids_and_lost_gpus_have_none() -> None:
    mig = GpuSnapshot(NODE.gpus[0].identity, mig_enabled=True, instances=(
        GpuInstance(1, 0, "3g.40gb", "MIG-a"), GpuInstance(2, 0, "3g.40gb", "MIG-b")))
    lost = GpuSnapshot(NODE.gpus[1].identity, healthy=False)
    node = NodeSnapshot((mig, lost))
    got = lines(xid_errors_family(node, XIDS, EventFamilyOptions()))
    assert got == [
        f'DCGM_FI_DEV_XID_ERRORS{{{HEAD0},GPU_I_PROFILE="3g.40gb",GPU_I_ID="1",'
        'err_code="79",err_msg="GPU has fallen off the bus"} 79',
        f'DCGM_FI_DEV_XID_ERRORS{{{HEAD0},GPU_I_PROFILE="3g.40gb",GPU_I_ID="2",'
        'err_code="79",err_msg="GPU has fallen off the bus"} 79',
    ]
    # Our counter is per physical GPU, lost or not (a counter must not vanish and return).
    assert len(own_xid_counter_family(node, XIDS, None).samples) == 2


def test_clock_event_families() -> None:
    counts = {UUID0: {"gpu_idle": 3, "power_cap": 1}, UUID1: {}}
    opts = EventFamilyOptions(hostname="node-a", clock_events_window_ms=60_000)
    assert lines(clock_events_count_family(NODE, counts, opts)) == [
        f'DCGM_EXP_CLOCK_EVENTS_COUNT{{{HEAD0},Hostname="node-a",clock_event="gpu_idle",'
        'window_size_in_ms="60000"} 3',
        f'DCGM_EXP_CLOCK_EVENTS_COUNT{{{HEAD0},Hostname="node-a",clock_event="power_cap",'
        'window_size_in_ms="60000"} 1',
    ]  # GPU 1: samples without a known reason, no series (dcgm-exporter's behaviour)
    assert lines(clock_events_count_family(NODE, {}, opts)) == [
        f'DCGM_EXP_CLOCK_EVENTS_COUNT{{{HEAD0},Hostname="node-a",window_size_in_ms="60000"}} 0',
        f'DCGM_EXP_CLOCK_EVENTS_COUNT{{{HEAD1},Hostname="node-a",window_size_in_ms="60000"}} 0',
    ]
    totals = {UUID1: {"hw_slowdown": 4}}
    assert lines(clock_events_total_family(NODE, totals, opts)) == [
        f'DCGM_EXP_CLOCK_EVENTS_TOTAL{{{HEAD1},Hostname="node-a",clock_event="hw_slowdown"}} 4']


def test_event_families_follow_the_counters_lines() -> None:
    metrics = [
        MetricField("DCGM_FI_DEV_GPU_TEMP", "gauge", "t", "DCGM_FI_DEV_GPU_TEMP"),
        MetricField("DCGM_EXP_XID_ERRORS_COUNT", "counter", "reported XIDs",
                    "DCGM_EXP_XID_ERRORS_COUNT"),
        MetricField("DCGM_FI_DEV_XID_ERROR", "gauge", "last", "DCGM_FI_DEV_XID_ERRORS"),
        MetricField("DCGM_EXP_CLOCK_EVENTS_COUNT", "counter", "clock events",
                    "DCGM_EXP_CLOCK_EVENTS_COUNT"),
        MetricField("DCGM_EXP_CLOCK_EVENTS_TOTAL", "counter", "ce", "DCGM_EXP_CLOCK_EVENTS_TOTAL"),
        MetricField("DCGM_EXP_XID_ERRORS_TOTAL", "counter", "xt", "DCGM_EXP_XID_ERRORS_TOTAL"),
    ]
    families = event_families(NODE, metrics, XIDS, {}, {}, OPTS, now=100.0)
    assert [(f.name, f.prom_type, f.help) for f in families] == [
        ("DCGM_EXP_XID_ERRORS_COUNT", "counter", "reported XIDs"),
        ("DCGM_FI_DEV_XID_ERROR", "gauge", "last"),
        ("DCGM_EXP_CLOCK_EVENTS_COUNT", "counter", "clock events"),
        ("DCGM_EXP_CLOCK_EVENTS_TOTAL", "counter", "ce"),
        ("DCGM_EXP_XID_ERRORS_TOTAL", "counter", "xt"),
    ]
    assert families[3].samples == ()  # nothing became active: no series


def test_event_fields_are_implemented_but_not_pass_readings() -> None:
    expected = {"DCGM_FI_DEV_XID_ERRORS", "DCGM_EXP_XID_ERRORS_COUNT",
                "DCGM_EXP_XID_ERRORS_TOTAL", "DCGM_EXP_CLOCK_EVENTS_COUNT",
                "DCGM_EXP_CLOCK_EVENTS_TOTAL", "DCGM_EXP_GPU_HEALTH_STATUS", "DCGM_EXP_P2P_STATUS"}
    assert expected == EVENT_FIELDS
    assert all(isinstance(IMPLEMENTED[f].source, EventCount) for f in EVENT_FIELDS)
