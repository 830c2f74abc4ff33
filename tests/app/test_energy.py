"""Energy per pod on the real process (issue 25): pynvml over the fake libnvidia-ml, whose
energy counter rises with each read, read on the slow cadence; scraped twice over HTTP, every
GPU's energy series rise by exactly its counter's rise in the same scrapes, and none falls."""

import re
import time
from pathlib import Path

from tests.app.test_process import Exporter, get
from tests.app.test_process import exporters as exporters  # a fixture, used by name
from tests.samples import samples, value

POD = "gpu_enricher_pod_energy_joules_total"
UNATTRIBUTED = "gpu_enricher_unattributed_energy_joules_total"
COUNTER = "DCGM_FI_DEV_TOTAL_ENERGY_CONSUMPTION"


def counter(body: str, gpu: str) -> float | None:
    """The GPU's energy counter in mJ (an integer counter without `_total`, read as written)."""
    found = re.search(rf'^{COUNTER}{{gpu="{gpu}",.*}} (\d+)$', body, re.MULTILINE)
    return float(found.group(1)) if found else None


def energy(body: str) -> dict[tuple[str, str], float]:
    """(gpu, the rest of the labels) → joules, both families."""
    return {(s.labels["gpu"], repr(sorted(s.labels.items()))): s.value
            for name in (POD, UNATTRIBUTED) for s in samples(body, name)}


def test_the_energy_series_rise_with_each_gpu_s_counter(exporters: list[Exporter],
                                                        fake_nvml_path: Path) -> None:
    # GPU 0 runs a process the exporter's /proc cannot place in a pod (host or unknown); GPU 1
    # none, so all of its energy is idle. The counter is read every third pass; every other
    # power reading is 50 W above the idle baseline.
    exp = Exporter(["-c", "200", "--process-metrics", "--slow-fields-interval", "600"],
                   {"LD_LIBRARY_PATH": str(fake_nvml_path.parent),
                    "FAKE_NVML_PROCESSES": "0=4194303:512::90:30;1=",
                    "FAKE_NVML_POWER_SWING_MW": "50000"})
    exporters.append(exp)
    exp.wait_ready()
    scrapes: list[str] = []
    deadline = time.monotonic() + 20
    while len(scrapes) < 2:
        body = get(exp.base + "/metrics")[1]
        if samples(body, UNATTRIBUTED) and (not scrapes or all(
                (counter(body, g) or 0) > (counter(scrapes[0], g) or 0) for g in ("0", "1"))):
            scrapes.append(body)
        assert time.monotonic() < deadline, body
        time.sleep(0.1)
    first, second = (energy(body) for body in scrapes)
    assert set(first) <= set(second) and all(second[k] >= first[k] for k in first), \
        "a counter never decreases"
    for gpu in ("0", "1"):
        rise = sum(v for k, v in second.items() if k[0] == gpu) - \
            sum(v for k, v in first.items() if k[0] == gpu)
        counter_rise = (counter(scrapes[1], gpu) or 0) - (counter(scrapes[0], gpu) or 0)
        assert counter_rise > 0
        assert abs(rise - counter_rise / 1000) < 1e-5, (gpu, rise, counter_rise)
    assert value(scrapes[1], UNATTRIBUTED, gpu="1", reason="idle") == \
        sum(v for k, v in second.items() if k[0] == "1"), "nobody on GPU 1: all idle"
    assert value(scrapes[1], UNATTRIBUTED, gpu="0", reason="unknown") or \
        value(scrapes[1], UNATTRIBUTED, gpu="0", reason="host"), "GPU 0's process pays"
    code, err = exp.stop()
    assert code == 0, err


def test_the_simulated_node_s_energy_series_add_up(exporters: list[Exporter]) -> None:
    """--simulate: the built-in node's pods pay energy, and per GPU the series rise by the
    GPU's counter's rise between two scrapes."""
    exp = Exporter(["--simulate", "-c", "200", "--slow-fields-interval", "0"], {})
    exporters.append(exp)
    exp.wait_ready()
    bodies = []
    deadline = time.monotonic() + 20
    while len(bodies) < 2:
        body = get(exp.base + "/metrics")[1]
        if samples(body, POD) and (not bodies or counter(body, "0") != counter(bodies[0], "0")):
            bodies.append(body)
        assert time.monotonic() < deadline
        time.sleep(0.3)
    first, second = (energy(body) for body in bodies)
    assert {s.labels["pod"] for s in samples(bodies[1], POD)} >= {"llm-trainer-0"}
    exact: list[str] = []
    for gpu in {k[0] for k in second}:
        rise = sum(v for k, v in second.items() if k[0] == gpu) - \
            sum(v for k, v in first.items() if k[0] == gpu)
        counter_rise = (counter(bodies[1], gpu) or 0) - (counter(bodies[0], gpu) or 0)
        if {k for k in first if k[0] == gpu} <= set(second):
            assert abs(rise - counter_rise / 1000) < 1e-4, (gpu, rise, counter_rise)
            exact.append(gpu)
        else:  # a pod that ended between the scrapes (the churn) took its joules with it
            assert 0 <= rise <= counter_rise / 1000 + 1e-4, (gpu, rise, counter_rise)
    assert len(exact) >= 4, exact
    trainer = sum(v for k, v in second.items() if "llm-trainer-0" in k[1])
    assert trainer > 0, "the trainer's process pays for what it uses"


def test_the_split_uses_the_gpu_s_counter_even_when_the_counters_file_lists_neither(
        exporters: list[Exporter], fake_nvml_path: Path, tmp_path: Path) -> None:
    """A counters file without the energy counter or the power: with --process-metrics both are
    still read (and not shown), so the series add up to the counter, not to power times time. The
    fake's counter rises 100 mJ per read (0.1 J) while it draws ~16 W: the integrated power
    would be some 100 times more, and not in steps of 0.1 J."""
    counters = tmp_path / "counters.csv"
    counters.write_text("DCGM_FI_DEV_GPU_UTIL, gauge, GPU utilization (in %).\n")
    exp = Exporter(["-c", "200", "--process-metrics", "--slow-fields-interval", "600",
                    "-f", str(counters)],
                   {"LD_LIBRARY_PATH": str(fake_nvml_path.parent), "FAKE_NVML_PROCESSES": "1="})
    exporters.append(exp)
    started = time.monotonic()
    exp.wait_ready()
    deadline = started + 20
    while True:
        body = get(exp.base + "/metrics")[1]
        idle = value(body, UNATTRIBUTED, gpu="1", reason="idle")
        if idle is not None and idle >= 0.3:
            break
        assert time.monotonic() < deadline, body
        time.sleep(0.2)
    elapsed = time.monotonic() - started
    assert COUNTER not in body and "DCGM_FI_DEV_POWER_USAGE" not in body
    assert "DCGM_FI_DEV_GPU_UTIL{" in body
    reads = idle / 0.1
    assert abs(reads - round(reads)) < 1e-6, idle  # whole counter steps
    assert idle < elapsed * 2, (idle, elapsed)  # power times time: ~16 J each second
    code, err = exp.stop()
    assert code == 0, err
