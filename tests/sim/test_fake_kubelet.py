"""The fake kubelet over a real unix socket, called with a plain grpc.aio channel and the stubs.

Servers and channels are made inside each test's own event loop (grpc.aio objects are bound to
the loop that created them).
"""

import time
from collections.abc import AsyncIterator
from pathlib import Path

import grpc
import pytest

from gpu_enricher.model import AllocatableDevices, ClaimAllocation, PodAssignment
from gpu_enricher.rpc._generated.podresources.v1 import api_pb2 as v1_pb2
from gpu_enricher.rpc._generated.podresources.v1 import api_pb2_grpc as v1_grpc
from gpu_enricher.rpc._generated.podresources.v1alpha1 import api_pb2 as v1alpha1_pb2
from gpu_enricher.rpc._generated.podresources.v1alpha1 import api_pb2_grpc as v1alpha1_grpc
from gpu_enricher.sim.fake_kubelet.server import FakeKubelet

GPU0 = "GPU-8a748984-0fe7-297f-916c-4b998ce202d1"
GPU1 = "GPU-1d2c3b4a-0000-1111-2222-333344445555"
MIB = 1024 * 1024

ASSIGNMENTS = (
    PodAssignment("ml", "train-0", "main", "nvidia.com/gpu", (GPU0,)),
    PodAssignment("ml", "train-0", "main", "example.com/rdma", ("rdma0",)),
    PodAssignment("ml", "train-0", "sidecar", "nvidia.com/gpu", ()),
    PodAssignment("default", "web", "nginx", "nvidia.com/gpu", ()),
    PodAssignment("ml", "infer-1", "server", "nvidia.com/gpu", (f"{GPU1}::0", f"{GPU1}::3")),
)


@pytest.fixture
async def kubelet(tmp_path: Path) -> AsyncIterator[FakeKubelet]:
    fake = FakeKubelet(tmp_path / "kubelet.sock")
    fake.set_assignments(ASSIGNMENTS)
    fake.set_allocatable([AllocatableDevices("nvidia.com/gpu", (GPU0, GPU1))])
    async with fake:
        yield fake


def _devices(
    response: v1_pb2.ListPodResourcesResponse | v1alpha1_pb2.ListPodResourcesResponse,
) -> list[tuple[str, str, str, list[tuple[str, list[str]]]]]:
    return [
        (
            pod.namespace,
            pod.name,
            container.name,
            [(d.resource_name, list(d.device_ids)) for d in container.devices],
        )
        for pod in response.pod_resources
        for container in pod.containers
    ]


EXPECTED = [
    ("ml", "train-0", "main", [("nvidia.com/gpu", [GPU0]), ("example.com/rdma", ["rdma0"])]),
    ("ml", "train-0", "sidecar", []),
    ("default", "web", "nginx", []),
    ("ml", "infer-1", "server", [("nvidia.com/gpu", [f"{GPU1}::0", f"{GPU1}::3"])]),
]


async def test_v1_list_and_allocatable(kubelet: FakeKubelet) -> None:
    async with grpc.aio.insecure_channel(kubelet.target) as channel:
        stub = v1_grpc.PodResourcesListerStub(channel)
        listed = await stub.List(v1_pb2.ListPodResourcesRequest(), timeout=5)
        assert [p.name for p in listed.pod_resources] == ["train-0", "web", "infer-1"]
        assert _devices(listed) == EXPECTED
        allocatable = await stub.GetAllocatableResources(
            v1_pb2.AllocatableResourcesRequest(), timeout=5
        )
        assert [(d.resource_name, list(d.device_ids)) for d in allocatable.devices] == [
            ("nvidia.com/gpu", [GPU0, GPU1])
        ]
        with pytest.raises(grpc.aio.AioRpcError) as err:
            await stub.Get(v1_pb2.GetPodResourcesRequest(pod_name="web"), timeout=5)
        assert err.value.code() == grpc.StatusCode.UNKNOWN
        kubelet.get_enabled = True
        got = await stub.Get(
            v1_pb2.GetPodResourcesRequest(pod_name="web", pod_namespace="default"), timeout=5
        )
        assert got.pod_resources.containers[0].name == "nginx"
    assert kubelet.calls == {"v1.List": 1, "v1.GetAllocatableResources": 1, "v1.Get": 2}


async def test_v1alpha1_list(kubelet: FakeKubelet) -> None:
    async with grpc.aio.insecure_channel(kubelet.target) as channel:
        stub = v1alpha1_grpc.PodResourcesListerStub(channel)
        listed = await stub.List(v1alpha1_pb2.ListPodResourcesRequest(), timeout=5)
    assert _devices(listed) == EXPECTED
    assert kubelet.calls == {"v1alpha1.List": 1}


CLAIMS = (
    # Beside train-0/main's device-plugin GPU: that container is listed once, with both.
    ClaimAllocation("ml", "train-0", "main", "gpus", "ml", "gpu.nvidia.com", "node-a", "gpu-0"),
    ClaimAllocation("ml", "train-0", "main", "gpus", "ml", "gpu.nvidia.com", "node-a", "gpu-1"),
    ClaimAllocation("ml", "shared", "c", "pool", "infra", "gpu.nvidia.com", "node-a", "gpu-2",
                    share_id="a1"),
)


