"""The real container runtimes the runtime benches drive (issue 34): Debian's dockerd
(tests/runtime/dockerd.py) or containerd (tests/runtime/containerd.py), one interface. Needs
root."""

from __future__ import annotations

import sys
import tempfile
from pathlib import Path

from _common import ROOT

sys.path.insert(0, str(ROOT))

from tests.runtime.containerd import Containerd
from tests.runtime.dockerd import Dockerd


class Runtime:
    """What the bench needs of either: start, a container given a GPU, its socket, stop."""

    def __init__(self, kind: str) -> None:
        self.docker = Dockerd() if kind == "docker" else None
        self.containerd = Containerd() if kind == "containerd" else None

    @property
    def socket(self) -> Path:
        return self.docker.socket if self.docker else self._containerd().socket

    def _containerd(self) -> Containerd:
        assert self.containerd is not None
        return self.containerd

    def start(self) -> None:
        if self.docker is not None:
            self.docker.start()
            with tempfile.TemporaryDirectory() as work:
                self.docker.import_image(Path(work))
        else:
            self._containerd().start()

    def run(self, number: int, gpus: int = 8) -> None:
        """Container `c<number>`, given GPU `number % gpus` through NVIDIA_VISIBLE_DEVICES."""
        env = [f"NVIDIA_VISIBLE_DEVICES={number % gpus}"]
        if self.docker is not None:
            self.docker.run(f"c{number}", env)
        else:
            self._containerd().run("bench", f"c{number}", env)

    def remove(self, number: int) -> None:
        if self.docker is not None:
            self.docker.remove(f"c{number}")
        else:
            self._containerd().remove("bench", f"c{number}")

    def stop(self) -> None:
        if self.docker is not None:
            self.docker.stop()
        else:
            self._containerd().stop()
