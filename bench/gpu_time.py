"""GPU time per pod's cost per pass: what `gpu_enricher_pod_gpu_seconds_total` adds to a pass.

The node: 8 GPUs time-sliced 14 ways (the device plugin's `replicas: 14`, all offered by
`GetAllocatableResources`), 110 pods (the kubelet's default max-pods) each holding one
replica. Per pass, in-process, `time.perf_counter_ns`: the shares (`offered_replicas` and
`held_shares`, in `collector/cycle.compose`), the ledger step (`accumulate`), the family and
its rendering (text and OpenMetrics, as `Exposition.from_families` renders every family);
median and p90 of `--passes`. Also `compose` itself on this node without a counters plan
(attribution and the query document: the join's part that runs with `-k`), for scale.

    .venv/bin/python bench/gpu_time.py [--passes 2000]
"""

from __future__ import annotations

import argparse
import statistics
import time
from collections.abc import Callable

from gpu_enricher.attribution.devices import attribute
from gpu_enricher.attribution.shares import held_shares, offered_replicas
from gpu_enricher.collector.cycle import CycleInputs, JoinOptions, compose
from gpu_enricher.collector.ledger import Ledger, accumulate
from gpu_enricher.exposition.chargeback import gpu_seconds_family
from gpu_enricher.exposition.render import render_openmetrics, render_text
from gpu_enricher.model import (
    AllocatableDevices,
    AssignmentSnapshot,
    DeviceIdentity,
    GpuSnapshot,
    NodeSnapshot,
    PodAssignment,
)

GPUS, REPLICAS, PODS = 8, 14, 110


def node() -> tuple[NodeSnapshot, AssignmentSnapshot]:
    gpus = tuple(GpuSnapshot(DeviceIdentity(i, f"GPU-{i:08x}-7953-256e-8f33-1343419b1a1c",
                                            f"00000000:{0x18 + i:02x}:00.0", "NVIDIA H100"))
                 for i in range(GPUS))
    replicas = [f"{g.identity.uuid}::{n}" for g in gpus for n in range(REPLICAS)]
    held = tuple(PodAssignment(f"team-{p % 12}", f"pod-{p:03d}", "main", "nvidia.com/gpu",
                               (replicas[p],)) for p in range(PODS))
    offered = (AllocatableDevices("nvidia.com/gpu", tuple(replicas)),)
    return NodeSnapshot(gpus), AssignmentSnapshot(held, 0.1, True, offered, "v1")


def timed(step: Callable[[], object], passes: int) -> list[float]:
    """Microseconds per call."""
    found = []
    for _ in range(passes):
        started = time.perf_counter_ns()
        step()
        found.append((time.perf_counter_ns() - started) / 1000)
    return found


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--passes", type=int, default=2000)
    args = parser.parse_args()
    gpus, answer = node()
    attribution = attribute(gpus.gpus, answer.assignments)
    ledger = Ledger()
    clock = [1000.0]

    def added() -> None:
        nonlocal ledger
        shares = held_shares(gpus.gpus, attribution,
                             offered_replicas(gpus.gpus, answer.allocatable))
        clock[0] += 1.0
        ledger = accumulate(ledger, shares, clock[0], 2.0)
        family = gpu_seconds_family(ledger.totals)
        render_text([family])
        render_openmetrics([family], eof=False)

    inputs = CycleInputs(gpus, None, answer)
    options = JoinOptions(hostname="node")
    timed(added, 50)  # warm up
    print(f"| per pass ({args.passes} passes, {PODS} pods on {GPUS} GPUs) | median µs | p90 µs |")
    print("|---|---|---|")
    for name, step in (("GPU time, added", added),
                       ("compose without a plan (for scale)", lambda: compose(inputs, options))):
        found = sorted(timed(step, args.passes))
        print(f"| {name} | {statistics.median(found):.0f} | "
              f"{found[int(len(found) * 0.9)]:.0f} |")
    assert len(ledger.totals) == PODS


if __name__ == "__main__":
    main()
