"""Pod attribution's cost: the exporter with `-k` against a fake kubelet on a dense MIG node.

The node: the fake NVML library with 8 GPUs x 7 `1g.10gb` MIG instances, and
`fake_kubelet_proc.py` (its own process) serving 110 pods, 56 of them holding one MIG
instance each. Sections (`--sections`, default all three):

  cpu     exporter CPU per collection pass (List included): utime + stime from /proc over
          `--cpu-seconds` without scrapes, divided by the passes done (collections_total
          {source="nvml"} from /metrics, read before and after: two scrapes), at each
          `--cpu-intervals` for: no `-k`, `-k` with churn 0, `-k` with churn 5 (pods replaced
          per List); `--cpu-repeats` interleaved repeats, medians. Target <= 20 ms/pass.
  scrape  /metrics with pod labels (`-k`, `-c 5000`) against bench/bare_server.py serving the
          same bytes on the asyncio loop (`bare`) and on uvloop (`bare-uvloop`, the exporter's
          loop), wrk plain and gzip, interleaved rounds (bench/scrape.py's machinery).
          Targets: throughput >= 0.85x bare, p99 <= 1.2x bare.
  churn   RSS growth over `--churn-events` pod churn events (`-c 100`, `--churn-per-list` pods
          per List), VmRSS after `--churn-warmup` events vs at the end, one gzip scrape of
          /metrics per second meanwhile. Target: growth <= 5 MiB.
  large   (not in the default sections) a large List answer (issue 13, defect 2): the node
          plus `--large-pods` pods without GPUs (two containers of ten 100-byte device IDs
          each: 24,000 pods answer ~50 MB), against the 110-pod answer. First the event
          loop's longest stall per List: a 5 ms ticker beside KubeletSource.refresh, in a
          process of its own pinned like the exporter, `--large-lists` Lists. Then /metrics
          under wrk (plain, `--duration` s) with the exporter at `-c` `--large-interval` (1000:
          a List per second), `--large-rounds` interleaved rounds. Target: p99 within 10 %.
          The large answer runs twice: at the default --kubelet-list-cpu-budget (2 %: a List
          per its CPU / 0.02, ~9 s for this answer on the 2-core bench machine) and with the
          budget off (a List every pass). A fourth row is
          a control: the exporter on the 110-pod answer while a process beside
          wrk (on its CPUs) pulls the large answer at the same rate, so the fake kubelet's
          sending of it loads wrk's side as in the large row, and the exporter does none of
          the work.
  unmatched  (not in the default sections) issue 26: a ~50 MB answer of 250,000 device IDs in
          GPU form naming no GPU here, against the 110-pod answer: /metrics p99 and RSS after
          1 and 10 Lists (bench/kubelet_unmatched.py).
See bench/README.md.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import json
import os
import re
import shutil
import signal
import subprocess
import sys
import tempfile
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from _common import (
    BENCH,
    DEFAULT_BUILD_DIR,
    PYTHON,
    Server,
    build_fake_nvml,
    capture_bodies,
    free_port,
    median,
    proc_cpu_seconds,
    proc_status_kib,
    wrk_ms,
)
from fake_kubelet_proc import GPUS, MIG_PER_GPU, ChurningKubelet, mig_uuid
from fake_kubelet_proc import Node as KubeletNode
from kubelet_node import LIST_CPU, KubeletProc, Node, counters, metrics_text
from kubelet_unmatched import section_unmatched, serve_unmatched
from scrape import WrkResult, parse_wrk, ratio, run_wrk

from gpu_enricher.model import (
    DeviceIdentity,
    GpuInstance,
    GpuSnapshot,
    NodeSnapshot,
    PodAssignment,
)

TARGET_CPU_MS_PER_PASS = 20.0
TARGET_THROUGHPUT_RATIO = 0.85
TARGET_P99_RATIO = 1.2
TARGET_RSS_GROWTH_MIB = 5.0
TARGET_LARGE_P99_RATIO = 1.10
SCRAPE_INTERVAL_MS = 5000
CHURN_INTERVAL_MS = 100

_ERRORS = re.compile(r'^gpu_enricher_collection_errors_total\{source="kubelet",reason="(\w+)"\}'
                     r" (\d+)", re.M)
_POD = re.compile(rb',pod="([^"]*)"')


# --- cpu: CPU per collection pass ----------------------------------------------------------

@dataclass
class CpuRun:
    interval_ms: int
    mode: str  # "no -k", "-k churn N"
    repeat: int
    passes: int
    lists: int
    seconds: float
    cpu_s: float
    kubelet_cpu_s: float
    errors: dict[str, int]

    @property
    def ms_per_pass(self) -> float:
        return 1e3 * self.cpu_s / self.passes if self.passes else float("nan")


def cpu_run(node: Node, interval_ms: int, churn: int | None, repeat: int, seconds: float,
            warmup: float) -> CpuRun:
    kubelet = None
    socket = None
    if churn is not None:
        socket = node.socket()
        kubelet = KubeletProc(socket, churn, node.side_cpus)
        kubelet.start()
    mode = "no -k" if churn is None else f"-k churn {churn}"
    server = node.exporter(mode, interval_ms, socket)
    server.start()
    try:
        server.wait_status("/ready")
        time.sleep(warmup)
        text0, _ = metrics_text(server)
        cpu0 = proc_cpu_seconds(server.pid)
        kcpu0 = proc_cpu_seconds(kubelet.pid) if kubelet else 0.0
        t0 = time.monotonic()
        time.sleep(seconds)
        cpu1 = proc_cpu_seconds(server.pid)
        kcpu1 = proc_cpu_seconds(kubelet.pid) if kubelet else 0.0
        t1 = time.monotonic()
        text1, _ = metrics_text(server)
    finally:
        server.stop()
        if kubelet is not None:
            kubelet.stop()
    c0, c1 = counters(text0), counters(text1)
    errors = {m[1]: int(m[2]) for m in _ERRORS.finditer(text1)}
    return CpuRun(interval_ms, mode, repeat, c1["nvml"] - c0["nvml"],
                  c1.get("kubelet", 0) - c0.get("kubelet", 0), t1 - t0, cpu1 - cpu0,
                  kcpu1 - kcpu0, errors)


def section_cpu(node: Node, args: argparse.Namespace) -> str:
    intervals = [int(x) for x in args.cpu_intervals.split(",")]
    modes: list[int | None] = [None, *(int(x) for x in args.cpu_churn.split(","))]
    runs: list[CpuRun] = []
    started = time.monotonic()
    for rep in range(1, args.cpu_repeats + 1):
        for interval in intervals:
            for churn in modes:
                r = cpu_run(node, interval, churn, rep, args.cpu_seconds, args.cpu_warmup)
                runs.append(r)
                print(f"[{time.monotonic() - started:5.0f}s] cpu rep {rep} -c {interval} "
                      f"{r.mode:12} {r.passes} passes {r.ms_per_pass:6.2f} ms/pass "
                      f"kubelet lists {r.lists} errors {r.errors or '-'}", file=sys.stderr)
    out = [f"### CPU per collection pass ({args.cpu_seconds:g} s windows, no scrapes, "
           f"median of {args.cpu_repeats} (min..max))", "",
           "| -c ms | exporter | passes | Lists | CPU ms/pass | vs no -k | CPU % of a core "
           "| fake kubelet CPU ms/List | kubelet errors |",
           "|---:|---|---:|---:|---:|---:|---:|---:|---|"]
    for interval in intervals:
        base = {r.repeat: r.ms_per_pass for r in runs
                if r.interval_ms == interval and r.mode == "no -k"}
        for churn in modes:
            mode = "no -k" if churn is None else f"-k churn {churn}"
            rs = [r for r in runs if r.interval_ms == interval and r.mode == mode]
            ms = [r.ms_per_pass for r in rs]
            delta = [r.ms_per_pass - base[r.repeat] for r in rs if r.repeat in base]
            pct = [100 * r.cpu_s / r.seconds for r in rs]
            kms = [1e3 * r.kubelet_cpu_s / r.lists for r in rs if r.lists]
            errs: dict[str, int] = {}
            for r in rs:
                for k, v in r.errors.items():
                    errs[k] = errs.get(k, 0) + v
            kubelet_ms = f"{median(kms):.2f}" if kms else "-"
            vs_base = "-" if churn is None else f"{median(delta):+.2f}"
            lists = "-" if churn is None else f"{median([r.lists for r in rs]):.0f}"
            out.append(
                f"| {interval} | {mode} | {median([r.passes for r in rs]):.0f} | {lists} "
                f"| {median(ms):.2f} ({min(ms):.2f}..{max(ms):.2f}) | {vs_base} "
                f"| {median(pct):.2f} | {kubelet_ms} | {errs or '-'} |")
    worst = max(median([r.ms_per_pass for r in runs if r.interval_ms == i and r.mode == m])
                for i in intervals for m in {r.mode for r in runs} if m != "no -k")
    verdict = "met" if worst <= TARGET_CPU_MS_PER_PASS else "MISSED"
    out += ["", f"- worst -k median: {worst:.2f} ms/pass (target <= "
            f"{TARGET_CPU_MS_PER_PASS:g}): {verdict}"]
    return "\n".join(out)


# --- scrape: exporter with pod labels vs bare -----------------------------------------------

def fetch_bodies(node: Node, bodies: Path, kubelet_socket: Path) -> dict[str, int]:
    """The exporter's plain and gzip /metrics bodies, stored as bare_server.py reads them."""
    server = node.exporter("exporter", SCRAPE_INTERVAL_MS, kubelet_socket)
    server.start()
    try:
        server.wait_status("/ready")
        # /ready does not wait for the kubelet: wait until the pods show up.
        deadline = time.monotonic() + 20
        while counters(metrics_text(server)[0]).get("kubelet", 0) < 1:
            if time.monotonic() > deadline:
                raise RuntimeError("the exporter never completed a kubelet List")
            time.sleep(0.1)
        headers = capture_bodies(server, bodies)
    finally:
        server.stop()
    plain = (bodies / "plain.bin").read_bytes()
    gz = (bodies / "gzip.bin").read_bytes()
    assert headers["gzip"].get("Content-Encoding") == "gzip", headers
    lines = [line for line in plain.splitlines() if not line.startswith(b"#")]
    return {"plain": len(plain), "gzip": len(gz), "series": len(lines),
            "series with pod": sum(1 for line in lines if b',pod="' in line),
            "pods": len({m for line in lines for m in _POD.findall(line)})}


