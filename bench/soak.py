"""Soak: the exporter on a simulated node whose pods and GPU processes churn every second.

    .venv/bin/python bench/soak.py --duration 3600 --out /tmp/soak

Runs `python -m gpu_enricher --simulate SCENARIO -c INTERVAL` (default: 8 GPUs x 7 MIG
instances, 110 pods, 5 pods and their processes replaced every second), scrapes /metrics
gzipped once per interval, as Prometheus does, and every `--sample-every` seconds records
VmRSS, CPU and the series count. Ground truth comes from the simulated node itself: the
exporter runs with TMPDIR in the output directory, so its simulated kubelet log names
(`log/pods/<ns>_<pod>_<uid>`) and /proc tree (`proc/<pid>`) can be polled (every 0.1 s and
right after each scrape) to know which pods and processes exist and when each departed.

Checks (exit status 1 when one fails; `--json` has the figures):
  rss     VmRSS at the end (median of the last 3 samples) at most 5 % above VmRSS at the end of
          the warm-up (`--warmup`, default 20 % of the run, at least 30 s);
  bounded every pod (namespace/pod) and pid label in every scrape existed on the node within
          the interval before the scrape, and the series count never exceeds the warm-up's
          largest by more than 5 %;
  stale   no scrape that started more than one interval (+ `--slack`, default 1 s, for the
          pass itself and a shared machine) after a pod departed shows its label (its GPU-time
          and energy counters: two intervals, as they show their final value one pass more),
          unless the exporter said it was keeping its last kubelet answer (a `List` that timed
          out: it keeps those labels for up to 3 intervals, by design): such sightings are reported
          as explained, with the log line's time.
The CSV (every sample) and a markdown report go to `--out`; the report to stdout.
"""

from __future__ import annotations

import argparse
import csv
import gzip
import json
import os
import re
import signal
import statistics
import subprocess
import sys
import threading
import time
from dataclasses import asdict
from pathlib import Path
from types import FrameType

from _common import PYTHON, ROOT, free_port, http_get, proc_cpu_seconds, proc_status_kib
from _soak_report import Findings, Sample, report, summarize

DEFAULT_SCENARIO = ROOT / "bench" / "scenarios" / "mig-8x7-110pods-churn.yaml"
POLL_SECONDS = 0.1
_ACCOUNTS = (b"gpu_enricher_pod_gpu_seconds_total{", b"gpu_enricher_pod_energy_joules_total{")
_POD = re.compile(rb'[{,]pod="([^"]*)"')
_NAMESPACE = re.compile(rb'[{,]namespace="([^"]*)"')
_PID = re.compile(rb'[{,]pid="([0-9]+)"')


class Truth:
    """What exists on the simulated node, polled from its directory: key → first seen, and
    key → first poll that found it gone."""

    def __init__(self, directory: Path) -> None:
        self.pods_dir = directory / "log" / "pods"
        self.proc_dir = directory / "proc"
        self.lock = threading.Lock()
        self.first: dict[str, float] = {}
        self.gone: dict[str, float] = {}
        self.live: set[str] = set()

    def _keys(self) -> set[str]:
        pods = {"pod:" + "/".join(n.split("_", 2)[:2]) for n in os.listdir(self.pods_dir)}
        return pods | {"pid:" + n for n in os.listdir(self.proc_dir) if n.isdigit()}

    def poll(self) -> None:
        keys = self._keys()
        now = time.monotonic()
        with self.lock:
            for key in keys - self.live:
                self.first.setdefault(key, now)
                self.gone.pop(key, None)  # a pid Linux would reuse; not expected here
            for key in self.live - keys:
                self.gone[key] = now
            self.live = keys

    def existed_since(self, key: str, since: float) -> bool:
        """Seen live at some poll, and not gone before `since`."""
        with self.lock:
            return key in self.first and self.gone.get(key, float("inf")) >= since

    def gone_at(self, key: str) -> float | None:
        with self.lock:
            return self.gone.get(key)

    def counts(self) -> tuple[int, int, int]:
        """Live pods, live pids, pods departed so far."""
        with self.lock:
            pods = sum(1 for k in self.live if k.startswith("pod:"))
            gone = sum(1 for k in self.gone if k.startswith("pod:"))
            return pods, len(self.live) - pods, gone


