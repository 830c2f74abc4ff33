"""Issue 32: true from the first scrape. The first scrape after `/ready` carries every holder's
labels, at every interval and for every kind of holding (device plugin, MIG, time-sliced, MPS,
DRA), through the real process, its fake kubelet (grpc.aio) and fake API server; sources that
answer nothing delay `/ready` by the bound at most; and an exporter killed and restarted again
and again, scraped every 100 ms, never shows a held device without its holder.

"Every holder" comes from the scenario file itself (tests/holders.py), not from the exporter.
"""

import asyncio
import os
import signal
import socket
import threading
import time
import urllib.error
from collections.abc import Iterator
from pathlib import Path

import pytest
import yaml

from gpu_enricher.sim.fake_api.server import FakeKubeApi
from gpu_enricher.sim.fake_kubelet.server import FakeKubelet
from tests.app.fault_helpers import (
    Process,
    gpu0,
    kubelet_args,
    nvml_env,
    trainer_pod,
    until,
    write_kubeconfig,
)
from tests.app.fault_helpers import kubelet as kubelet  # the fixture
from tests.app.test_process import Exporter, get
from tests.app.test_process import exporters as exporters  # the fixture
from tests.holders import Expected, builtin_scenario, expected, unlabelled
from tests.kube_helpers import loopback_only as loopback_only  # autouse
from tests.kubelet.test_kubelet import socket_dir as socket_dir  # the fixture
from tests.samples import value

ROOT = Path(__file__).parents[2]
MIG_NODE = ROOT / "bench" / "scenarios" / "mig-8x7-110pods.yaml"
# Two H100s time-sliced two ways each, three replicas held (virtual GPUs: a series per holder),
# and two whole H100s held through the device plugin, one process per holder.
TIME_SLICED = {
    "seed": 5,
    "gpus": [{"model": "NVIDIA H100 80GB HBM3", "processes": [
        {"pid": 100 + 10 * gpu + n, "used_memory_mib": 512, "pod": f"serve/replica-{gpu}-{n}"}
        for n in range(2 if gpu < 2 else 1)]} for gpu in range(4)],
    "pods": [*({"namespace": "serve", "pod": f"replica-{gpu}-{n}", "container": "main",
                "gpus": [gpu], "replica": n} for gpu in range(2) for n in range(2)),
             *({"namespace": "serve", "pod": f"replica-{gpu}-0", "container": "main",
                "gpus": [gpu]} for gpu in (2, 3))],
}
INTERVALS = (1000, 5000, 30000)


def scenario_file(tmp_path: Path, scenario: str) -> tuple[list[str], Expected]:
    """The exporter's arguments for `scenario` and who holds what in it."""
    if scenario == "builtin (device plugin, MIG, MPS, DRA)":
        return ["--simulate"], expected(builtin_scenario())
    if scenario == "MIG 8 x 7, 110 pods":
        return (["--simulate", str(MIG_NODE)],
                expected(yaml.safe_load(MIG_NODE.read_text(encoding="utf-8"))))
    path = tmp_path / "time-sliced.yaml"
    path.write_text(yaml.safe_dump(TIME_SLICED), encoding="utf-8")
    return (["--simulate", str(path), "--kubernetes-virtual-gpus"],
            expected(TIME_SLICED, virtual_gpus=True))


@pytest.mark.parametrize("interval", INTERVALS)
@pytest.mark.parametrize("scenario", ["builtin (device plugin, MIG, MPS, DRA)",
                                      "MIG 8 x 7, 110 pods", "time-sliced, virtual GPUs"])
def test_the_first_scrape_after_ready_carries_every_holder(
        exporters: list[Exporter], tmp_path: Path, scenario: str, interval: int) -> None:
    args, want = scenario_file(tmp_path, scenario)
    exp = Exporter([*args, "-c", str(interval)], {"NODE_NAME": "node-a"})
    exporters.append(exp)
    exp.wait_ready()
    _, body = get(exp.base + "/metrics")
    assert unlabelled(body, want) == []
    # The wait it took is the exporter's own figure, within the bound (2 s by default).
    waited = value(body, "gpu_enricher_startup_label_wait_seconds")
    assert waited is not None and waited < 2.5, waited


@pytest.fixture
def silent_kubelet(tmp_path: Path) -> Iterator[Path]:
    """A pod-resources socket that accepts connections and never answers."""
    path = tmp_path / "kubelet.sock"
    server = socket.socket(socket.AF_UNIX)
    server.bind(str(path))
    server.listen(8)
    held: list[socket.socket] = []
    stop = threading.Event()

    def accept() -> None:
        server.settimeout(0.1)
        while not stop.is_set():
            try:
                held.append(server.accept()[0])
            except TimeoutError:
                continue
            except OSError:
                return

    thread = threading.Thread(target=accept, daemon=True)
    thread.start()
    yield path
    stop.set()
    thread.join()
    for conn in held:
        conn.close()
    server.close()


