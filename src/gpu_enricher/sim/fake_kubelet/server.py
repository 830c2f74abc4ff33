"""A fake kubelet: the pod-resources gRPC API served on a unix socket from in-memory state.

The simulated node and the tests talk to it exactly as the exporter talks to a real kubelet: a
real `grpc.aio` server, the v1 and v1alpha1 `PodResourcesLister` services on one socket, the
same method paths and messages. On top of the state it can misbehave the ways a kubelet does:
injected error codes, an old kubelet without v1 (`UNIMPLEMENTED`), slow answers (client
deadlines), the kubelet's 100 qps / burst 10 rate limit, and restarts (stop, then start on the
same path: clients must reconnect).

It must run inside the event loop of its user: start it from the test or the simulated node's
own loop, never from another one.
"""

from __future__ import annotations

import asyncio
import collections
import stat
import time
from collections.abc import Callable, Iterable, Sequence
from pathlib import Path
from types import TracebackType
from typing import Any, NoReturn, Self

import grpc

from ...model import AllocatableDevices, ClaimAllocation, PodAssignment
from ...rpc._generated.podresources.v1 import api_pb2 as v1_pb2
from ...rpc._generated.podresources.v1alpha1 import api_pb2 as v1alpha1_pb2
from .answers import TokenBucket, allocatable_answer, list_answers

# grpcio ships no type information, so its objects are Any to mypy; the aliases name them.
ServicerContext = Any
"""`grpc.aio.ServicerContext`."""
AioServer = Any
"""`grpc.aio.Server`."""


def _wire(message: Any) -> bytes:
    """The response serializer: `List` answers are bytes made once per state change (see
    fake_answers), passed through; other answers are messages, serialized here."""
    if isinstance(message, bytes):
        return message
    data: bytes = message.SerializeToString()
    return data


# The request parsers of the generated stubs (grpcio-tools writes no types for them).
_REQUESTS: dict[str, dict[str, Callable[[bytes], Any]]] = {
    "v1.PodResourcesLister": {
        "List": v1_pb2.ListPodResourcesRequest.FromString,
        "GetAllocatableResources": v1_pb2.AllocatableResourcesRequest.FromString,
        "Get": v1_pb2.GetPodResourcesRequest.FromString,
    },
    "v1alpha1.PodResourcesLister": {"List": v1alpha1_pb2.ListPodResourcesRequest.FromString},
}


def _register(server: AioServer, service: str, servicer: object) -> None:
    """What the generated `add_PodResourcesListerServicer_to_server` does (same service and
    method names, the generated request parsers), with `_wire` as the response serializer."""
    handlers = {
        method: grpc.unary_unary_rpc_method_handler(
            getattr(servicer, method), request_deserializer=parse, response_serializer=_wire)
        for method, parse in _REQUESTS[service].items()
    }
    server.add_generic_rpc_handlers((grpc.method_handlers_generic_handler(service, handlers),))
    server.add_registered_method_handlers(service, handlers)

METHODS = ("v1.List", "v1.GetAllocatableResources", "v1.Get", "v1alpha1.List")
"""Method names for `fail_next` and the keys of `calls`."""

KUBELET_RATE_QPS = 100.0
KUBELET_RATE_BURST = 10
"""The kubelet's hard-coded limiter (1.27+), shared by every client of the socket."""

RATE_LIMIT_DETAILS = "rejected by rate limit"
GET_DISABLED_DETAILS = "PodResources API Get method disabled"

# sun_path is 108 bytes on Linux, including the terminating NUL.
_MAX_SOCKET_PATH = 107

SERVER_OPTIONS = (
    # gRPC's default send limit is already unlimited (-1); it is set explicitly because a
    # pod-dense node's List answer exceeds 4 MiB and only the client may refuse it.
    ("grpc.max_send_message_length", -1),
    # Requests are empty messages; the default 4 MiB receive limit is more than enough.
)


def _inode(path: Path) -> tuple[int, int] | None:
    """(device, inode) of the socket file at `path`, or None when there is none."""
    try:
        st = path.lstat()
    except FileNotFoundError:
        return None
    return (st.st_dev, st.st_ino)


async def _abort(context: ServicerContext, code: grpc.StatusCode, details: str) -> NoReturn:
    await context.abort(code, details)
    # grpc.aio's abort always raises; this line only tells the type checker so.
    raise AssertionError("ServicerContext.abort returned")


