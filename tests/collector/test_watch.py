"""Watch groups on the collection passes: a field watched every I ms is read every
ceil(I / interval)-th pass and repeats its last reading in between, per GPU and MIG instance."""

from gpu_enricher.collector.loop import Collector, CollectorOptions
from gpu_enricher.collector.watch import FieldCadence
from gpu_enricher.fields.counters import parse_counters
from gpu_enricher.model import DeviceIdentity, GpuInstance, GpuSnapshot, NodeSnapshot
from gpu_enricher.nvml.backend import NvmlBackend
from tests.fake_nvml.build import FakeNvml
from tests.samples import value

CLOCK = "DCGM_FI_DEV_SM_CLOCK"  # a plain reading of every pass
TEMP = "DCGM_FI_DEV_GPU_TEMP"
FB = "DCGM_FI_DEV_FB_USED"


def gpu(uuid: str, values: dict[str, float], instances: tuple[GpuInstance, ...] = (),
        healthy: bool = True) -> GpuSnapshot:
    return GpuSnapshot(DeviceIdentity(0, uuid, "00000000:18:00.0", "H100"), healthy,
                       values=values if healthy else {}, instances=instances)


def instance(values: dict[str, float]) -> GpuInstance:
    return GpuInstance(1, 0, "3g.40gb", "MIG-1", values)


def read(cadence: FieldCadence, fields: set[str], gpus: tuple[GpuSnapshot, ...]
         ) -> tuple[frozenset[str], NodeSnapshot]:
    """One pass: what was skipped, and the snapshot the collector keeps (the backend answers
    only the fields asked for)."""
    skipped = cadence.skipped(fields)
    asked = [g if not g.healthy else GpuSnapshot(
        g.identity, values={k: v for k, v in g.values.items() if k not in skipped},
        instances=tuple(GpuInstance(i.gpu_instance_id, i.compute_instance_id, i.profile, i.uuid,
                                    {k: v for k, v in i.values.items() if k not in skipped})
                        for i in g.instances)) for g in gpus]
    return skipped, cadence.carry(NodeSnapshot(tuple(asked)), skipped)


def test_a_watched_field_is_read_every_nth_pass_and_repeated_in_between() -> None:
    cadence = FieldCadence(interval_seconds=5)
    cadence.use({CLOCK: 12_000, TEMP: 5_000})  # 12 s at 5 s: every 3rd pass; 5 s: every pass
    assert dict(cadence.periods) == {CLOCK: 3}
    seen = []
    for n in range(7):
        skipped, snap = read(cadence, {CLOCK, TEMP}, (gpu("GPU-a", {CLOCK: 100 + n, TEMP: n}),))
        seen.append((sorted(skipped), snap.gpus[0].values[CLOCK], snap.gpus[0].values[TEMP]))
    assert seen == [([], 100, 0), ([CLOCK], 100, 1), ([CLOCK], 100, 2), ([], 103, 3),
                    ([CLOCK], 103, 4), ([CLOCK], 103, 5), ([], 106, 6)]


def test_mig_instances_repeat_their_own_values() -> None:
    cadence = FieldCadence(interval_seconds=1)
    cadence.use({FB: 2_000})
    read(cadence, {FB}, (gpu("GPU-a", {FB: 10}, (instance({FB: 3}),)),))
    _, second = read(cadence, {FB}, (gpu("GPU-a", {FB: 11}, (instance({FB: 4}),)),))
    assert second.gpus[0].values[FB] == 10 and second.gpus[0].instances[0].values[FB] == 3
    _, third = read(cadence, {FB}, (gpu("GPU-a", {FB: 12}, (instance({FB: 5}),)),))
    assert third.gpus[0].values[FB] == 12 and third.gpus[0].instances[0].values[FB] == 5


def test_a_field_due_and_absent_stays_absent_until_read_again() -> None:
    cadence = FieldCadence(interval_seconds=1)
    cadence.use({CLOCK: 2_000})
    read(cadence, {CLOCK}, (gpu("GPU-a", {CLOCK: 1}),))
    read(cadence, {CLOCK}, (gpu("GPU-a", {CLOCK: 2}),))
    _, due = read(cadence, {CLOCK}, (gpu("GPU-a", {}),))  # NOT_SUPPORTED now, say
    assert CLOCK not in due.gpus[0].values
    _, between = read(cadence, {CLOCK}, (gpu("GPU-a", {CLOCK: 9}),))
    assert CLOCK not in between.gpus[0].values, "nothing to repeat"


