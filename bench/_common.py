"""Helpers shared by the bench scripts: the fake NVML library, processes, HTTP polling."""

from __future__ import annotations

import contextlib
import importlib
import json
import os
import re
import signal
import socket
import statistics
import subprocess
import sys
import tempfile
import time
import urllib.error
import urllib.request
from collections.abc import Iterator, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
BENCH = ROOT / "bench"
PYTHON = sys.executable
DEFAULT_BUILD_DIR = Path(os.environ.get("BENCH_BUILD_DIR", "/tmp/gpu-enricher-bench"))
GPU_COUNT = 8


def build_fake_nvml(build_dir: Path = DEFAULT_BUILD_DIR) -> Path:
    """Compile (or reuse) tests/fake_nvml into build_dir/fake-nvml; return the .so.1 path."""
    if str(ROOT) not in sys.path:
        sys.path.insert(0, str(ROOT))
    module = importlib.import_module("tests.fake_nvml.build")
    path: Path = module.build_fake_nvml(build_dir / "fake-nvml")
    return path


def in_process_fake(real_cost: bool) -> tuple[Any, Any]:
    """The fake library loaded into this process for `GPU_COUNT` GPUs (with the H100 cost
    profile when `real_cost`), and the bundled counters lines: what an in-process NVML
    benchmark starts from. Returns (FakeNvml, counter lines)."""
    lib = build_fake_nvml(DEFAULT_BUILD_DIR)
    if str(ROOT) not in sys.path:
        sys.path.insert(0, str(ROOT))
    os.environ["FAKE_NVML_GPU_COUNT"] = str(GPU_COUNT)
    os.environ["FAKE_NVML_COST_PROFILE"] = "h100" if real_cost else ""
    fake = importlib.import_module("tests.fake_nvml.build").FakeNvml(lib)
    counters = importlib.import_module("gpu_enricher.fields.counters")
    collection = importlib.import_module("gpu_enricher.fields.collection")
    return fake, counters.load_counters(collection.default_counters_path())


def clean_env() -> dict[str, str]:
    """This environment without the fake library's and the exporter's settings: an exporter
    on the host's own libnvidia-ml (a real GPU node)."""
    env = {k: v for k, v in os.environ.items()
           if not k.startswith(("FAKE_NVML_", "GPU_ENRICHER_", "DCGM_EXPORTER_"))}
    env["PYTHONUNBUFFERED"] = "1"
    return env


def fake_env(lib: Path, gpus: int = GPU_COUNT, extra: Mapping[str, str] | None = None,
             ) -> dict[str, str]:
    """The environment of a process that loads the fake library: nothing else FAKE_NVML_*."""
    env = clean_env()
    env["LD_LIBRARY_PATH"] = str(lib.parent)
    env["FAKE_NVML_GPU_COUNT"] = str(gpus)
    if extra:
        env.update(extra)
    return env


_WRK_UNITS_MS = {"us": 1e-3, "ms": 1.0, "s": 1e3, "m": 60e3}


def wrk_ms(text: str) -> float:
    """A duration as wrk prints it (`812.00us`, `1.23ms`, `2.00s`, `1.00m`), in ms."""
    found = re.fullmatch(r"([\d.]+)(us|ms|s|m)", text)
    if found is None:
        raise ValueError(f"unparsed wrk duration {text!r}")
    return float(found[1]) * _WRK_UNITS_MS[found[2]]


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port: int = s.getsockname()[1]
        return port


def http_get(url: str, headers: Mapping[str, str] | None = None,
             timeout: float = 5.0) -> tuple[int, dict[str, str], bytes]:
    """Status, headers, raw body (never decompressed). Raises URLError when nothing listens."""
    request = urllib.request.Request(url, headers=dict(headers or {}))
    try:
        with urllib.request.urlopen(request, timeout=timeout) as resp:
            return resp.status, dict(resp.headers.items()), resp.read()
    except urllib.error.HTTPError as err:
        return err.code, dict(err.headers.items()), err.read()


