"""A kubeconfig with inline certificates and a private key: kubernetes_asyncio copies them into
temporary files and removes them from an atexit hook, which never runs because the process ends
with os._exit (app.end_process). The exporter removes them itself on its way out."""

import base64
import signal
import time
from pathlib import Path

from tests.app.fault_helpers import Process, nvml_env
from tests.app.test_process import Exporter
from tests.app.test_process import exporters as exporters  # the fixture
from tests.pki import make_ca


def test_inline_kubeconfig_credentials_leave_no_file_behind(
        exporters: list[Exporter], fake_nvml_path: Path, tmp_path: Path) -> None:
    make_ca(tmp_path, "kube")
    cert, key = (tmp_path / "kube.pem").read_bytes(), (tmp_path / "kube.key").read_bytes()
    b64 = {name: base64.b64encode(data).decode() for name, data in
           (("ca", cert), ("cert", cert), ("key", key))}
    kubeconfig = tmp_path / "kubeconfig"
    kubeconfig.write_text(f"""apiVersion: v1
kind: Config
clusters:
- name: c
  cluster: {{server: "https://127.0.0.1:9", certificate-authority-data: {b64["ca"]}}}
users:
- name: u
  user: {{client-certificate-data: {b64["cert"]}, client-key-data: {b64["key"]}}}
contexts:
- name: x
  context: {{cluster: c, user: u}}
current-context: x
""")
    temporary = tmp_path / "tmp"
    temporary.mkdir()
    exp = Process(["-c", "200", "--kubernetes-enable-pod-labels", "-k",
                   "--pod-resources-kubelet-socket", str(tmp_path / "none.sock"),
                   "--kubeconfig", str(kubeconfig)],
                  nvml_env(fake_nvml_path, TMPDIR=str(temporary)))
    exporters.append(exp)
    exp.wait_ready()
    deadline = time.monotonic() + 15
    # The copies exist while it runs: the test can fail. Each is created, then written, so a
    # file can be seen empty for a moment (a clean-clone run once read the key's as b"").
    while key not in [p.read_bytes() for p in temporary.iterdir()]:
        assert time.monotonic() < deadline, "kubernetes_asyncio never copied the credentials"
        time.sleep(0.05)
    exp.proc.send_signal(signal.SIGTERM)
    _, err = exp.proc.communicate(timeout=15)
    assert exp.proc.returncode == 0, err
    assert list(temporary.iterdir()) == []