def scrape(base: str) -> tuple[bytes, float]:
    t0 = time.monotonic()
    status, headers, body = http_get(base + "/metrics", {"Accept-Encoding": "gzip"}, 10.0)
    if status != 200:
        raise RuntimeError(f"/metrics answered {status}")
    if headers.get("Content-Encoding") == "gzip":
        body = gzip.decompress(body)
    return body, (time.monotonic() - t0) * 1e3


def check(body: bytes, started: float, truth: Truth, interval: float, slack: float,
          found: Findings) -> tuple[int, int, int]:
    """Series, pod and pid labels of one scrape, checked against the truth."""
    series = 0
    pods: set[str] = set()
    accounts: set[str] = set()  # pods seen only in the per-pod counters (GPU time, energy)
    pids: set[str] = set()
    for line in body.split(b"\n"):
        if not line or line.startswith(b"#"):
            continue
        series += 1
        if (pod := _POD.search(line)) is not None:
            namespace = _NAMESPACE.search(line)
            key = f"pod:{namespace[1].decode() if namespace else ''}/{pod[1].decode()}"
            (accounts if line.startswith(_ACCOUNTS) else pods).add(key)
        if (pid := _PID.search(line)) is not None:
            pids.add("pid:" + pid[1].decode())
    for key in pods | (accounts - pods) | pids:
        gone = truth.gone_at(key)
        # Existed at some point of the interval before the pass this scrape serves; a pod's
        # counters are shown one pass more, with their final value (collector/ledger.py).
        window = interval * (2 if key in accounts and key not in pods else 1)
        if not truth.existed_since(key, started - window - slack):
            if gone is None:
                found.unknown_count += 1
                found.unknown[100:] = []
                found.unknown.append(key)
            else:  # a departed pod, or a departed pod's process
                found.stale_count += 1
                if len(found.stale) < 1000:
                    found.stale.append((key, started - gone, time.time()))
        if gone is not None and gone < started and key.startswith("pod:"):
            found.max_lag_s = max(found.max_lag_s, started - gone)
    return series, len(pods), len(pids)


def find_sim_dir(tmp: Path, proc: subprocess.Popen[bytes], timeout: float = 30) -> Path:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if proc.poll() is not None:
            raise RuntimeError(f"exporter exited {proc.returncode}")
        for d in tmp.glob("gpu-enricher-sim-*"):
            if (d / "log" / "pods").is_dir() and (d / "proc").is_dir():
                return d
        time.sleep(0.05)
    raise RuntimeError("the simulated node's directory never appeared")


def wait_ready(base: str, proc: subprocess.Popen[bytes], timeout: float = 60) -> None:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if proc.poll() is not None:
            raise RuntimeError(f"exporter exited {proc.returncode}")
        try:
            if http_get(base + "/ready", timeout=2.0)[0] == 200:
                return
        except OSError:
            pass
        time.sleep(0.05)
    raise RuntimeError("/ready never answered 200")


def _raise_exit(signum: int, _frame: FrameType | None) -> None:
    raise SystemExit(128 + signum)  # unwind: the finally stops the exporter


