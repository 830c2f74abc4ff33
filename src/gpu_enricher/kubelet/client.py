"""Async client of the kubelet's pod-resources API over its unix socket (grpc.aio).

One persistent channel; a deadline on every call; a receive limit far above gRPC's 4 MiB
default (pod-dense nodes produce larger `List` answers: dcgm-exporter #509); `v1alpha1.List`
when the kubelet answers `UNIMPLEMENTED` for v1 (old kubelets). Devices held through DRA
ResourceClaims come only from v1 (`dynamic_resources`; v1alpha1 has no such field).
"""

import logging
from collections.abc import Iterable
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Final

import grpc

from ..model import AllocatableDevices, ClaimAllocation, PodAssignment
from ._generated.podresources.v1 import api_pb2 as v1_pb2
from ._generated.podresources.v1 import api_pb2_grpc as v1_grpc
from ._generated.podresources.v1alpha1 import api_pb2 as v1alpha1_pb2
from ._generated.podresources.v1alpha1 import api_pb2_grpc as v1alpha1_grpc

log = logging.getLogger(__name__)

MAX_RECEIVE_BYTES: Final = 256 << 20
SOCKET_MISSING: Final = "SOCKET_MISSING"  # reason labels next to gRPC's status code names
SOCKET_ERROR: Final = "SOCKET_ERROR"


class KubeletError(Exception):
    def __init__(self, code: str, message: str) -> None:
        super().__init__(message)
        self.code = code  # gRPC status name (UNAVAILABLE, RESOURCE_EXHAUSTED, …)


@dataclass(frozen=True, slots=True)
class ListResult:
    assignments: tuple[PodAssignment, ...]
    api: str  # "v1" or "v1alpha1"
    claims: tuple[ClaimAllocation, ...] = ()  # always empty from v1alpha1


def parse_pod_resources(pods: Iterable[Any]) -> tuple[PodAssignment, ...]:
    """`PodResources` messages (v1 or v1alpha1) → one assignment per container and resource.
    The kubelet also lists containers that hold no device: they give no assignment."""
    result: list[PodAssignment] = []
    for pod in pods:
        for container in pod.containers:
            for devices in container.devices:
                result.append(PodAssignment(pod.namespace, pod.name, container.name,
                                            devices.resource_name, tuple(devices.device_ids)))
    return tuple(result)


def parse_claims(pods: Iterable[v1_pb2.PodResources]) -> tuple[ClaimAllocation, ...]:
    """v1 `PodResources` → one allocation per container, claim and claimed device.
    Every driver is kept: which ones count is the join's decision."""
    return tuple(
        ClaimAllocation(pod.namespace, pod.name, container.name, claim.claim_name,
                        claim.claim_namespace, device.driver_name, device.pool_name,
                        device.device_name,
                        # proto3 `optional`: unset (not shared) differs from "".
                        device.share_id if device.HasField("share_id") else None)
        for pod in pods
        for container in pod.containers
        for claim in container.dynamic_resources
        for device in claim.claim_resources
    )


def parse_allocatable(devices: Iterable[Any]) -> tuple[AllocatableDevices, ...]:
    merged: dict[str, list[str]] = {}
    for entry in devices:
        merged.setdefault(entry.resource_name, []).extend(entry.device_ids)
    return tuple(AllocatableDevices(r, tuple(ids)) for r, ids in sorted(merged.items()))


class PodResourcesClient:
    def __init__(self, socket_path: Path, timeout_seconds: float) -> None:
        self.socket_path = socket_path
        self.timeout_seconds = timeout_seconds
        self._channel: grpc.aio.Channel | None = None
        self._v1_unimplemented = False

    def _stubs(self) -> tuple[Any, Any]:
        if self._channel is None:
            self._channel = grpc.aio.insecure_channel(
                f"unix://{self.socket_path}",
                options=[
                    ("grpc.max_receive_message_length", MAX_RECEIVE_BYTES),
                    # A restarted kubelet should be found within a cycle, not gRPC's 2 min.
                    ("grpc.initial_reconnect_backoff_ms", 200),
                    ("grpc.max_reconnect_backoff_ms", 2000),
                ],
            )
        return (v1_grpc.PodResourcesListerStub(self._channel),
                v1alpha1_grpc.PodResourcesListerStub(self._channel))

    async def _unary(self, method: Any, request: Any) -> Any:
        try:
            present = self.socket_path.exists()
        except OSError as exc:  # e.g. a root-only directory and a non-root exporter
            raise KubeletError(SOCKET_ERROR, f"{self.socket_path}: {exc.strerror}") from None
        if not present:
            raise KubeletError(SOCKET_MISSING, f"{self.socket_path} does not exist")
        try:
            return await method(request, timeout=self.timeout_seconds)
        except grpc.aio.AioRpcError as exc:
            code = exc.code()
            if code in (grpc.StatusCode.UNAVAILABLE, grpc.StatusCode.DEADLINE_EXCEEDED):
                await self.close()  # a fresh channel finds a replaced socket at once
            raise KubeletError(code.name, f"{code.name}: {exc.details()}") from None

    async def list(self) -> ListResult:
        v1, v1alpha1 = self._stubs()
        if not self._v1_unimplemented:
            try:
                response = await self._unary(v1.List, v1_pb2.ListPodResourcesRequest())
                return ListResult(parse_pod_resources(response.pod_resources), "v1",
                                  parse_claims(response.pod_resources))
            except KubeletError as exc:
                if exc.code != grpc.StatusCode.UNIMPLEMENTED.name:
                    raise
                log.warning("the kubelet does not serve pod-resources v1; using v1alpha1")
                self._v1_unimplemented = True
        response = await self._unary(v1alpha1.List, v1alpha1_pb2.ListPodResourcesRequest())
        return ListResult(parse_pod_resources(response.pod_resources), "v1alpha1")

    async def allocatable(self) -> tuple[AllocatableDevices, ...] | None:
        """None when the kubelet cannot say (v1alpha1 only, or the method is off)."""
        if self._v1_unimplemented:
            return None
        v1, _ = self._stubs()
        try:
            response = await self._unary(v1.GetAllocatableResources,
                                         v1_pb2.AllocatableResourcesRequest())
        except KubeletError as exc:
            if exc.code == grpc.StatusCode.UNIMPLEMENTED.name:
                return None
            raise
        return parse_allocatable(response.devices)

    async def close(self) -> None:
        channel, self._channel = self._channel, None
        if channel is not None:
            await channel.close()
