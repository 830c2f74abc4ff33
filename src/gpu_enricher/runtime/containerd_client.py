"""containerd's gRPC API over its socket, read once per pass: every namespace, the running
tasks in each, and each container not seen before (`Containers.Get`: its spec does not change
while its task runs, so one read per task, not per pass; its labels only with an update event,
after which every container is read again). Only reads. The calls run on a thread of the
reader's own over `rpc`'s channel (no gRPC C core); containerd.py parses.

One read at a time: a pass that gives up waiting leaves the read running on its thread, and the
next pass takes its outcome instead of asking again, as the kubelet's client does; a read an
event asks for waits for it, then reads anew.

Between reads, `events` subscribes to containerd's events (`Events.Subscribe`, a server stream,
on a second thread: `rpc/stream.py`) for the topics that change the running tasks or a
container's labels, and calls back on each.
"""

import asyncio
import contextlib
import time
from collections.abc import Callable
from concurrent.futures import Future
from functools import partial
from pathlib import Path
from typing import Final

from ..attribution.containers import RuntimeContainer, RuntimeContainers
from ..rpc.answer import CallError, Message, release
from ..rpc.stream import ServerStream
from ..rpc.wire import UnaryChannel
from ..worker import BlockingWorker
from .containerd import (
    UPDATE_TOPIC,
    DescribedContainer,
    changed_topic,
    described,
    get_request,
    namespaces,
    running_tasks,
    subscribe_request,
)
from .reader import MAX_ANSWER_BYTES, MAX_NEW_CONTAINERS, RuntimeFailure

NAMESPACES: Final = "/containerd.services.namespaces.v1.Namespaces/List"
TASKS: Final = "/containerd.services.tasks.v1.Tasks/List"
GET: Final = "/containerd.services.containers.v1.Containers/Get"
SUBSCRIBE: Final = "/containerd.services.events.v1.Events/Subscribe"
NAMESPACE_HEADER: Final = b"containerd-namespace"
DEADLINE_SECONDS: Final = 2.0

_Task = tuple[str, str, int]
"""(namespace, container ID, PID): a running task; a container started again has a new PID."""


def _failure(exc: CallError) -> RuntimeFailure:
    if isinstance(exc.__context__, PermissionError):
        return RuntimeFailure("permission", str(exc))
    if exc.code == "DEADLINE_EXCEEDED":
        return RuntimeFailure("timeout", str(exc))
    return RuntimeFailure("unavailable" if exc.code == "UNAVAILABLE" else "status", str(exc))


def _taken(message: Message) -> bytes:
    """The answer's bytes, its buffer given back (a large one is mapped memory)."""
    try:
        return bytes(message)
    finally:
        release(message)


