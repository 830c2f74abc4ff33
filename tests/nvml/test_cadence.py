"""The slow cadence's bookkeeping (nvml_cadence.SlowReadings) on a fake clock."""

from gpu_enricher.nvml.cadence import SlowReadings


class Clock:
    def __init__(self) -> None:
        self.now = 100.0

    def __call__(self) -> float:
        return self.now


def test_due_once_per_interval() -> None:
    clock = Clock()
    slow = SlowReadings(30.0, clock)
    assert slow.due("GPU-a")
    slow.store("GPU-a", {"E": 1}, False)
    clock.now += 29.9
    assert not slow.due("GPU-a") and slow.values("GPU-a") == {"E": 1}
    clock.now += 0.1
    assert slow.due("GPU-a")


def test_a_transient_failure_keeps_the_last_values_and_retries_next_pass() -> None:
    clock = Clock()
    slow = SlowReadings(30.0, clock)
    slow.store("GPU-a", {"ENERGY": 1000, "REPLAY": 5}, False)
    clock.now += 30
    # The energy call failed this time (a timeout, not NOT_SUPPORTED): its series must not
    # vanish for a whole interval, and the counter must not go back.
    slow.store("GPU-a", {"REPLAY": 6}, False, complete=False)
    assert slow.values("GPU-a") == {"ENERGY": 1000, "REPLAY": 6}
    assert slow.due("GPU-a"), "asked again on the next pass"
    slow.store("GPU-a", {"ENERGY": 1200, "REPLAY": 6}, False)
    assert not slow.due("GPU-a")
    assert slow.values("GPU-a") == {"ENERGY": 1200, "REPLAY": 6}


def test_first_readings_are_spread_by_phase() -> None:
    clock = Clock()
    slow = SlowReadings(40.0, clock)
    for i in range(4):
        slow.store(f"GPU-{i}", {}, False, phase=i / 4)
    due_after = []
    for step in range(1, 5):
        clock.now = 100.0 + 10 * step
        due_after.append(sorted(u for u in (f"GPU-{i}" for i in range(4)) if slow.due(u)))
    # GPU-3 first (after 10 s), then GPU-2, …, GPU-0 after the full interval.
    assert due_after == [["GPU-3"], ["GPU-2", "GPU-3"], ["GPU-1", "GPU-2", "GPU-3"],
                         ["GPU-0", "GPU-1", "GPU-2", "GPU-3"]]
    slow.store("GPU-3", {}, False, phase=0.75)  # later refreshes: a full interval, no phase
    clock.now += 39.9
    assert not slow.due("GPU-3")
