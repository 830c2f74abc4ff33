"""A real Podman for the tests: Debian's podman (4.3) serving its Docker-compatible API
(`podman system service`) with its own storage root, run root and socket under a temporary
directory, the vfs storage driver, the cgroupfs manager and file events, so that it touches
nothing of the host's. It is driven through that API as dockerd is (tests/runtime/dockerd.py):
the same image of one static program, imported from a local tarball; containers with no network
and ulimits this sandbox allows (Podman's defaults ask for more open files and processes than
the test's hard limits)."""

import resource
import subprocess
from typing import Any

from tests.conftest import require_tool
from tests.runtime.dockerd import Dockerd


def _ulimits() -> list[dict[str, Any]]:
    """Open files and processes: at most 1024, never above this process's hard limits."""
    limits = (("nofile", resource.RLIMIT_NOFILE), ("nproc", resource.RLIMIT_NPROC))
    return [{"Name": name, "Soft": value, "Hard": value} for name, limit in limits
            for value in [min(resource.getrlimit(limit)[1] % (1 << 63), 1024)]]


class Podman(Dockerd):
    name = "podman"

    def __init__(self) -> None:
        super().__init__()
        self.mounted = self.root / "run"
        # Podman 4.3 imports without the tag asked for; no short-name lookup in registries.
        self.image = "localhost/gpu-enricher-tiny:latest"
        self.host_config = {"Ulimits": _ulimits()}

    def _podman(self) -> list[str]:
        (self.root / "tmp").mkdir(exist_ok=True)
        return [require_tool("podman"), "--root", str(self.root / "storage"),
                "--runroot", str(self.root / "run"), "--storage-driver", "vfs",
                "--cgroup-manager", "cgroupfs", "--events-backend", "file",
                "--tmpdir", str(self.root / "tmp")]

    def start(self, timeout: float = 60.0) -> None:
        require_tool("conmon")
        require_tool("runc")
        with self.log.open("wb") as log:
            self.proc = subprocess.Popen(
                [*self._podman(), "system", "service", "--time=0", f"unix://{self.socket}"],
                stdout=log, stderr=subprocess.STDOUT)
        self._wait_answering(timeout)