class ContainerdReader:
    """Satisfies `RuntimeReader`."""

    kind = "containerd"

    def __init__(self, socket_path: str) -> None:
        self._channel = UnaryChannel(Path(socket_path), MAX_ANSWER_BYTES, "containerd")
        self._worker = BlockingWorker("containerd")
        self._reading: Future[object] | None = None
        self._described: dict[_Task, DescribedContainer | None] = {}
        """Touched on the reader's thread only."""
        self._relabelled = False
        """Set by the listener's thread on a container's update: the next read reads every
        container again (their labels, so their names, may have changed)."""
        self.socket_path = socket_path
        self._stream: ServerStream | None = None  # the subscription in progress
        self._listener = BlockingWorker("containerd-events")

    # --- on the reader's thread ------------------------------------------------------------

    def _ask(self, method: str, request: bytes, deadline: float, namespace: str = "",
             ) -> Message:
        """One call within what is left of the read's deadline; CallError as it failed."""
        left = deadline - time.monotonic()
        if left <= 0:
            raise CallError("DEADLINE_EXCEEDED", "containerd: no whole answer within "
                            f"{DEADLINE_SECONDS:g}s")
        metadata = [(NAMESPACE_HEADER, namespace.encode())] if namespace else []
        return self._channel.call(method, request, left, metadata)

    def _call(self, method: str, request: bytes, deadline: float, namespace: str = "",
              ) -> bytes:
        try:
            return _taken(self._ask(method, request, deadline, namespace))
        except CallError as exc:
            raise _failure(exc) from None

    def _describe(self, task: _Task, deadline: float) -> DescribedContainer | None:
        namespace, container_id, _ = task
        try:
            wire = self._ask(GET, get_request(container_id), deadline, namespace)
        except CallError as exc:
            if exc.code == "NOT_FOUND":  # deleted between the list and the read
                return None
            raise _failure(exc) from None
        return described(_taken(wire), container_id)

    def _read_now(self, leave_out: str | None) -> RuntimeContainers:
        deadline = time.monotonic() + DEADLINE_SECONDS
        tasks: list[_Task] = []
        listing = self._call(NAMESPACES, b"", deadline)
        for namespace in namespaces(listing):
            answer = self._call(TASKS, b"", deadline, namespace)
            tasks += [(namespace, cid, pid) for cid, pid in running_tasks(answer)
                      if cid != leave_out]
        live = set(tasks)
        if self._relabelled:
            self._relabelled = False
            live = set()
        self._described = {t: d for t, d in self._described.items() if t in live}
        for task in [t for t in tasks if t not in self._described][:MAX_NEW_CONTAINERS]:
            # Kept as each answers: a read its deadline cut short is not lost.
            self._described[task] = self._describe(task, deadline)
        containers: list[RuntimeContainer] = []
        names: dict[str, str] = {}
        cgroups: dict[str, str] = {}
        compose: dict[str, tuple[str, str]] = {}
        for task in tasks:
            found = self._described.get(task)
            if found is None:
                continue
            names[task[1]] = found.label
            if found.cgroup is not None:
                cgroups[found.cgroup] = found.label
            if found.compose is not None:
                compose[found.label] = found.compose
            if found.gpus is not None:
                containers.append(RuntimeContainer(task[1], found.label, found.gpus))
        return RuntimeContainers(tuple(containers), names, cgroups, compose)

    # --- on the event loop -----------------------------------------------------------------

    async def read(self, leave_out: str | None, fresh: bool = False) -> RuntimeContainers:
        reading = self._reading
        if fresh and reading is not None and not reading.done():
            # Begun before the event this read answers: let it end, then read again.
            with contextlib.suppress(Exception):  # its failure is not this read's
                await asyncio.wrap_future(reading)
            reading = None
        if reading is None or reading.cancelled():
            reading = self._reading = self._worker.submit(partial(self._read_now, leave_out))
        try:
            result = await asyncio.wrap_future(reading)
        finally:
            if reading.done() and self._reading is reading:
                self._reading = None
        assert isinstance(result, RuntimeContainers)
        return result

    def _listen(self, stream: ServerStream, changed: Callable[[], object],
                opened: Callable[[], object]) -> None:
        """On the listener's thread: one subscription, until it ends."""
        for envelope in stream.messages(SUBSCRIBE, subscribe_request(), opened=opened):
            topic = changed_topic(envelope)
            if topic == UPDATE_TOPIC:
                self._relabelled = True
            if topic is not None:
                changed()

    async def events(self, changed: Callable[[], None], opened: Callable[[], None]) -> bool:
        """Call `changed` (on the loop) after each event that changes the running tasks or a
        container's labels, until the subscription ends; False when containerd serves no
        events (UNIMPLEMENTED)."""
        loop = asyncio.get_running_loop()
        stream = self._stream = ServerStream(Path(self.socket_path), "containerd")
        try:
            await asyncio.wrap_future(self._listener.submit(partial(
                self._listen, stream, partial(loop.call_soon_threadsafe, changed),
                partial(loop.call_soon_threadsafe, opened))))
        except CallError as exc:
            if exc.code == "UNIMPLEMENTED":
                return False
            raise _failure(exc) from None
        finally:
            stream.close()  # cancelled: wakes the listener's thread, which ends the call
        return True

    async def close(self) -> None:
        self._channel.close()
        if self._stream is not None:
            self._stream.close()
        self._worker.stop()
        self._listener.stop()