def section_scrape(node: Node, args: argparse.Namespace) -> str:
    if shutil.which("wrk") is None:
        raise SystemExit("wrk is not installed (apt-get install wrk)")
    socket = node.socket()
    kubelet = KubeletProc(socket, args.scrape_churn, node.side_cpus)
    kubelet.start()
    bodies = Path(tempfile.mkdtemp(prefix="bodies-", dir=node.tmp))
    servers = ["exporter", *(b.strip() for b in args.bare.split(",") if b.strip())]
    if not set(servers[1:]) <= {"bare", "bare-uvloop"}:
        raise SystemExit(f"--bare: bare and/or bare-uvloop, not {args.bare!r}")
    wrk_args = argparse.Namespace(threads=args.threads, connections=args.connections)
    results: list[WrkResult] = []
    started = time.monotonic()
    try:
        sizes = fetch_bodies(node, bodies, socket)
        print(f"bodies: {sizes}", file=sys.stderr)
        for rnd in range(1, args.rounds + 1):
            for kind in servers:
                if kind == "exporter":
                    server = node.exporter(kind, SCRAPE_INTERVAL_MS, socket)
                else:
                    port = free_port()
                    argv = [PYTHON, str(BENCH / "bare_server.py"), "--port", str(port),
                            "--dir", str(bodies)]
                    if kind == "bare-uvloop":
                        argv.append("--uvloop")
                    server = Server(kind, argv, node.env, port, node.server_cpus)
                server.start()
                try:
                    server.wait_status("/ready")
                    if kind == "exporter":  # pod labels in place before load starts
                        while counters(metrics_text(server)[0]).get("kubelet", 0) < 1:
                            time.sleep(0.05)
                    url = server.base + "/metrics"
                    for gz in (False, True):
                        if args.warmup > 0:
                            run_wrk(url, wrk_args, args.warmup, gz, node.side_cpus)
                    for gz in (False, True):
                        result = parse_wrk(run_wrk(url, wrk_args, args.duration, gz,
                                                   node.side_cpus),
                                           kind, "gzip" if gz else "plain", rnd)
                        results.append(result)
                        print(f"[{time.monotonic() - started:5.0f}s] round {rnd} {kind:8} "
                              f"{result.variant:5} {result.rps:9,.0f} req/s "
                              f"p99 {result.p99_ms:6.2f} ms {result.errors}", file=sys.stderr)
                finally:
                    server.stop()
    finally:
        kubelet.stop()
        shutil.rmtree(bodies, ignore_errors=True)
    by: dict[tuple[str, str], list[WrkResult]] = {}
    for r in results:
        by.setdefault((r.server, r.variant), []).append(r)
    out = [f"### /metrics with pod labels: wrk -t{args.threads} -c{args.connections} "
           f"-d{args.duration}s, {args.rounds} interleaved rounds, medians", "",
           f"Body: {sizes['plain']:,} B plain, {sizes['gzip']:,} B gzip; {sizes['series']} "
           f"series, {sizes['series with pod']} with a pod label, {sizes['pods']} pods.", "",
           "| server | variant | req/s | p50 ms | p99 ms | bytes/resp | errors |",
           "|---|---|---:|---:|---:|---:|---|"]
    for kind in servers:
        for variant in ("plain", "gzip"):
            rs = by.get((kind, variant), [])
            errs = sorted({r.errors for r in rs if r.errors})
            out.append(f"| {kind} | {variant} | {median([r.rps for r in rs]):,.0f} "
                       f"| {median([r.p50_ms for r in rs]):.2f} "
                       f"| {median([r.p99_ms for r in rs]):.2f} "
                       f"| {median([r.bytes_per_response for r in rs]):,.0f} "
                       f"| {' '.join(errs) or '-'} |")
    out += ["", "Ratios, median of the per-round ratios (min..max over rounds):", "",
            "| ratio | variant | throughput | p99 | targets |", "|---|---|---:|---:|---|"]
    for base, variant in ((b, v) for b in servers[1:] for v in ("plain", "gzip")):
        ra = {r.round: r for r in by.get(("exporter", variant), [])}
        rb = {r.round: r for r in by.get((base, variant), [])}
        rounds = sorted(set(ra) & set(rb))
        tput = [ratio(ra[i].rps, rb[i].rps) for i in rounds]
        p99 = [ratio(ra[i].p99_ms, rb[i].p99_ms) for i in rounds]
        if not tput:
            continue
        ok_t = median(tput) >= TARGET_THROUGHPUT_RATIO
        ok_p = median(p99) <= TARGET_P99_RATIO
        out.append(f"| exporter/{base} | {variant} | {median(tput):.2f} "
                   f"({min(tput):.2f}..{max(tput):.2f}) "
                   f"| {median(p99):.2f} ({min(p99):.2f}..{max(p99):.2f}) "
                   f"| throughput {'met' if ok_t else 'MISSED'}, "
                   f"p99 {'met' if ok_p else 'MISSED'} |")
    return "\n".join(out)


