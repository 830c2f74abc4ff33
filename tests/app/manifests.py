"""The exporter started exactly as a deployment renders it (test_manifests.py): the container's
environment and arguments verbatim, the files it mounts, against the fake library, the grpc.aio
fake kubelet and the fake Kubernetes API, all in the test's event loop.

Only paths are mapped, so that the test needs no root: a file mounted under /etc/dcgm-exporter
lands in a temporary folder that GPU_ENRICHER_DCGM_EXPORTER_DIR names; the pod-resources socket
is the fake kubelet's (GPU_ENRICHER_POD_RESOURCES_KUBELET_SOCKET); the in-cluster service
account is a kubeconfig for the fake API server (KUBECONFIG); a hostPath directory named by a
variable (the HPC job mapping) is that variable's value mapped; `:9400` becomes a free port.
"""

import os
import subprocess
import sys
import time
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path

from gpu_enricher.sim.fake_api.server import FakeKubeApi
from gpu_enricher.sim.fake_kubelet.server import FakeKubelet
from tests.app.test_process import Exporter, free_port

DCGM_DIR = "/etc/dcgm-exporter"
HOST_PATHS = ("/var/lib/dcgm-exporter",)
"""hostPath mounts whose container path a variable names, mapped under the test's root."""


@dataclass(frozen=True)
class Manifest:
    """What one deployment hands the exporter's container."""

    env: Mapping[str, str]
    args: Sequence[str] = ()
    files: Mapping[str, str] = field(default_factory=dict)
    """Container path → content (ConfigMap keys mounted by subPath, hostPath files)."""
    token: bool = False
    """The service-account token is mounted: the exporter may call the Kubernetes API."""


class Deployed(Exporter):
    """The exporter process of one manifest (no `-a`: DCGM_EXPORTER_LISTEN says where)."""

    def __init__(self, manifest: Manifest, root: Path, nvml: Mapping[str, str],
                 kubelet: FakeKubelet | None = None, api: FakeKubeApi | None = None) -> None:
        self.port = free_port()
        self.base = f"http://127.0.0.1:{self.port}"
        self.root = root
        for path, content in manifest.files.items():
            local = self.local(path)
            local.parent.mkdir(parents=True, exist_ok=True)
            local.write_text(content)
        env = {k: v for k, v in os.environ.items()
               if not k.startswith(("FAKE_NVML_", "GRPC_", "DCGM_", "GPU_ENRICHER_"))
               and k not in ("KUBECONFIG", "NODE_NAME", "POD_NAME", "POD_NAMESPACE")}
        env.update(nvml)
        env.update({name: self.mapped(value) for name, value in manifest.env.items()})
        env["GPU_ENRICHER_DCGM_EXPORTER_DIR"] = str(self.local(DCGM_DIR))
        if kubelet is not None:
            env["GPU_ENRICHER_POD_RESOURCES_KUBELET_SOCKET"] = str(kubelet.socket_path)
        if manifest.token and api is not None:
            env["KUBECONFIG"] = str(self.kubeconfig(api))
        self.proc = subprocess.Popen(
            [sys.executable, "-m", "gpu_enricher", *manifest.args], env=env, cwd=root,
            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
        self.started = time.monotonic()

    def local(self, container_path: str) -> Path:
        return self.root / container_path.lstrip("/")

    def mapped(self, value: str) -> str:
        """A variable's value with the container's paths and port mapped."""
        if value == ":9400":
            return f":{self.port}"
        if value.startswith(HOST_PATHS):
            return str(self.local(value))
        return value

    def kubeconfig(self, api: FakeKubeApi) -> Path:
        path = self.root / "kubeconfig"
        path.write_text(
            f"apiVersion: v1\nkind: Config\nclusters:\n- name: fake\n  cluster: {{server: "
            f'"{api.url}"}}\nusers:\n- name: exporter\n  user: {{token: not-a-secret}}\n'
            "contexts:\n- name: fake\n  context: {cluster: fake, user: exporter}\n"
            "current-context: fake\n")
        return path