def test_a_gpu_that_appears_shows_the_field_from_its_next_due_pass() -> None:
    cadence = FieldCadence(interval_seconds=1)
    cadence.use({CLOCK: 2_000})
    read(cadence, {CLOCK}, (gpu("GPU-a", {CLOCK: 1}),))
    _, snap = read(cadence, {CLOCK}, (gpu("GPU-a", {CLOCK: 2}), gpu("GPU-b", {CLOCK: 5})))
    assert snap.gpus[0].values == {CLOCK: 1} and snap.gpus[1].values == {}
    _, snap = read(cadence, {CLOCK}, (gpu("GPU-a", {CLOCK: 3}), gpu("GPU-b", {CLOCK: 6})))
    assert snap.gpus[1].values == {CLOCK: 6}


def test_a_lost_gpu_stays_empty_and_new_groups_read_everything_at_once() -> None:
    cadence = FieldCadence(interval_seconds=1)
    cadence.use({CLOCK: 3_000})
    read(cadence, {CLOCK}, (gpu("GPU-a", {CLOCK: 1}),))
    _, lost = read(cadence, {CLOCK}, (gpu("GPU-a", {}, healthy=False),))
    assert lost.gpus[0].values == {}
    cadence.use({CLOCK: 3_000})  # a reload: the next pass reads every field
    assert cadence.skipped({CLOCK}) == frozenset()
    cadence.use({})
    assert dict(cadence.periods) == {} and cadence.skipped({CLOCK}) == frozenset()


def test_intervals_round_up_to_whole_passes() -> None:
    cadence = FieldCadence(interval_seconds=0.2)
    cadence.use({"a": 1_000, "b": 1_100, "c": 200, "d": 100, "e": 300})
    assert dict(cadence.periods) == {"a": 5, "b": 6, "e": 2}


def test_slow_profiling_and_event_fields_keep_their_own_cadence() -> None:
    """The NVML backend reads the slow fields every --slow-fields-interval and keeps their last
    values itself; a GPM ratio is a window between the samples of two consecutive passes; XIDs,
    health and P2P status are not plain readings of a pass."""
    cadence = FieldCadence(interval_seconds=1)
    cadence.use({"DCGM_FI_DEV_TOTAL_ENERGY_CONSUMPTION": 60_000, "DCGM_EXP_P2P_STATUS": 60_000,
                 "DCGM_EXP_XID_ERRORS_COUNT": 60_000, "DCGM_FI_PROF_SM_ACTIVE": 60_000,
                 "DCGM_FI_DEV_GPU_TEMP": 60_000})
    assert dict(cadence.periods) == {"DCGM_FI_DEV_GPU_TEMP": 60}


CSV = ("DCGM_FI_DEV_GPU_TEMP, gauge, GPU temperature (in C).\n"
       "DCGM_FI_DEV_POWER_USAGE, gauge, Power draw (in W).\n")


async def test_the_nvml_backend_is_asked_only_on_due_passes(fake: FakeNvml) -> None:
    """Through the real collector and the fake libnvidia-ml: POWER_USAGE watched every 3 s at a
    1 s interval is asked of NVML on passes 0, 3 and 6 (and at once after a reload), while its
    series stays on every pass."""
    counters = parse_counters(CSV, "t.csv")
    collector = Collector(NvmlBackend(), CollectorOptions(
        interval_seconds=1, hostname="node-a", counters=counters,
        field_intervals_ms={"DCGM_FI_DEV_POWER_USAGE": 3_000}))
    try:
        await collector.open_backend()
        fake.reset()
        for _ in range(7):
            await collector.collect_once()
            text = collector.exposition.text.decode()
            assert value(text, "DCGM_FI_DEV_POWER_USAGE", gpu="1") is not None
        gpus = 2
        assert fake.calls("nvmlDeviceGetTemperature") == 7 * gpus
        assert fake.calls("nvmlDeviceGetPowerUsage") == 3 * gpus
        collector.use_counters(counters, {"DCGM_FI_DEV_POWER_USAGE": 3_000})
        await collector.collect_once()
        assert fake.calls("nvmlDeviceGetPowerUsage") == 4 * gpus, "read at once after a reload"
    finally:
        collector.backend.close()
