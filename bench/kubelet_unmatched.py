"""bench/kubelet.py's `unmatched` section (issue 26, item 1): a ~50 MB `List` answer whose
250,000 device IDs are all in GPU form (`GPU-…`, resource `nvidia.com/gpu`) but name no GPU of
this node, beside the dense MIG node's 110 pods; `GetAllocatableResources` lists them too (the
device plugin advertises them), one entry per device.

Per round, interleaved, each variant an exporter of its own at `-c --unmatched-interval` (2000,
as in the issue): `110 pods` (the baseline), the unmatched answer at the default
--kubelet-list-cpu-budget, and the unmatched answer with the budget off (a List every pass).
Each: /metrics under wrk (plain, `--unmatched-duration` s, after `--warmup`), p99; VmRSS after
the first List and after the tenth (budget off and baseline only: at the default budget the
tenth List is minutes away), each the least of 3 s of samples every 50 ms: what is kept between
calls, not an answer being received (the most sampled is the peak). Reported: medians over
`--unmatched-rounds`, the per-round p99 ratios to the baseline (target <= 1.2) and RSS after 10
Lists minus after 1 (target <= 60 MB).
"""

from __future__ import annotations

import argparse
import asyncio
import json
import signal
import sys
import threading
import time
from pathlib import Path

from _common import Server, http_get, median, proc_status_kib
from fake_kubelet_proc import ChurningKubelet
from fake_kubelet_proc import Node as KubeletNode
from kubelet_node import LIST_CPU, KubeletProc, Node, counters
from scrape import WrkResult, parse_wrk, ratio, run_wrk

from gpu_enricher.model import AllocatableDevices, PodAssignment

TARGET_P99_RATIO = 1.2
TARGET_RSS_GROWTH_MB = 60.0
IDS_PER_CONTAINER = 10


def unmatched_pods(ids: int) -> list[PodAssignment]:
    """Pods of two containers, each holding ten ~200-byte `nvidia.com/gpu` IDs in GPU form
    that name no GPU of the node (a broken device plugin's replicas): 250,000 IDs answer
    ~50 MB."""
    pad = "f" * 150
    pods = ids // (2 * IDS_PER_CONTAINER)
    return [PodAssignment(f"batch-{n % 50}", f"replica-job-{n:06d}", container, "nvidia.com/gpu",
                          tuple(f"GPU-{n:08x}-{c:04x}-{d:04x}-8f33-1343419b1a1c-{pad}::{d}"
                                for d in range(IDS_PER_CONTAINER)))
            for n in range(pods) for c, container in enumerate(("worker", "sidecar"))]


async def serve_unmatched(socket_path: Path, ids: int) -> None:
    """The dense MIG node of fake_kubelet_proc.py plus `ids` unmatched device IDs, held by pods
    in `List` and, as a device plugin advertises them, in `GetAllocatableResources` (one entry
    per device, as a kubelet answers)."""
    kubelet = ChurningKubelet(socket_path, KubeletNode(), 0)
    pods = unmatched_pods(ids)
    kubelet.set_assignments([*kubelet.node.assignments(), *pods])
    kubelet.set_allocatable([*kubelet.node.allocatable(), *(
        AllocatableDevices(p.resource, (d,)) for p in pods for d in p.device_ids)])
    stop = asyncio.Event()
    loop = asyncio.get_running_loop()
    for sig in (signal.SIGTERM, signal.SIGINT):
        loop.add_signal_handler(sig, stop.set)
    await kubelet.start()
    print(f"ready {socket_path} pods={kubelet.node.pods} bytes={kubelet.list_answer_bytes}",
          flush=True)
    try:
        await stop.wait()
    finally:
        await kubelet.stop(grace=0.5)
    print(json.dumps({"list_calls": kubelet.calls["v1.List"], "calls": dict(kubelet.calls)}),
          flush=True)


def _metrics(server: Server) -> str:
    """/metrics, however long it takes: before issue 26 this answer stalled it for seconds."""
    status, _, body = http_get(server.base + "/metrics", timeout=120)
    assert status == 200, status
    return body.decode()


def _drain(server: Server) -> None:
    """Read the exporter's stderr away: before issue 26 it logged one line per unmatched ID
    (1,000 of them), more than a pipe holds, and blocked on the write."""
    assert server.proc is not None and server.proc.stderr is not None
    stream = server.proc.stderr
    threading.Thread(target=lambda: [None for _ in iter(lambda: stream.read(65536), b"")],
                     daemon=True).start()


def _wait_lists(server: Server, count: int, timeout: float) -> tuple[float, float]:
    """Wait for the exporter's `count`-th kubelet List and its allocatable devices (asked after
    the first List); then its VmRSS in MB (10^6 B), the least and the most of 3 s of samples: a
    List answer in progress holds its ~50 MB message meanwhile."""
    deadline = time.monotonic() + timeout
    while counters(_metrics(server)).get("kubelet", 0) < count:
        if time.monotonic() > deadline:
            raise RuntimeError(f"no {count} kubelet Lists within {timeout:g} s")
        time.sleep(0.05)
    # The first List is followed by the first GetAllocatableResources: that too, for up to 30 s
    # (before issue 26 a 50 MB one outlasted every pass's deadline and never arrived).
    deadline = time.monotonic() + 30
    while "gpu_enricher_kubelet_allocatable_devices{" not in _metrics(server) and \
            time.monotonic() < deadline:
        time.sleep(0.05)
    samples = []
    for _ in range(60):
        samples.append(proc_status_kib(server.pid, "VmRSS") * 1024 / 1e6)
        time.sleep(0.05)
    return min(samples), max(samples)