# --- churn: RSS growth over pod churn -------------------------------------------------------

def section_churn(node: Node, args: argparse.Namespace) -> str:
    per_list = args.churn_per_list
    socket = node.socket()
    kubelet = KubeletProc(socket, per_list, node.side_cpus)
    kubelet.start()
    server = node.exporter("exporter", CHURN_INTERVAL_MS, socket)
    server.start()
    seen_pods: set[bytes] = set()
    samples: list[tuple[float, int, float]] = []  # (seconds, churn events, RSS MiB)
    rss_warm = rss_end = float("nan")
    warm_events = end_events = 0
    cpu_warm = cpu_end = 0.0
    passes_warm = passes_end = 0
    text = ""
    stats: dict[str, Any] = {}
    try:
        server.wait_status("/ready")
        pid = server.pid
        rss_ready = proc_status_kib(pid, "VmRSS") / 1024
        t0 = time.monotonic()
        deadline = t0 + args.churn_timeout
        i = 0
        while True:
            text, raw = metrics_text(server, gz=True)
            seen_pods.update(_POD.findall(raw))
            now = time.monotonic() - t0
            c = counters(text)
            # Each successful List is followed by `per_list` churn events in the kubelet.
            events = c.get("kubelet", 0) * per_list
            rss = proc_status_kib(pid, "VmRSS") / 1024
            samples.append((now, events, rss))
            if not warm_events and events >= args.churn_warmup:
                rss_warm, warm_events = rss, events
                cpu_warm, passes_warm = proc_cpu_seconds(pid), c["nvml"]
                print(f"[{now:5.0f}s] warm: {events} events, RSS {rss:.1f} MiB", file=sys.stderr)
            if warm_events and events >= warm_events + args.churn_events:
                rss_end, end_events = rss, events
                cpu_end, passes_end = proc_cpu_seconds(pid), c["nvml"]
                break
            if time.monotonic() > deadline:
                raise RuntimeError(f"only {events} churn events in {args.churn_timeout} s")
            if i % 10 == 0:
                print(f"[{now:5.0f}s] {events} events, RSS {rss:.1f} MiB", file=sys.stderr)
            i += 1
            time.sleep(max(0.0, t0 + i - time.monotonic()))
        hwm = proc_status_kib(pid, "VmHWM") / 1024
    finally:
        server.stop()
        stats = kubelet.stop()
    errors = {m[1]: int(m[2]) for m in _ERRORS.finditer(text)}
    growth = rss_end - rss_warm
    # Slope over the second half of the run (MiB per 1,000 events): steady leak vs a step.
    half = [s for s in samples if s[1] >= (warm_events + end_events) / 2]
    slope = ((half[-1][2] - half[0][2]) / (half[-1][1] - half[0][1]) * 1e3
             if len(half) > 1 and half[-1][1] > half[0][1] else float("nan"))
    cpu_ms = 1e3 * (cpu_end - cpu_warm) / max(passes_end - passes_warm, 1)
    verdict = "met" if growth <= TARGET_RSS_GROWTH_MIB else "MISSED"
    out = [f"### RSS over pod churn (-c {CHURN_INTERVAL_MS}, {per_list} pods replaced per List, "
           "one gzip scrape/s)", "",
           "| RSS at ready MiB | after warm-up MiB (events) | end MiB (events) | growth MiB "
           "| MiB per 1k events, 2nd half | VmHWM MiB | CPU ms/pass (scrapes incl.) |",
           "|---:|---:|---:|---:|---:|---:|---:|",
           f"| {rss_ready:.1f} | {rss_warm:.1f} ({warm_events:,}) | {rss_end:.1f} "
           f"({end_events:,}) | {growth:+.2f} | {slope:+.3f} | {hwm:.1f} | {cpu_ms:.2f} |", "",
           f"- growth over {end_events - warm_events:,} churn events: {growth:+.2f} MiB "
           f"(target <= {TARGET_RSS_GROWTH_MIB:g}): {verdict}",
           f"- fake kubelet: {stats.get('list_calls', '?')} List calls, "
           f"{stats.get('churn_events', '?'):,} churn events, {stats.get('pod_names', '?'):,} "
           f"distinct pod names served; {len(seen_pods):,} distinct pod names seen in the "
           f"{len(samples)} scrapes",
           f"- kubelet collection errors: {errors or 'none'}"]
    return "\n".join(out)


