"""What the fault tests (test_faults.py, test_faults_node.py) share: the exporter as a process
with the command, environment and working directory a test chooses, polling its /metrics from
an async test (the fakes run in the test's event loop, so blocking HTTP goes to a thread), and
the fake kubelet holding one pod on GPU 0, and that pod as the (fake) Kubernetes API lists it."""

import asyncio
import os
import re
import subprocess
import sys
import time
from collections.abc import AsyncIterator, Callable
from pathlib import Path

import pytest

from gpu_enricher.model import PodAssignment, PodMeta
from gpu_enricher.sim.fake_api.objects import pod_object
from gpu_enricher.sim.fake_kubelet.server import FakeKubelet
from tests.app.test_process import Exporter, free_port, get

NODE = "gpu-node-1"
NV0 = "GPU-fa4e0000-7953-256e-8f33-1343419b1a1c"
TRAINER = PodAssignment("ml", "trainer", "main", "nvidia.com/gpu", (NV0,))
ERRORS = "gpu_enricher_collection_errors_total"
OUR_LOG_LINE = re.compile(r"^\d{4}-\d\d-\d\d \d\d:\d\d:\d\d,\d{3} (DEBUG|INFO|WARNING|ERROR) "
                          r"gpu_enricher[\w.]*: ")


class Process(Exporter):
    """An `Exporter` whose command line and working directory the test chooses."""

    def __init__(self, args: list[str], env: dict[str, str], *,
                 command: list[str] | None = None, cwd: Path | None = None,
                 pass_fds: tuple[int, ...] = ()) -> None:
        self.port = free_port()
        self.base = f"http://127.0.0.1:{self.port}"
        # Not GRPC_*: importing gpu_enricher.sim.fake_kubelet here set GRPC_VERBOSITY for this
        # process; the exporter must choose its own.
        full_env = {k: v for k, v in os.environ.items()
                    if not k.startswith(("FAKE_NVML_", "GRPC_"))}
        full_env.update(env)
        self.proc = subprocess.Popen(
            [*(command or [sys.executable, "-m", "gpu_enricher"]),
             "-a", f"127.0.0.1:{self.port}", *args],
            env=full_env, cwd=cwd, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
            pass_fds=pass_fds)
        self.started = time.monotonic()


def nvml_env(fake_nvml_path: Path, **env: str) -> dict[str, str]:
    return {"LD_LIBRARY_PATH": str(fake_nvml_path.parent), "FAKE_NVML_GPU_COUNT": "2",
            "NODE_NAME": NODE, **env}


def threads(exp: Exporter) -> int:
    return len(os.listdir(f"/proc/{exp.proc.pid}/task"))


async def fetch(exp: Exporter, path: str = "/metrics") -> tuple[int, str]:
    return await asyncio.to_thread(get, exp.base + path)


async def until(exp: Exporter, predicate: Callable[[str], bool], within: float = 10.0) -> str:
    """/metrics once `predicate` holds for it (polled every 50 ms)."""
    deadline = time.monotonic() + within
    while True:
        assert exp.proc.poll() is None, "the exporter exited"
        _, body = await fetch(exp)
        if predicate(body):
            return body
        if time.monotonic() > deadline:
            pytest.fail(f"condition not met within {within}s; /metrics:\n{body}")
        await asyncio.sleep(0.05)


def gpu0(body: str) -> str:
    """GPU 0's temperature series, the one a pod's labels go on."""
    return next(line for line in body.splitlines()
                if line.startswith('DCGM_FI_DEV_GPU_TEMP{gpu="0",'))


def held(body: str) -> bool:
    return 'pod="trainer"' in gpu0(body)


def foreign_lines(err: str) -> list[str]:
    """Log lines that are not ours: gRPC's own, tracebacks, warnings."""
    return [line for line in err.splitlines() if not OUR_LOG_LINE.match(line)]


@pytest.fixture
async def kubelet(socket_dir: Path) -> AsyncIterator[FakeKubelet]:
    fake = FakeKubelet(socket_dir / "kubelet.sock")
    fake.set_assignments([TRAINER])
    await fake.start()
    yield fake
    await fake.stop()


def kubelet_args(kubelet: FakeKubelet, *args: str) -> list[str]:
    """-k on `kubelet`'s socket, every 200 ms: List deadline 0.5 s, pod labels kept 1 s after
    the last good List."""
    return ["-c", "200", "-k", "--pod-resources-kubelet-socket", str(kubelet.socket_path),
            *args]


def trainer_pod(team: str) -> dict[str, object]:
    """TRAINER as the API server lists it, with the label `team`."""
    return pod_object(PodMeta("u-1", "ml", "trainer", {"team": team}), NODE)


def write_kubeconfig(directory: Path, server: str) -> Path:
    """A kubeconfig in `directory` for the API server at `server`, with a bearer token."""
    kubeconfig = directory / "kubeconfig"
    kubeconfig.write_text(
        f"apiVersion: v1\nkind: Config\nclusters:\n- name: fake\n  cluster: {{server: "
        f'"{server}"}}\nusers:\n- name: exporter\n  user: {{token: not-a-secret}}\n'
        "contexts:\n- name: fake\n  context: {cluster: fake, user: exporter}\n"
        "current-context: fake\n")
    return kubeconfig
