"""What following GPU binds and unbinds costs (nvml/binding.py, docs/flags.md): the median
time of one nvmlDeviceGetCount_v2 (what a pass asks anyway), of one listing of the nvidia
driver's sysfs directory (what a pass adds to tell a bind or an unbind), and of one
nvmlShutdown + nvmlInit cycle (what a change costs, and what polling by restarting NVML would
cost every poll).

  python bench/device_count.py                 the host's libnvidia-ml (a real GPU node)
  python bench/device_count.py --fake --gpus 8 the fake library the tests build

Prints one markdown table of medians in µs (each over --calls calls or --cycles cycles, the
median of --rounds rounds).
"""

from __future__ import annotations

import argparse
import os
import statistics
import sys
import time
from collections.abc import Callable
from pathlib import Path

from _common import ROOT, build_fake_nvml

DRIVER_DIR = Path("/sys/bus/pci/drivers/nvidia")


def per_call_us(call: Callable[[], object], count: int) -> float:
    """The median of `count` timed calls, in µs."""
    times = []
    for _ in range(count):
        started = time.perf_counter_ns()
        call()
        times.append(time.perf_counter_ns() - started)
    return statistics.median(times) / 1000


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--fake", action="store_true", help="use the fake libnvidia-ml")
    parser.add_argument("--gpus", type=int, default=8, help="GPUs of the fake library")
    parser.add_argument("--calls", type=int, default=10000, help="count calls per round")
    parser.add_argument("--cycles", type=int, default=20, help="restart cycles per round")
    parser.add_argument("--rounds", type=int, default=5)
    args = parser.parse_args()
    if args.fake:
        sys.path.insert(0, str(ROOT))
        from tests.fake_nvml.build import FakeNvml

        os.environ["FAKE_NVML_GPU_COUNT"] = str(args.gpus)
        FakeNvml(build_fake_nvml())  # pynvml's CDLL("libnvidia-ml.so.1") reuses it
    import pynvml

    pynvml.nvmlInit()
    try:
        gpus = pynvml.nvmlDeviceGetCount()
        driver = pynvml.nvmlSystemGetDriverVersion()
        # Handles in use, as the exporter holds them: the restart releases and reopens them.
        for index in range(gpus):
            pynvml.nvmlDeviceGetUUID(pynvml.nvmlDeviceGetHandleByIndex(index))

        def restart() -> None:
            pynvml.nvmlShutdown()
            pynvml.nvmlInit()
            for index in range(gpus):
                pynvml.nvmlDeviceGetHandleByIndex(index)

        rows = [
            ("nvmlDeviceGetCount_v2", args.calls,
             [per_call_us(pynvml.nvmlDeviceGetCount, args.calls) for _ in range(args.rounds)]),
            (f"listdir {DRIVER_DIR}" + ("" if DRIVER_DIR.is_dir() else " (absent: a failed stat)"),
             args.calls,
             [per_call_us(lambda: os.listdir(DRIVER_DIR) if DRIVER_DIR.is_dir() else None,
                          args.calls) for _ in range(args.rounds)]),
            ("nvmlShutdown + nvmlInit + every handle", args.cycles,
             [per_call_us(restart, args.cycles) for _ in range(args.rounds)]),
        ]
    finally:
        pynvml.nvmlShutdown()
    source = f"fake libnvidia-ml, {gpus} GPUs" if args.fake else f"driver {driver}, {gpus} GPUs"
    print(f"{source}; medians of {args.rounds} rounds\n")
    print("| call | per round | median µs | rounds' medians µs |")
    print("|---|---:|---:|---|")
    for name, count, medians in rows:
        print(f"| {name} | {count} | {statistics.median(medians):.2f} | "
              + ", ".join(f"{m:.2f}" for m in medians) + " |")
    return 0


if __name__ == "__main__":
    sys.exit(main())
