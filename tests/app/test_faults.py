"""Faults of the kubelet and the Kubernetes API against the running exporter (issue 13): the
real process (`python -m gpu_enricher`), the fake libnvidia-ml, the fake kubelet and the fake
Kubernetes API, judged only by what an operator sees: /metrics, /health, /ready and the log.
The node's own faults (the driver, the disk, threads) are in test_faults_node.py.

Faults tested elsewhere at process level are not repeated: no kubelet socket at start
(`test_process.py::test_kubernetes_mode_without_kubelet_socket`).
"""

import asyncio
from collections.abc import Callable
from pathlib import Path

import grpc

from gpu_enricher.sim.fake_api.server import FakeKubeApi
from gpu_enricher.sim.fake_kubelet.server import RATE_LIMIT_DETAILS, FakeKubelet
from tests.app.fault_helpers import (
    ERRORS,
    Process,
    fetch,
    foreign_lines,
    gpu0,
    held,
    kubelet_args,
    nvml_env,
    trainer_pod,
    until,
    write_kubeconfig,
)
from tests.app.fault_helpers import kubelet as kubelet  # the fixture
from tests.app.test_process import Exporter
from tests.app.test_process import exporters as exporters  # the fixture
from tests.kube_helpers import loopback_only as loopback_only  # autouse
from tests.kubelet.test_kubelet import socket_dir as socket_dir  # the fixture
from tests.samples import value

# --- the kubelet ------------------------------------------------------------------------


async def test_kubelet_killed_keeps_labels_for_the_max_age_then_restarted_brings_them_back(
        exporters: list[Exporter], fake_nvml_path: Path, kubelet: FakeKubelet) -> None:
    exp = Process(kubelet_args(kubelet), nvml_env(fake_nvml_path))
    exporters.append(exp)
    await asyncio.to_thread(exp.wait_ready)
    await until(exp, held)
    await kubelet.stop()  # killed: its socket is gone
    down = await until(exp, lambda b: value(b, "gpu_enricher_kubelet_up") == 0)
    assert held(down), "the last assignments are kept for a bounded time"
    assert value(down, ERRORS, source="kubelet", reason="SOCKET_MISSING")
    assert value(down, "gpu_enricher_source_up", source="kubelet") == 0
    dropped = await until(exp, lambda b: not held(b), within=3.0)
    assert value(dropped, "gpu_enricher_kubelet_assignments_age_seconds") is None
    assert value(dropped, "gpu_enricher_source_up", source="nvml") == 1
    stamp = value(dropped, "gpu_enricher_last_collection_timestamp_seconds", source="nvml")
    again = await until(exp, lambda b: value(
        b, "gpu_enricher_last_collection_timestamp_seconds", source="nvml") != stamp)
    assert 'DCGM_FI_DEV_GPU_TEMP{gpu="1",' in again, "GPU series keep coming"
    assert (await fetch(exp, "/health"))[0] == 200 and (await fetch(exp, "/ready"))[0] == 200
    await kubelet.start()  # a new kubelet on the same path
    back = await until(exp, held, within=5.0)
    assert value(back, "gpu_enricher_kubelet_up") == 1
    code, err = exp.stop()
    assert code == 0, err
    assert err.count("no kubelet pod-resources socket") == 1, err
    assert err.count("kubelet pod-resources API answers again") == 1, err
    assert foreign_lines(err) == []