class FakeKubelet:
    """The kubelet's pod-resources endpoint, served from the state its `set_*` methods give.

    Attributes tests may set at any time, taking effect on the next call:
    `v1_unimplemented` (an old kubelet: v1 methods answer UNIMPLEMENTED, v1alpha1 works),
    `delay_seconds` (sleep before every answer), `rate_limit` (the kubelet's 100 qps / burst 10
    limiter, RESOURCE_EXHAUSTED beyond it), `get_enabled` (v1 Get served; when False it fails
    like a kubelet with the KubeletPodResourcesGet gate off). `calls` counts every call per
    method name, failed ones included.
    """

    def __init__(
        self,
        socket_path: Path,
        *,
        rate_qps: float = KUBELET_RATE_QPS,
        rate_burst: int = KUBELET_RATE_BURST,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        """`rate_qps`/`rate_burst` tune the limiter (when `rate_limit` is on); `clock` is the
        limiter's time source, so tests can step it instead of depending on scheduling."""
        if len(str(socket_path).encode()) > _MAX_SOCKET_PATH:
            raise ValueError(
                f"unix socket path longer than {_MAX_SOCKET_PATH} bytes: {socket_path}"
            )
        self.socket_path = socket_path
        self.v1_unimplemented = False
        self.delay_seconds = 0.0
        self.rate_limit = False
        self.get_enabled = False
        self.after_list: Callable[[], None] | None = None
        """Called after each v1 List answer (benchmarks replace pods here: pod churn)."""
        self.calls: collections.Counter[str] = collections.Counter()
        self._rate_qps = rate_qps
        self._rate_burst = rate_burst
        self._clock = clock
        self._bucket = TokenBucket(rate_qps, rate_burst, clock)
        self._failures: dict[str, collections.deque[tuple[grpc.StatusCode, str]]] = {
            method: collections.deque() for method in METHODS
        }
        self._server: AioServer | None = None
        self._socket_inode: tuple[int, int] | None = None
        self._answers = list_answers(())
        self._allocatable: bytes = allocatable_answer(()).SerializeToString()

    # --- state -------------------------------------------------------------------------------

    def set_assignments(self, assignments: Iterable[PodAssignment]) -> None:
        """Replace the device-plugin devices (see `list_answers` for how pods are grouped)."""
        self._answers = self._answers.with_assignments(assignments)

    def set_claims(self, claims: Iterable[ClaimAllocation]) -> None:
        """Replace the devices held through ResourceClaims (v1 `dynamic_resources` only)."""
        self._answers = self._answers.with_claims(claims)

    def set_allocatable(self, devices: Sequence[AllocatableDevices]) -> None:
        """Replace the allocatable devices answered by `GetAllocatableResources`: encoded once
        here, as the `List` answers are, not on the loop per call (a 50 MB answer took ~0.1 s)."""
        self._allocatable = allocatable_answer(devices).SerializeToString()

    def fail_next(
        self, method: str, code: grpc.StatusCode, count: int = 1, details: str = ""
    ) -> None:
        """Make the next `count` calls of `method` (see `METHODS`) fail with `code`."""
        if method not in self._failures:
            raise ValueError(f"unknown method {method!r}; expected one of {METHODS}")
        self._failures[method].extend([(code, details or f"injected {code.name}")] * count)

    @property
    def list_answer_bytes(self) -> int:
        """The size of the `v1.List` answer for the current state, as sent."""
        return len(self._answers.v1_wire)

    # --- lifecycle ---------------------------------------------------------------------------

    @property
    def running(self) -> bool:
        return self._server is not None

    @property
    def target(self) -> str:
        """The grpcio target string of the socket, `unix:///...`."""
        return f"unix://{self.socket_path.resolve()}"

    async def start(self) -> None:
        """Bind the socket and serve; after `stop` this starts a fresh server (a restart)."""
        if self._server is not None:
            raise RuntimeError("FakeKubelet is already running")
        path = self.socket_path
        if path.exists() or path.is_symlink():
            # A crashed kubelet leaves its socket behind and the next one replaces it; anything
            # else at that path is a mistake, not ours to delete.
            if not stat.S_ISSOCK(path.lstat().st_mode):
                raise FileExistsError(f"{path} exists and is not a socket")
            path.unlink()
        path.parent.mkdir(parents=True, exist_ok=True)
        server = grpc.aio.server(options=SERVER_OPTIONS)
        _register(server, "v1.PodResourcesLister", _V1Servicer(self))
        _register(server, "v1alpha1.PodResourcesLister", _V1alpha1Servicer(self))
        server.add_insecure_port(self.target)
        await server.start()
        # A new kubelet process has a new, full limiter.
        self._bucket = TokenBucket(self._rate_qps, self._rate_burst, self._clock)
        self._server = server
        self._socket_inode = _inode(path)

    async def stop(self, grace: float | None = None) -> None:
        """Stop serving (in-flight calls get `grace` seconds); the socket file is removed."""
        server, self._server = self._server, None
        inode, self._socket_inode = self._socket_inode, None
        if server is not None:
            await server.stop(grace)
        # grpc's stop already unlinks the path, and does so even when another server has bound
        # a new socket there since (it goes by name). This covers the rest, but leaves alone a
        # socket that is not the one this server made.
        if inode is not None and _inode(self.socket_path) == inode:
            self.socket_path.unlink(missing_ok=True)

    async def __aenter__(self) -> Self:
        await self.start()
        return self

    async def __aexit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        await self.stop()

    # --- the behaviour shared by every method ------------------------------------------------

    async def _enter(self, method: str, context: ServicerContext) -> None:
        """Count the call and apply the failure modes, in the kubelet's order."""
        self.calls[method] += 1
        # The kubelet's limiter is a server interceptor: it rejects before any handler runs.
        if self.rate_limit and not self._bucket.allow():
            await _abort(context, grpc.StatusCode.RESOURCE_EXHAUSTED, RATE_LIMIT_DETAILS)
        if self.delay_seconds > 0:
            await asyncio.sleep(self.delay_seconds)
        if self.v1_unimplemented and method.startswith("v1."):
            # What grpc-go answers for a service it does not know.
            await _abort(
                context,
                grpc.StatusCode.UNIMPLEMENTED,
                "unknown service v1.PodResourcesLister",
            )
        failures = self._failures[method]
        if failures:
            code, details = failures.popleft()
            await _abort(context, code, details)

    async def _list_v1_answer(self, context: ServicerContext) -> bytes:
        await self._enter("v1.List", context)
        answer = self._answers.v1_wire
        if self.after_list is not None:
            # Scheduled after this handler (the answer in flight is bytes, never changed).
            asyncio.get_running_loop().call_soon(self.after_list)
        return answer

    async def _allocatable_answer(self, context: ServicerContext) -> bytes:
        await self._enter("v1.GetAllocatableResources", context)
        return self._allocatable

    async def _get_answer(
        self, request: v1_pb2.GetPodResourcesRequest, context: ServicerContext
    ) -> v1_pb2.GetPodResourcesResponse:
        await self._enter("v1.Get", context)
        if not self.get_enabled:
            # The kubelet returns a plain Go error here, which gRPC sends as UNKNOWN.
            await _abort(context, grpc.StatusCode.UNKNOWN, GET_DISABLED_DETAILS)
        for pod in self._answers.pods:
            if pod.name == request.pod_name and pod.namespace == request.pod_namespace:
                return v1_pb2.GetPodResourcesResponse(pod_resources=pod)
        await _abort(
            context,
            grpc.StatusCode.UNKNOWN,
            f"pod {request.pod_name} not found in {request.pod_namespace}",
        )

    async def _list_v1alpha1_answer(self, context: ServicerContext) -> bytes:
        await self._enter("v1alpha1.List", context)
        return self._answers.v1alpha1_wire


class _V1Servicer:
    """`v1.PodResourcesLister`: the method names are those the generated registration looks up."""

    def __init__(self, kubelet: FakeKubelet) -> None:
        self._kubelet = kubelet

    async def List(
        self, request: v1_pb2.ListPodResourcesRequest, context: ServicerContext
    ) -> bytes:
        return await self._kubelet._list_v1_answer(context)

    async def GetAllocatableResources(
        self, request: v1_pb2.AllocatableResourcesRequest, context: ServicerContext
    ) -> bytes:
        return await self._kubelet._allocatable_answer(context)

    async def Get(
        self, request: v1_pb2.GetPodResourcesRequest, context: ServicerContext
    ) -> v1_pb2.GetPodResourcesResponse:
        return await self._kubelet._get_answer(request, context)


class _V1alpha1Servicer:
    """`v1alpha1.PodResourcesLister`."""

    def __init__(self, kubelet: FakeKubelet) -> None:
        self._kubelet = kubelet

    async def List(
        self, request: v1alpha1_pb2.ListPodResourcesRequest, context: ServicerContext
    ) -> bytes:
        return await self._kubelet._list_v1alpha1_answer(context)
