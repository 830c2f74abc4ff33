"""What `--container-labels` costs a pass: the container source's refresh against a real dockerd
(tests/runtime/dockerd.py: Debian's 20.10, its own roots, vfs) or a real containerd
(tests/runtime/containerd.py: Debian's 1.6, tasks made with ctr), with N running containers,
each given a GPU through NVIDIA_VISIBLE_DEVICES (issue 34).

    .venv/bin/python bench/runtime_refresh.py --runtime docker --containers 10,50,200
    .venv/bin/python bench/runtime_refresh.py --runtime containerd --containers 10,50,200

For each N: the first refresh (the kind probed, the list and N inspects or `Containers.Get`s),
then steady refreshes (the list only: a container is read once), wall time and the CPU of this
process, every thread (the exporter's side), medians; and the snapshot's container count, so a
refresh that named nothing cannot pass. Needs root. Prints a markdown table on stdout.
"""

from __future__ import annotations

import argparse
import asyncio
import sys
import time
from pathlib import Path

from _common import ROOT, median

sys.path.insert(0, str(ROOT))

from runtimes import Runtime

from gpu_enricher.runtime.source import ContainerSource


async def measure(socket: Path, refreshes: int) -> tuple[float, float, list[float], list[float],
                                                         int]:
    source = ContainerSource(str(socket), max_age_seconds=60)
    try:
        wall, cpu = time.perf_counter(), time.process_time()
        await source.refresh(None)
        first_wall, first_cpu = time.perf_counter() - wall, time.process_time() - cpu
        walls, cpus = [], []
        for _ in range(refreshes):
            wall, cpu = time.perf_counter(), time.process_time()
            await source.refresh(None)
            walls.append(time.perf_counter() - wall)
            cpus.append(time.process_time() - cpu)
        return first_wall, first_cpu, walls, cpus, len(source.snapshot().containers)
    finally:
        await source.close()


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--runtime", choices=("docker", "containerd"), default="docker")
    parser.add_argument("--containers", default="10,50,200")
    parser.add_argument("--refreshes", type=int, default=30)
    args = parser.parse_args()
    engine = Runtime(args.runtime)
    rows = []
    try:
        engine.start()
        running = 0
        for target in (int(n) for n in args.containers.split(",")):
            while running < target:
                engine.run(running)
                running += 1
            first_wall, first_cpu, walls, cpus, named = asyncio.run(
                measure(engine.socket, args.refreshes))
            assert named == target, (named, target)
            rows.append((target, first_wall, first_cpu, median(walls), median(cpus)))
            print(f"{target} containers: first {first_wall * 1000:.1f} ms, steady "
                  f"{median(walls) * 1000:.2f} ms", file=sys.stderr)
    finally:
        engine.stop()
    print("| running containers | first refresh, wall (CPU) | steady refresh, wall (CPU) |")
    print("|---:|---:|---:|")
    for target, fw, fc, sw, sc in rows:
        print(f"| {target} | {fw * 1000:.1f} ms ({fc * 1000:.1f}) | "
              f"{sw * 1000:.2f} ms ({sc * 1000:.2f}) |")
    return 0


if __name__ == "__main__":
    sys.exit(main())