@dataclass
class Server:
    """A server process on 127.0.0.1 (exporter, bare baseline, naive exporter)."""

    name: str
    argv: list[str]
    env: dict[str, str]
    port: int
    cpus: set[int] | None = None
    proc: subprocess.Popen[bytes] | None = None
    spawned_at: float = 0.0

    @property
    def base(self) -> str:
        return f"http://127.0.0.1:{self.port}"

    def start(self) -> None:
        cpus = self.cpus

        def pin() -> None:
            if cpus:
                os.sched_setaffinity(0, cpus)

        self.spawned_at = time.monotonic()
        self.proc = subprocess.Popen(self.argv, env=self.env, stdout=subprocess.DEVNULL,
                                     stderr=subprocess.PIPE, preexec_fn=pin)

    @property
    def pid(self) -> int:
        assert self.proc is not None
        return self.proc.pid

    def wait_status(self, path: str, status: int = 200, timeout: float = 30.0,
                    poll: float = 0.01) -> float:
        """Seconds from spawn until `path` answers `status`."""
        assert self.proc is not None
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            if self.proc.poll() is not None:
                _, err = self.proc.communicate()
                raise RuntimeError(f"{self.name} exited {self.proc.returncode}: "
                                   f"{err.decode(errors='replace')[-2000:]}")
            try:
                if http_get(self.base + path, timeout=2.0)[0] == status:
                    return time.monotonic() - self.spawned_at
            except (urllib.error.URLError, ConnectionError, TimeoutError):
                pass
            time.sleep(poll)
        raise RuntimeError(f"{self.name}: {path} never answered {status}")

    def stop(self) -> None:
        if self.proc is None:
            return
        if self.proc.poll() is None:
            self.proc.send_signal(signal.SIGTERM)
            try:
                self.proc.communicate(timeout=10)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.communicate()
        self.proc = None


def exporter_argv(port: int, interval_ms: int, extra: Sequence[str] = (),
                  loop: str | None = None) -> list[str]:
    """`python -m gpu_enricher`, or with `loop` (asyncio, uvloop) that event loop forced."""
    head = [PYTHON, "-m", "gpu_enricher"] if loop is None else [
        PYTHON, str(BENCH / "loop_run.py"), loop]
    return [*head, "-a", f"127.0.0.1:{port}", "-c", str(interval_ms), *extra]


def set_plan(collector: Any, plan: object) -> None:
    """Give an in-process Collector its counter plan without a backend open (collect.py,
    processes.py), wherever the collector keeps it: its CounterPlanner, or itself."""
    planner = getattr(collector, "_planner", None)
    (planner if planner is not None else collector).plan = plan


def median(values: Sequence[float]) -> float:
    return statistics.median(values) if values else float("nan")


def proc_cpu_seconds(pid: int) -> float:
    """utime + stime of a process, from /proc/PID/stat."""
    raw = Path(f"/proc/{pid}/stat").read_text()
    fields = raw[raw.rindex(")") + 2:].split()
    ticks = int(fields[11]) + int(fields[12])  # fields 14, 15 of stat(5)
    return ticks / os.sysconf("SC_CLK_TCK")


def proc_status_kib(pid: int, key: str) -> int:
    """A `kB` line of /proc/PID/status (VmRSS, VmHWM, …)."""
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith(key + ":"):
            return int(line.split()[1])
    raise KeyError(key)


def capture_bodies(server: Server, bodies: Path) -> dict[str, dict[str, str]]:
    """Store the exporter's /metrics body as served plain and gzipped (for the bare server),
    with the headers that matter; return those headers by variant."""
    headers: dict[str, dict[str, str]] = {}
    for variant, req in (("plain", {}), ("gzip", {"Accept-Encoding": "gzip"})):
        status, resp_headers, body = http_get(server.base + "/metrics", req)
        assert status == 200, status
        keep = ("Content-Type", "Content-Encoding", "Vary")
        headers[variant] = {k: v for k, v in resp_headers.items() if k in keep}
        (bodies / f"{variant}.bin").write_bytes(body)
    (bodies / "headers.json").write_text(json.dumps(headers, indent=1))
    return headers


@contextlib.contextmanager
def baseline_tree(commit: str) -> Iterator[Path]:
    """A `git worktree` of `commit` in a temporary directory, removed afterwards: the tree an
    A/B bench measures this one against."""
    with tempfile.TemporaryDirectory(prefix="gpu-enricher-baseline-") as tmp:
        tree = Path(tmp) / "baseline"
        subprocess.run(["git", "worktree", "add", "--detach", str(tree), commit],
                       cwd=ROOT, check=True, capture_output=True)
        try:
            yield tree
        finally:
            subprocess.run(["git", "worktree", "remove", "--force", str(tree)], cwd=ROOT,
                           check=False, capture_output=True)