@pytest.fixture
def silent_api(tmp_path: Path) -> Iterator[Path]:
    """A kubeconfig whose API server accepts connections and never answers."""
    server = socket.socket()
    server.bind(("127.0.0.1", 0))
    server.listen(16)
    yield write_kubeconfig(tmp_path, f"http://127.0.0.1:{server.getsockname()[1]}")
    server.close()


async def test_sources_that_answer_nothing_delay_ready_by_the_bound_at_most(
        exporters: list[Exporter], fake_nvml_path: Path, silent_kubelet: Path,
        silent_api: Path) -> None:
    """A kubelet and an API server that accept and never answer: the first picture waits
    the whole bound for them (not the kubelet's deadline of 30 s at -c 30000), then /ready;
    the log says what it went without."""
    exp = Process(["-k", "--pod-resources-kubelet-socket", str(silent_kubelet),
                   "--process-metrics", "--kubeconfig", str(silent_api), "-c", "30000",
                   "--startup-label-wait", "1500"], nvml_env(fake_nvml_path))
    exporters.append(exp)
    await asyncio.to_thread(exp.wait_ready)
    _, body = await asyncio.to_thread(get, exp.base + "/metrics")
    waited = value(body, "gpu_enricher_startup_label_wait_seconds")
    assert waited is not None and 1.5 <= waited < 3.0, waited
    assert value(body, "gpu_enricher_gpu_up", gpu="0") == 1
    exp.proc.send_signal(signal.SIGTERM)
    _, err = exp.proc.communicate(timeout=15)
    assert "first picture after 1." in err and "without the first answer of" in err, err


def ready(exp: Exporter) -> int | None:
    """/ready's status; None while nothing listens yet."""
    try:
        return get(exp.base + "/ready")[0]
    except (urllib.error.URLError, ConnectionError):
        return None


def test_an_exporter_restarted_20_times_never_shows_a_held_device_without_its_holder(
        exporters: list[Exporter]) -> None:
    """The built-in node (MPS clients, DRA claims, device plugin, MIG), at 1 s and 30 s
    intervals: killed (SIGKILL, as a node drain or OOM does) and started again 20 times, each
    run scraped every 100 ms from /ready on for a second."""
    want = expected(builtin_scenario())
    for run in range(20):
        exp = Exporter(["--simulate", "-c", "1000" if run % 2 else "30000"],
                       {"NODE_NAME": "node-a"})
        exporters.append(exp)
        while ready(exp) != 200:
            assert exp.proc.poll() is None, exp.proc.communicate()
            time.sleep(0.1)  # scraped every 100 ms, ready or not
        for _ in range(10):
            status, body = get(exp.base + "/metrics")
            assert status == 200 and unlabelled(body, want) == [], (run, unlabelled(body, want))
            time.sleep(0.1)
        os.kill(exp.proc.pid, signal.SIGKILL)
        exp.proc.communicate()


async def test_a_label_the_api_tells_between_passes_is_shown_at_once(
        exporters: list[Exporter], fake_nvml_path: Path, tmp_path: Path,
        kubelet: FakeKubelet) -> None:
    """At -c 60000 a pod's new Kubernetes label (a watch event) is on its GPU's series within
    a second, not at the next pass a minute later: the picture is painted again from the
    snapshots in hand, without an NVML pass."""
    async with FakeKubeApi() as api:
        api.set_pods([trainer_pod("a")])
        kubeconfig = write_kubeconfig(tmp_path, api.url)
        args = kubelet_args(kubelet, "--kubernetes-enable-pod-labels", "--kubeconfig",
                            str(kubeconfig))
        args[args.index("-c") + 1] = "60000"
        exp = Process(args, nvml_env(fake_nvml_path))
        exporters.append(exp)
        await asyncio.to_thread(exp.wait_ready)
        first = await until(exp, lambda b: True)
        assert 'team="a"' in gpu0(first), "in the first picture, not after it"
        passes = value(first, "gpu_enricher_collections_total", source="nvml")
        api.upsert_pod(trainer_pod("b"))
        shown = await until(exp, lambda b: 'team="b"' in gpu0(b), within=5.0)
        assert value(shown, "gpu_enricher_collections_total", source="nvml") == passes
        news_renders = value(shown, "gpu_enricher_news_renders_total")
        assert news_renders is not None and news_renders >= 1
