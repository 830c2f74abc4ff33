"""Issue 25's benchmark: the MPS and energy part of a whole collector pass on 8 GPUs, 110 pods,
100 processes, measured beside the same pass without it.

One pass, in-process, as `collector/loop.py` runs it: the NVML pass (`NvmlBackend.sample`, the
default counters, pynvml over the fake library), the pure join (`cycle.compose` with -k and
--process-metrics: attribution, processes, per-pod sums, the DCGM families), the per-pod
accounts (`PodAccounts.families`: GPU time, and energy when on) and the rendering of every
family in both formats (`Exposition.from_families`). The node: 8 GPUs time-sliced 14 ways, 110
pods each holding a replica, and the device plugin's MPS daemon pod; 100 processes, per GPU one
MPS server (in the daemon pod) and 11-12 clients, each in a pod holding a replica of its GPU.

  with     the clients in NVML's MPS and compute lists (`M+C`, as a real H200 lists them;
           both read every pass) and the energy split on
           (`gpu_enricher_pod_energy_joules_total` and the unattributed series)
  without  the same processes all in the compute list, the MPS list NOT_SUPPORTED (remembered
           after the first pass: the pass as it was before issue 25) and no energy accounts

CPU of the pass (`time.thread_time`: everything runs on this thread), the two alternating pass
by pass (each with its own backend over the one fake library, set to its processes before its
pass), so that a noisy neighbour slows both alike; the part is the median of the paired
differences. `--real-cost`: the fake burns what each NVML call costs on a real H100
(`FAKE_NVML_COST_PROFILE=h100`).

    .venv/bin/python bench/shared_gpus.py [--passes 2000] [--real-cost]
"""

from __future__ import annotations

import argparse
import importlib
import os
import sys
import time
from typing import Any

from _common import GPU_COUNT, in_process_fake, median
from mps_cost import PROCESSES, per_gpu

REPLICAS, PODS = 14, 110
DAEMON = ("nvidia-device-plugin", "nvidia-device-plugin-mps-control-daemon-x7k2p", "mps")


def pod_of(n: int) -> int:
    """Process n's pod (n > 0 on its GPU): one holding a replica of the GPU it runs on."""
    return (n % GPU_COUNT) * REPLICAS + n // GPU_COUNT


def cluster(uuids: list[str]) -> tuple[Any, Any, Any]:
    """The kubelet's answer, the API's pods and /proc's table for the node."""
    model = importlib.import_module("gpu_enricher.model")
    replicas = [f"{uuid}::{r}" for uuid in uuids for r in range(REPLICAS)]
    held = tuple(model.PodAssignment(f"team-{p % 12}", f"pod-{p:03d}", "main", "nvidia.com/gpu",
                                     (replicas[p],)) for p in range(PODS))
    offered = (model.AllocatableDevices("nvidia.com/gpu", tuple(replicas)),)
    answer = model.AssignmentSnapshot(held, 0.1, True, offered, "v1")
    metas = [model.PodMeta(f"uid-{p:03d}", f"team-{p % 12}", f"pod-{p:03d}", phase="Running",
                           containers={f"{p:064x}": "main"}) for p in range(PODS)]
    metas.append(model.PodMeta("uid-daemon", DAEMON[0], DAEMON[1], phase="Running",
                               containers={"d" * 64: DAEMON[2]}))
    table: dict[int, Any] = {}
    for n in range(PROCESSES):
        pid = 10_000 + n
        if n < GPU_COUNT:  # spec(): the first process of each GPU is its MPS server
            table[pid] = model.HostProcess(pid, 1, "nvidia-cuda-mps",
                                           model.ContainerRef("uid-daemon", "d" * 64))
        else:
            pod = pod_of(n)
            table[pid] = model.HostProcess(pid, 1, "python",
                                           model.ContainerRef(f"uid-{pod:03d}", f"{pod:064x}"))
    return (answer, model.PodDirectory(tuple(metas), True),
            model.ProcessTable(table))