# --- large: a large List answer (issue 13, defect 2) ---------------------------------------

def extra_pods(count: int) -> list[PodAssignment]:
    """Pods without GPUs that make the List answer large: two containers each holding ten
    `example.com/rdma` devices with 100-byte IDs (~2.1 kB per pod on the wire)."""
    filler = "x" * 80
    return [PodAssignment(f"batch-{n % 50}", f"batch-job-{n:06d}", container, "example.com/rdma",
                          tuple(f"rdma-{n:06d}-{container[0]}-{d:03d}-{filler}"
                                for d in range(10)))
            for n in range(count) for container in ("worker", "sidecar")]


async def serve_large(socket_path: Path, extra: int) -> None:
    """The dense MIG node of fake_kubelet_proc.py plus `extra` pods without GPUs."""
    kubelet = ChurningKubelet(socket_path, KubeletNode(), 0)
    kubelet.set_assignments([*kubelet.node.assignments(), *extra_pods(extra)])
    stop = asyncio.Event()
    loop = asyncio.get_running_loop()
    for sig in (signal.SIGTERM, signal.SIGINT):
        loop.add_signal_handler(sig, stop.set)
    await kubelet.start()
    print(f"ready {socket_path} pods={kubelet.node.pods + extra} "
          f"bytes={kubelet.list_answer_bytes}", flush=True)
    try:
        await stop.wait()
    finally:
        await kubelet.stop(grace=0.5)
    print(json.dumps({"list_calls": kubelet.calls["v1.List"], "calls": dict(kubelet.calls)}),
          flush=True)


