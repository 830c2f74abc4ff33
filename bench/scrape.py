"""Scrape benchmark: the exporter's /metrics against a bare aiohttp baseline and a naive exporter.

Every server is its own process on 127.0.0.1, started one at a time over the fake NVML
library (8 GPUs); `wrk --latency` then hits /metrics without and with `Accept-Encoding: gzip`.
Rounds interleave the servers (exporter, bare, naive, exporter, …) and the report gives
medians over rounds and ratios paired within a round. `--simulate SCENARIO` runs the exporters on
a simulated node instead (every feature on: its fake kubelet, API, /proc and job files; the bare
server serves that exporter's bytes), as issue 33's benchmark does:

    .venv/bin/python bench/scrape.py --simulate bench/scenarios/mig-8x7-110pods.yaml \
        --servers exporter,exporter-nocollect,bare --interval-ms 500 --variants plain,gzip

See bench/README.md.
"""

from __future__ import annotations

import argparse
import contextlib
import gzip
import json
import os
import re
import shutil
import subprocess
import sys
import tempfile
import time
from dataclasses import asdict, dataclass
from pathlib import Path

from _common import (
    BENCH,
    DEFAULT_BUILD_DIR,
    PYTHON,
    Server,
    baseline_tree,
    build_fake_nvml,
    capture_bodies,
    exporter_argv,
    fake_env,
    free_port,
    http_get,
    median,
    wrk_ms,
)

SERVERS = ("exporter", "bare", "naive", "exporter-asyncio", "exporter-uvloop", "bare-uvloop",
           "baseline", "baseline-nocollect",
           "exporter-nocollect")
NOCOLLECT_INTERVAL_MS = 60_000  # one pass at start, none while wrk runs (a server lives ~25 s)
VARIANTS = ("plain", "gzip")
GZIP_HEADER = "Accept-Encoding: gzip"
_SIZES = {"B": 1, "KB": 1 << 10, "MB": 1 << 20, "GB": 1 << 30, "TB": 1 << 40}


@dataclass
class WrkResult:
    server: str
    variant: str
    round: int
    rps: float
    p50_ms: float
    p99_ms: float
    requests: int
    bytes_per_response: float
    errors: str


def parse_wrk(out: str, server: str, variant: str, rnd: int) -> WrkResult:
    rps = re.search(r"Requests/sec:\s+([\d.]+)", out)
    p50 = re.search(r"^\s+50%\s+(\S+)", out, re.M)
    p99 = re.search(r"^\s+99%\s+(\S+)", out, re.M)
    total = re.search(r"(\d+) requests in [\d.]+\w+, ([\d.]+)(\w+) read", out)
    if not (rps and p50 and p99 and total):
        raise ValueError(f"unparsed wrk output:\n{out}")
    errors = [line.strip() for line in out.splitlines()
              if "Socket errors" in line or "Non-2xx" in line]
    requests = int(total[1])
    read = float(total[2]) * _SIZES[total[3]]
    return WrkResult(server, variant, rnd, float(rps[1]), wrk_ms(p50[1]),
                     wrk_ms(p99[1]), requests, read / max(requests, 1),
                     "; ".join(errors))


def run_wrk(url: str, args: argparse.Namespace, duration: int, gz: bool,
            cpus: set[int] | None) -> str:
    cmd = ["wrk", f"-t{args.threads}", f"-c{args.connections}", f"-d{duration}s", "--latency"]
    if gz:
        cmd += ["-H", GZIP_HEADER]

    def pin() -> None:
        if cpus:
            os.sched_setaffinity(0, cpus)

    proc = subprocess.run([*cmd, url], capture_output=True, text=True, check=True,
                          preexec_fn=pin)
    return proc.stdout


def make_server(kind: str, lib: Path, bodies: Path, cpus: set[int] | None,
                interval_ms: int, simulate: Path | None = None,
                baseline: Path | None = None) -> Server:
    port = free_port()
    env = fake_env(lib)
    extra = ["--simulate", str(simulate)] if simulate is not None else []
    if kind.startswith("baseline"):  # the exporter of --baseline's tree, as the others
        assert baseline is not None, "--baseline COMMIT"
        env["PYTHONPATH"] = str(baseline / "src")
        kind = kind.replace("baseline", "exporter")
    if kind == "exporter":
        argv = exporter_argv(port, interval_ms, extra)
    elif kind in ("exporter-asyncio", "exporter-uvloop"):
        argv = exporter_argv(port, interval_ms, extra, loop=kind.removeprefix("exporter-"))
    elif kind == "exporter-nocollect":
        argv = exporter_argv(port, NOCOLLECT_INTERVAL_MS, extra)
    elif kind in ("bare", "bare-uvloop"):
        argv = [PYTHON, str(BENCH / "bare_server.py"), "--port", str(port), "--dir", str(bodies)]
        if kind == "bare-uvloop":
            argv.append("--uvloop")
    elif kind == "naive":
        argv = [PYTHON, str(BENCH / "naive_server.py"), "--port", str(port)]
    else:
        raise ValueError(kind)
    return Server(kind, argv, env, port, cpus)


