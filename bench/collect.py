"""CPU time of one collection pass, in-process over the fake NVML library.

Per pass, with `time.thread_time()` (CPU time of this thread only):
  (i)   `NvmlBackend.sample()`: the NVML calls through pynvml (the fake's C code is trivial,
        so this is pynvml/ctypes and our Python around it);
  (ii)  join + render, `Collector._render()`: dcgm_families, the exporter's own metrics
        (self_families + OwnMetrics.render: prometheus_client with its process_*/python_*
        collectors, both formats) and the DCGM render (text and OpenMetrics), also broken
        down per step;
  (iii) gzip of the text body, `Exposition.body(gzipped=True)` on a fresh Exposition (the
        lazy compression the first gzip scrape of a cycle pays).
Two nodes: 8 GPUs, and 8 GPUs in MIG mode with 7 GPU instances each. See bench/README.md.
"""

from __future__ import annotations

import argparse
import cProfile
import importlib
import os
import pstats
import socket
import sys
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from functools import partial
from pathlib import Path
from typing import Any

from _common import DEFAULT_BUILD_DIR, GPU_COUNT, ROOT, build_fake_nvml, median

from gpu_enricher.cli import default_counters_path
from gpu_enricher.collector import Collector, CollectorOptions
from gpu_enricher.counters import load_counters, plan_counters
from gpu_enricher.join import dcgm_families
from gpu_enricher.model import NodeSnapshot
from gpu_enricher.ownmetrics import OwnMetrics
from gpu_enricher.render import Exposition
from gpu_enricher.selfmetrics import self_families

TARGET_RENDER_MS = 2.0


@dataclass
class Timings:
    sample: list[float] = field(default_factory=list)
    render: list[float] = field(default_factory=list)
    dcgm_families: list[float] = field(default_factory=list)
    self_families: list[float] = field(default_factory=list)
    from_families: list[float] = field(default_factory=list)
    gzip_text: list[float] = field(default_factory=list)
    process_total: float = 0.0
    series: int = 0
    text_bytes: int = 0
    gzip_bytes: int = 0


def _timed(clock: Callable[[], float], fn: Callable[..., Any], *args: Any) -> tuple[float, Any]:
    t0 = clock()
    result = fn(*args)
    return (clock() - t0) * 1e3, result


def mig_spec(gpus: int, instances: int) -> str:
    per_gpu = ",".join(f"{gi}:19" for gi in range(1, instances + 1))
    return ";".join(f"{i}={per_gpu}" for i in range(gpus))


def measure(fake: Any, passes: int, warmup: int, mig: str | None, profile: bool) -> Timings:
    from gpu_enricher.nvml import NvmlBackend

    os.environ["FAKE_NVML_GPU_COUNT"] = str(GPU_COUNT)
    if mig is None:
        os.environ.pop("FAKE_NVML_MIG", None)
    else:
        os.environ["FAKE_NVML_MIG"] = mig
    fake.reset()
    backend = NvmlBackend()
    backend.open()
    counters = load_counters(default_counters_path())
    plan, _ = plan_counters(counters, backend.deliverable_fields(), backend.name)
    hostname = socket.gethostname()
    collector = Collector(backend, CollectorOptions(5.0, hostname, counters))
    collector.plan = plan
    collector._opened = True
    fields = plan.sampled_fields
    clock = time.thread_time
    own_metrics = OwnMetrics()
    t = Timings()
    try:
        for i in range(warmup + passes):
            p0 = time.process_time()
            ms_sample, snapshot = _timed(clock, backend.sample, fields)
            assert isinstance(snapshot, NodeSnapshot)
            collector.snapshot = snapshot
            collector._collections += 1
            collector._last_duration = ms_sample / 1e3  # as collect_once sets them
            collector._last_success = time.time()
            ms_render, exposition = _timed(clock, collector._render)
            assert isinstance(exposition, Exposition)
            fresh = Exposition(exposition.text, exposition.openmetrics)  # nothing cached yet
            ms_gzip, gz = _timed(clock, partial(fresh.body, openmetrics=False, gzipped=True))
            p1 = time.process_time()
            # The three steps of _render, timed separately (same inputs).
            ms_dcgm, families = _timed(clock, dcgm_families, snapshot, plan, hostname)
            ms_self, _ = _timed(clock, lambda: own_metrics.render(self_families(
                collector.snapshot, collector.health(), hostname, backend.name)))
            ms_from, _ = _timed(clock, Exposition.from_families, families)
            if i < warmup:
                continue
            t.sample.append(ms_sample)
            t.render.append(ms_render)
            t.gzip_text.append(ms_gzip)
            t.dcgm_families.append(ms_dcgm)
            t.self_families.append(ms_self)
            t.from_families.append(ms_from)
            t.process_total += (p1 - p0) * 1e3
            t.series = sum(1 for line in exposition.text.splitlines()
                           if not line.startswith(b"#"))
            t.text_bytes = len(exposition.text)
            t.gzip_bytes = len(gz)
        if profile:
            prof = cProfile.Profile()
            prof.enable()
            for _ in range(50):
                collector._render()
            prof.disable()
            print(f"\ncProfile of 50 x Collector._render() (MIG: {mig is not None}):",
                  file=sys.stderr)
            pstats.Stats(prof, stream=sys.stderr).sort_stats("tottime").print_stats(15)
    finally:
        backend.close()
    return t


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--passes", type=int, default=200)
    parser.add_argument("--warmup", type=int, default=20)
    parser.add_argument("--mig-instances", type=int, default=7,
                        help="GPU instances per GPU in the MIG variant (1..7)")
    parser.add_argument("--profile", action="store_true",
                        help="print a cProfile of the render step to stderr")
    parser.add_argument("--build-dir", type=Path, default=DEFAULT_BUILD_DIR)
    args = parser.parse_args()

    lib = build_fake_nvml(args.build_dir)
    if str(ROOT) not in sys.path:
        sys.path.insert(0, str(ROOT))
    fake_cls = importlib.import_module("tests.fake_nvml.build").FakeNvml
    fake = fake_cls(lib)  # before pynvml loads libnvidia-ml.so.1: pynvml reuses this one

    variants = [(f"{GPU_COUNT} GPUs", None),
                (f"{GPU_COUNT} GPUs x {args.mig_instances} MIG",
                 mig_spec(GPU_COUNT, args.mig_instances))]
    rows = []
    for label, mig in variants:
        t = measure(fake, args.passes, args.warmup, mig, args.profile)
        rows.append((label, t))

    print(f"CPU ms per pass (thread_time), median of {args.passes} passes after "
          f"{args.warmup} warm-up passes\n")
    print("| node | series | body B (gzip B) | (i) sample | (ii) join+render "
          "[dcgm join / own metrics / dcgm render] | (iii) gzip | total (process_time, mean) |")
    print("|---|---:|---:|---:|---:|---:|---:|")
    for label, t in rows:
        print(f"| {label} | {t.series} | {t.text_bytes:,} ({t.gzip_bytes:,}) "
              f"| {median(t.sample):.3f} | {median(t.render):.3f} "
              f"[{median(t.dcgm_families):.3f} / {median(t.self_families):.3f} / "
              f"{median(t.from_families):.3f}] | {median(t.gzip_text):.3f} "
              f"| {t.process_total / args.passes:.3f} |")
    first = rows[0][1]
    verdict = "met" if median(first.render) <= TARGET_RENDER_MS else "MISSED"
    print(f"\n(ii) for {GPU_COUNT} GPUs: {median(first.render):.3f} ms, target <= "
          f"{TARGET_RENDER_MS} ms: {verdict}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
