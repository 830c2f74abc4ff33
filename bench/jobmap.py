"""HPC job mapping's cost per collection pass (`--hpc-job-mapping-dir`), 8 GPU files.

Three cases, each the median of `--passes` passes (wall time, `time.perf_counter_ns`):

  unchanged  `JobMapReader.read()` on a settled directory: one stat of the directory (its
             listing reused), one stat per file (its jobs reused), nothing read
  changed    the same after every file got a new mtime (as a rewrite in place gives it; the
             directory's own stat is unchanged, so its listing is still reused): every file
             read and parsed again, which is what dcgm-exporter does every pass
  refresh    `JobMapSource.refresh()` on the unchanged directory, as the collector calls it:
             the read above plus the hop to a worker thread and back

Each file holds two job IDs. Run from the repository root:

    .venv/bin/python bench/jobmap.py [--passes 2000]
"""

from __future__ import annotations

import argparse
import asyncio
import os
import statistics
import tempfile
import time
from collections.abc import Callable
from pathlib import Path

from gpu_enricher.attribution.jobmap_reader import JobMapReader
from gpu_enricher.attribution.jobmap_source import JobMapSource

GPUS = 8
LATER = time.time_ns() + 3600 * 10**9  # every file settled


def median_us(run: Callable[[], object], passes: int, before: Callable[[], None] | None = None,
              ) -> float:
    times = []
    for _ in range(passes):
        if before is not None:
            before()
        start = time.perf_counter_ns()
        run()
        times.append(time.perf_counter_ns() - start)
    return statistics.median(times) / 1000


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n", 1)[0])
    parser.add_argument("--passes", type=int, default=2000)
    passes = parser.parse_args().passes
    with tempfile.TemporaryDirectory() as name:
        directory = Path(name)
        for gpu in range(GPUS):
            (directory / str(gpu)).write_text(f"{4200 + gpu}\n{5200 + gpu}\n")
        reader = JobMapReader(directory, clock=lambda: LATER)
        reader.read()
        unchanged = median_us(reader.read, passes)
        stamp = [time.time_ns()]

        def rewrite() -> None:
            stamp[0] += 1000
            for gpu in range(GPUS):
                os.utime(directory / str(gpu), ns=(stamp[0], stamp[0]))

        reads = reader.reads
        changed = median_us(reader.read, passes, rewrite)
        assert reader.reads - reads == passes * GPUS, "every changed file was read"
        source = JobMapSource(directory, JobMapReader(directory, clock=lambda: LATER))

        async def refreshes() -> float:
            await source.refresh(None)
            times = []
            for _ in range(passes):
                start = time.perf_counter_ns()
                await source.refresh(None)
                times.append(time.perf_counter_ns() - start)
            return statistics.median(times) / 1000

        refresh = asyncio.run(refreshes())
        assert len(source.snapshot().jobs) == GPUS
    print(f"| case ({GPUS} GPU files, {passes} passes) | median µs |")
    print("|---|---|")
    print(f"| unchanged: `JobMapReader.read()` | {unchanged:.1f} |")
    print(f"| changed (all 8 rewritten): `JobMapReader.read()` | {changed:.1f} |")
    print(f"| unchanged: `JobMapSource.refresh()` (with the thread hop) | {refresh:.1f} |")


if __name__ == "__main__":
    main()
