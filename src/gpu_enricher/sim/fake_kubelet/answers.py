"""What the fake kubelet answers, built from in-memory state. Pure: no gRPC server, no I/O.

The fake kubelet (fake_server.py) is the I/O half: it serves these messages on a unix socket
and applies the failure modes; this module builds the messages and their wire bytes once per
state change, so a List call only hands bytes to gRPC (a large answer costs its user's event
loop nothing per call), and holds the kubelet's rate limiter.
"""

import time
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass, field

from ...model import AllocatableDevices, ClaimAllocation, PodAssignment
from ...rpc._generated.podresources.v1 import api_pb2 as v1_pb2
from ...rpc._generated.podresources.v1alpha1 import api_pb2 as v1alpha1_pb2


@dataclass(frozen=True, slots=True)
class ListAnswers:
    """One state of the node's pods, as each API version answers it, and what it was built from
    (so one half of the state can be replaced alone)."""

    pods: tuple[v1_pb2.PodResources, ...]
    v1: v1_pb2.ListPodResourcesResponse
    v1alpha1: v1alpha1_pb2.ListPodResourcesResponse
    v1_wire: bytes = b""
    """`v1` serialized: what `v1.List` sends."""
    v1alpha1_wire: bytes = b""
    """`v1alpha1` serialized: what `v1alpha1.List` sends."""
    assignments: tuple[PodAssignment, ...] = ()
    claims: tuple[ClaimAllocation, ...] = ()

    def with_assignments(self, assignments: Iterable[PodAssignment]) -> "ListAnswers":
        return list_answers(assignments, self.claims)

    def with_claims(self, claims: Iterable[ClaimAllocation]) -> "ListAnswers":
        return list_answers(self.assignments, claims)


@dataclass
class _Container:
    """One container's resources while the answer is grouped."""

    devices: dict[str, list[str]] = field(default_factory=dict)
    claims: dict[tuple[str, str], list[v1_pb2.ClaimResource]] = field(default_factory=dict)

    def message(self, name: str) -> v1_pb2.ContainerResources:
        return v1_pb2.ContainerResources(
            name=name,
            devices=[
                v1_pb2.ContainerDevices(resource_name=resource, device_ids=ids)
                for resource, ids in self.devices.items()
            ],
            dynamic_resources=[
                v1_pb2.DynamicResource(
                    claim_name=claim, claim_namespace=namespace, claim_resources=resources
                )
                for (namespace, claim), resources in self.claims.items()
            ],
        )


def claim_resource(claim: ClaimAllocation) -> v1_pb2.ClaimResource:
    """The `ClaimResource` the kubelet lists for one claimed device.

    The CDI name imitates the NVIDIA DRA driver's (`k8s.gpu.nvidia.com/claim=…`); nothing reads
    it. `share_id` is set only for a shared device: it is a proto3 `optional` field.
    """
    cdi = f"k8s.{claim.driver}/claim={claim.claim_namespace}.{claim.claim_name}-{claim.device}"
    shared = {} if claim.share_id is None else {"share_id": claim.share_id}
    return v1_pb2.ClaimResource(
        cdi_devices=[v1_pb2.CDIDevice(name=cdi)],
        driver_name=claim.driver,
        pool_name=claim.pool,
        device_name=claim.device,
        **shared,
    )


def list_answers(
    assignments: Iterable[PodAssignment], claims: Iterable[ClaimAllocation] = ()
) -> ListAnswers:
    """Pods grouped by pod, then container, in first-seen order (assignments, then claims).

    An assignment with no device ids lists its container without devices (as the kubelet
    lists every container); two assignments of one container and resource are merged. The
    claimed devices of one container and claim form one `DynamicResource`; a container that
    holds only claims is listed with no devices.
    """
    assignments, claims = tuple(assignments), tuple(claims)
    pods: dict[tuple[str, str], dict[str, _Container]] = {}
    for a in assignments:
        container = pods.setdefault((a.namespace, a.pod), {}).setdefault(a.container, _Container())
        if a.device_ids:
            container.devices.setdefault(a.resource, []).extend(a.device_ids)
    for c in claims:
        container = pods.setdefault((c.namespace, c.pod), {}).setdefault(c.container, _Container())
        key = (c.claim_namespace, c.claim_name)
        container.claims.setdefault(key, []).append(claim_resource(c))
    messages = tuple(
        v1_pb2.PodResources(
            name=pod,
            namespace=namespace,
            containers=[container.message(name) for name, container in containers.items()],
        )
        for (namespace, pod), containers in pods.items()
    )
    v1 = v1_pb2.ListPodResourcesResponse(pod_resources=messages)
    # v1alpha1's messages are a wire-compatible subset of v1's (same numbers and types), so
    # the v1 bytes parse as v1alpha1. A kubelet's v1alpha1 server has no dynamic_resources
    # field to send: the parse keeps it as an unknown field, which is dropped here.
    v1_wire = v1.SerializeToString()
    v1alpha1 = v1alpha1_pb2.ListPodResourcesResponse.FromString(v1_wire)
    v1alpha1.DiscardUnknownFields()
    return ListAnswers(messages, v1, v1alpha1, v1_wire, v1alpha1.SerializeToString(),
                       assignments, claims)


def allocatable_answer(
    devices: Sequence[AllocatableDevices],
) -> v1_pb2.AllocatableResourcesResponse:
    """What `GetAllocatableResources` answers for these devices."""
    return v1_pb2.AllocatableResourcesResponse(
        devices=[
            v1_pb2.ContainerDevices(resource_name=d.resource, device_ids=d.device_ids)
            for d in devices
        ]
    )


class TokenBucket:
    """The token bucket of Go's `rate.Limiter` as the kubelet uses it: `Allow()`, never wait."""

    def __init__(
        self, rate: float, burst: int, clock: Callable[[], float] = time.monotonic
    ) -> None:
        self._rate = rate
        self._burst = float(burst)
        self._clock = clock
        self._tokens = self._burst  # a new limiter starts full
        self._last = clock()

    def allow(self) -> bool:
        now = self._clock()
        self._tokens = min(self._burst, self._tokens + (now - self._last) * self._rate)
        self._last = now
        if self._tokens >= 1.0:
            self._tokens -= 1.0
            return True
        return False
