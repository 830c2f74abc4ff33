"""The installed entry point as an operator runs it: a real process, real HTTP, real signals."""

import json
import os
import signal
import socket
import subprocess
import sys
import time
import urllib.error
import urllib.request
from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.samples import value


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port: int = s.getsockname()[1]
        return port


def get(url: str) -> tuple[int, str]:
    try:
        with urllib.request.urlopen(url, timeout=5) as resp:
            return resp.status, resp.read().decode()
    except urllib.error.HTTPError as err:
        return err.code, err.read().decode()


class Exporter:
    def __init__(self, args: list[str], env: dict[str, str]) -> None:
        self.port = free_port()
        self.base = f"http://127.0.0.1:{self.port}"
        full_env = {k: v for k, v in os.environ.items() if not k.startswith("FAKE_NVML_")}
        full_env.update(env)
        self.proc = subprocess.Popen(
            [sys.executable, "-m", "gpu_enricher", "-a", f"127.0.0.1:{self.port}", *args],
            env=full_env, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
        self.started = time.monotonic()

    def wait_listening(self) -> None:
        deadline = time.monotonic() + 20
        while time.monotonic() < deadline:
            assert self.proc.poll() is None, self.proc.communicate()
            try:
                get(self.base + "/health")
                return
            except (urllib.error.URLError, ConnectionError):
                time.sleep(0.05)
        raise AssertionError("exporter never listened")

    def wait_ready(self) -> float:
        deadline = time.monotonic() + 20
        while time.monotonic() < deadline:
            assert self.proc.poll() is None, self.proc.communicate()
            try:
                if get(self.base + "/ready")[0] == 200:
                    return time.monotonic() - self.started
            except (urllib.error.URLError, ConnectionError):
                pass
            time.sleep(0.05)
        raise AssertionError("exporter never ready")

    def stop(self) -> tuple[int, str]:
        if self.proc.poll() is None:
            self.proc.send_signal(signal.SIGTERM)
        _, err = self.proc.communicate(timeout=15)
        return self.proc.returncode, err


@pytest.fixture
def exporters() -> Iterator[list[Exporter]]:
    started: list[Exporter] = []
    yield started
    for exp in started:
        if exp.proc.poll() is None:
            exp.proc.kill()
            exp.proc.communicate()


def test_simulated_node_serves_dcgm_metrics(exporters: list[Exporter]) -> None:
    exp = Exporter(["--simulate", "-c", "200"], {"NODE_NAME": "sim-node"})
    exporters.append(exp)
    exp.wait_ready()
    # /ready does not wait for the kubelet: pod labels follow within a cycle or two.
    deadline = time.monotonic() + 10
    while True:
        status, body = get(exp.base + "/metrics")
        if value(body, "gpu_enricher_kubelet_up") == 1 or time.monotonic() > deadline:
            break
        time.sleep(0.05)
    assert status == 200
    assert 'DCGM_FI_DEV_GPU_UTIL{gpu="0",' in body and 'Hostname="sim-node"' in body
    assert 'GPU_I_PROFILE="3g.40gb"' in body
    assert 'backend="simulated"' in body
    # The simulated pods come through the in-process fake kubelet and the real client.
    assert ',container="pytorch",namespace="ml",pod="llm-trainer-0"}' in body
    assert 'pod="notebook-alice"' in body and value(body, "gpu_enricher_kubelet_up") == 1
    # The List's cost is measured; a node of a few pods never meets the CPU budget.
    assert 0 < value(body, "gpu_enricher_kubelet_list_cpu_seconds") < 0.05
    assert value(body, "gpu_enricher_kubelet_lists_deferred_total") == 0
    code, _ = exp.stop()
    assert code == 0


@pytest.mark.parametrize(("flags", "host_labels"), [
    ([], 'Hostname="sim-node",hostname="sim-node",'),
    (["--hostname-label-name", "hostname", "--naming", "4.9"], 'hostname="sim-node",'),
])
def test_simulated_node_under_4_9_names_and_host_labels(
        exporters: list[Exporter], flags: list[str], host_labels: str) -> None:
    """Issue 31 as a newcomer sees it: `--simulate` carries both host labels by default, and
    `--naming 4.9` serves dcgm-exporter 4.9's names (DCGM 4.7's, in base units); the query API
    reads the byte counts the 4.9 names carry."""
    exp = Exporter(["--simulate", "-c", "200", *flags], {"NODE_NAME": "sim-node"})
    exporters.append(exp)
    exp.wait_ready()
    _, body = get(exp.base + "/metrics")
    gpu0 = [line for line in body.splitlines()
            if line.startswith("DCGM_FI_") and 'gpu="0",' in line]
    assert gpu0 and all(host_labels in line for line in gpu0)
    families = {line.split("{")[0] for line in gpu0}
    if "4.9" in flags:
        assert {"DCGM_FI_DEV_GPU_UTIL_RATIO", "DCGM_FI_DEV_FB_USED_BYTES",
                "DCGM_FI_DEV_SM_CLOCK_HERTZ", "DCGM_FI_DEV_GPU_TEMP_CELSIUS"} <= families
        assert not {"DCGM_FI_DEV_GPU_UTIL", "DCGM_FI_DEV_FB_USED"} & families
        assert all('DCGM_FI_SYSTEM_DRIVER_VERSION="580.105.08"' in line for line in gpu0)
        assert "Hostname=" not in body
    else:
        assert {"DCGM_FI_DEV_GPU_UTIL", "DCGM_FI_DEV_FB_USED"} <= families
        assert not {"DCGM_FI_DEV_GPU_UTIL_RATIO", "DCGM_FI_DEV_FB_USED_BYTES"} & families
    _, document = get(exp.base + "/api/v1/gpus")
    h100 = json.loads(document)["gpus"][0]
    assert h100["memory_used_bytes"] > 0 and 0 <= h100["utilization_ratio"] <= 1
    code, _ = exp.stop()
    assert code == 0


def test_a_tiny_kubelet_list_cpu_budget_spaces_the_lists_and_keeps_the_labels(
        exporters: list[Exporter]) -> None:
    """The flag reaches the kubelet source: at 0.01 % of a core the simulated kubelet's ~1 ms
    List makes the next wait ~10 s; passes meanwhile use the last answer, past the labels' max
    age of 1 s at -c 200 (max(3 intervals, 2 deadlines of 0.5 s))."""
    exp = Exporter(["--simulate", "-c", "200", "--kubelet-list-cpu-budget", "0.01"], {})
    exporters.append(exp)
    exp.wait_ready()
    deadline = time.monotonic() + 15
    while True:
        _, body = get(exp.base + "/metrics")
        age = value(body, "gpu_enricher_kubelet_assignments_age_seconds")
        if (age or 0) > 2.0 or time.monotonic() > deadline:
            break
        time.sleep(0.1)
    assert age is not None and age > 2.0, body
    assert value(body, "gpu_enricher_collections_total", source="kubelet") == 1
    assert (value(body, "gpu_enricher_kubelet_lists_deferred_total") or 0) >= 5
    assert 'pod="notebook-alice"' in body and value(body, "gpu_enricher_kubelet_up") == 1
    code, err = exp.stop()
    assert code == 0
    assert err.count("within --kubelet-list-cpu-budget 0.01%") == 1, err


def test_standard_process_and_python_metrics_refresh_each_cycle(
        exporters: list[Exporter]) -> None:
    exp = Exporter(["--simulate", "-c", "200"], {})
    exporters.append(exp)
    exp.wait_ready()
    _, body = get(exp.base + "/metrics")
    rss = value(body, "process_resident_memory_bytes")
    assert rss is not None and 10 << 20 < rss < 300 << 20, rss
    started = value(body, "process_start_time_seconds")
    assert started is not None and abs(started - time.time()) < 60
    assert value(body, "process_open_fds") and value(body, "process_max_fds")
    assert value(body, "python_info", implementation="CPython") == 1
    assert value(body, "python_gc_collections_total", generation="0") is not None
    cpu = value(body, "process_cpu_seconds_total")
    assert cpu is not None and cpu > 0
    # Rendered with each cycle, not per scrape: the CPU counter moves between cycles, and two
    # scrapes within one cycle get the same bytes.
    for _ in range(20):
        first, second = get(exp.base + "/metrics")[1], get(exp.base + "/metrics")[1]
        if first == second:
            break
    assert first == second, "two scrapes within one cycle got different process_* values"
    deadline = time.monotonic() + 10
    while True:
        time.sleep(0.3)
        _, later = get(exp.base + "/metrics")
        moved = value(later, "process_cpu_seconds_total")
        if (moved is not None and moved > cpu) or time.monotonic() > deadline:
            break
    assert moved is not None and moved > cpu
    request = urllib.request.Request(
        exp.base + "/metrics", headers={"Accept": "application/openmetrics-text"})
    with urllib.request.urlopen(request, timeout=5) as resp:
        om = resp.read().decode()
    assert om.count("# EOF") == 1 and om.endswith("# EOF\n")
    assert "# TYPE process_cpu_seconds counter\n" in om
    assert om.index("DCGM_FI_DEV_GPU_TEMP") < om.index("gpu_enricher_build_info") < om.index(
        "process_resident_memory_bytes")
    code, _ = exp.stop()
    assert code == 0


def test_fake_nvml_node_with_eight_gpus(exporters: list[Exporter], fake_nvml_path: Path) -> None:
    exp = Exporter(["-c", "200"], {"LD_LIBRARY_PATH": str(fake_nvml_path.parent),
                                   "FAKE_NVML_GPU_COUNT": "8", "FAKE_NVML_LOST": "5",
                                   "NODE_NAME": "gpu-node"})
    exporters.append(exp)
    exp.wait_ready()
    _, body = get(exp.base + "/metrics")
    gpus = {line.split('gpu="')[1].split('"')[0]
            for line in body.splitlines() if line.startswith("DCGM_FI_DEV_GPU_TEMP{")}
    assert gpus == {"0", "1", "2", "3", "4", "6", "7"}, "GPU 5 is lost, the others report"
    assert value(body, "gpu_enricher_gpu_up", gpu="5") == 0
    assert value(body, "gpu_enricher_gpu_up", gpu="4", Hostname="gpu-node") == 1
    assert value(body, "gpu_enricher_build_info", backend="nvml") == 1
    code, err = exp.stop()
    assert code == 0, err
    # The fake has no GPM: the profiling lines of the bundled file are skipped, one warning each.
    assert err.count("DCGM_FI_PROF_GR_ENGINE_ACTIVE cannot be delivered") == 1


def test_without_usable_nvml_stays_up_not_ready_and_says_why(
        exporters: list[Exporter], fake_nvml_path: Path) -> None:
    # The fake answers nvmlInit with NVML_ERROR_DRIVER_NOT_LOADED, as a node without driver does.
    exp = Exporter([], {"LD_LIBRARY_PATH": str(fake_nvml_path.parent),
                        "FAKE_NVML_INIT_ERROR": "9"})
    exporters.append(exp)
    exp.wait_listening()
    time.sleep(3.5)  # several retries with backoff (1 s, 2 s, …)
    assert exp.proc.poll() is None, "the process stays up"
    status, text = get(exp.base + "/ready")
    assert status == 503 and text.startswith("not ready: nvml backend unavailable, retrying")
    _, body = get(exp.base + "/metrics")
    assert value(body, "gpu_enricher_source_up", source="nvml") == 0
    retries = value(body, "gpu_enricher_collection_errors_total", source="nvml",
                    reason="DriverNotLoaded")
    assert retries is not None and retries >= 2, body
    assert "DCGM_FI_" not in body
    code, err = exp.stop()
    assert code == 0
    assert err.count("NVML initialisation failed") == 1, "one log line, not one per retry"
    # /ready gives the reason in the log line's own words (docs/install.md promises it).
    logged = next(line for line in err.splitlines() if "NVML initialisation failed" in line)
    assert logged.endswith(text.removeprefix("not ready: ").rstrip("\n")), (logged, text)


def test_kubernetes_mode_without_kubelet_socket(exporters: list[Exporter], tmp_path: Path,
                                                fake_nvml_path: Path) -> None:
    socket = tmp_path / "pod-resources" / "kubelet.sock"
    exp = Exporter(["-c", "200", "-k", "--pod-resources-kubelet-socket", str(socket)],
                   {"LD_LIBRARY_PATH": str(fake_nvml_path.parent)})
    exporters.append(exp)
    exp.wait_ready()
    time.sleep(1.0)
    _, body = get(exp.base + "/metrics")
    assert "DCGM_FI_DEV_GPU_TEMP{" in body and 'pod="' not in body
    assert value(body, "gpu_enricher_kubelet_up") == 0
    assert value(body, "gpu_enricher_collection_errors_total", source="kubelet",
                 reason="SOCKET_MISSING")
    code, err = exp.stop()
    assert code == 0
    assert err.count("no kubelet pod-resources socket") == 1, err


def run_to_exit(args: list[str], timeout: float = 20,
                tmpdir: Path | None = None) -> tuple[int, list[str]]:
    """The exporter run to its exit; with `tmpdir` as its TMPDIR (its temporary files there)."""
    env = None if tmpdir is None else {**os.environ, "TMPDIR": str(tmpdir)}
    proc = subprocess.run([sys.executable, "-m", "gpu_enricher", *args], capture_output=True,
                          text=True, timeout=timeout, check=False, env=env)
    return proc.returncode, proc.stderr.splitlines()


SIM_DIR_PREFIX = "gpu-enricher-sim-"
"""The simulated node's private temporary directory (sim_cluster.SimulatedCluster)."""


def test_a_taken_port_is_one_line_with_a_hint_and_exit_1(tmp_path: Path) -> None:
    with socket.socket() as taken:
        taken.bind(("127.0.0.1", 0))
        taken.listen()
        port = taken.getsockname()[1]
        code, err = run_to_exit(["--simulate", "-a", f"127.0.0.1:{port}"], tmpdir=tmp_path)
    assert code == 1
    assert len(err) == 1, err  # nothing was started: no "collecting", no "serving"
    # Its own TMPDIR, so another exporter's directory in the shared /tmp cannot confuse this.
    left = sorted(p.name for p in tmp_path.glob(f"{SIM_DIR_PREFIX}*"))
    assert not left, f"not even the simulated node's temporary directory: {left}"
    assert err[0].endswith(
        f"ERROR gpu_enricher.app: cannot listen on 127.0.0.1:{port}: the address is already in "
        "use (another exporter on this node?); choose another with -a/--address or "
        "DCGM_EXPORTER_LISTEN"), err


def test_an_address_not_on_this_host_is_one_line_and_exit_1() -> None:
    # 192.0.2.1 (TEST-NET-1) is never a local address; binding sends nothing anywhere.
    # (A name that does not resolve is reported the same way; not tested, to make no DNS query.)
    code, err = run_to_exit(["--simulate", "-a", "192.0.2.1:9400"])
    assert code == 1
    assert len(err) == 1, err
    assert err[0].endswith("cannot listen on 192.0.2.1:9400: the address is not one of this "
                           "host's; choose another with -a/--address or DCGM_EXPORTER_LISTEN")


def test_serving_is_logged_once_bound(exporters: list[Exporter]) -> None:
    exp = Exporter(["--simulate"], {})
    exporters.append(exp)
    exp.wait_ready()
    code, err = exp.stop()
    assert code == 0
    lines = err.splitlines()
    serving = [n for n, line in enumerate(lines) if f"serving /metrics on 127.0.0.1:{exp.port}"
               in line]
    assert len(serving) == 1, err
    assert "shutting down" in lines[-1], err
