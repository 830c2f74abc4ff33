"""Footprint of the exporter process: start-up time, resident memory, idle CPU.

Over the fake NVML library (8 GPUs) (`nvml`), the same with `-k` against a fake kubelet of
110 pods in a process of its own (`kubelet`: what pod attribution adds), and `--simulate`:
  * start-up: spawn → first HTTP 200 on /ready (first collection pass done), median of N
    starts; also spawn → first HTTP answer of any status (listening);
  * RSS: VmRSS from /proc/PID/status after 30 s of running at `-c 1000` with one gzip scrape
    of /metrics per second (as Prometheus scrapes), plus VmHWM (peak);
  * idle CPU: utime + stime from /proc/PID/stat over the 60 s that follow, no scrapes,
    as % of one core;
  * threads: /proc/PID/task after the scrapes;
  * with `-k`, how many DCGM series carry a pod label (the attribution works, not just runs).

The fake kubelet's GPU pods hold the GPUs' UUIDs, one whole GPU each.
`--real-nvml`: the host's own libnvidia-ml instead of the fake (a real GPU node), its GPUs
held by the fake kubelet's pods. `--baselines`: the RSS of what the process
is made of, measured in the same run: python alone, python + nvmlInit, python + the exporter's
imports, both (docs/real-gpu.md).
See bench/README.md.
"""

from __future__ import annotations

import argparse
import os
import re
import subprocess
import sys
import tempfile
import time
import urllib.error
from dataclasses import dataclass
from pathlib import Path

from _common import (
    DEFAULT_BUILD_DIR,
    PYTHON,
    ROOT,
    Server,
    build_fake_nvml,
    clean_env,
    exporter_argv,
    fake_env,
    free_port,
    http_get,
    median,
    proc_cpu_seconds,
    proc_status_kib,
)
from kubelet_node import KubeletProc

TARGET_READY_S = 2.0
TARGET_RSS_MIB = 60.0  # the fake library: the exporter alone
TARGET_REAL_KUBELET_RSS_MIB = 75.0  # a real driver, with -k (issue 13)
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
    pod_series: int


# A DCGM series whose pod label is not empty.
_POD_SERIES = re.compile(rb'^DCGM_FI_\w+\{[^}]*\bpod="[^"]', re.M)


def make(mode: str, lib: Path | None, interval_ms: int, kubelet_socket: Path) -> Server:
    port = free_port()
    extra = {"simulate": ["--simulate"],
             "kubelet": ["-k", "--pod-resources-kubelet-socket", str(kubelet_socket)]}
    env = clean_env() if lib is None else fake_env(lib)
    return Server(mode, exporter_argv(port, interval_ms, extra.get(mode, [])), env, port)


def gpu_uuids(env: dict[str, str]) -> list[str]:
    """The GPU UUIDs the exporter will see (the host's, or the fake library's 8), read in a
    child so this process never loads the driver."""
    out = subprocess.run(
        [PYTHON, "-c", "import pynvml as n; n.nvmlInit(); print(*(n.nvmlDeviceGetUUID("
         "n.nvmlDeviceGetHandleByIndex(i)) for i in range(n.nvmlDeviceGetCount())))"],
        env=env, capture_output=True, text=True, check=True).stdout
    return out.split()


# What the exporter process is made of, each in a fresh interpreter that prints its VmRSS.
# The exporter's imports as a run with -k loads them (no web config: TLS and its YAML load
# only with --web-config-file, tests/app/test_imports.py).
_EXPORTER_IMPORTS = ("import gpu_enricher.cli.main, gpu_enricher.app, gpu_enricher.assembly, "
                     "gpu_enricher.kubelet.source")
_BASELINES = (
    ("python alone", "pass"),
    ("python + nvmlInit", "import pynvml; pynvml.nvmlInit()"),
    ("python + the libraries it is built on (aiohttp.web, uvloop, prometheus_client, pynvml, "
     "hpack, protobuf)", "import aiohttp.web, uvloop, prometheus_client, pynvml, hpack, "
     "google.protobuf.message"),
    ("python + the exporter's imports", _EXPORTER_IMPORTS),
    ("python + the exporter's imports + nvmlInit",
     _EXPORTER_IMPORTS + "; import pynvml; pynvml.nvmlInit()"),
)