class NotHttp2:
    """A unix socket that answers every connection with bytes that are not HTTP/2."""

    def __init__(self, path: Path) -> None:
        self.path = path
        self._server: asyncio.AbstractServer | None = None

    async def __aenter__(self) -> "NotHttp2":
        async def answer(_: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
            writer.write(b"HTTP/1.1 400 Bad Request\r\nConnection: close\r\n\r\n\x00\xff" * 8)
            await writer.drain()
            writer.close()

        self._server = await asyncio.start_unix_server(answer, str(self.path))
        return self

    async def __aexit__(self, *_: object) -> None:
        assert self._server is not None
        self._server.close()
        await self._server.wait_closed()
        self.path.unlink(missing_ok=True)


class Undecodable:
    """A gRPC server whose `List` answers bytes that are no ListPodResourcesResponse."""

    def __init__(self, path: Path) -> None:
        self.path = path
        self._server: grpc.aio.Server | None = None

    async def __aenter__(self) -> "Undecodable":
        async def answer(request: bytes, context: object) -> bytes:
            return b"\x0a\xff\xff\xff\xff\x0f"  # field 1, a length far past the end

        handlers = {"List": grpc.unary_unary_rpc_method_handler(answer)}
        self._server = grpc.aio.server()
        self._server.add_generic_rpc_handlers(
            (grpc.method_handlers_generic_handler("v1.PodResourcesLister", handlers),))
        self._server.add_insecure_port(f"unix://{self.path}")
        await self._server.start()
        return self

    async def __aexit__(self, *_: object) -> None:
        assert self._server is not None
        await self._server.stop(None)
        self.path.unlink(missing_ok=True)


async def test_kubelet_rate_limiting_and_garbage_are_counted_by_reason_and_logged_once(
        exporters: list[Exporter], fake_nvml_path: Path, kubelet: FakeKubelet) -> None:
    exp = Process(kubelet_args(kubelet), nvml_env(fake_nvml_path))
    exporters.append(exp)
    await asyncio.to_thread(exp.wait_ready)
    await until(exp, held)

    def failed(reason: str, times: int = 1) -> Callable[[str], bool]:
        return lambda b: (value(b, ERRORS, source="kubelet", reason=reason) or 0) >= times

    def up(body: str) -> bool:
        return value(body, "gpu_enricher_kubelet_up") == 1 and held(body)

    # The kubelet's limiter (RESOURCE_EXHAUSTED): backed off, the labels kept meanwhile.
    kubelet.fail_next("v1.List", grpc.StatusCode.RESOURCE_EXHAUSTED, 2, RATE_LIMIT_DETAILS)
    limited = await until(exp, failed("RESOURCE_EXHAUSTED"))
    assert held(limited) and value(limited, "gpu_enricher_kubelet_up") == 0
    await until(exp, failed("RESOURCE_EXHAUSTED", 2))
    await until(exp, up)
    # Something that is not HTTP/2 on the kubelet's socket, then a gRPC server whose answer
    # does not parse: each failing twice or more, then the real kubelet again.
    for server, reason in ((NotHttp2, "UNAVAILABLE"), (Undecodable, "INTERNAL")):
        await kubelet.stop()
        async with server(kubelet.socket_path):
            await until(exp, failed(reason, 2))
            assert (await fetch(exp, "/health"))[0] == 200
        await kubelet.start()
        await until(exp, up, within=5.0)
    code, err = exp.stop()
    assert code == 0, err
    for reason in ("RESOURCE_EXHAUSTED", "UNAVAILABLE", "INTERNAL"):
        assert err.count(f"kubelet pod-resources API failed: {reason}") == 1, err
    assert err.count("kubelet pod-resources API answers again") == 3, err
    assert foreign_lines(err) == [], "no traceback, nothing from gRPC itself"


# --- the Kubernetes API ---------------------------------------------------------------------


async def test_kubernetes_api_expiry_and_outage_relist_and_keep_the_pod_labels(
        exporters: list[Exporter], fake_nvml_path: Path, kubelet: FakeKubelet,
        tmp_path: Path) -> None:
    async with FakeKubeApi() as api:
        api.set_pods([trainer_pod("a")])
        kubeconfig = write_kubeconfig(tmp_path, api.url)
        exp = Process(kubelet_args(kubelet, "--kubernetes-enable-pod-labels", "--kubeconfig",
                                   str(kubeconfig)), nvml_env(fake_nvml_path))
        exporters.append(exp)
        await asyncio.to_thread(exp.wait_ready)
        await until(exp, lambda b: 'team="a"' in gpu0(b) and api.open_watches == 1)

        def kube(body: str, name: str, **labels: str) -> float | None:
            return value(body, f"gpu_enricher_kubernetes_{name}", **labels)

        # The watch expires (410 as an ERROR event, what an API server sends for a compacted
        # resourceVersion): listed again at once.
        api.expire_next_watch(in_stream=True)
        api.bookmark()  # an event first: the ended watch is not a "short watch" failure
        api.end_watches()
        relisted = await until(exp, lambda b: kube(b, "lists_total") == 2)
        assert kube(relisted, "watch_restarts_total", reason="gone") == 1
        assert 'team="a"' in gpu0(relisted)
        # The API server goes down; the pod changes meanwhile and the history it would resume
        # from is compacted away: the labels are kept through the outage, then relisted.
        await api.stop()
        down = await until(exp, lambda b: value(
            b, "gpu_enricher_source_up", source="kubernetes") == 0)
        assert 'team="a"' in gpu0(down), "pod metadata kept through an outage"
        assert kube(down, "synced") == 1, "not stale yet: within the 60 s bound"
        assert value(down, ERRORS, source="kubernetes", reason="unavailable")
        api.upsert_pod(trainer_pod("b"))
        api.compact()
        await api.start()
        back = await until(exp, lambda b: 'team="b"' in gpu0(b), within=10.0)
        assert kube(back, "lists_total") == 3
        assert kube(back, "watch_restarts_total", reason="gone") == 2
        assert value(back, ERRORS, source="kubernetes", reason="gone") is None, \
            "a 410 after an outage is no failure, though the last restart was a 410 too"
        assert value(back, "gpu_enricher_source_up", source="kubernetes") == 1
        assert kube(back, "synced") == 1
        code, err = exp.stop()
    assert code == 0, err
    assert err.count("Kubernetes pods on node gpu-node-1 watch failed") == 1, err
    assert err.count("Kubernetes API answers again") == 1, err
    assert foreign_lines(err) == []
