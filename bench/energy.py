"""Energy per pod's cost per pass: what the two joule counters add to a pass (issue 25).

The node: 8 GPUs time-sliced 14 ways, 110 pods (the kubelet's default max-pods) each holding
one replica (`entity_holdings`, as `collector/cycle.compose` finds them), 100 processes
(12-13 per GPU, each in one of those pods, with an SM sample), the power moving and the
energy counter rising every pass (the snapshots built beforehand). Per pass, in-process,
`time.perf_counter_ns`: the ledger step (`EnergyBook.step`: the split of every GPU, its
weighing and the counter's delta), the two families and their rendering (text and
OpenMetrics); median and p90 of `--passes`.

    .venv/bin/python bench/energy.py [--passes 2000]
"""

from __future__ import annotations

import argparse
import dataclasses
import statistics
import time

from gpu_enricher.attribution.devices import attribute
from gpu_enricher.attribution.shares import entity_holdings, offered_replicas
from gpu_enricher.attribution.workloads import GpuProcess, Workload
from gpu_enricher.collector.energy import EnergyBook
from gpu_enricher.exposition.chargeback import energy_families
from gpu_enricher.exposition.render import render_openmetrics, render_text
from gpu_enricher.model import (
    AllocatableDevices,
    DeviceIdentity,
    GpuSnapshot,
    NodeSnapshot,
    PodAssignment,
    ProcessSample,
    ProcessTable,
)

GPUS, REPLICAS, PODS, PROCESSES = 8, 14, 110, 100


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--passes", type=int, default=2000)
    args = parser.parse_args()
    gpus = tuple(GpuSnapshot(DeviceIdentity(i, f"GPU-{i:08x}-7953-256e-8f33-1343419b1a1c",
                                            f"00000000:{0x18 + i:02x}:00.0", "NVIDIA H100"))
                 for i in range(GPUS))
    replicas = [f"{g.identity.uuid}::{n}" for g in gpus for n in range(REPLICAS)]
    held = [PodAssignment(f"team-{p % 12}", f"pod-{p:03d}", "main", "nvidia.com/gpu",
                          (replicas[p],)) for p in range(PODS)]
    offered = (AllocatableDevices("nvidia.com/gpu", tuple(replicas)),)
    holdings = entity_holdings(gpus, attribute(gpus, held), offered_replicas(gpus, offered))
    # Process n runs in the pod holding replica n of the GPU: a pod on the GPU it holds.
    processes = [GpuProcess((p // REPLICAS, None), gpus[p // REPLICAS], None,
                            ProcessSample(10_000 + p, 1 << 30, sm_utilization=0.05 + p % 7 / 20),
                            "python", Workload(f"team-{p % 12}", f"pod-{p:03d}", "main"), True)
                 for p in range(PROCESSES)]
    book = EnergyBook(2.0)
    table = ProcessTable()
    clock = [1000.0]

    # The snapshots the backend would hand in, built beforehand: not part of the cost.
    nodes = [NodeSnapshot(tuple(dataclasses.replace(g, values={
        "DCGM_FI_DEV_POWER_USAGE": 100.0 + 50 * (tick % 5) + g.identity.index,
        "DCGM_FI_DEV_TOTAL_ENERGY_CONSUMPTION": 1_000_000 + 250_000 * tick}) for g in gpus))
        for tick in range(args.passes + 50)]

    def added() -> None:
        clock[0] += 1.0
        book.step(nodes[int(clock[0]) - 1001], processes, table, holdings, clock[0])
        families = energy_families(book.accounts())
        render_text(families)
        render_openmetrics(families, eof=False)

    for _ in range(50):  # warm up
        added()
    found = []
    for _ in range(args.passes):
        started = time.perf_counter_ns()
        added()
        found.append((time.perf_counter_ns() - started) / 1000)
    found.sort()
    print(f"| per pass ({args.passes} passes, {PODS} pods, {PROCESSES} processes on {GPUS} "
          "GPUs) | median µs | p90 µs |")
    print("|---|---|---|")
    print(f"| energy per pod, added | {statistics.median(found):.0f} | "
          f"{found[int(len(found) * 0.9)]:.0f} |")
    assert sum(len(a.totals) for a in book.accounts()) == PODS + GPUS  # the pods and idle


if __name__ == "__main__":
    main()