class Variant:
    """One side of the comparison: its own backend (what it remembers, e.g. an MPS list
    NOT_SUPPORTED, stays its own), accounts and clock; the fake is set to its processes before
    each of its passes, outside the timed part."""

    def __init__(self, fake: Any, on: bool, lines: Any, slow_seconds: float) -> None:
        backend_cls = importlib.import_module("gpu_enricher.nvml.backend").NvmlBackend
        cycle = importlib.import_module("gpu_enricher.collector.cycle")
        counters = importlib.import_module("gpu_enricher.fields.counters")
        accounts_cls = importlib.import_module("gpu_enricher.collector.accounts").PodAccounts
        self.fake, self.on = fake, on
        # On a real GPU the clients are in both the MPS and the compute list (`M+C`).
        self.processes = per_gpu("M" if on else "c")
        self.apply()
        self.backend = backend_cls(slow_seconds)
        self.backend.open()
        self.plan, _ = counters.plan_counters(lines, self.backend.deliverable_fields(),
                                              self.backend.name)
        self.accounts = accounts_cls(1.0, on, frozenset())
        self.fields = self.plan.sampled_fields | self.accounts.sampled_fields()
        self.options = cycle.JoinOptions(hostname="node", process_metrics=True)
        first = self.backend.sample(self.fields)  # the first pass asks everything once
        self.cluster = cluster([g.identity.uuid for g in first.gpus])
        self.clock = 1000.0
        self.body = ""
        self.kinds: list[str] = []

    def apply(self) -> None:
        for gpu, processes in enumerate(self.processes):
            self.fake.set_processes(gpu, processes)
            self.fake.set_not_supported(gpu, "mps", not self.on)

    def pass_cpu(self) -> tuple[float, ...]:
        """The CPU of each stage: the NVML pass, the join, the accounts, the rendering."""
        cycle = importlib.import_module("gpu_enricher.collector.cycle")
        render = importlib.import_module("gpu_enricher.exposition.render")
        self.apply()
        answer, pods, table = self.cluster
        self.clock += 1.0
        clock = time.thread_time
        started = clock()
        snapshot = self.backend.sample(self.fields)
        sampled = clock()
        inputs = cycle.CycleInputs(snapshot, self.plan, answer, pods, None, table, self.clock,
                                   now=self.clock)
        joined = cycle.compose(inputs, self.options)
        composed = clock()
        families = [*joined.families, *self.accounts.families(inputs, joined)]
        counted = clock()
        exposition = render.Exposition.from_families(families)
        rendered = clock()
        spent = (sampled - started, composed - sampled, counted - composed, rendered - counted)
        self.body = exposition.text.decode()
        self.kinds = sorted({p.sample.kind for p in joined.processes})
        assert sum(p.workload is not None for p in joined.processes) == PROCESSES, "attributed"
        return spent

    def check(self) -> None:
        # The server is told by its /proc name in both (one string compare per process).
        assert self.kinds == ["mps" if self.on else "compute", "mps-server"], self.kinds
        assert ("gpu_enricher_pod_energy_joules_total{" in self.body) == self.on
        assert "gpu_enricher_pod_gpu_seconds_total{" in self.body

    def close(self) -> None:
        self.backend.close()


STAGES = ("NVML pass", "join", "accounts (GPU time; energy)", "rendering")


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--passes", type=int, default=2000)
    parser.add_argument("--real-cost", action="store_true")
    parser.add_argument("--slow-fields-interval", type=float, default=30.0, metavar="SECONDS",
                        help="the backend's slow cadence (the energy counter's); 0: every pass")
    args = parser.parse_args()
    os.environ.pop("FAKE_NVML_PROCESSES", None)
    fake, lines = in_process_fake(args.real_cost)
    fake.reset()
    without = Variant(fake, False, lines, args.slow_fields_interval)
    with_ = Variant(fake, True, lines, args.slow_fields_interval)
    try:
        for _ in range(20):  # warm up
            without.pass_cpu()
            with_.pass_cpu()
        pairs = [(without.pass_cpu(), with_.pass_cpu()) for _ in range(args.passes)]
        without.check()
        with_.check()
    finally:
        with_.close()
        without.close()
    cost = "H100 cost profile" if args.real_cost else "fake library, no call cost"
    print(f"{GPU_COUNT} GPUs, {PODS} pods, {PROCESSES} processes ({cost}; energy counter read "
          f"every {args.slow_fields_interval:g} s; {args.passes} passes each, alternating)\n")
    print("| CPU per pass, median | without MPS list and energy | with | added |")
    print("|---|---|---|---|")
    added_by_stage = []
    for n, stage in enumerate(STAGES):
        off = median([p[0][n] for p in pairs])
        on = median([p[1][n] for p in pairs])
        added_by_stage.append(on - off)
        print(f"| {stage} | {off * 1e3:.3f} ms | {on * 1e3:.3f} ms | {(on - off) * 1e3:.3f} ms |")
    off = median([sum(p[0]) for p in pairs])
    on = median([sum(p[1]) for p in pairs])
    paired = median([sum(p[1]) - sum(p[0]) for p in pairs])
    print(f"| whole pass | {off * 1e3:.2f} ms | {on * 1e3:.2f} ms | {paired * 1e3:.2f} ms "
          f"(median of the paired differences; {on / off:.3f}x) |")
    print(f"\nthe MPS and energy part, summed over the stages' medians: "
          f"{sum(added_by_stage) * 1e3:.2f} ms per pass")
    return 0


if __name__ == "__main__":
    sys.exit(main())
