"""What the fake kubelet answers, built from in-memory state. Pure: no gRPC server, no I/O.

The fake kubelet (fake_server.py) is the I/O half: it serves these messages on a unix socket
and applies the failure modes; this module builds the messages once per state change, so a
List call only serializes them, and holds the kubelet's rate limiter.
"""

import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass

from gpu_enricher.model import AllocatableDevices, PodAssignment

from ._generated.podresources.v1 import api_pb2 as v1_pb2
from ._generated.podresources.v1alpha1 import api_pb2 as v1alpha1_pb2


@dataclass(frozen=True, slots=True)
class ListAnswers:
    """One state of the node's pods, as each API version answers it."""

    pods: tuple[v1_pb2.PodResources, ...]
    v1: v1_pb2.ListPodResourcesResponse
    v1alpha1: v1alpha1_pb2.ListPodResourcesResponse


def list_answers(assignments: Sequence[PodAssignment]) -> ListAnswers:
    """Pods grouped by pod, then container, in first-seen order.

    An assignment with no device ids lists its container without devices (as the kubelet
    lists every container); two assignments of one container and resource are merged.
    """
    pods: dict[tuple[str, str], dict[str, dict[str, list[str]]]] = {}
    for a in assignments:
        containers = pods.setdefault((a.namespace, a.pod), {})
        resources = containers.setdefault(a.container, {})
        if a.device_ids:
            resources.setdefault(a.resource, []).extend(a.device_ids)
    messages = tuple(
        v1_pb2.PodResources(
            name=pod,
            namespace=namespace,
            containers=[
                v1_pb2.ContainerResources(
                    name=container,
                    devices=[
                        v1_pb2.ContainerDevices(resource_name=resource, device_ids=ids)
                        for resource, ids in resources.items()
                    ],
                )
                for container, resources in containers.items()
            ],
        )
        for (namespace, pod), containers in pods.items()
    )
    v1 = v1_pb2.ListPodResourcesResponse(pod_resources=messages)
    # v1alpha1's messages are a wire-compatible subset of v1's (same numbers and types), so
    # the v1 bytes parse as v1alpha1: exactly what an old client of a new kubelet sees.
    v1alpha1 = v1alpha1_pb2.ListPodResourcesResponse.FromString(v1.SerializeToString())
    return ListAnswers(messages, v1, v1alpha1)


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
