"""The soak's records and report (bench/soak.py): samples, findings, the checks' verdicts."""

from __future__ import annotations

import argparse
import shlex
import statistics
import sys
from dataclasses import asdict, dataclass, field
from datetime import datetime
from pathlib import Path

RSS_GROWTH_LIMIT = 0.05
SERIES_GROWTH_LIMIT = 0.05
HOLD_INTERVALS = 3  # assembly.make_assignments: the kubelet's last answer kept 3 intervals at most


@dataclass
class Sample:
    elapsed_s: float
    rss_mib: float
    hwm_mib: float
    cpu_pct: float  # of one core, since the previous sample
    series: int
    scrape_pods: int
    live_pods: int
    scrape_pids: int
    live_pids: int
    pods_departed: int
    scrapes: int
    errors: int
    scrape_p50_ms: float
    scrape_max_ms: float


@dataclass
class Findings:
    unknown: list[str] = field(default_factory=list)  # labels of nothing that existed
    stale: list[tuple[str, float, float]] = field(default_factory=list)  # key, lag, wall time
    unknown_count: int = 0  # the lists keep the first 100 only: an hour of a bug is long
    stale_count: int = 0
    max_lag_s: float = 0.0  # the longest a departed pod's label was still served
    series_warmup_max: int = 0
    series_max: int = 0


def holds(log: Path) -> list[float]:
    """When the exporter said it keeps a source's last answer (its kubelet `List` or another
    source missed its deadline): the wall-clock times of those WARNING lines."""
    times = []
    for line in log.read_text(errors="replace").splitlines():
        if "WARNING" in line and "keeping" in line:
            try:
                times.append(datetime.strptime(line[:23], "%Y-%m-%d %H:%M:%S,%f").timestamp())
            except ValueError:
                continue
    return times


def summarize(samples: list[Sample], found: Findings, warmup: float,
              args: argparse.Namespace) -> dict[str, object]:
    # A stale label is explained when a hold began in the 3 intervals (the kubelet source's
    # max age at -c 1000 and longer) before the pod departed, or after.
    hold_span = HOLD_INTERVALS * args.interval_ms / 1000 + args.slack
    kept = holds(args.out / "exporter.log")
    interval = args.interval_ms / 1000
    explained = [lag <= hold_span + interval and any(wall - lag - hold_span <= t <= wall
                                                     for t in kept)
                 for _, lag, wall in found.stale]
    after = [s for s in samples if s.elapsed_s >= warmup]
    if not after:
        raise RuntimeError("no sample after the warm-up: run longer or sample more often")
    rss_warm = after[0].rss_mib
    rss_end = statistics.median(s.rss_mib for s in samples[-3:])
    growth = rss_end / rss_warm - 1
    series_growth = found.series_max / max(found.series_warmup_max, 1) - 1
    total_errors = samples[-1].errors
    return {
        "command": shlex.join([".venv/bin/python", "bench/soak.py", *sys.argv[1:]]),
        "duration_s": args.duration, "interval_ms": args.interval_ms, "warmup_s": warmup,
        "scrapes": samples[-1].scrapes, "errors": total_errors,
        "pods_departed": samples[-1].pods_departed,
        "rss_warm_mib": rss_warm, "rss_end_mib": rss_end, "rss_growth": growth,
        "rss_max_after_warmup_mib": max(s.rss_mib for s in after),
        "hwm_mib": samples[-1].hwm_mib,
        "cpu_pct_median": statistics.median(s.cpu_pct for s in after),
        "series_warmup_max": found.series_warmup_max, "series_max": found.series_max,
        "series_growth": series_growth,
        "unknown_labels": found.unknown[:20], "unknown_count": found.unknown_count,
        "stale_labels": [f"{k} {lag:.2f}s after it departed{' (explained)' if ok else ''}"
                         for (k, lag, _), ok in zip(found.stale[:20], explained, strict=False)],
        "stale_count": found.stale_count, "stale_explained": sum(explained),
        "max_departed_lag_s": found.max_lag_s,
        "ok_rss": growth <= RSS_GROWTH_LIMIT,
        "ok_bounded": not found.unknown and series_growth <= SERIES_GROWTH_LIMIT,
        "ok_stale": found.stale_count == sum(explained),
        "ok_errors": total_errors == 0,
        "samples": [asdict(s) for s in samples],
    }


def report(result: dict[str, object], curve_every: float) -> str:
    samples = result["samples"]
    assert isinstance(samples, list)
    rows, next_at = [], 0.0
    for s in samples:
        if s["elapsed_s"] >= next_at or s is samples[-1]:
            rows.append(s)
            next_at = s["elapsed_s"] + curve_every - 0.5 * curve_every / 10
    lines = [f"`{result['command']}`", "",
             "| t (s) | RSS MiB | HWM MiB | CPU % of a core | series | pods in scrape / live "
             "| pids in scrape / live | pods departed | scrapes | errors | scrape p50 / max ms |",
             "|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|"]
    lines += [f"| {s['elapsed_s']:.0f} | {s['rss_mib']:.1f} | {s['hwm_mib']:.1f} | "
              f"{s['cpu_pct']:.1f} | {s['series']} | {s['scrape_pods']} / {s['live_pods']} | "
              f"{s['scrape_pids']} / {s['live_pids']} | {s['pods_departed']} | {s['scrapes']} | "
              f"{s['errors']} | {s['scrape_p50_ms']:.1f} / {s['scrape_max_ms']:.1f} |"
              for s in rows]
    verdict = {True: "met", False: "NOT MET"}
    lines += ["",
              f"- RSS after warm-up ({result['warmup_s']:.0f} s) {result['rss_warm_mib']:.1f} MiB "
              f"-> end {result['rss_end_mib']:.1f} MiB: {100 * result['rss_growth']:+.1f} % "
              f"(max {result['rss_max_after_warmup_mib']:.1f}; limit +5 %): "
              f"{verdict[bool(result['ok_rss'])]}",
              f"- series: warm-up max {result['series_warmup_max']}, run max "
              f"{result['series_max']}; labels of nothing that existed: "
              f"{result['unknown_count']}: {verdict[bool(result['ok_bounded'])]}",
              f"- departed pods still served after one interval + slack: "
              f"{result['stale_count']}, {result['stale_explained']} of them while the exporter "
              f"kept its last kubelet answer (longest a departed pod's label was served: "
              f"{result['max_departed_lag_s']:.2f} s): {verdict[bool(result['ok_stale'])]}",
              f"- scrapes {result['scrapes']}, errors {result['errors']}, pods departed "
              f"{result['pods_departed']}"]
    return "\n".join(lines)
