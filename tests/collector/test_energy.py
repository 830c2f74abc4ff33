"""Energy per pod across passes: driven through random sequences of passes (processes, pods,
holders, counter reads on the slow cadence, the counter unsupported, a GPU lost), every GPU's
series plus its ended pods always add up to its counter's rise, and no series ever decreases."""

from hypothesis import given, settings
from hypothesis import strategies as st

from gpu_enricher.attribution.devices import Holder
from gpu_enricher.attribution.energy import IDLE, Payer
from gpu_enricher.attribution.workloads import GpuProcess, Workload
from gpu_enricher.collector.energy import EnergyBook
from gpu_enricher.model import (
    ContainerRef,
    DeviceIdentity,
    GpuSnapshot,
    HostProcess,
    NodeSnapshot,
    ProcessSample,
    ProcessTable,
)

ENERGY = "DCGM_FI_DEV_TOTAL_ENERGY_CONSUMPTION"
POWER = "DCGM_FI_DEV_POWER_USAGE"
MAX_STEP = 60.0
PODS = [("ml", p, "main") for p in "abcd"]
TABLE = ProcessTable({
    900: HostProcess(900, 1, "python", None),  # on the host
    901: HostProcess(901, 1, "python", ContainerRef("uid-x", "f" * 64)),  # pod unknown
})


def _gpu(index: int, values: dict[str, int | float], healthy: bool = True) -> GpuSnapshot:
    ident = DeviceIdentity(index, f"GPU-{index}", f"0000:0{index}:00.0", "NVIDIA H100")
    return GpuSnapshot(ident, healthy=healthy, values=values if healthy else {})


def _proc(gpu: GpuSnapshot, pid: int, pod: int | None, sm: float | None,
          kind: str = "compute", memory: int = 0) -> GpuProcess:
    workload = Workload(*PODS[pod]) if pod is not None else None
    sample = ProcessSample(pid, memory, sm_utilization=sm, kind=kind)
    return GpuProcess((gpu.identity.index, None), gpu, None, sample, "python", workload, None)


def _holding(gpu: int, pods: list[int]) -> dict[tuple[int, int | None], list[tuple[Holder, float]]]:
    return {(gpu, None): [(Holder(*PODS[p], "nvidia.com/gpu", f"GPU-{gpu}::{p}"), 1 / 4)
                          for p in pods]} if pods else {}


def test_a_slow_counter_s_delta_is_split_by_the_passes_it_covers() -> None:
    book = EnergyBook(MAX_STEP)
    gpu = _gpu(0, {POWER: 100.0, ENERGY: 1_000_000})
    book.step(NodeSnapshot((gpu,)), [], TABLE, _holding(0, [0, 1, 2, 3]), 0.0)
    # Two passes of 10 s with the counter repeated (slow cadence), a held only in the first.
    book.step(NodeSnapshot((gpu,)), [], TABLE, _holding(0, [0]), 10.0)
    assert book.meters["GPU-0"].totals[("ml", "a", "main", None)] == 0.0
    moved = _gpu(0, {POWER: 100.0, ENERGY: 1_000_000 + 8_000_000})
    book.step(NodeSnapshot((moved,)), [], TABLE, {}, 20.0)
    totals = book.meters["GPU-0"].totals
    # 8000 J over 20 s: the first 10 s a held 1/4, the next 10 s nobody held anything.
    assert abs(totals[("ml", "a", "main", None)] - 1000.0) < 1e-6
    assert abs(totals[IDLE] - 7000.0) < 1e-6


@st.composite
def passes(draw: st.DrawFn) -> list[tuple[float, int, list[tuple[int, float, list[int], bool,
                                                                  list[int]]]]]:
    result = []
    for _ in range(draw(st.integers(1, 25))):
        step = draw(st.floats(0.0, 100.0))
        read = draw(st.integers(0, 3))  # 0: the counter repeated (slow cadence)
        gpus = []
        for _ in range(2):
            gpus.append((
                draw(st.integers(0, 2000)),  # mJ rise when read
                draw(st.floats(50.0, 700.0)),  # watts
                draw(st.lists(st.integers(-2, 3), max_size=5)),  # processes: pods, -1 host
                draw(st.integers(0, 9)) == 0,  # lost this pass
                draw(st.lists(st.integers(0, 3), max_size=4, unique=True)),  # holders
            ))
        result.append((step, read, gpus))
    return result