def fake_node() -> NodeSnapshot:
    """The fake NVML library's node as an NVML pass hands it to the kubelet source (whose
    client keeps only the device IDs naming it): 8 GPUs x 7 1g.10gb MIG instances."""
    return NodeSnapshot(tuple(
        GpuSnapshot(DeviceIdentity(g, f"GPU-fa4e{g:04x}-7953-256e-8f33-1343419b1a1c",
                                   f"00000000:{g + 1:02x}:00.0", "NVIDIA A100"),
                    mig_enabled=True,
                    instances=tuple(GpuInstance(gi, 0, "1g.10gb", mig_uuid(g, gi))
                                    for gi in range(1, MIG_PER_GPU + 1)))
        for g in range(GPUS)))


async def stall_probe(socket_path: Path, lists: int) -> None:
    """One JSON line per List: the longest time the event loop could not run a 5 ms ticker
    while `KubeletSource.refresh` ran, and how long the refresh took (uvloop, as the
    exporter)."""
    from gpu_enricher.kubelet.client import PodResourcesClient
    from gpu_enricher.kubelet.source import KubeletOptions, KubeletSource

    source = KubeletSource(PodResourcesClient(socket_path, 30.0),
                           KubeletOptions(max_age_seconds=3600))
    period = 0.005
    woke = time.perf_counter()
    worst = 0.0

    async def tick() -> None:
        nonlocal woke, worst
        while True:
            woke = time.perf_counter()
            await asyncio.sleep(period)
            worst = max(worst, time.perf_counter() - woke - period)

    ticker = asyncio.create_task(tick())
    try:
        for _ in range(lists):
            await asyncio.sleep(0.3)  # the previous List's garbage and threads settle
            worst = 0.0
            started = time.perf_counter()
            await source.refresh(fake_node())
            took = time.perf_counter() - started
            worst = max(worst, time.perf_counter() - woke - period)  # the tick in progress
            snapshot = source.snapshot()
            print(json.dumps({"stall_ms": 1e3 * worst, "refresh_s": took, "up": snapshot.up,
                              "cpu_s": source.last_list_cpu_seconds,
                              "assignments": len(snapshot.assignments),
                              "errors": dict(source.health().errors)}), flush=True)
    finally:
        ticker.cancel()
        await source.close()


async def pull_large(socket_path: Path, interval_ms: int) -> None:
    """The control's puller: `List` every `interval_ms` until SIGTERM, with the exporter's
    client and filters, so the fake kubelet sends the large answer as often as to the
    exporter."""
    from gpu_enricher.attribution.devices import node_index
    from gpu_enricher.kubelet.client import PodResourcesClient
    from gpu_enricher.kubelet.selection import held_on, may_name_a_gpu

    client = PodResourcesClient(socket_path, 30.0)
    keep = held_on(node_index(fake_node().gpus), frozenset())
    may_keep = may_name_a_gpu(frozenset())
    stop = asyncio.Event()
    asyncio.get_running_loop().add_signal_handler(signal.SIGTERM, stop.set)
    print("ready", flush=True)
    try:
        while not stop.is_set():
            await client.list(keep, may_keep)
            with contextlib.suppress(TimeoutError):
                async with asyncio.timeout(interval_ms / 1000):
                    await stop.wait()
    finally:
        await client.close()


