"""A real containerd for the tests: Debian's containerd (1.6) with its own root, state, gRPC and
ttrpc sockets under a temporary directory, its CRI plugin off, running real tasks (runc, through
containerd-shim-runc-v2) from a root filesystem of one static program that sleeps, no image and
no registry: `ctr run --rootfs`. ctr, containerd's own client, creates, starts and stops them;
the exporter only reads (its own gRPC client, `runtime/containerd_client.py`)."""

import subprocess
import tempfile
import time
from collections.abc import Sequence
from pathlib import Path

from tests.conftest import require_tool
from tests.runtime.dockerd import SLEEPER, end_daemon

CONFIG = """version = 2
root = "{root}/root"
state = "{root}/state"
disabled_plugins = ["io.containerd.grpc.v1.cri"]
[grpc]
  address = "{socket}"
[ttrpc]
  address = "{socket}.ttrpc"
[debug]
  address = ""
[metrics]
  address = ""
"""


class Containerd:
    def __init__(self) -> None:
        # A short path: a unix socket's name is at most 107 bytes.
        self.root = Path(tempfile.mkdtemp(prefix="gpu-enricher-ctd-", dir="/tmp"))
        self.socket = self.root / "containerd.sock"
        self.rootfs = self.root / "rootfs"
        self.log = self.root / "containerd.log"
        self.proc: subprocess.Popen[bytes] | None = None
        self.ctr = ""

    def start(self, timeout: float = 30.0) -> None:
        containerd = require_tool("containerd")
        self.ctr = require_tool("ctr")
        require_tool("runc")
        require_tool("containerd-shim-runc-v2")
        config = self.root / "config.toml"
        config.write_text(CONFIG.format(root=self.root, socket=self.socket))
        self._build_rootfs()
        with self.log.open("wb") as log:
            self.proc = subprocess.Popen([containerd, "--config", str(config)],
                                         stdout=log, stderr=subprocess.STDOUT)
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            assert self.proc.poll() is None, self.log.read_text()[-3000:]
            if self.socket.exists() and self._ctr("version", check=False).returncode == 0:
                return
            time.sleep(0.1)
        raise RuntimeError(f"containerd did not answer: {self.log.read_text()[-3000:]}")

    def _build_rootfs(self) -> None:
        source = self.root / "sleeper.c"
        source.write_text("#include <unistd.h>\n" + SLEEPER)
        self.rootfs.mkdir()
        subprocess.run([require_tool("gcc"), "-static", "-O2", "-o",
                        str(self.rootfs / "sleeper"), str(source)], check=True, timeout=120)

    def _ctr(self, *args: str, namespace: str = "default",
             check: bool = True) -> subprocess.CompletedProcess[str]:
        return subprocess.run([self.ctr, "--address", str(self.socket), "--namespace", namespace,
                               *args], capture_output=True, text=True, timeout=60, check=check)

    def run(self, namespace: str, container_id: str, env: Sequence[str] = (),
            labels: Sequence[str] = ()) -> int:
        """A started task running /sleeper: its PID on the host. Its cgroup is ctr's default,
        `/<namespace>/<id>`."""
        flags = [*(f"--env={e}" for e in env), *(f"--label={label}" for label in labels)]
        self._ctr("run", "--detach", *flags, "--rootfs", str(self.rootfs), container_id,
                  "/sleeper", namespace=namespace)
        return self.pid(namespace, container_id)

    def label(self, namespace: str, container_id: str, label: str) -> None:
        """Set one of a container's labels (`nerdctl rename` rewrites `nerdctl/name` so)."""
        self._ctr("container", "label", container_id, label, namespace=namespace)

    def pid(self, namespace: str, container_id: str) -> int:
        for line in self._ctr("task", "ls", namespace=namespace).stdout.splitlines()[1:]:
            task, pid, *_ = line.split()
            if task == container_id:
                return int(pid)
        raise LookupError(f"no task {namespace}/{container_id}")

    def remove(self, namespace: str, container_id: str) -> None:
        """Kill the task, delete it and its container."""
        self._ctr("task", "kill", "--signal", "SIGKILL", container_id, namespace=namespace)
        deadline = time.monotonic() + 30
        while self._ctr("task", "delete", container_id, namespace=namespace,
                        check=False).returncode != 0:
            assert time.monotonic() < deadline, f"task {container_id} did not stop"
            time.sleep(0.1)
        self._ctr("container", "delete", container_id, namespace=namespace)

    def stop(self) -> None:
        if self.proc is not None and self.proc.poll() is None:
            for namespace in self._ctr("namespace", "ls", "--quiet").stdout.split():
                for task in self._ctr("task", "ls", "--quiet",
                                      namespace=namespace).stdout.split():
                    self.remove(namespace, task)
        end_daemon(self.proc, self.root, self.root / "state")
