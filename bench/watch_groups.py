"""What dcgm-exporter's watch groups save and cost on our passes (collector/watch.py).

(i)  NVML: the real collector over the fake library with its h100 cost profile (each call burns
     the CPU it takes on a real H100), 8 GPUs with GPM (--no-gpm: without), the bundled
     counters; the library's CPU
     per pass (FAKE_NVML's own accounting), averaged over whole watch periods, without watch
     groups and with every field of the counters in one group of --group-ms at -c --interval-ms.
(ii) the repeat: FieldCadence.skipped + carry on an 8-GPU snapshot of the bundled counters'
     fields, every field watched, microseconds per pass (median of 5 x 1000).
--real-nvml: the machine's own GPUs, this process's CPU per pass (NVML calls, join, render).
See bench/README.md.
"""

from __future__ import annotations

import argparse
import asyncio
import importlib
import os
import statistics
import sys
import time
import timeit
from pathlib import Path
from typing import Any

from _common import DEFAULT_BUILD_DIR, ROOT, build_fake_nvml, median


def _cpu_ns(fake: Any) -> int:
    """The fake library's own CPU accounting; on a real GPU, this process's CPU (both threads:
    the NVML worker's calls and the loop's join and render)."""
    return int(fake.total_cpu_ns()) if fake is not None else time.process_time_ns()


async def nvml_ms_per_pass(fake: Any, gpus: int, interval_ms: int, group_ms: int | None,
                           passes: int) -> float:
    from gpu_enricher.collector.loop import Collector, CollectorOptions
    from gpu_enricher.fields.collection import default_counters_path
    from gpu_enricher.fields.counters import load_counters, value_field
    from gpu_enricher.nvml.backend import NvmlBackend

    counters = load_counters(default_counters_path())
    intervals = {} if group_ms is None else {
        f: group_ms for line in counters if (f := value_field(line.field)) is not None}
    collector = Collector(NvmlBackend(), CollectorOptions(
        interval_seconds=interval_ms / 1000, hostname="bench", counters=counters,
        field_intervals_ms=intervals))
    try:
        await collector.open_backend()
        await collector.collect_once()  # the first pass reads everything, slow fields too
        start = _cpu_ns(fake)
        for _ in range(passes):
            await collector.collect_once()
        return (_cpu_ns(fake) - start) / 1e6 / passes
    finally:
        collector.backend.close()


def carry_us() -> float:
    from gpu_enricher.collector.watch import FieldCadence
    from gpu_enricher.fields.collection import default_counters_path
    from gpu_enricher.fields.counters import load_counters, value_field
    from gpu_enricher.model import DeviceIdentity, GpuSnapshot, NodeSnapshot

    fields = sorted({f for line in load_counters(default_counters_path())
                     if (f := value_field(line.field)) is not None})
    snapshot = NodeSnapshot(tuple(
        GpuSnapshot(DeviceIdentity(i, f"GPU-{i}", "", "H100"), values=dict.fromkeys(fields, 1.0))
        for i in range(8)))
    cadence = FieldCadence(5)
    cadence.use(dict.fromkeys(fields, 60_000))

    def one_pass() -> None:
        cadence.carry(snapshot, cadence.skipped(fields))

    return statistics.median(timeit.timeit(one_pass, number=1000) / 1000 * 1e6
                             for _ in range(5))


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--gpus", type=int, default=8)
    parser.add_argument("--interval-ms", type=int, default=5000)
    parser.add_argument("--group-ms", type=int, default=60000)
    parser.add_argument("--build-dir", type=Path, default=DEFAULT_BUILD_DIR)
    parser.add_argument("--runs", type=int, default=3)
    parser.add_argument("--no-gpm", action="store_true",
                        help="GPUs without GPM (before Hopper): no profiling fields")
    parser.add_argument("--real-nvml", action="store_true",
                        help="the machine's own GPUs and driver; the process's CPU per pass")
    args = parser.parse_args()
    fake = None
    if not args.real_nvml:
        lib = build_fake_nvml(args.build_dir)
        if str(ROOT) not in sys.path:
            sys.path.insert(0, str(ROOT))
        fake = importlib.import_module("tests.fake_nvml.build").FakeNvml(lib)
        os.environ.update(FAKE_NVML_GPU_COUNT=str(args.gpus), FAKE_NVML_COST_PROFILE="h100",
                          FAKE_NVML_GPM="" if args.no_gpm else ",".join(map(str,
                                                                            range(args.gpus))))
        fake.reset()
    gpus = "this node's GPUs" if fake is None else f"{args.gpus} GPUs"
    period = -(-args.group_ms // args.interval_ms)
    passes = 2 * period  # whole periods
    for label, group in (("no watch group", None), (f"every field in a {args.group_ms} ms group",
                                                    args.group_ms)):
        runs = [asyncio.run(nvml_ms_per_pass(fake, args.gpus, args.interval_ms, group, passes))
                for _ in range(args.runs)]
        what = "process CPU" if fake is None else "NVML CPU"
        print(f"{label}: {what} {median(runs):.2f} ms per pass (median of {args.runs}, "
              f"{passes} passes each: {', '.join(f'{r:.2f}' for r in runs)}), {gpus}, "
              f"-c {args.interval_ms}")
    print(f"repeat (skipped + carry), 8 GPUs, every field watched: {carry_us():.0f} µs per pass")
    return 0


if __name__ == "__main__":
    sys.exit(main())
