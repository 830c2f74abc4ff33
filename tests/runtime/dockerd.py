"""A real Docker Engine for the tests: Debian's dockerd (20.10) with its own data root, exec root,
pid file and socket under a temporary directory, the vfs storage driver, no iptables, bridge or
masquerading, and a containerd namespace of its own, so that it touches nothing of the host's.

Its one image is imported from a local tarball: a root filesystem of one static program that
sleeps (`SLEEPER`, built with gcc), no registry. A stand-in `nvidia-container-runtime-hook`
(a script that exits 0) on dockerd's PATH makes dockerd register its `nvidia` device driver, so
that a container started with `--gpus` (HostConfig.DeviceRequests) runs here without a GPU.
"""

import http.client
import json
import os
import secrets
import shutil
import socket
import subprocess
import tarfile
import tempfile
import time
from collections.abc import Sequence
from pathlib import Path
from typing import Any
from urllib.parse import quote

from tests.conftest import require_tool

IMAGE = "gpu-enricher-tiny:1"
SLEEPER = "int main(void) { for (;;) pause(); }\n"
HOOK = "#!/bin/sh\ncat >/dev/null\nexit 0\n"


class _UnixConnection(http.client.HTTPConnection):
    def __init__(self, path: str, timeout: float) -> None:
        super().__init__("docker", timeout=timeout)
        self.path = path

    def connect(self) -> None:
        self.sock = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        self.sock.settimeout(self.timeout)
        self.sock.connect(self.path)


def end_daemon(proc: subprocess.Popen[bytes] | None, root: Path, mounted: Path) -> None:
    """A runtime the tests started: terminated (killed if it lingers), what it left mounted
    under `mounted` unmounted, its directory removed."""
    if proc is not None and proc.poll() is None:
        proc.terminate()
        try:
            proc.wait(timeout=30)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait(timeout=10)
    subprocess.run(["umount", "-R", str(mounted)], capture_output=True, check=False)
    shutil.rmtree(root, ignore_errors=True)


class Dockerd:
    name = "dockerd"

    def __init__(self) -> None:
        self.image = IMAGE
        self.host_config: dict[str, Any] = {}
        """What every container's HostConfig adds (Podman's ulimits)."""
        # A short path: a unix socket's name is at most 107 bytes.
        self.root = Path(tempfile.mkdtemp(prefix=f"gpu-enricher-{self.name}-", dir="/tmp"))
        self.socket = self.root / f"{self.name}.sock"
        self.proc: subprocess.Popen[bytes] | None = None
        self.log = self.root / f"{self.name}.log"
        self.mounted = self.root / "exec"  # what the runtime mounts, left behind if it dies

    def start(self, timeout: float = 60.0) -> None:
        dockerd = require_tool("dockerd")
        require_tool("containerd")
        require_tool("runc")
        hooks = self.root / "bin"
        hooks.mkdir(exist_ok=True)
        hook = hooks / "nvidia-container-runtime-hook"
        hook.write_text(HOOK)
        hook.chmod(0o755)
        env = {**os.environ, "PATH": f"{hooks}:{os.environ.get('PATH', '/usr/bin:/bin')}"}
        # containerd's namespaces are dot- or dash-joined words: mkdtemp's `_` may not be.
        namespace = "gpu-enricher-" + secrets.token_hex(4)
        with self.log.open("wb") as log:
            self.proc = subprocess.Popen(
                [dockerd, "--data-root", str(self.root / "data"),
                 "--exec-root", str(self.root / "exec"), "--pidfile", str(self.root / "pid"),
                 "-H", f"unix://{self.socket}", "--storage-driver", "vfs",
                 "--iptables=false", "--ip6tables=false", "--bridge=none", "--ip-masq=false",
                 "--containerd-namespace", namespace,
                 "--containerd-plugins-namespace", f"{namespace}-plugins"],
                env=env, stdout=log, stderr=subprocess.STDOUT)
        self._wait_answering(timeout)

    def _wait_answering(self, timeout: float) -> None:
        """Until `GET /_ping` answers 200 on the socket."""
        assert self.proc is not None
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            assert self.proc.poll() is None, self.log.read_text()[-3000:]
            try:
                if self.api("GET", "/_ping")[0] == 200:
                    return
            except OSError:
                pass
            time.sleep(0.1)
        raise RuntimeError(f"{self.name} did not answer: {self.log.read_text()[-3000:]}")

    def api(self, method: str, path: str, body: Any = None, *, raw: bytes | None = None,
            timeout: float = 60.0) -> tuple[int, Any]:
        """One Engine API call; the answer decoded from JSON when it is."""
        connection = _UnixConnection(str(self.socket), timeout)
        try:
            data = raw if raw is not None else (json.dumps(body).encode()
                                                 if body is not None else None)
            headers = {"Content-Type": "application/x-tar" if raw is not None
                       else "application/json"}
            connection.request(method, path, body=data, headers=headers)
            response = connection.getresponse()
            answer = response.read()
        finally:
            connection.close()
        try:
            return response.status, json.loads(answer) if answer else None
        except ValueError:
            return response.status, answer

    def import_image(self, work: Path) -> None:
        """IMAGE: a root filesystem of /sleeper, from a tarball made here."""
        source, sleeper = work / "sleeper.c", work / "rootfs" / "sleeper"
        sleeper.parent.mkdir(parents=True, exist_ok=True)
        source.write_text("#include <unistd.h>\n" + SLEEPER)
        subprocess.run([require_tool("gcc"), "-static", "-O2", "-o", str(sleeper), str(source)],
                       check=True, timeout=120)
        tarball = work / "rootfs.tar"
        with tarfile.open(tarball, "w") as tar:
            tar.add(sleeper, arcname="sleeper")
        repo, tag = self.image.rsplit(":", 1)
        status, answer = self.api("POST", f"/images/create?fromSrc=-&repo={repo}&tag={tag}",
                                  raw=tarball.read_bytes())
        assert status == 200, answer

    def run(self, name: str, env: Sequence[str] = (),
            device_requests: Sequence[dict[str, Any]] = (),
            labels: dict[str, str] | None = None) -> tuple[str, int]:
        """A started container running /sleeper: its ID and its process's PID on the host."""
        status, created = self.api("POST", f"/containers/create?name={quote(name)}", {
            "Image": self.image, "Cmd": ["/sleeper"], "Env": list(env), "Labels": labels or {},
            "HostConfig": {"DeviceRequests": list(device_requests), "NetworkMode": "none",
                           **self.host_config}})
        assert status == 201, created
        status, answer = self.api("POST", f"/containers/{created['Id']}/start")
        assert status == 204, answer
        status, inspect = self.api("GET", f"/containers/{created['Id']}/json")
        return created["Id"], int(inspect["State"]["Pid"])

    def remove(self, name: str) -> None:
        status, answer = self.api("DELETE", f"/containers/{quote(name)}?force=true")
        assert status == 204, answer

    def stop(self) -> None:
        if self.proc is not None and self.proc.poll() is None:
            for container in self.api("GET", "/containers/json?all=true")[1] or []:
                self.api("DELETE", f"/containers/{container['Id']}?force=true")
        # vfs layers are plain directories; what the runtime left mounted is gone with it.
        end_daemon(self.proc, self.root, self.mounted)


def gpu_request(*device_ids: str, count: int = 0) -> dict[str, Any]:
    """What `docker run --gpus device=…` (or `--gpus N`, `--gpus all` as count -1) sends."""
    return {"Driver": "", "Count": count, "DeviceIDs": list(device_ids),
            "Capabilities": [["gpu"]], "Options": {}}
