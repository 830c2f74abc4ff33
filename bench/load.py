"""Load: 50 concurrent scrapers against the exporter on a dense simulated node, and against a
bare aiohttp server serving the same bytes, in the same run.

    .venv/bin/python bench/load.py                         # plain, gzip, TLS: ~9 min
    .venv/bin/python bench/load.py --variants gzip --duration 30 --rounds 2

The exporter: `python -m gpu_enricher --simulate bench/scenarios/mig-8x7-110pods.yaml -c 5000`
(8 GPUs x 7 MIG instances, 110 pods, 56 holding an instance, one GPU process each: the fake
kubelet, Kubernetes API and /proc run inside the exporter's process, as `--simulate` does).
Its /metrics body, fetched once plain and gzipped, is what `bare_server.py` serves (on uvloop,
the exporter's own loop, by default). For each variant (`plain`, `gzip`, `tls-plain`,
`tls-gzip`; TLS through `--web-config-file` with a self-signed certificate made by `openssl`,
and the same certificate for the bare server) `wrk -t2 -c50 --latency` keeps 50 connections
scraping back to back, for `--duration` seconds in all, split into `--rounds` slices that
interleave the exporter and the bare server (each started fresh per round and TLS mode, with
`--warmup` s of unrecorded load per variant). Reported per server and variant: requests,
errors (socket errors, non-2xx; must be 0), requests/s, p50/p90/p99 (medians over rounds), max
(over rounds), the server's CPU in % of a core; and exporter/bare ratios paired per round
(median, min..max). By default the servers run on CPU 1 and wrk on CPU 0 (`--no-pin`).
"""

from __future__ import annotations

import argparse
import json
import os
import re
import shlex
import shutil
import signal
import ssl
import subprocess
import sys
import tempfile
import time
import urllib.error
import urllib.request
from dataclasses import asdict, dataclass
from pathlib import Path

from _common import (
    BENCH,
    PYTHON,
    Server,
    capture_bodies,
    free_port,
    median,
    proc_cpu_seconds,
    wrk_ms,
)

DEFAULT_SCENARIO = BENCH / "scenarios" / "mig-8x7-110pods.yaml"
VARIANTS = ("plain", "gzip", "tls-plain", "tls-gzip")


@dataclass
class Result:
    server: str
    variant: str
    round: int
    requests: int
    errors: int
    rps: float
    p50_ms: float
    p90_ms: float
    p99_ms: float
    max_ms: float
    cpu_pct: float
    error_text: str
    crowd: str = ""
    """bench/crowd.py's closing line, for `exporter+crowd`."""


def parse_wrk(out: str) -> dict[str, float | int | str]:
    pct = {p: wrk_ms(v) for p, v in re.findall(r"^\s+(50|90|99)%\s+(\S+)", out, re.M)}
    latency = re.search(r"^\s+Latency\s+\S+\s+\S+\s+(\S+)", out, re.M)
    total = re.search(r"(\d+) requests in", out)
    rps = re.search(r"Requests/sec:\s+([\d.]+)", out)
    if not (latency and total and rps and len(pct) == 3):
        raise ValueError(f"unparsed wrk output:\n{out}")
    socket_errors = re.search(r"Socket errors: connect (\d+), read (\d+), write (\d+), "
                              r"timeout (\d+)", out)
    non2xx = re.search(r"Non-2xx or 3xx responses: (\d+)", out)
    errors = (sum(int(g) for g in socket_errors.groups()) if socket_errors else 0) + (
        int(non2xx[1]) if non2xx else 0)
    text = "; ".join(line.strip() for line in out.splitlines()
                     if "Socket errors" in line or "Non-2xx" in line)
    return {"requests": int(total[1]), "errors": errors, "rps": float(rps[1]),
            "p50": pct["50"], "p90": pct["90"], "p99": pct["99"], "max": wrk_ms(latency[1]),
            "text": text}


def run_wrk(url: str, args: argparse.Namespace, seconds: int, gz: bool) -> str:
    cmd = ["wrk", "-t2", f"-c{args.connections}", f"-d{seconds}s", "--latency", "--timeout",
           "10s"]
    if gz:
        cmd += ["-H", "Accept-Encoding: gzip"]
    cpus = args.wrk_cpus

    def pin() -> None:
        if cpus:
            os.sched_setaffinity(0, cpus)

    return subprocess.run([*cmd, url], capture_output=True, text=True, check=True,
                          preexec_fn=pin).stdout