def run(args: argparse.Namespace) -> dict[str, object]:
    out: Path = args.out
    tmp = out / "tmp"
    tmp.mkdir(parents=True, exist_ok=True)
    port = free_port()
    base = f"http://127.0.0.1:{port}"
    interval = args.interval_ms / 1000
    env = {k: v for k, v in os.environ.items() if not k.startswith(("FAKE_NVML_", "GPU_ENR"))}
    env.update(TMPDIR=str(tmp), PYTHONUNBUFFERED="1", NODE_NAME="soak-node")
    argv = [PYTHON, "-m", "gpu_enricher", "--simulate", str(args.scenario), "-a",
            f"127.0.0.1:{port}", "-c", str(args.interval_ms)]
    log_file = (out / "exporter.log").open("wb")
    proc = subprocess.Popen(argv, env=env, stdout=log_file, stderr=subprocess.STDOUT,
                            cwd=ROOT)
    samples: list[Sample] = []
    found = Findings()
    stop = threading.Event()
    try:
        truth = Truth(find_sim_dir(tmp, proc))
        wait_ready(base, proc)
        truth.poll()

        def poller() -> None:
            while not stop.wait(POLL_SECONDS):
                truth.poll()

        threading.Thread(target=poller, daemon=True).start()
        t0 = time.monotonic()
        warmup = args.warmup if args.warmup is not None else max(30.0, 0.2 * args.duration)
        last_cpu, last_t = proc_cpu_seconds(proc.pid), t0
        latencies: list[float] = []
        scrapes = errors = 0
        series = npods = npids = 0
        next_sample = t0 + args.sample_every
        tick = 0
        csv_file = (out / "soak.csv").open("w", newline="")
        writer = csv.writer(csv_file)
        writer.writerow(list(Sample.__dataclass_fields__))
        while (now := time.monotonic()) < t0 + args.duration:
            if proc.poll() is not None:
                raise RuntimeError(f"exporter exited {proc.returncode} during the soak")
            started = time.monotonic()
            try:
                body, ms = scrape(base)
                truth.poll()  # every label of this scrape has been seen live by now
                series, npods, npids = check(body, started, truth, interval, args.slack, found)
                latencies.append(ms)
                scrapes += 1
                if started - t0 < warmup:
                    found.series_warmup_max = max(found.series_warmup_max, series)
                found.series_max = max(found.series_max, series)
            except (OSError, RuntimeError) as err:
                errors += 1
                print(f"scrape error: {err}", file=sys.stderr)
            if time.monotonic() >= next_sample:
                now = time.monotonic()
                cpu = proc_cpu_seconds(proc.pid)
                live_pods, live_pids, departed = truth.counts()
                sample = Sample(
                    round(now - t0, 1), proc_status_kib(proc.pid, "VmRSS") / 1024,
                    proc_status_kib(proc.pid, "VmHWM") / 1024,
                    100 * (cpu - last_cpu) / (now - last_t), series, npods, live_pods, npids,
                    live_pids, departed, scrapes, errors,
                    statistics.median(latencies) if latencies else float("nan"),
                    max(latencies, default=float("nan")))
                samples.append(sample)
                writer.writerow([f"{v:.2f}" if isinstance(v, float) else v
                                 for v in asdict(sample).values()])
                csv_file.flush()
                print(f"[{sample.elapsed_s:7.0f}s] RSS {sample.rss_mib:6.1f} MiB cpu "
                      f"{sample.cpu_pct:5.1f}% series {series} pods {npods}/{live_pods} "
                      f"departed {departed} errors {errors} stale {found.stale_count} "
                      f"unknown {found.unknown_count}", file=sys.stderr)
                last_cpu, last_t, latencies = cpu, now, []
                next_sample += args.sample_every
            tick += 1
            time.sleep(max(0.0, t0 + tick * interval - time.monotonic()))
        csv_file.close()
    finally:
        stop.set()
        if proc.poll() is None:
            proc.send_signal(signal.SIGTERM)
            try:
                proc.wait(timeout=15)
            except subprocess.TimeoutExpired:
                proc.kill()
                proc.wait()
        log_file.close()
    return summarize(samples, found, warmup, args)


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--duration", type=float, default=180, help="seconds (default 180)")
    parser.add_argument("--scenario", type=Path, default=DEFAULT_SCENARIO)
    parser.add_argument("--interval-ms", type=int, default=1000, help="exporter -c")
    parser.add_argument("--sample-every", type=float, default=10.0, help="seconds")
    parser.add_argument("--warmup", type=float, default=None, help="seconds")
    parser.add_argument("--slack", type=float, default=1.0,
                        help="seconds beyond one interval before a departed pod is stale")
    parser.add_argument("--curve-every", type=float, default=None,
                        help="report rows every N s (default: duration / 12)")
    parser.add_argument("--out", type=Path, default=Path("/tmp/soak"))
    parser.add_argument("--json", type=Path, help="also write the result here")
    args = parser.parse_args()
    signal.signal(signal.SIGTERM, _raise_exit)
    args.out.mkdir(parents=True, exist_ok=True)
    result = run(args)
    if args.json:
        args.json.write_text(json.dumps(result, indent=1))
    text = report(result, args.curve_every or args.duration / 12)
    (args.out / "soak.md").write_text(text + "\n")
    print(text)
    ok = all(bool(result[k]) for k in ("ok_rss", "ok_bounded", "ok_stale", "ok_errors"))
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