def run_stall_probe(socket_path: Path, lists: int, cpus: set[int] | None) -> list[dict[str, Any]]:
    def pin() -> None:
        if cpus:
            os.sched_setaffinity(0, cpus)

    proc = subprocess.run([PYTHON, str(BENCH / "kubelet.py"), "--stall-probe", str(socket_path),
                           "--large-lists", str(lists)], capture_output=True, text=True,
                          check=True, preexec_fn=pin, timeout=60 + 30 * lists)
    return [json.loads(line) for line in proc.stdout.splitlines() if line.startswith("{")]


_WRK_MAX = re.compile(r"^\s+Latency\s+\S+\s+\S+\s+(\S+)", re.M)


def section_large(node: Node, args: argparse.Namespace) -> str:
    if shutil.which("wrk") is None:
        raise SystemExit("wrk is not installed (apt-get install wrk)")
    answers = {"110 pods": 0, f"+{args.large_pods:,} pods": args.large_pods}
    kubelets = {name: KubeletProc(node.socket(), 0, node.side_cpus, extra)
                for name, extra in answers.items()}
    small_name, large_name = answers
    unbudgeted = f"{large_name}, no CPU budget"
    control = f"110 pods, +{args.large_pods:,} pulled beside"
    # name -> (answer, more exporter flags); the large row at the default CPU budget
    variants: dict[str, tuple[str, list[str]]] = {
        small_name: (small_name, []), large_name: (large_name, []),
        unbudgeted: (large_name, ["--kubelet-list-cpu-budget", "0"]), control: (small_name, [])}
    wrk_args = argparse.Namespace(threads=args.threads, connections=args.connections)
    stalls: dict[str, list[dict[str, Any]]] = {}
    # per round: wrk's result, its max latency, Lists in the window, kubelet errors, the last
    # List's CPU (gpu_enricher_kubelet_list_cpu_seconds)
    runs: dict[str, list[tuple[WrkResult, float, int, dict[str, int], float]]] = {
        n: [] for n in variants}
    started = time.monotonic()
    try:
        for kubelet in kubelets.values():
            kubelet.start(timeout=120)
        for name, kubelet in kubelets.items():
            stalls[name] = run_stall_probe(kubelet.socket_path, args.large_lists,
                                           node.server_cpus)
            print(f"[{time.monotonic() - started:5.0f}s] stall probe {name}: "
                  f"{[round(p['stall_ms'], 1) for p in stalls[name]]} ms", file=sys.stderr)
        for rnd in range(1, args.large_rounds + 1):
            for name, (answer, more) in variants.items():
                kubelet = kubelets[answer]
                server = node.exporter(name, args.large_interval, kubelet.socket_path, more)
                server.start()
                puller = start_puller(kubelets[large_name].socket_path, args.large_interval,
                                      node.side_cpus) if name == control else None
                try:
                    server.wait_status("/ready")
                    deadline = time.monotonic() + 30
                    while counters(metrics_text(server)[0]).get("kubelet", 0) < 1:
                        if time.monotonic() > deadline:
                            raise RuntimeError("the exporter never completed a kubelet List")
                        time.sleep(0.05)
                    url = server.base + "/metrics"
                    if args.warmup > 0:
                        run_wrk(url, wrk_args, args.warmup, False, node.side_cpus)
                    before = counters(metrics_text(server)[0]).get("kubelet", 0)
                    wrk_out = run_wrk(url, wrk_args, args.duration, False, node.side_cpus)
                    text = metrics_text(server)[0]
                    lists = counters(text).get("kubelet", 0) - before
                    errors = {m[1]: int(m[2]) for m in _ERRORS.finditer(text)}
                    found_cpu = LIST_CPU.search(text)
                    list_cpu = float(found_cpu[1]) if found_cpu else float("nan")
                finally:
                    server.stop()
                    if puller is not None:
                        puller.terminate()
                        puller.wait(timeout=30)
                result = parse_wrk(wrk_out, name, "plain", rnd)
                found = _WRK_MAX.search(wrk_out)
                worst_ms = wrk_ms(found[1]) if found else float("nan")
                runs[name].append((result, worst_ms, lists, errors, list_cpu))
                print(f"[{time.monotonic() - started:5.0f}s] round {rnd} {name:30} "
                      f"{result.rps:9,.0f} req/s p99 {result.p99_ms:6.2f} ms max "
                      f"{worst_ms:7.2f} ms, {lists} Lists of {list_cpu:.3f} s CPU, "
                      f"errors {errors or '-'}",
                      file=sys.stderr)
    finally:
        for kubelet in kubelets.values():
            kubelet.stop()
    names = list(answers)
    out = [f"### A large List answer: the event loop's longest stall per List "
           f"({args.large_lists} Lists, a 5 ms ticker beside KubeletSource.refresh)", "",
           "| answer | bytes | assignments | stall ms, median (max) | refresh s, median | "
           "List CPU s, median | errors |", "|---|---:|---:|---:|---:|---:|---|"]
    for name in names:
        probe = stalls[name]
        probe_errors = {k: v for p in probe for k, v in p["errors"].items()}
        out.append(f"| {name} | {kubelets[name].answer_bytes:,} "
                   f"| {probe[-1]['assignments'] if probe else '-'} "
                   f"| {median([p['stall_ms'] for p in probe]):.1f} "
                   f"({max((p['stall_ms'] for p in probe), default=float('nan')):.1f}) "
                   f"| {median([p['refresh_s'] for p in probe]):.3f} "
                   f"| {median([p['cpu_s'] for p in probe if p['cpu_s'] is not None]):.3f} "
                   f"| {probe_errors or '-'} |")
    out += ["", f"### /metrics while the answer is processed: wrk -t{args.threads} "
            f"-c{args.connections} -d{args.duration}s plain, exporter -c {args.large_interval} "
            "(one List per pass, or per its CPU cost / --kubelet-list-cpu-budget), "
            f"{args.large_rounds} interleaved rounds, medians", "",
            "| answer | req/s | p50 ms | p99 ms | max ms | Lists in the window "
            "| List CPU s | kubelet errors |",
            "|---|---:|---:|---:|---:|---:|---:|---|"]
    for name in variants:
        rs = runs[name]
        errs: dict[str, int] = {}
        for _, _, _, e, _ in rs:
            for k, v in e.items():
                errs[k] = max(errs.get(k, 0), v)
        out.append(f"| {name} | {median([r.rps for r, *_ in rs]):,.0f} "
                   f"| {median([r.p50_ms for r, *_ in rs]):.2f} "
                   f"| {median([r.p99_ms for r, *_ in rs]):.2f} "
                   f"| {median([w for _, w, *_ in rs]):.2f} "
                   f"| {median([n for _, _, n, *_ in rs]):.0f} "
                   f"| {median([c for *_, c in rs]):.3f} | {errs or '-'} |")
    small, large, free, beside = (runs[n] for n in variants)
    p99 = [ratio(b[0].p99_ms, a[0].p99_ms) for a, b in zip(small, large, strict=True)]
    if p99:
        verdict = "met" if median(p99) <= TARGET_LARGE_P99_RATIO else "MISSED"
        out += ["", f"- p99 large (default CPU budget) / 110 pods: {median(p99):.2f} "
                f"({min(p99):.2f}..{max(p99):.2f}); target <= {TARGET_LARGE_P99_RATIO:.2f}: "
                f"{verdict}"]
        for label, base, other in (("large, no CPU budget / 110 pods", small, free),
                                   ("control / 110 pods", small, beside),
                                   ("large, no CPU budget / control", beside, free)):
            ratios = [ratio(b[0].p99_ms, a[0].p99_ms)
                      for a, b in zip(base, other, strict=True)]
            out.append(f"- p99 {label}: {median(ratios):.2f} "
                       f"({min(ratios):.2f}..{max(ratios):.2f})")
    return "\n".join(out)