def make_cert(directory: Path) -> tuple[Path, Path, Path]:
    """A self-signed certificate for 127.0.0.1, and the web config that serves it."""
    cert, key = directory / "cert.pem", directory / "key.pem"
    subprocess.run(["openssl", "req", "-x509", "-newkey", "ec", "-pkeyopt",
                    "ec_paramgen_curve:prime256v1", "-nodes", "-days", "2", "-subj",
                    "/CN=127.0.0.1", "-addext", "subjectAltName=IP:127.0.0.1", "-keyout",
                    str(key), "-out", str(cert)], check=True, capture_output=True)
    config = directory / "web.yml"
    config.write_text(f"tls_server_config:\n  cert_file: {cert}\n  key_file: {key}\n")
    return cert, key, config


def make_server(kind: str, tls: bool, args: argparse.Namespace, bodies: Path,
                tls_files: tuple[Path, Path, Path] | None) -> Server:
    port = free_port()
    env = {k: v for k, v in os.environ.items() if not k.startswith(("FAKE_NVML_", "GPU_ENR"))}
    env["PYTHONUNBUFFERED"] = "1"
    if kind.startswith("exporter"):
        argv = [PYTHON, "-m", "gpu_enricher", "--simulate", str(args.scenario), "-a",
                f"127.0.0.1:{port}", "-c", str(args.interval_ms)]
        if args.crowd:  # room for the crowd and the scrapers (default 1024), in both runs
            argv += ["--web-max-connections", str(args.max_connections)]
        if tls:
            assert tls_files is not None
            argv += ["--web-config-file", str(tls_files[2])]
    else:
        argv = [PYTHON, str(BENCH / "bare_server.py"), "--port", str(port), "--dir", str(bodies)]
        if args.bare == "uvloop":
            argv.append("--uvloop")
        if tls:
            assert tls_files is not None
            argv += ["--tls-cert", str(tls_files[0]), "--tls-key", str(tls_files[1])]
    return Server(kind, argv, env, port, args.server_cpus)


def start_crowd(port: int, tls: bool, args: argparse.Namespace) -> subprocess.Popen[str]:
    """bench/crowd.py on the wrk CPUs, its connections open."""
    idle, slow = args.crowd
    cpus = args.wrk_cpus

    def pin() -> None:
        if cpus:
            os.sched_setaffinity(0, cpus)

    argv = [PYTHON, str(BENCH / "crowd.py"), "--port", str(port), "--idle", str(idle),
            "--slow", str(slow), *(["--tls"] if tls else [])]
    proc = subprocess.Popen(argv, stdout=subprocess.PIPE, text=True, preexec_fn=pin)
    assert proc.stdout is not None
    if proc.stdout.readline().strip() != "ready":
        proc.kill()
        raise RuntimeError("bench/crowd.py did not get its connections open")
    return proc


def stop_crowd(proc: subprocess.Popen[str]) -> str:
    """SIGTERM; its closing JSON line."""
    proc.send_signal(signal.SIGTERM)
    out, _ = proc.communicate(timeout=30)
    return out.strip().splitlines()[-1] if out.strip() else "(no report)"


def wait_ready(server: Server, tls: bool, timeout: float = 60.0) -> None:
    url = f"{'https' if tls else 'http'}://127.0.0.1:{server.port}/ready"
    context = ssl._create_unverified_context() if tls else None  # our own self-signed cert
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        assert server.proc is not None
        if server.proc.poll() is not None:
            raise RuntimeError(f"{server.name} exited {server.proc.returncode}")
        try:
            with urllib.request.urlopen(url, timeout=2, context=context) as resp:
                if resp.status == 200:
                    return
        except (urllib.error.URLError, ConnectionError, TimeoutError):
            pass
        time.sleep(0.05)
    raise RuntimeError(f"{server.name}: /ready never answered 200")