@settings(max_examples=150, deadline=None)
@given(passes(), st.lists(st.floats(0.0, 1.0) | st.none(), min_size=6, max_size=6),
       st.tuples(st.booleans(), st.booleans()))
def test_the_counters_add_up_to_each_gpu_s_energy_and_never_decrease(
        sequence: list[tuple[float, int, list[tuple[int, float, list[int], bool, list[int]]]]],
        sm: list[float | None], supported: tuple[bool, bool]) -> None:
    book = EnergyBook(MAX_STEP)
    counters = [5_000_000.0, 9_000_000.0]
    first: dict[int, float] = {}
    integrated = [0.0, 0.0]  # power times the bounded step, where the counter is unsupported
    last_at: dict[int, float] = {}
    shown: dict[tuple[int, Payer], float] = {}
    now = 0.0
    for step, read, gpus in sequence:
        now += step
        snaps, procs, holdings = [], [], {}
        for index, (rise, watts, pods, lost, holders) in enumerate(gpus):
            if read:
                counters[index] += rise
            values: dict[str, int | float] = {POWER: watts}
            if supported[index]:
                values[ENERGY] = int(counters[index])
            gpu = _gpu(index, values, healthy=not lost)
            snaps.append(gpu)
            if lost:
                continue
            if index in last_at:
                integrated[index] += watts * min(now - last_at[index], MAX_STEP)
            last_at[index] = now
            pids = {-2: 901, -1: 900}
            procs += [_proc(gpu, pids.get(p, 100 + p), p if p >= 0 else None,
                            sm[n % len(sm)]) for n, p in enumerate(pods)]
            holdings.update(_holding(index, holders))
        book.step(NodeSnapshot(tuple(snaps)), procs, TABLE, holdings, now)
        for gpu in snaps:
            meter = book.meters.get(gpu.identity.uuid)
            if meter is None or not gpu.healthy:
                continue
            index = gpu.identity.index
            if ENERGY in gpu.values and meter.first_mj is not None:
                first.setdefault(index, meter.first_mj)
                expected = (counters[index] - first[index]) / 1000
            else:
                expected = integrated[index]
            assert abs(meter.counted_joules() - expected) < 1e-6 * max(1.0, expected)
            for ended in [k for k in shown if k[0] == index and k[1] not in meter.totals]:
                del shown[ended]  # a series that ended: one that comes back starts anew
            for payer, joules in meter.totals.items():
                assert joules >= shown.get((index, payer), 0.0) - 1e-9, "never decreases"
                shown[(index, payer)] = joules


def test_without_the_counter_power_times_the_step_is_split() -> None:
    book = EnergyBook(MAX_STEP)
    gpu = _gpu(0, {POWER: 300.0})
    for now in (0.0, 10.0, 25.0, 200.0):  # the last step is bounded by MAX_STEP
        book.step(NodeSnapshot((gpu,)), [], TABLE, {}, now)
    assert abs(book.meters["GPU-0"].counted_joules() - 300.0 * (10 + 15 + MAX_STEP)) < 1e-6


def test_a_pod_s_series_ends_one_pass_after_it_neither_holds_nor_uses_the_gpu() -> None:
    book = EnergyBook(MAX_STEP)
    pod_a = ("ml", "a", "main", None)
    for now, counter, holders in ((0.0, 0, [0]), (1.0, 1000, [0]), (2.0, 2000, []),
                                  (3.0, 3000, []), (4.0, 4000, [])):
        gpu = _gpu(0, {POWER: 100.0, ENERGY: counter})
        book.step(NodeSnapshot((gpu,)), [], TABLE, _holding(0, holders), now)
        if now == 2.0:
            assert book.meters["GPU-0"].totals[pod_a] > 0, "shown once more, final value"
    meter = book.meters["GPU-0"]
    assert pod_a not in meter.totals
    assert abs(meter.counted_joules() - 4.0) < 1e-9 and meter.ended > 0
    assert meter.closing == set()
