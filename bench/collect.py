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

--real-cost: the fake library's cost profile on (FAKE_NVML_COST_PROFILE=h100: each call burns
the CPU it takes on a real H100), GPM on every GPU; the CPU of `NvmlBackend.sample()` per pass
for 1 and 8 GPUs with the default counters file, per field group, and in % of one core.
"""

from __future__ import annotations

import argparse
import cProfile
import importlib
import inspect
import os
import pstats
import shlex
import socket
import sys
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from functools import partial
from pathlib import Path
from typing import Any

from _common import DEFAULT_BUILD_DIR, GPU_COUNT, ROOT, build_fake_nvml, median, set_plan

from gpu_enricher.cli.flag_values import parse_drop_labels
from gpu_enricher.collector.loop import Collector, CollectorOptions
from gpu_enricher.exposition.join import PodContext, dcgm_families
from gpu_enricher.exposition.ownmetrics import OwnMetrics
from gpu_enricher.exposition.render import Exposition
from gpu_enricher.exposition.selfmetrics import self_families
from gpu_enricher.fields.collection import default_counters_path
from gpu_enricher.fields.counters import CounterLine, load_counters, plan_counters
from gpu_enricher.fields.table import PROFILING_FIELDS
from gpu_enricher.model import NodeSnapshot

TARGET_RENDER_MS = 2.0
REAL_COST_INTERVALS_MS = (1000, 5000)  # -c 1000, and the default interval


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


def measure(fake: Any, passes: int, warmup: int, mig: str | None, profile: bool,
            gpus: int = GPU_COUNT, drop: frozenset[str] = frozenset()) -> Timings:
    from gpu_enricher.nvml.backend import NvmlBackend

    os.environ["FAKE_NVML_GPU_COUNT"] = str(gpus)
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
    collector = Collector(backend, CollectorOptions(5.0, hostname, counters, drop_labels=drop))
    set_plan(collector, plan)
    session = collector._session
    session.opened = True
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
            session.collections += 1
            session.last_duration = ms_sample / 1e3  # as collect_once sets them
            session.last_success = time.time()
            ms_render, exposition = _timed(clock, collector._render)
            assert isinstance(exposition, Exposition)
            fresh = Exposition(exposition.text, exposition.openmetrics)  # nothing cached yet
            ms_gzip, gz = _timed(clock, partial(fresh.body, openmetrics=False, gzipped=True))
            p1 = time.process_time()
            # The three steps of _render, timed separately (same inputs).
            ms_dcgm, families = _timed(clock, partial(dcgm_families, pods=PodContext(drop=drop)),
                                       snapshot, plan, hostname)
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


# --real-cost ---------------------------------------------------------------------------

# Field groups of the breakdown, in report order: (label, test on the DCGM field name).
COST_GROUPS: tuple[tuple[str, Callable[[str], bool]], ...] = (
    ("energy", lambda f: "ENERGY" in f),
    ("PCIe replay", lambda f: "PCIE_REPLAY" in f),
    ("ECC / remapped rows", lambda f: any(k in f for k in ("ECC", "REMAP", "RETIRED"))),
    ("violations", lambda f: "VIOLATION" in f),
    ("GPM profiling", lambda f: f in PROFILING_FIELDS),
)
REST_GROUP = "the rest"


SLOW_INTERVALS_S = (30.0, 60.0, 120.0, 150.0, 300.0)


def cost_group(field_name: str) -> str:
    return next((label for label, test in COST_GROUPS if test(field_name)), REST_GROUP)


def slow_interval_s() -> float | None:
    """The backend's default slow-reading interval, when it has one (else every pass
    reads everything)."""
    from gpu_enricher.nvml.backend import NvmlBackend

    param = inspect.signature(NvmlBackend).parameters.get("slow_interval_seconds")
    if param is None or not isinstance(param.default, int | float):
        return None
    return float(param.default)


@dataclass
class CostRun:
    cpu_ms: list[float] = field(default_factory=list)  # thread_time around sample(), per pass
    lib_ms: list[float] = field(default_factory=list)  # CPU inside libnvidia-ml, per pass
    by_symbol: dict[str, float] = field(default_factory=dict)  # lib ms per pass, mean
    fields: int = 0


def cost_run(fake: Any, gpus: int, lines: Sequence[CounterLine], passes: int, warmup: int,
             every_pass: bool) -> CostRun:
    """`NvmlBackend.sample()` on this thread with the cost profile on. every_pass: slow
    readings refreshed every pass (slow interval 0); else the backend's default cadence,
    whose refresh falls in the first (warm-up) pass."""
    from gpu_enricher.nvml.backend import NvmlBackend

    os.environ.pop("FAKE_NVML_MIG", None)
    os.environ["FAKE_NVML_GPU_COUNT"] = str(gpus)
    os.environ["FAKE_NVML_GPM"] = ",".join(str(i) for i in range(gpus))
    os.environ["FAKE_NVML_COST_PROFILE"] = "h100"
    fake.reset()
    kwargs = {"slow_interval_seconds": 0.0} if every_pass and slow_interval_s() else {}
    backend = NvmlBackend(**kwargs)
    backend.open()
    run = CostRun()
    try:
        plan, _ = plan_counters(lines, backend.deliverable_fields(), backend.name)
        fields = plan.sampled_fields
        run.fields = len(fields)
        started = time.monotonic()
        before: dict[str, int] = {}
        for i in range(warmup + passes):
            if i == warmup:
                before = fake.cpu_ns_by_symbol()
            lib0 = fake.total_cpu_ns()
            t0 = time.thread_time()
            backend.sample(fields)
            t1 = time.thread_time()
            lib1 = fake.total_cpu_ns()
            if i >= warmup:
                run.cpu_ms.append((t1 - t0) * 1e3)
                run.lib_ms.append((lib1 - lib0) / 1e6)
        after = fake.cpu_ns_by_symbol()
        run.by_symbol = {s: (n - before.get(s, 0)) / 1e6 / passes for s, n in after.items()
                         if n > before.get(s, 0)}
        slow = slow_interval_s()
        if not every_pass and slow is not None and time.monotonic() - started >= slow:
            print(f"warning: the run took longer than the slow interval ({slow} s): its "
                  "passes include slow refreshes", file=sys.stderr)
    finally:
        backend.close()
        os.environ.pop("FAKE_NVML_COST_PROFILE", None)
        fake.reset()
    return run


def averaged_ms(every: float, cadence: float | None, interval_ms: int,
                slow_s: float | None) -> float:
    """Mean CPU per pass at -c interval_ms: slow readings refreshed once per slow interval."""
    if cadence is None or slow_s is None or slow_s <= 0:
        return every
    return cadence + (every - cadence) * min(1.0, interval_ms / 1e3 / slow_s)


def ms2(value: float) -> str:
    """Two decimals, without a '-0.00' for a difference that is zero within noise."""
    return f"{round(value, 2) + 0.0:.2f}"


def cost_table_line(fake: Any) -> str:
    fake.set_cost_profile("h100")
    costs = sorted(((fake.cost_us(s), s) for s in fake.symbols if fake.cost_us(s) >= 10),
                   reverse=True)
    extras = ", ".join(f"[{f}] {fake.field_cost_us(f):,}" for f in (83, 94))
    fake.reset()
    parts = [f"{name.removeprefix('nvml')} {us:,}" for us, name in costs
             if name != "nvmlDeviceGetFieldValues"]
    return (f"cost profile h100 (us per call): {', '.join(parts)}; DeviceGetFieldValues: sum of "
            f"{extras}, else 10; other device calls 5 (strings 8)")


def real_cost(fake: Any, args: argparse.Namespace) -> int:
    passes = args.passes if args.passes is not None else 40
    warmup = args.warmup if args.warmup is not None else 3
    gpu_counts = [int(g) for g in args.gpus.split(",")]
    counters_path = args.counters or default_counters_path()
    lines = load_counters(counters_path)
    slow_s = slow_interval_s()
    groups = [label for label, _ in COST_GROUPS] + [REST_GROUP]
    by_group = {g: [ln for ln in lines if cost_group(ln.field) == g] for g in groups}
    groups = [g for g in groups if by_group[g]]
    print(f"# {shlex.join(['.venv/bin/python', 'bench/collect.py', *sys.argv[1:]])}\n")
    print(cost_table_line(fake))
    rows: list[tuple[int, str, CostRun, CostRun | None]] = []
    symbols: dict[int, dict[str, float]] = {}
    for gpus in gpu_counts:
        variants: list[tuple[str, Sequence[CounterLine]]] = [
            (f"all: {counters_path.name}", lines), ("fixed", ())]
        variants += [(f"+ {g}", by_group[g]) for g in groups]
        for label, subset in variants:
            print(f"{gpus} GPU(s): {label}", file=sys.stderr)
            every = cost_run(fake, gpus, subset, passes, warmup, every_pass=True)
            cadence = (cost_run(fake, gpus, subset, passes, warmup, every_pass=False)
                       if slow_s is not None else None)
            rows.append((gpus, label, every, cadence))
            if not subset or subset is lines:
                symbols.setdefault(gpus, every.by_symbol)

    ivals = "/".join(str(ms) for ms in REAL_COST_INTERVALS_MS)
    print(f"\nCPU ms per pass on the NVML thread: time.thread_time() around "
          f"NvmlBackend.sample(), median of {passes} passes after {warmup} warm-up; "
          "FAKE_NVML_COST_PROFILE=h100, FAKE_NVML_GPM on every GPU, no MIG. 'in lib': the "
          "part inside libnvidia-ml (the fake's per-symbol CPU counter). 'fixed': no fields "
          "(handles, MIG mode, processes); '+ group': that group's counter lines alone, minus "
          f"'fixed'. % core at -c {ivals} ms.")
    if slow_s is None:
        print("This backend reads every field every pass (no slow cadence).")
    else:
        print(f"'every pass': slow readings refreshed every pass (slow interval 0: the "
              f"design before the cadence); 'cadence': the default, refreshed every "
              f"{slow_s:g} s: a pass without refresh, and the mean per pass at -c N ms = "
              f"cadence + (every - cadence) x N / {slow_s * 1e3:g}.")
    head = "| GPUs | fields | every pass | in lib | % core"
    rule = "|---:|---|---:|---:|---:|"
    if slow_s is not None:
        head += f" | cadence | mean ms/pass -c {ivals} | % core"
        rule += "---:|---:|---:|"
    print(f"\n{head} |\n{rule}")
    base: dict[int, tuple[float, float, float | None]] = {}
    for gpus, label, every, cadence in rows:
        e, lib = median(every.cpu_ms), median(every.lib_ms)
        c = median(cadence.cpu_ms) if cadence is not None else None
        if label.startswith("fixed"):
            base[gpus] = (e, lib, c)
        elif label.startswith("+"):
            be, blib, bc = base[gpus]
            e, lib = e - be, lib - blib
            c = c - bc if c is not None and bc is not None else None
        pct = " / ".join(ms2(e / ms * 100) for ms in REAL_COST_INTERVALS_MS)
        line = f"| {gpus} | {label} ({every.fields}) | {ms2(e)} | {ms2(lib)} | {pct}"
        if slow_s is not None and c is not None:
            means = [averaged_ms(e, c, ms, slow_s) for ms in REAL_COST_INTERVALS_MS]
            line += (f" | {ms2(c)} | {' / '.join(ms2(m) for m in means)} | "
                     + " / ".join(ms2(m / ms * 100)
                                  for m, ms in zip(means, REAL_COST_INTERVALS_MS, strict=True)))
        print(f"{line} |")
    if slow_s is not None:  # what a longer --slow-fields-interval would give, same medians
        print(f"\nAll fields, mean % of a core at -c {ivals} ms by --slow-fields-interval:")
        for gpus, label, every, cadence in rows:
            if label.startswith("all") and cadence is not None:
                e, c = median(every.cpu_ms), median(cadence.cpu_ms)
                by_slow = ", ".join(
                    f"{s:g} s " + " / ".join(ms2(averaged_ms(e, c, ms, s) / ms * 100)
                                            for ms in REAL_COST_INTERVALS_MS)
                    for s in SLOW_INTERVALS_S)
                print(f"- {gpus} GPU(s): {by_slow}")
    for gpus, per_symbol in symbols.items():
        top = sorted(per_symbol.items(), key=lambda kv: -kv[1])
        text = ", ".join(f"{s.removeprefix('nvml')} {ms:.2f}" for s, ms in top if ms >= 0.05)
        print(f"\n{gpus} GPU(s), all fields, every pass: libnvidia-ml CPU ms per pass by call "
              f"(>= 0.05): {text}")
    return 0


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--passes", type=int, default=None,
                        help="measured passes (default 200; --real-cost: 40)")
    parser.add_argument("--warmup", type=int, default=None,
                        help="warm-up passes (default 20; --real-cost: 3)")
    parser.add_argument("--real-cost", action="store_true",
                        help="CPU per NVML pass with the fake's h100 cost profile, per group")
    parser.add_argument("--gpus", default=None,
                        help="GPU counts, e.g. 1,8,64 (default 8; --real-cost: 1,8)")
    parser.add_argument("--counters", type=Path, default=None,
                        help="--real-cost: counters file (default: the bundled one)")
    parser.add_argument("--mig-instances", type=int, default=7,
                        help="GPU instances per GPU in the MIG variant (1..7)")
    parser.add_argument("--profile", action="store_true",
                        help="print a cProfile of the render step to stderr")
    parser.add_argument("--build-dir", type=Path, default=DEFAULT_BUILD_DIR)
    parser.add_argument("--drop-labels", default=None, metavar="NAMES",
                        help="also measure each node with these labels dropped (--drop-labels)")
    args = parser.parse_args()

    lib = build_fake_nvml(args.build_dir)
    if str(ROOT) not in sys.path:
        sys.path.insert(0, str(ROOT))
    fake_cls = importlib.import_module("tests.fake_nvml.build").FakeNvml
    fake = fake_cls(lib)  # before pynvml loads libnvidia-ml.so.1: pynvml reuses this one
    if args.real_cost:
        args.gpus = args.gpus or "1,8"
        return real_cost(fake, args)
    args.passes = 200 if args.passes is None else args.passes
    args.warmup = 20 if args.warmup is None else args.warmup

    counts = [int(g) for g in (args.gpus or str(GPU_COUNT)).split(",")]
    variants = [v for n in counts for v in (
        (f"{n} GPUs", n, None),
        (f"{n} GPUs x {args.mig_instances} MIG", n, mig_spec(n, args.mig_instances)))]
    drops = [frozenset()] + ([parse_drop_labels(args.drop_labels)] if args.drop_labels else [])
    rows = []
    for label, n, mig in variants:
        for drop in drops:
            t = measure(fake, args.passes, args.warmup, mig, args.profile, n, drop)
            rows.append((label + (", --drop-labels" if drop else ""), t))

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
    first_label, first = next((row for row in rows if row[0] == f"{GPU_COUNT} GPUs"), rows[0])
    verdict = "met" if median(first.render) <= TARGET_RENDER_MS else "MISSED"
    print(f"\n(ii) for {first_label}: {median(first.render):.3f} ms, target <= "
          f"{TARGET_RENDER_MS} ms: {verdict}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