def baseline_rss_mib(code: str, env: dict[str, str]) -> float:
    probe = (f"{code}\nfor line in open('/proc/self/status'):\n"
             "    if line.startswith('VmRSS:'): print(int(line.split()[1]))")
    env = {**env, "PYTHONPATH": os.pathsep.join(
        p for p in (str(ROOT / "src"), env.get("PYTHONPATH", "")) if p)}
    out = subprocess.run([PYTHON, "-c", probe], env=env, capture_output=True, text=True,
                         check=True).stdout
    return int(out.split()[-1]) / 1024


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
        pod_series = len(_POD_SERIES.findall(http_get(server.base + "/metrics")[2]))
        cpu1 = proc_cpu_seconds(pid)
        scrape_pct = 100 * (cpu1 - cpu0) / (time.monotonic() - t0)
        rss = proc_status_kib(pid, "VmRSS") / 1024
        threads = len(os.listdir(f"/proc/{pid}/task"))
        t1 = time.monotonic()
        time.sleep(idle_seconds)
        idle_pct = 100 * (proc_cpu_seconds(pid) - cpu1) / (time.monotonic() - t1)
        hwm = proc_status_kib(pid, "VmHWM") / 1024
        return Steady(rss_ready, rss, hwm, scrape_pct, idle_pct, threads, pod_series)
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
    parser.add_argument("--real-nvml", action="store_true",
                        help="the host's libnvidia-ml (a real GPU node), not the fake")
    parser.add_argument("--baselines", action="store_true",
                        help="also the RSS of python alone, + nvmlInit, + the exporter's imports")
    args = parser.parse_args()
    modes = [m.strip() for m in args.modes.split(",") if m.strip()]
    if args.real_nvml and "simulate" in modes:
        parser.error("--real-nvml: simulate runs on its own simulated node; leave it out")
    lib = None if args.real_nvml else build_fake_nvml(args.build_dir)
    # The kubelet's GPU pods hold the GPUs the exporter sees, whole (its default, the fake's
    # MIG instances, would match nothing on 8 whole fake GPUs: no pod label to count).
    devices = gpu_uuids(clean_env() if lib is None else fake_env(lib))
    print(f"{os.cpu_count()} CPUs, load {os.getloadavg()[0]:.2f}", file=sys.stderr)

    socket = Path(tempfile.mkdtemp(prefix="footprint-")) / "kubelet.sock"
    kubelet = KubeletProc(socket, 0, None, gpu_devices=devices)
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

    node = (f"{len(devices)} real GPU(s), the host's libnvidia-ml" if args.real_nvml else
            "8 fake GPUs (nvml) or the built-in simulated node")
    print(f"exporter -c {args.interval_ms}, {node}\n")
    print("| mode | spawn→listening s | spawn→/ready 200 s (min..max) | RSS at ready MiB "
          f"| RSS after {args.scrape_seconds}s MiB | VmHWM MiB | CPU % 1 scrape/s "
          f"| idle CPU % over {args.idle_seconds}s | threads | DCGM series with a pod |")
    print("|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|")
    for mode in modes:
        s, st = starts[mode], steadies[mode]
        ready = [x.ready_s for x in s]
        print(f"| {mode} | {median([x.listening_s for x in s]):.2f} | {median(ready):.2f} "
              f"({min(ready):.2f}..{max(ready):.2f}) | {st.rss_ready_mib:.1f} | {st.rss_mib:.1f} "
              f"| {st.hwm_mib:.1f} | {st.scrape_cpu_pct:.2f} | {st.idle_cpu_pct:.2f} "
              f"| {st.threads} | {st.pod_series} |")
    if args.baselines:
        env = clean_env() if lib is None else fake_env(lib)
        print("\n| the same interpreter | RSS MiB |\n|---|---:|")
        for what, code in _BASELINES:
            print(f"| {what} | {baseline_rss_mib(code, env):.1f} |")
    # The fake library's targets are for the exporter alone; on a real node the driver's own
    # memory comes on top, and issue 13's target is the process with -k.
    rss_mode, rss_target = ("kubelet", TARGET_REAL_KUBELET_RSS_MIB) if args.real_nvml else (
        "nvml", TARGET_RSS_MIB)
    if "nvml" in modes and rss_mode in modes:
        ready_s = median([x.ready_s for x in starts["nvml"]])
        st = steadies["nvml"]
        print()
        for what, value, target, unit in (
                ("start-up to /ready", ready_s, TARGET_READY_S, "s"),
                (f"RSS ({rss_mode})", steadies[rss_mode].rss_mib, rss_target, "MiB"),
                ("idle CPU", st.idle_cpu_pct, TARGET_IDLE_CPU_PCT, "%")):
            verdict = "met" if value <= target else "MISSED"
            print(f"- {what}: {value:.2f} {unit} (target <= {target:g} {unit}): {verdict}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