def fetch_bodies(lib: Path, bodies: Path, interval_ms: int,
                 simulate: Path | None = None) -> dict[str, int]:
    """Fetch the exporter's /metrics plain and gzipped; store what bare_server.py serves."""
    server = make_server("exporter", lib, bodies, None, interval_ms, simulate)
    server.start()
    try:
        server.wait_status("/ready")
        headers = capture_bodies(server, bodies)
    finally:
        server.stop()
    plain = (bodies / "plain.bin").read_bytes()
    gz = (bodies / "gzip.bin").read_bytes()
    assert headers["gzip"].get("Content-Encoding") == "gzip", headers
    unzipped = gzip.decompress(gz)
    return {"plain": len(plain), "gzip": len(gz), "gzip_unzipped": len(unzipped),
            "series": sum(1 for line in plain.splitlines() if not line.startswith(b"#"))}


def naive_sizes(lib: Path, bodies: Path) -> dict[str, int]:
    server = make_server("naive", lib, bodies, None, 0)
    server.start()
    try:
        server.wait_status("/ready")
        plain = http_get(server.base + "/metrics")[2]
        gz = http_get(server.base + "/metrics", {"Accept-Encoding": "gzip"})[2]
    finally:
        server.stop()
    return {"plain": len(plain), "gzip": len(gz)}


def ratio(a: float, b: float) -> float:
    return a / b if b else float("nan")


