"""A running exporter loads what its configuration uses, not more (issue 33: "load what a
configuration does not use only when it is used"): PyYAML only with a YAML file, bcrypt only
with basic auth, the Kubernetes client only with the API, gRPC's own library never (the kubelet
client speaks HTTP/2 itself). Read from the process itself once it is ready, not from a list
of imports, so a new top-level import anywhere on the way is caught."""

import asyncio
import sys
from pathlib import Path

from gpu_enricher.sim.fake_kubelet.server import FakeKubelet
from tests.app.fault_helpers import Process, held, kubelet_args, nvml_env, until
from tests.app.fault_helpers import kubelet as kubelet  # the fixture
from tests.app.test_process import Exporter
from tests.app.test_process import exporters as exporters  # the fixture
from tests.kubelet.test_kubelet import socket_dir as socket_dir  # the fixture

REPORTING = [sys.executable, "-c", """
import os, socket, sys, threading, time
from gpu_enricher.cli.main import main

def ready(port):
    try:
        with socket.create_connection(("127.0.0.1", port), timeout=1) as conn:
            conn.sendall(b"GET /ready HTTP/1.0\\r\\n\\r\\n")
            return conn.recv(64).split(b" ")[1:2] == [b"200"]
    except OSError:
        return False

def report():
    port = int(sys.argv[2].rpartition(":")[2])
    while not ready(port) or not os.path.exists(os.environ["REPORT_WHEN"]):
        time.sleep(0.05)
    print("LOADED", *sorted({name.split(".")[0] for name in sys.modules}), flush=True)
    os._exit(0)

threading.Thread(target=report, daemon=True).start()
sys.exit(main())
"""]
"""The exporter as `python -m gpu_enricher` runs it, printing its loaded top-level packages
once /ready answers 200 and the file $REPORT_WHEN exists, then exiting."""

UNUSED = {"yaml", "bcrypt", "kubernetes_asyncio", "grpc"}


def loaded(exp: Exporter) -> set[str]:
    out, err = exp.proc.communicate(timeout=60)
    line = next((line for line in out.splitlines() if line.startswith("LOADED ")), None)
    assert line is not None, err
    return set(line.split()[1:])


async def test_a_run_loads_only_what_its_configuration_uses(
        exporters: list[Exporter], fake_nvml_path: Path, kubelet: FakeKubelet,
        tmp_path: Path) -> None:
    web_config = tmp_path / "web.yml"
    web_config.write_text("http_server_config:\n  headers:\n    X-Frame-Options: deny\n")
    go = tmp_path / "report"
    env = nvml_env(fake_nvml_path, REPORT_WHEN=str(go))
    runs = {
        "no -k": Process(["-c", "200"], env, command=REPORTING),
        "-k": Process(kubelet_args(kubelet), env, command=REPORTING),
        "web config": Process(["-c", "200", "--web-config-file", str(web_config)], env,
                              command=REPORTING),
    }
    exporters.extend(runs.values())
    for exp in runs.values():
        await asyncio.to_thread(exp.wait_ready)
    await until(runs["-k"], held)  # the kubelet answered: its client is loaded
    await asyncio.sleep(0.5)  # a few more passes: whatever a pass loads is loaded
    go.touch()
    packages = {name: loaded(exp) for name, exp in runs.items()}
    assert {"aiohttp", "pynvml", "gpu_enricher"} <= packages["no -k"], "the report works"
    assert packages["no -k"] & UNUSED == set()
    assert packages["-k"] & UNUSED == set()
    assert {"hpack", "google"} <= packages["-k"] - packages["no -k"], "the kubelet's client"
    assert packages["web config"] & UNUSED == {"yaml"}, "a YAML file: PyYAML, nothing more"