def report(results: list[Result], args: argparse.Namespace, sizes: dict[str, int]) -> str:
    pin = (f"servers on CPU {sorted(args.server_cpus)}, wrk on CPU {sorted(args.wrk_cpus)}"
           if args.server_cpus else "no pinning")
    out = [f"`{shlex.join(['.venv/bin/python', 'bench/load.py', *sys.argv[1:]])}`", "",
           f"wrk -t2 -c{args.connections} --latency, {args.duration} s per server and variant in "
           f"{args.rounds} interleaved slice(s); exporter -c {args.interval_ms} on "
           f"{args.scenario.name}; bare_server.py on {args.bare}; {pin}. Body "
           f"{sizes['plain']:,} B plain, {sizes['gzip']:,} B gzipped, {sizes['series']} series.",
           "", "| server | variant | requests | errors | req/s | p50 ms | p90 ms | p99 ms "
           "| max ms | CPU % core |", "|---|---|---:|---:|---:|---:|---:|---:|---:|---:|"]
    by: dict[tuple[str, str], list[Result]] = {}
    for r in results:
        by.setdefault((r.server, r.variant), []).append(r)
    for variant in args.variants:
        for server in ("exporter", "exporter+crowd", "bare"):
            rs = by.get((server, variant), [])
            if not rs:
                continue
            out.append(f"| {server} | {variant} | {sum(r.requests for r in rs):,} | "
                       f"{sum(r.errors for r in rs)} | {median([r.rps for r in rs]):,.0f} | "
                       f"{median([r.p50_ms for r in rs]):.2f} | "
                       f"{median([r.p90_ms for r in rs]):.2f} | "
                       f"{median([r.p99_ms for r in rs]):.2f} | {max(r.max_ms for r in rs):.1f} "
                       f"| {median([r.cpu_pct for r in rs]):.0f} |")
    out += ["", "exporter / bare, median of the per-round ratios (min..max):", "",
            "| variant | throughput | p50 | p90 | p99 | max |", "|---|---:|---:|---:|---:|---:|"]
    for variant in args.variants:
        ex = {r.round: r for r in by.get(("exporter", variant), [])}
        ba = {r.round: r for r in by.get(("bare", variant), [])}
        rounds = sorted(set(ex) & set(ba))
        if not rounds:
            continue
        cells = []
        for attr in ("rps", "p50_ms", "p90_ms", "p99_ms", "max_ms"):
            ratios = [getattr(ex[i], attr) / getattr(ba[i], attr) for i in rounds
                      if getattr(ba[i], attr)]
            cells.append(f"{median(ratios):.2f} ({min(ratios):.2f}..{max(ratios):.2f})")
        out.append(f"| {variant} | {' | '.join(cells)} |")
    if args.crowd:
        idle, slow = args.crowd
        out += ["", f"exporter with {idle:,} idle keep-alive connections and {slow} slowloris "
                f"connections (bench/crowd.py, on the wrk CPUs) / exporter alone, median of "
                "the per-round ratios (min..max):", "",
                "| variant | throughput | p50 | p90 | p99 | max |",
                "|---|---:|---:|---:|---:|---:|"]
        for variant in args.variants:
            crowded = {r.round: r for r in by.get(("exporter+crowd", variant), [])}
            alone = {r.round: r for r in by.get(("exporter", variant), [])}
            rounds = sorted(set(crowded) & set(alone))
            cells = []
            for attr in ("rps", "p50_ms", "p90_ms", "p99_ms", "max_ms"):
                ratios = [getattr(crowded[i], attr) / getattr(alone[i], attr) for i in rounds
                          if getattr(alone[i], attr)]
                cells.append(f"{median(ratios):.2f} ({min(ratios):.2f}..{max(ratios):.2f})"
                             if ratios else "-")
            out.append(f"| {variant} | {' | '.join(cells)} |")
        out += ["", "The crowd at the end of each run: "
                + "; ".join(f"round {r.round} {r.variant}: {r.crowd}"
                            for r in results if r.crowd)]
    errors = sum(r.errors for r in results)
    out += ["", f"Errors over all runs: {errors} (must be 0): {'met' if not errors else 'NOT MET'}"]
    return "\n".join(out)


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--variants", default="plain,gzip,tls-plain,tls-gzip",
                        help=f"comma-separated, from {', '.join(VARIANTS)}")
    parser.add_argument("--duration", type=int, default=60,
                        help="seconds of load per server and variant, over all rounds")
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--connections", type=int, default=50, help="concurrent scrapers")
    parser.add_argument("--warmup", type=int, default=2, help="seconds per variant and start")
    parser.add_argument("--scenario", type=Path, default=DEFAULT_SCENARIO)
    parser.add_argument("--interval-ms", type=int, default=5000, help="exporter -c")
    parser.add_argument("--bare", choices=("uvloop", "asyncio"), default="uvloop",
                        help="the bare server's event loop (the exporter runs on uvloop)")
    parser.add_argument("--no-pin", dest="pin", action="store_false")
    parser.add_argument("--server-cpus", default="1")
    parser.add_argument("--wrk-cpus", default="0")
    parser.add_argument("--json", type=Path, help="also write every wrk result here")
    parser.add_argument("--crowd", metavar="IDLE,SLOW",
                        help="also run the exporter with IDLE idle keep-alive connections and "
                        "SLOW slowloris ones open (bench/crowd.py), e.g. 1000,10")
    args = parser.parse_args()
    args.crowd = tuple(int(n) for n in args.crowd.split(",")) if args.crowd else None
    if args.crowd and len(args.crowd) != 2:
        parser.error("--crowd IDLE,SLOW")
    args.max_connections = max(1024, 2 * (sum(args.crowd) + args.connections)) \
        if args.crowd else None
    args.variants = [v.strip() for v in args.variants.split(",") if v.strip()]
    if not args.variants or not set(args.variants) <= set(VARIANTS):
        parser.error(f"--variants: from {', '.join(VARIANTS)}")
    if shutil.which("wrk") is None:
        parser.error("wrk is not installed (apt-get install wrk)")
    if any(v.startswith("tls") for v in args.variants) and shutil.which("openssl") is None:
        parser.error("the TLS variants need openssl")
    args.server_cpus = {int(c) for c in args.server_cpus.split(",")} if args.pin else None
    args.wrk_cpus = {int(c) for c in args.wrk_cpus.split(",")} if args.pin else None
    slice_s = max(1, args.duration // args.rounds)

    work = Path(tempfile.mkdtemp(prefix="load-"))
    tls_files = make_cert(work) if any(v.startswith("tls") for v in args.variants) else None
    first = make_server("exporter", False, args, work, None)
    first.start()
    try:
        wait_ready(first, False)
        time.sleep(1)  # the pod watch and slices synced: the labelled body
        capture_bodies(first, work)
    finally:
        first.stop()
    plain = (work / "plain.bin").read_bytes()
    sizes = {"plain": len(plain), "gzip": len((work / "gzip.bin").read_bytes()),
             "series": sum(1 for line in plain.splitlines() if not line.startswith(b"#"))}
    print(f"bodies: {sizes}", file=sys.stderr)

    results: list[Result] = []
    started = time.monotonic()
    for rnd in range(1, args.rounds + 1):
        for tls in sorted({v.startswith("tls") for v in args.variants}):
            variants = [v for v in args.variants if v.startswith("tls") == tls]
            kinds = ("exporter", "exporter+crowd", "bare") if args.crowd else ("exporter", "bare")
            for kind in kinds:
                server = make_server(kind, tls, args, work, tls_files)
                server.start()
                crowd = None
                try:
                    wait_ready(server, tls)
                    if kind == "exporter+crowd":
                        crowd = start_crowd(server.port, tls, args)
                    url = f"{'https' if tls else 'http'}://127.0.0.1:{server.port}/metrics"
                    for v in variants:
                        if args.warmup:
                            run_wrk(url, args, args.warmup, v.endswith("gzip"))
                    for v in variants:
                        cpu0 = proc_cpu_seconds(server.pid)
                        t0 = time.monotonic()
                        w = parse_wrk(run_wrk(url, args, slice_s, v.endswith("gzip")))
                        cpu = 100 * (proc_cpu_seconds(server.pid) - cpu0) / (
                            time.monotonic() - t0)
                        r = Result(kind, v, rnd, int(w["requests"]), int(w["errors"]),
                                   float(w["rps"]), float(w["p50"]), float(w["p90"]),
                                   float(w["p99"]), float(w["max"]), cpu, str(w["text"]))
                        if crowd is not None and v == variants[-1]:
                            r.crowd = stop_crowd(crowd)
                            crowd = None
                        results.append(r)
                        print(f"[{time.monotonic() - started:5.0f}s] round {rnd} {kind:8} "
                              f"{v:9} {r.rps:8,.0f} req/s p99 {r.p99_ms:7.2f} ms max "
                              f"{r.max_ms:7.1f} ms errors {r.errors}", file=sys.stderr)
                finally:
                    if crowd is not None:
                        stop_crowd(crowd)
                    server.stop()
    if args.json:
        args.json.write_text(json.dumps([asdict(r) for r in results], indent=1))
    print(report(results, args, sizes))
    shutil.rmtree(work, ignore_errors=True)
    return 0 if not any(r.errors for r in results) else 1


if __name__ == "__main__":
    sys.exit(main())
