"""The harness bench/kubelet.py's sections share with bench/kubelet_unmatched.py and
bench/footprint.py: a fake kubelet in its own process, the node every exporter start of those
benches runs on, and the self-metrics they read back."""

from __future__ import annotations

import gzip
import json
import os
import re
import signal
import subprocess
import tempfile
import time
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from _common import BENCH, PYTHON, Server, exporter_argv, fake_env, free_port, http_get
from fake_kubelet_proc import fake_nvml_mig_env

_COUNTER = re.compile(r'^gpu_enricher_collections_total\{source="(\w+)"\} (\d+)', re.M)
LIST_CPU = re.compile(r"^gpu_enricher_kubelet_list_cpu_seconds (\S+)$", re.M)


class KubeletProc:
    """bench/fake_kubelet_proc.py in its own process; `stop()` returns its exit stats."""

    def __init__(self, socket_path: Path, churn: int, cpus: set[int] | None,
                 extra_pods: int | None = None, gpu_devices: Sequence[str] = (),
                 serve: Sequence[str] = ()) -> None:
        self.socket_path = socket_path
        self.serve = tuple(serve)  # this script's arguments that serve a kubelet of its own
        self.churn = churn
        self.cpus = cpus
        self.extra_pods = extra_pods
        self.gpu_devices = tuple(gpu_devices)
        self.proc: subprocess.Popen[str] | None = None
        self.answer_bytes = 0

    def start(self, timeout: float = 30.0) -> None:
        cpus = self.cpus

        def pin() -> None:
            if cpus:
                os.sched_setaffinity(0, cpus)

        env = {**os.environ, "PYTHONUNBUFFERED": "1"}
        argv = ([PYTHON, str(BENCH / "kubelet.py"), self.serve[0], str(self.socket_path),
                 *self.serve[1:]]
                if self.serve else
                [PYTHON, str(BENCH / "kubelet.py"), "--serve-large", str(self.socket_path),
                 "--large-pods", str(self.extra_pods)] if self.extra_pods is not None else
                [PYTHON, str(BENCH / "fake_kubelet_proc.py"), "--socket", str(self.socket_path),
                 "--churn", str(self.churn), "--gpu-devices", ",".join(self.gpu_devices)])
        self.proc = subprocess.Popen(argv, env=env, stdout=subprocess.PIPE,
                                     stderr=subprocess.PIPE, text=True, preexec_fn=pin)
        assert self.proc.stdout is not None
        deadline = time.monotonic() + timeout
        line = self.proc.stdout.readline()  # blocks until "ready ..." or EOF
        if not line.startswith("ready") or time.monotonic() > deadline:
            _, err = self.proc.communicate(timeout=10)
            raise RuntimeError(f"fake kubelet did not start: {line!r} {err[-2000:]}")
        if (size := re.search(r" bytes=(\d+)", line)) is not None:
            self.answer_bytes = int(size[1])

    @property
    def pid(self) -> int:
        assert self.proc is not None
        return self.proc.pid

    def stop(self) -> dict[str, Any]:
        if self.proc is None:
            return {}
        proc, self.proc = self.proc, None
        proc.send_signal(signal.SIGTERM)
        try:
            out, err = proc.communicate(timeout=15)
        except subprocess.TimeoutExpired:
            proc.kill()
            out, err = proc.communicate()
        for line in reversed(out.splitlines()):
            if line.startswith("{"):
                stats: dict[str, Any] = json.loads(line)
                return stats
        raise RuntimeError(f"fake kubelet gave no stats: {out[-500:]} {err[-2000:]}")


@dataclass
class Node:
    """What every exporter start needs: the fake library, env, a socket dir, pinning."""

    lib: Path
    tmp: Path
    server_cpus: set[int] | None
    side_cpus: set[int] | None  # the fake kubelet, wrk, and this script's polling
    env: dict[str, str] = field(default_factory=dict)

    def __post_init__(self) -> None:
        self.env = fake_env(self.lib, 8, {"FAKE_NVML_MIG": fake_nvml_mig_env()})

    def socket(self) -> Path:
        return Path(tempfile.mkdtemp(prefix="k", dir=self.tmp)) / "kubelet.sock"

    def exporter(self, name: str, interval_ms: int, socket: Path | None,
                 more: Sequence[str] = ()) -> Server:
        port = free_port()
        extra = ["-k", "--pod-resources-kubelet-socket", str(socket)] if socket else []
        return Server(name, exporter_argv(port, interval_ms, [*extra, *more]), self.env, port,
                      self.server_cpus)


def counters(text: str) -> dict[str, int]:
    return {m[1]: int(m[2]) for m in _COUNTER.finditer(text)}


def metrics_text(server: Server, gz: bool = False) -> tuple[str, bytes]:
    headers = {"Accept-Encoding": "gzip"} if gz else {}
    status, resp_headers, body = http_get(server.base + "/metrics", headers)
    assert status == 200, status
    if resp_headers.get("Content-Encoding") == "gzip":
        body = gzip.decompress(body)
    return body.decode(), body
