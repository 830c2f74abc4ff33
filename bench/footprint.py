"""Footprint of the exporter process: start-up time, resident memory, idle CPU.

Over the fake NVML library (8 GPUs) (`nvml`), the same with `-k` against a fake kubelet of
110 pods in a process of its own (`kubelet`: what pod attribution adds), and `--simulate`:
  * start-up: spawn → first HTTP 200 on /ready (first collection pass done), median of N
    starts; also spawn → first HTTP answer of any status (listening);
  * RSS: VmRSS from /proc/PID/status after 30 s of running at `-c 1000` with one gzip scrape
    of /metrics per second (as Prometheus scrapes), plus VmHWM (peak);
  * idle CPU: utime + stime from /proc/PID/stat over the 60 s that follow, no scrapes,
    as % of one core;
  * threads: /proc/PID/task after the scrapes.
See bench/README.md.
"""

from __future__ import annotations

import argparse
import os
import sys
import tempfile
import time
import urllib.error
from dataclasses import dataclass
from pathlib import Path

from _common import (
    DEFAULT_BUILD_DIR,
    Server,
    build_fake_nvml,
    exporter_argv,
    fake_env,
    free_port,
    http_get,
    median,
    proc_cpu_seconds,
    proc_status_kib,
)
from kubelet import KubeletProc

TARGET_READY_S = 2.0
TARGET_RSS_MIB = 60.0
TARGET_IDLE_CPU_PCT = 1.0


@dataclass
class Startup:
    listening_s: float
    ready_s: float


@dataclass
class Steady:
    rss_ready_mib: float
    rss_mib: float
    hwm_mib: float
    scrape_cpu_pct: float
    idle_cpu_pct: float
    threads: int


def make(mode: str, lib: Path, interval_ms: int, kubelet_socket: Path) -> Server:
    port = free_port()
    extra = {"simulate": ["--simulate"],
             "kubelet": ["-k", "--pod-resources-kubelet-socket", str(kubelet_socket)]}
    return Server(mode, exporter_argv(port, interval_ms, extra.get(mode, [])), fake_env(lib),
                  port)


def startup(server: Server, timeout: float = 30.0) -> Startup:
    """Poll /ready every 5 ms from spawn; first answer = listening, first 200 = ready."""
    server.start()
    listening: float | None = None
    deadline = time.monotonic() + timeout
    try:
        while time.monotonic() < deadline:
            assert server.proc is not None and server.proc.poll() is None, "exporter exited"
            try:
                status = http_get(server.base + "/ready", timeout=2.0)[0]
            except (urllib.error.URLError, ConnectionError, TimeoutError):
                time.sleep(0.005)
                continue
            now = time.monotonic() - server.spawned_at
            if listening is None:
                listening = now
            if status == 200:
                return Startup(listening, now)
            time.sleep(0.005)
        raise RuntimeError(f"{server.name}: /ready never answered 200")
    finally:
        server.stop()


def steady(server: Server, scrape_seconds: int, idle_seconds: int) -> Steady:
    server.start()
    try:
        server.wait_status("/ready")
        pid = server.pid
        rss_ready = proc_status_kib(pid, "VmRSS") / 1024
        cpu0 = proc_cpu_seconds(pid)
        t0 = time.monotonic()
        for i in range(scrape_seconds):
            status, _, _ = http_get(server.base + "/metrics", {"Accept-Encoding": "gzip"})
            assert status == 200
            time.sleep(max(0.0, t0 + i + 1 - time.monotonic()))
        cpu1 = proc_cpu_seconds(pid)
        scrape_pct = 100 * (cpu1 - cpu0) / (time.monotonic() - t0)
        rss = proc_status_kib(pid, "VmRSS") / 1024
        threads = len(os.listdir(f"/proc/{pid}/task"))
        t1 = time.monotonic()
        time.sleep(idle_seconds)
        idle_pct = 100 * (proc_cpu_seconds(pid) - cpu1) / (time.monotonic() - t1)
        hwm = proc_status_kib(pid, "VmHWM") / 1024
        return Steady(rss_ready, rss, hwm, scrape_pct, idle_pct, threads)
    finally:
        server.stop()


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--starts", type=int, default=5)
    parser.add_argument("--scrape-seconds", type=int, default=30)
    parser.add_argument("--idle-seconds", type=int, default=60)
    parser.add_argument("--interval-ms", type=int, default=1000, help="exporter -c")
    parser.add_argument("--modes", default="nvml,kubelet,simulate",
                        help="nvml (fake library), kubelet (the same with -k), simulate")
    parser.add_argument("--build-dir", type=Path, default=DEFAULT_BUILD_DIR)
    args = parser.parse_args()
    modes = [m.strip() for m in args.modes.split(",") if m.strip()]
    lib = build_fake_nvml(args.build_dir)
    print(f"{os.cpu_count()} CPUs, load {os.getloadavg()[0]:.2f}", file=sys.stderr)

    socket = Path(tempfile.mkdtemp(prefix="footprint-")) / "kubelet.sock"
    kubelet = KubeletProc(socket, 0, None)
    if "kubelet" in modes:
        kubelet.start()
    try:
        starts: dict[str, list[Startup]] = {m: [] for m in modes}
        for _ in range(args.starts):  # interleaved: nvml, kubelet, simulate, nvml, …
            for mode in modes:
                starts[mode].append(startup(make(mode, lib, args.interval_ms, socket)))
        steadies = {m: steady(make(m, lib, args.interval_ms, socket), args.scrape_seconds,
                              args.idle_seconds) for m in modes}
    finally:
        kubelet.stop()

    print(f"exporter -c {args.interval_ms}, 8 fake GPUs (nvml) or the built-in simulated node\n")
    print("| mode | spawn→listening s | spawn→/ready 200 s (min..max) | RSS at ready MiB "
          f"| RSS after {args.scrape_seconds}s MiB | VmHWM MiB | CPU % 1 scrape/s "
          f"| idle CPU % over {args.idle_seconds}s | threads |")
    print("|---|---:|---:|---:|---:|---:|---:|---:|---:|")
    for mode in modes:
        s, st = starts[mode], steadies[mode]
        ready = [x.ready_s for x in s]
        print(f"| {mode} | {median([x.listening_s for x in s]):.2f} | {median(ready):.2f} "
              f"({min(ready):.2f}..{max(ready):.2f}) | {st.rss_ready_mib:.1f} | {st.rss_mib:.1f} "
              f"| {st.hwm_mib:.1f} | {st.scrape_cpu_pct:.2f} | {st.idle_cpu_pct:.2f} "
              f"| {st.threads} |")
    if "nvml" in modes:
        ready_s = median([x.ready_s for x in starts["nvml"]])
        st = steadies["nvml"]
        print()
        for what, value, target, unit in (
                ("start-up to /ready", ready_s, TARGET_READY_S, "s"),
                ("RSS", st.rss_mib, TARGET_RSS_MIB, "MiB"),
                ("idle CPU", st.idle_cpu_pct, TARGET_IDLE_CPU_PCT, "%")):
            verdict = "met" if value <= target else "MISSED"
            print(f"- {what}: {value:.2f} {unit} (target <= {target:g} {unit}): {verdict}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