def start_puller(socket_path: Path, interval_ms: int,
                 cpus: set[int] | None) -> subprocess.Popen[str]:
    def pin() -> None:
        if cpus:
            os.sched_setaffinity(0, cpus)

    proc = subprocess.Popen([PYTHON, str(BENCH / "kubelet.py"), "--pull-large", str(socket_path),
                             "--large-interval", str(interval_ms)], stdout=subprocess.PIPE,
                            text=True, preexec_fn=pin)
    assert proc.stdout is not None
    if proc.stdout.readline().strip() != "ready":
        raise RuntimeError("the control's puller did not start")
    return proc


def run_probe(socket_path: Path, lists: int) -> None:
    """The stall probe on uvloop when installed (the exporter's loop), else asyncio's."""
    try:
        import uvloop
    except ImportError:
        asyncio.run(stall_probe(socket_path, lists))
        return
    with asyncio.Runner(loop_factory=uvloop.new_event_loop) as runner:
        runner.run(stall_probe(socket_path, lists))


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--sections", default="cpu,scrape,churn")
    parser.add_argument("--cpu-intervals", default="200,1000", help="exporter -c values")
    parser.add_argument("--cpu-churn", default="0,5", help="-k modes: pods churned per List")
    parser.add_argument("--cpu-seconds", type=float, default=60.0)
    parser.add_argument("--cpu-warmup", type=float, default=3.0)
    parser.add_argument("--cpu-repeats", type=int, default=3)
    parser.add_argument("--rounds", type=int, default=5, help="scrape rounds")
    parser.add_argument("--duration", type=int, default=8, help="wrk -d, seconds")
    parser.add_argument("--bare", default="bare,bare-uvloop",
                        help="baselines: bare (asyncio loop) and/or bare-uvloop")
    parser.add_argument("--warmup", type=int, default=1, help="wrk warm-up seconds per variant")
    parser.add_argument("--threads", type=int, default=2)
    parser.add_argument("--connections", type=int, default=10)
    parser.add_argument("--scrape-churn", type=int, default=0,
                        help="pods churned per List during the scrape section")
    parser.add_argument("--churn-per-list", type=int, default=25)
    parser.add_argument("--churn-events", type=int, default=10_000,
                        help="events counted after the warm-up")
    parser.add_argument("--churn-warmup", type=int, default=500)
    parser.add_argument("--churn-timeout", type=float, default=300.0)
    parser.add_argument("--large-pods", type=int, default=24_000,
                        help="large: pods without GPUs added to the answer (24,000: ~50 MB)")
    parser.add_argument("--large-interval", type=int, default=1000,
                        help="large: exporter -c, ms (a List per pass)")
    parser.add_argument("--large-rounds", type=int, default=3)
    parser.add_argument("--large-lists", type=int, default=5,
                        help="large: Lists timed by the stall probe per answer")
    parser.add_argument("--unmatched-ids", type=int, default=250_000,
                        help="unmatched: device IDs of no GPU here in the answer (~50 MB)")
    parser.add_argument("--unmatched-interval", type=int, default=2000,
                        help="unmatched: exporter -c, ms")
    parser.add_argument("--unmatched-duration", type=int, default=20,
                        help="unmatched: wrk -d, seconds")
    parser.add_argument("--unmatched-rounds", type=int, default=3)
    parser.add_argument("--serve-large", type=Path, metavar="SOCKET", help=argparse.SUPPRESS)
    parser.add_argument("--serve-unmatched", type=Path, metavar="SOCKET",
                        help=argparse.SUPPRESS)
    parser.add_argument("--pull-large", type=Path, metavar="SOCKET", help=argparse.SUPPRESS)
    parser.add_argument("--stall-probe", type=Path, metavar="SOCKET", help=argparse.SUPPRESS)
    parser.add_argument("--no-pin", dest="pin", action="store_false",
                        help="by default the exporter runs on CPU 1, everything else on CPU 0")
    parser.add_argument("--server-cpus", default="1")
    parser.add_argument("--side-cpus", default="0")
    parser.add_argument("--build-dir", type=Path, default=DEFAULT_BUILD_DIR)
    args = parser.parse_args()
    if args.serve_large is not None:  # the large section's fake kubelet, in its own process
        asyncio.run(serve_large(args.serve_large, args.large_pods))
        return 0
    if args.serve_unmatched is not None:  # the unmatched section's fake kubelet
        asyncio.run(serve_unmatched(args.serve_unmatched, args.unmatched_ids))
        return 0
    if args.pull_large is not None:  # the large section's control
        asyncio.run(pull_large(args.pull_large, args.large_interval))
        return 0
    if args.stall_probe is not None:
        run_probe(args.stall_probe, args.large_lists)
        return 0
    sections = [s.strip() for s in args.sections.split(",") if s.strip()]
    for s in sections:
        if s not in ("cpu", "scrape", "churn", "large", "unmatched"):
            parser.error(f"unknown section {s!r}")
    server_cpus = {int(c) for c in args.server_cpus.split(",")} if args.pin else None
    side_cpus = {int(c) for c in args.side_cpus.split(",")} if args.pin else None
    if args.pin and not ((server_cpus or set()) | (side_cpus or set())) <= \
            os.sched_getaffinity(0):
        parser.error(f"pinning needs CPUs {args.server_cpus} and {args.side_cpus}")
    if side_cpus:
        os.sched_setaffinity(0, side_cpus)  # this script's polling stays off the exporter's CPU

    lib = build_fake_nvml(args.build_dir)
    tmp = Path(tempfile.mkdtemp(prefix="gek-", dir="/tmp"))  # short: sun_path is 108 bytes
    node = Node(lib, tmp, server_cpus, side_cpus)
    print(f"{os.cpu_count()} CPUs, load {os.getloadavg()[0]:.2f}; 8 GPUs x 7 MIG 1g.10gb, "
          f"110 pods (56 on GPUs); pinning: "
          f"{f'exporter CPU {args.server_cpus}, rest CPU {args.side_cpus}' if args.pin else 'none'}"
          "\n")
    try:
        for section in sections:
            fn = {"cpu": section_cpu, "scrape": section_scrape, "churn": section_churn,
                  "large": section_large,
                  "unmatched": section_unmatched}[section]  # issue 26
            print(fn(node, args), "\n", flush=True)
    finally:
        shutil.rmtree(tmp, ignore_errors=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