Run = tuple[WrkResult, float, float | None, int, float, float]
"""wrk, RSS after 1 List, after 10, Lists, the last List's CPU (s, the client's thread), the
peak RSS sampled."""


def section_unmatched(node: Node, args: argparse.Namespace) -> str:
    small = "110 pods"
    large = f"+{args.unmatched_ids:,} unmatched IDs"
    kubelets: dict[str, KubeletProc] = {
        small: KubeletProc(node.socket(), 0, node.side_cpus, 0),
        large: KubeletProc(node.socket(), 0, node.side_cpus, serve=(
            "--serve-unmatched", "--unmatched-ids", str(args.unmatched_ids)))}
    no_budget = f"{large}, no CPU budget"
    variants = {small: (small, ["--kubelet-list-cpu-budget", "0"], True),
                large: (large, [], False),
                no_budget: (large, ["--kubelet-list-cpu-budget", "0"], True)}
    wrk_args = argparse.Namespace(threads=args.threads, connections=args.connections)
    runs: dict[str, list[Run]] = {name: [] for name in variants}
    started = time.monotonic()
    try:
        for kubelet in kubelets.values():
            kubelet.start(timeout=180)
        for rnd in range(1, args.unmatched_rounds + 1):
            for name, (answer, more, tenth) in variants.items():
                server = node.exporter(name, args.unmatched_interval,
                                       kubelets[answer].socket_path, more)
                server.start()
                _drain(server)
                try:
                    server.wait_status("/ready")
                    rss1, peak = _wait_lists(server, 1, 60)
                    url = server.base + "/metrics"
                    if args.warmup > 0:
                        run_wrk(url, wrk_args, args.warmup, False, node.side_cpus)
                    out = run_wrk(url, wrk_args, args.unmatched_duration, False, node.side_cpus)
                    rss10 = None
                    if tenth:
                        rss10, peak10 = _wait_lists(server, 10, 300)
                        peak = max(peak, peak10)
                    text = _metrics(server)
                    lists = counters(text).get("kubelet", 0)
                    cpu = LIST_CPU.search(text)
                    list_cpu = float(cpu[1]) if cpu else float("nan")
                finally:
                    server.stop()
                result = parse_wrk(out, name, "plain", rnd)
                runs[name].append((result, rss1, rss10, lists, list_cpu, peak))
                print(f"[{time.monotonic() - started:5.0f}s] round {rnd} {name:40} "
                      f"p99 {result.p99_ms:7.2f} ms, {result.rps:8,.0f} req/s, RSS after 1 List "
                      f"{rss1:.1f} MB, after 10 {rss10 or float('nan'):.1f} MB, peak "
                      f"{peak:.1f} MB, {lists} Lists of "
                      f"{list_cpu:.3f} s CPU, wrk errors: {result.errors or '-'}",
                      file=sys.stderr)
    finally:
        for kubelet in kubelets.values():
            kubelet.stop()
    return report(runs, kubelets, args)


def report(runs: dict[str, list[Run]], kubelets: dict[str, KubeletProc],
           args: argparse.Namespace) -> str:
    names = list(runs)
    out = [f"### {names[1]} in GPU form naming no GPU here ({kubelets[names[1]].answer_bytes:,} "
           f"B answer; 110 pods: {kubelets[names[0]].answer_bytes:,} B): wrk -t{args.threads} "
           f"-c{args.connections} -d{args.unmatched_duration}s plain, exporter -c "
           f"{args.unmatched_interval}, {args.unmatched_rounds} interleaved rounds, medians "
           "(min..max)", "",
           "| answer | req/s | p50 ms | p99 ms | p99 / 110 pods | RSS MB after 1 List "
           "| after 10 | growth MB | peak MB | Lists | List CPU s | wrk errors |",
           "|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---|"]
    base = runs[names[0]]
    verdicts = []
    for name, rs in runs.items():
        p99 = [r.p99_ms for r, *_ in rs]
        ratios = [ratio(r[0].p99_ms, b[0].p99_ms) for r, b in zip(rs, base, strict=True)]
        tenth = [r[2] for r in rs if r[2] is not None]
        growth = [r[2] - r[1] for r in rs if r[2] is not None]
        grown = (f"{median(growth):+.1f} ({min(growth):+.1f}..{max(growth):+.1f})"
                 if growth else "-")
        out.append(f"| {name} | {median([r.rps for r, *_ in rs]):,.0f} "
                   f"| {median([r.p50_ms for r, *_ in rs]):.2f} "
                   f"| {median(p99):.2f} ({min(p99):.2f}..{max(p99):.2f}) "
                   f"| {median(ratios):.2f} ({min(ratios):.2f}..{max(ratios):.2f}) "
                   f"| {median([r[1] for r in rs]):.1f} "
                   f"| {f'{median(tenth):.1f}' if tenth else '-'} | {grown} "
                   f"| {median([r[5] for r in rs]):.1f} | {median([r[3] for r in rs]):.0f} "
                   f"| {median([r[4] for r in rs]):.3f} "
                   f"| {'; '.join(sorted({r.errors for r, *_ in rs if r.errors})) or '-'} |")
        if name == names[0]:
            continue
        met = "met" if median(ratios) <= TARGET_P99_RATIO else "MISSED"
        line = f"- {name}: p99 / 110 pods {median(ratios):.2f} (target <= 1.2: {met})"
        if growth:
            met = "met" if median(growth) <= TARGET_RSS_GROWTH_MB else "MISSED"
            line += f"; RSS after 10 Lists - after 1: {median(growth):+.1f} MB (<= 60: {met})"
        verdicts.append(line)
    return "\n".join([*out, "", *verdicts])