def _claims(
    response: v1_pb2.ListPodResourcesResponse,
) -> list[tuple[str, str, list[tuple[str, str, list[tuple[str, str, str, str | None, int]]]]]]:
    return [
        (
            pod.name,
            container.name,
            [
                (
                    claim.claim_namespace,
                    claim.claim_name,
                    [
                        (
                            r.driver_name,
                            r.pool_name,
                            r.device_name,
                            r.share_id if r.HasField("share_id") else None,
                            len(r.cdi_devices),
                        )
                        for r in claim.claim_resources
                    ],
                )
                for claim in container.dynamic_resources
            ],
        )
        for pod in response.pod_resources
        for container in pod.containers
        if container.dynamic_resources
    ]


async def test_v1_list_serves_claims_beside_devices(kubelet: FakeKubelet) -> None:
    kubelet.set_claims(CLAIMS)
    async with grpc.aio.insecure_channel(kubelet.target) as channel:
        listed = await v1_grpc.PodResourcesListerStub(channel).List(
            v1_pb2.ListPodResourcesRequest(), timeout=5
        )
    # The device-plugin devices are unchanged; a claim-only pod lists its container empty.
    assert _devices(listed) == [*EXPECTED, ("ml", "shared", "c", [])]
    assert _claims(listed) == [
        ("train-0", "main", [("ml", "gpus", [("gpu.nvidia.com", "node-a", "gpu-0", None, 1),
                                             ("gpu.nvidia.com", "node-a", "gpu-1", None, 1)])]),
        ("shared", "c", [("infra", "pool", [("gpu.nvidia.com", "node-a", "gpu-2", "a1", 1)])]),
    ]
    # Replacing the device-plugin pods keeps the claims (set_claims above kept the pods).
    kubelet.set_assignments([])
    async with grpc.aio.insecure_channel(kubelet.target) as channel:
        relisted = await v1_grpc.PodResourcesListerStub(channel).List(
            v1_pb2.ListPodResourcesRequest(), timeout=5
        )
    assert _devices(relisted) == [("ml", "train-0", "main", []), ("ml", "shared", "c", [])]
    assert _claims(relisted) == _claims(listed)


async def test_v1alpha1_list_never_carries_claims(kubelet: FakeKubelet) -> None:
    kubelet.set_claims(CLAIMS)
    async with grpc.aio.insecure_channel(kubelet.target) as channel:
        listed = await v1alpha1_grpc.PodResourcesListerStub(channel).List(
            v1alpha1_pb2.ListPodResourcesRequest(), timeout=5
        )
    assert _devices(listed) == [*EXPECTED, ("ml", "shared", "c", [])]
    # Not even as unknown fields: the bytes read as v1 hold no dynamic_resources.
    as_v1 = v1_pb2.ListPodResourcesResponse.FromString(listed.SerializeToString())
    assert _claims(as_v1) == []


async def test_fail_next_fails_once_then_answers(kubelet: FakeKubelet) -> None:
    kubelet.fail_next("v1.List", grpc.StatusCode.UNAVAILABLE, details="kubelet busy")
    async with grpc.aio.insecure_channel(kubelet.target) as channel:
        stub = v1_grpc.PodResourcesListerStub(channel)
        with pytest.raises(grpc.aio.AioRpcError) as err:
            await stub.List(v1_pb2.ListPodResourcesRequest(), timeout=5)
        assert (err.value.code(), err.value.details()) == (
            grpc.StatusCode.UNAVAILABLE,
            "kubelet busy",
        )
        # Another method is not affected; the failed method answers on its next call.
        await stub.GetAllocatableResources(v1_pb2.AllocatableResourcesRequest(), timeout=5)
        assert len((await stub.List(v1_pb2.ListPodResourcesRequest(), timeout=5)).pod_resources)
    assert kubelet.calls["v1.List"] == 2  # the failed call counts too


async def test_old_kubelet_without_v1(kubelet: FakeKubelet) -> None:
    kubelet.v1_unimplemented = True
    async with grpc.aio.insecure_channel(kubelet.target) as channel:
        with pytest.raises(grpc.aio.AioRpcError) as err:
            await v1_grpc.PodResourcesListerStub(channel).List(
                v1_pb2.ListPodResourcesRequest(), timeout=5
            )
        assert err.value.code() == grpc.StatusCode.UNIMPLEMENTED
        listed = await v1alpha1_grpc.PodResourcesListerStub(channel).List(
            v1alpha1_pb2.ListPodResourcesRequest(), timeout=5
        )
    assert _devices(listed) == EXPECTED


async def test_delay_triggers_the_client_deadline(kubelet: FakeKubelet) -> None:
    kubelet.delay_seconds = 0.5
    async with grpc.aio.insecure_channel(kubelet.target) as channel:
        with pytest.raises(grpc.aio.AioRpcError) as err:
            await v1_grpc.PodResourcesListerStub(channel).List(
                v1_pb2.ListPodResourcesRequest(), timeout=0.1
            )
    assert err.value.code() == grpc.StatusCode.DEADLINE_EXCEEDED


