"""The MPS list's cost in an NVML pass (issue 25): the backend's pass (`NvmlBackend.sample`,
the default counters) on the fake library, 8 GPUs, 100 processes (12-13 per GPU: an MPS server
and its clients), with the MPS list read against the same pass without it.

  with     the clients in NVML's MPS list, the server in the compute list: each pass reads
           the MPS list (pynvml's size query and read) on every GPU
  without  the same processes all in the compute list and the MPS list NOT_SUPPORTED, which the
           backend remembers after the first pass: the pass as it was before issue 25

CPU of the pass (`time.thread_time`: the pass runs on this thread), median over `--passes`
passes per round, `--rounds` rounds alternating the two; with `--real-cost` the fake burns what
each call costs on a real H100 (`FAKE_NVML_COST_PROFILE=h100`: 5 µs per list call). The pass's
own jitter is larger than the list, so the list is also timed alone: one MPS read
(`nvml.processes.mps_clients`) of a GPU with 12 clients and of one with none, median of 5000.

    .venv/bin/python bench/mps_cost.py [--passes 200] [--rounds 5] [--real-cost]
"""

from __future__ import annotations

import argparse
import importlib
import os
import sys
import time
from typing import Any

from _common import GPU_COUNT, in_process_fake, median

PROCESSES = 100


def per_gpu(kind: str) -> list[str]:
    """Each GPU's fake processes: process n on GPU n % 8, the first of each GPU its MPS server
    (compute list), the others its clients in the lists `kind` names (tests/fake_nvml)."""
    found: list[list[str]] = [[] for _ in range(GPU_COUNT)]
    for n in range(PROCESSES):
        gpu = n % GPU_COUNT
        pid = 10_000 + n
        if not found[gpu]:
            found[gpu].append(f"{pid}:320::5")  # the server
        else:
            found[gpu].append(f"{pid}:1024::{10 + n % 50}::{kind}")
    return [",".join(procs) for procs in found]


def spec(mps: bool) -> str:
    """FAKE_NVML_PROCESSES: per GPU one server (compute) and its clients (m, or c)."""
    return ";".join(f"{g}={procs}" for g, procs in enumerate(per_gpu("m" if mps else "c")))


def round_cpu(fake: Any, mps: bool, passes: int, fields: frozenset[str]) -> list[float]:
    backend_cls = importlib.import_module("gpu_enricher.nvml.backend").NvmlBackend
    os.environ["FAKE_NVML_PROCESSES"] = spec(mps)
    os.environ["FAKE_NVML_NOT_SUPPORTED"] = "" if mps else "*:mps"
    fake.reset()
    backend = backend_cls()
    backend.open()
    try:
        backend.sample(fields)  # the first pass asks everything once
        spent = []
        for _ in range(passes):
            start = time.thread_time()
            snapshot = backend.sample(fields)
            spent.append(time.thread_time() - start)
        kinds = sorted({p.kind for g in snapshot.gpus for p in g.processes})
        assert sum(len(g.processes) for g in snapshot.gpus) == PROCESSES, snapshot
        assert kinds == (["compute", "mps"] if mps else ["compute"]), kinds
    finally:
        backend.close()
    return spent


def read_cpu_us(fake: Any, clients: int) -> float:
    """One MPS list read of GPU 0 (pynvml's size query and read), thread CPU, median."""
    processes = importlib.import_module("gpu_enricher.nvml.processes")
    pynvml = importlib.import_module("pynvml")
    os.environ["FAKE_NVML_PROCESSES"] = "0=" + ",".join(
        f"{20_000 + n}:1024::::m" for n in range(clients))
    os.environ["FAKE_NVML_NOT_SUPPORTED"] = ""
    fake.reset()
    pynvml.nvmlInit()
    try:
        handle = pynvml.nvmlDeviceGetHandleByIndex(0)
        assert len(processes.mps_clients(handle)) == clients
        spent = []
        for _ in range(5000):
            start = time.thread_time_ns()
            processes.mps_clients(handle)
            spent.append(time.thread_time_ns() - start)
    finally:
        pynvml.nvmlShutdown()
    return median(spent) / 1000


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--passes", type=int, default=200)
    parser.add_argument("--rounds", type=int, default=5)
    parser.add_argument("--real-cost", action="store_true")
    args = parser.parse_args()
    fake, lines = in_process_fake(args.real_cost)
    fields = frozenset(line.field for line in lines)
    medians: dict[bool, list[float]] = {True: [], False: []}
    for _ in range(args.rounds):
        for mps in (False, True):
            medians[mps].append(median(round_cpu(fake, mps, args.passes, fields)))
    without, with_ = median(medians[False]), median(medians[True])
    print(f"{GPU_COUNT} GPUs, {PROCESSES} processes, {len(fields)} fields, "
          f"cost profile {'h100' if args.real_cost else 'off'}; median of {args.rounds} "
          f"round medians ({args.passes} passes each)")
    print(f"pass CPU without the MPS list: {without * 1e3:.3f} ms")
    print(f"pass CPU with the MPS list:    {with_ * 1e3:.3f} ms")
    rounds = ", ".join(f"{(w - o) * 1e6:.0f}"
                       for w, o in zip(medians[True], medians[False], strict=True))
    print(f"added per pass: {(with_ - without) * 1e6:.0f} µs (rounds: {rounds})")
    full, empty = read_cpu_us(fake, 12), read_cpu_us(fake, 0)
    print(f"one MPS list read: {full:.1f} µs with 12 clients, {empty:.1f} µs with none; "
          f"x {GPU_COUNT} GPUs: {full * GPU_COUNT:.0f} µs, {empty * GPU_COUNT:.0f} µs per pass")
    return 0


if __name__ == "__main__":
    sys.exit(main())