def report(results: list[WrkResult], servers: list[str], sizes: dict[str, dict[str, int]],
           args: argparse.Namespace) -> str:
    pinning = f"servers CPU {args.server_cpus}, wrk CPU {args.wrk_cpus}" if args.pin else "none"
    out = [f"wrk -t{args.threads} -c{args.connections} -d{args.duration}s --latency, "
           f"{args.rounds} interleaved rounds, medians; pinning: {pinning}",
           "",
           "| server | variant | req/s | p50 ms | p99 ms | bytes/resp | errors |",
           "|---|---|---:|---:|---:|---:|---|"]
    by: dict[tuple[str, str], list[WrkResult]] = {}
    for r in results:
        by.setdefault((r.server, r.variant), []).append(r)
    for server in servers:
        for variant in args.variants:
            rs = by.get((server, variant), [])
            errs = sorted({r.errors for r in rs if r.errors})
            out.append(
                f"| {server} | {variant} | {median([r.rps for r in rs]):,.0f} "
                f"| {median([r.p50_ms for r in rs]):.2f} | {median([r.p99_ms for r in rs]):.2f} "
                f"| {median([r.bytes_per_response for r in rs]):,.0f} | {' '.join(errs) or '-'} |")
    pairs = [(a, b) for a, b in (("exporter", "bare"), ("exporter", "naive"),
                                 ("exporter", "exporter-nocollect"), ("baseline", "bare"),
                                 ("baseline", "baseline-nocollect"), ("exporter", "baseline"),
                                 ("exporter-nocollect", "bare"), ("exporter-asyncio", "bare"),
                                 ("exporter-uvloop", "bare"), ("exporter-uvloop", "bare-uvloop"),
                                 ("bare-uvloop", "bare"), ("exporter-uvloop", "exporter-asyncio"),
                                 ("exporter", "bare-uvloop"))
             if a in servers and b in servers]
    if pairs:
        out += ["", "Ratios, median of the per-round ratios (min..max over rounds):", "",
                "| ratio | variant | throughput | p99 |", "|---|---|---:|---:|"]
        for a, b in pairs:
            for variant in args.variants:
                ra = {r.round: r for r in by.get((a, variant), [])}
                rb = {r.round: r for r in by.get((b, variant), [])}
                rounds = sorted(set(ra) & set(rb))
                tput = [ratio(ra[i].rps, rb[i].rps) for i in rounds]
                p99 = [ratio(ra[i].p99_ms, rb[i].p99_ms) for i in rounds]
                if not tput:
                    continue
                out.append(f"| {a}/{b} | {variant} | {median(tput):.2f} "
                           f"({min(tput):.2f}..{max(tput):.2f}) | {median(p99):.2f} "
                           f"({min(p99):.2f}..{max(p99):.2f}) |")
    out += ["", "Body sizes (bytes): " + "; ".join(
        f"{name}: " + ", ".join(f"{k} {v:,}" for k, v in s.items()) for name, s in sizes.items())]
    return "\n".join(out)


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--servers", default="exporter,bare,naive",
                        help=f"comma-separated, in round order; from {', '.join(SERVERS)}")
    parser.add_argument("--variants", default="plain,gzip",
                        help="plain (no Accept-Encoding) and/or gzip, comma-separated")
    parser.add_argument("--rounds", type=int, default=5)
    parser.add_argument("--duration", type=int, default=10, help="wrk -d, seconds")
    parser.add_argument("--warmup", type=int, default=1,
                        help="seconds of unrecorded wrk load (each variant) after each start")
    parser.add_argument("--threads", type=int, default=2)
    parser.add_argument("--connections", type=int, default=10)
    parser.add_argument("--interval-ms", type=int, default=5000, help="exporter -c")
    parser.add_argument("--no-pin", dest="pin", action="store_false",
                        help="let the servers and wrk run on any CPU")
    parser.add_argument("--server-cpus", default="1", help="CPUs for the servers when pinned")
    parser.add_argument("--wrk-cpus", default="0", help="CPUs for wrk when pinned")
    parser.add_argument("--simulate", type=Path, metavar="SCENARIO",
                        help="run the exporters on this simulated node (--simulate SCENARIO)")
    parser.add_argument("--baseline", metavar="COMMIT",
                        help="servers baseline and baseline-nocollect: the exporter of this "
                             "commit (a git worktree), in the same rounds")
    parser.add_argument("--json", type=Path, help="also write every wrk result here")
    parser.add_argument("--build-dir", type=Path, default=DEFAULT_BUILD_DIR)
    args = parser.parse_args()

    servers = [s.strip() for s in args.servers.split(",") if s.strip()]
    args.variants = [v.strip() for v in args.variants.split(",") if v.strip()]
    if not args.variants or not set(args.variants) <= set(VARIANTS):
        parser.error(f"--variants: choose from {', '.join(VARIANTS)}")
    for s in servers:
        if s not in SERVERS:
            parser.error(f"unknown server {s!r}")
    if shutil.which("wrk") is None:
        parser.error("wrk is not installed (apt-get install wrk)")
    cpus = os.sched_getaffinity(0)
    server_cpus = {int(c) for c in args.server_cpus.split(",")} if args.pin else None
    wrk_cpus = {int(c) for c in args.wrk_cpus.split(",")} if args.pin else None
    if args.pin and not ((server_cpus or set()) | (wrk_cpus or set())) <= cpus:
        parser.error(f"pinning needs CPUs {args.server_cpus} and {args.wrk_cpus}; have {cpus}")

    lib = build_fake_nvml(args.build_dir)
    bodies = Path(tempfile.mkdtemp(prefix="scrape-bodies-", dir=args.build_dir))
    sizes = {"exporter": fetch_bodies(lib, bodies, args.interval_ms, args.simulate)}
    if "naive" in servers:
        sizes["naive"] = naive_sizes(lib, bodies)
    print(f"bodies in {bodies}: {sizes}", file=sys.stderr)

    with (baseline_tree(args.baseline) if args.baseline
          else contextlib.nullcontext(None)) as baseline:
        results = run_rounds(servers, lib, bodies, server_cpus, wrk_cpus, baseline, args)
    if args.json:
        args.json.write_text(json.dumps([asdict(r) for r in results], indent=1))
    print(report(results, servers, sizes, args))
    shutil.rmtree(bodies, ignore_errors=True)
    return 0


def run_rounds(servers: list[str], lib: Path, bodies: Path, server_cpus: set[int] | None,
               wrk_cpus: set[int] | None, baseline: Path | None,
               args: argparse.Namespace) -> list[WrkResult]:
    results: list[WrkResult] = []
    started = time.monotonic()
    for rnd in range(1, args.rounds + 1):
        for kind in servers:
            server = make_server(kind, lib, bodies, server_cpus, args.interval_ms,
                                 args.simulate, baseline)
            server.start()
            try:
                server.wait_status("/ready")
                url = server.base + "/metrics"
                gzs = [variant == "gzip" for variant in args.variants]
                for gz in gzs:
                    if args.warmup > 0:
                        run_wrk(url, args, args.warmup, gz, wrk_cpus)
                for gz in gzs:
                    out = run_wrk(url, args, args.duration, gz, wrk_cpus)
                    result = parse_wrk(out, kind, "gzip" if gz else "plain", rnd)
                    results.append(result)
                    print(f"[{time.monotonic() - started:5.0f}s] round {rnd} {kind:16} "
                          f"{result.variant:5} {result.rps:9,.0f} req/s "
                          f"p99 {result.p99_ms:6.2f} ms {result.errors}", file=sys.stderr)
            finally:
                server.stop()
    return results


if __name__ == "__main__":
    sys.exit(main())