async def test_rate_limit_burst_then_refill(tmp_path: Path) -> None:
    now = [100.0]  # the limiter's clock, stepped by hand: no dependence on scheduling
    async with FakeKubelet(tmp_path / "kubelet.sock", clock=lambda: now[0]) as fake:
        fake.rate_limit = True
        async with grpc.aio.insecure_channel(fake.target) as channel:
            stub = v1_grpc.PodResourcesListerStub(channel)

            async def burst(n: int) -> list[grpc.StatusCode]:
                codes = []
                for _ in range(n):
                    try:
                        await stub.List(v1_pb2.ListPodResourcesRequest(), timeout=5)
                        codes.append(grpc.StatusCode.OK)
                    except grpc.aio.AioRpcError as exc:
                        assert exc.details() == "rejected by rate limit"
                        codes.append(exc.code())
                return codes

            ok, limited = grpc.StatusCode.OK, grpc.StatusCode.RESOURCE_EXHAUSTED
            assert await burst(12) == [ok] * 10 + [limited] * 2  # burst of 10
            now[0] += 0.0625  # 6.25 tokens at 100/s (a step exact in binary floating point)
            assert await burst(7) == [ok] * 6 + [limited]
            now[0] += 10.0  # refills to the burst, never beyond
            assert await burst(11) == [ok] * 10 + [limited]
            fake.rate_limit = False
            assert await burst(3) == [ok] * 3
        assert fake.calls["v1.List"] == 33  # rejected calls count too


async def test_large_response_needs_a_raised_receive_limit(tmp_path: Path) -> None:
    # 20,000 containers with two long device ids each: a List answer of about 5 MiB, like the
    # pod-dense nodes of dcgm-exporter issues #509 and #378.
    assignments = [
        PodAssignment(
            "batch",
            f"pod-{i // 10:05d}",
            f"container-{i % 10}",
            "nvidia.com/gpu",
            (f"{GPU0}::{i}-replica-a" * 2, f"{GPU1}::{i}-replica-b" * 2),
        )
        for i in range(20_000)
    ]
    async with FakeKubelet(tmp_path / "kubelet.sock") as fake:
        fake.set_assignments(assignments)
        request = v1_pb2.ListPodResourcesRequest()
        options = [("grpc.max_receive_message_length", 64 * MIB)]
        async with grpc.aio.insecure_channel(fake.target, options=options) as channel:
            listed = await v1_grpc.PodResourcesListerStub(channel).List(request, timeout=10)
        size = listed.ByteSize()
        assert 4 * MIB < size < 8 * MIB
        assert sum(len(p.containers) for p in listed.pod_resources) == 20_000
        async with grpc.aio.insecure_channel(fake.target) as channel:  # default: 4 MiB
            with pytest.raises(grpc.aio.AioRpcError) as err:
                await v1_grpc.PodResourcesListerStub(channel).List(request, timeout=10)
        assert err.value.code() == grpc.StatusCode.RESOURCE_EXHAUSTED
        assert fake.calls["v1.List"] == 2


async def test_restart_on_the_same_path_and_reconnect(kubelet: FakeKubelet) -> None:
    request = v1_pb2.ListPodResourcesRequest()
    async with grpc.aio.insecure_channel(kubelet.target) as channel:
        stub = v1_grpc.PodResourcesListerStub(channel)
        await stub.List(request, timeout=5)

        await kubelet.stop()
        assert not kubelet.socket_path.exists()
        with pytest.raises(grpc.aio.AioRpcError) as err:
            await stub.List(request, timeout=5)
        assert err.value.code() == grpc.StatusCode.UNAVAILABLE

        await kubelet.start()
        assert kubelet.socket_path.is_socket()
        # The channel made before the restart reconnects to the new socket. The failed call
        # above put it into reconnect backoff (about 1 s), so a plain call may still fail
        # UNAVAILABLE for a moment; wait_for_ready waits out the backoff instead.
        started = time.monotonic()
        listed = await stub.List(request, timeout=5, wait_for_ready=True)
        assert _devices(listed) == EXPECTED
        assert time.monotonic() - started < 5
    assert kubelet.calls["v1.List"] == 2  # the call while stopped never reached a server


async def test_stale_socket_file_is_replaced(tmp_path: Path) -> None:
    path = tmp_path / "kubelet.sock"
    first = FakeKubelet(path)
    await first.start()
    # A kubelet that dies leaves its socket file; the next one binds over it.
    second = FakeKubelet(path)
    await second.start()
    try:
        async with grpc.aio.insecure_channel(second.target) as channel:
            await v1_grpc.PodResourcesListerStub(channel).List(
                v1_pb2.ListPodResourcesRequest(), timeout=5
            )
        assert (first.calls["v1.List"], second.calls["v1.List"]) == (0, 1)
    finally:
        await second.stop()
        await first.stop()
