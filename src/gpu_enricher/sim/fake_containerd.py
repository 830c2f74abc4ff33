"""A fake containerd: the simulated containerd host's containers, served on a unix socket as
containerd serves them, by a real grpc.aio server (`Namespaces.List`, `Tasks.List`,
`Containers.Get` with the `containerd-namespace` metadata, and `Events.Subscribe`, open and
quiet: the simulated containers never change), so `--simulate containerd-host` runs
`--container-labels` through the same client a real host's containerd answers. Only what the
exporter reads is in the answers."""

import asyncio
import json
from collections.abc import AsyncIterator, Sequence
from pathlib import Path
from typing import Any

import grpc

from ..rpc._generated.containerd.services.containers.v1 import containers_pb2
from ..rpc._generated.containerd.services.events.v1 import events_pb2
from ..rpc._generated.containerd.services.namespaces.v1 import namespace_pb2
from ..rpc._generated.containerd.services.tasks.v1 import tasks_pb2
from ..rpc._generated.containerd.types.task import task_pb2
from .node import SimContainer

NAMESPACE_HEADER = "containerd-namespace"
_SPEC_TYPE = "types.containerd.io/opencontainers/runtime-spec/1/Spec"


def _spec(container: SimContainer) -> bytes:
    return json.dumps({"ociVersion": "1.0.2-dev",
                       "process": {"args": ["/bin/sh"], "env": ["PATH=/usr/bin",
                                                                *container.env]},
                       "linux": {"cgroupsPath": container.cgroup}}).encode()


class FakeContainerd:
    def __init__(self, socket_path: Path, containers: Sequence[SimContainer],
                 pids: dict[str, int]) -> None:
        self.socket_path = socket_path
        self.containers = {(c.namespace or "default", c.container_id): c for c in containers}
        self.pids = pids  # a container's name → its first process's PID (else a made-up one)
        self.requests = 0
        self._server: Any = None
        self._stopping = asyncio.Event()

    @staticmethod
    def _namespace(context: Any) -> str:
        return str(dict(context.invocation_metadata()).get(NAMESPACE_HEADER, ""))

    async def _namespaces(self, request: Any, context: Any) -> Any:
        self.requests += 1
        names = sorted({ns for ns, _ in self.containers})
        return namespace_pb2.ListNamespacesResponse(
            namespaces=[namespace_pb2.Namespace(name=n) for n in names])

    async def _tasks(self, request: Any, context: Any) -> Any:
        self.requests += 1
        namespace = self._namespace(context)
        return tasks_pb2.ListTasksResponse(tasks=[
            task_pb2.Process(id=cid, pid=self.pids.get(c.name, 100_000 + n),
                             status=task_pb2.RUNNING)
            for n, ((ns, cid), c) in enumerate(self.containers.items()) if ns == namespace])

    async def _get(self, request: Any, context: Any) -> Any:
        self.requests += 1
        found = self.containers.get((self._namespace(context), request.id))
        if found is None:
            await context.abort(grpc.StatusCode.NOT_FOUND, f"container {request.id!r}: not found")
            raise AssertionError("abort raises")  # grpcio has no types to say so
        labels = {**found.labels,
                  **({"nerdctl/name": found.name} if found.container_id != found.name else {})}
        answer = containers_pb2.GetContainerResponse(container=containers_pb2.Container(
            id=found.container_id, labels=labels, image="simulated:latest"))
        answer.container.spec.type_url = _SPEC_TYPE
        answer.container.spec.value = _spec(found)
        return answer

    async def _subscribe(self, request: Any, context: Any) -> AsyncIterator[Any]:
        self.requests += 1
        await context.send_initial_metadata(())
        await self._stopping.wait()
        return
        yield  # an async generator that yields nothing: the stream stays open, quiet

    async def start(self) -> None:
        server = grpc.aio.server()

        def unary(handler: Any, request: Any) -> Any:
            return grpc.unary_unary_rpc_method_handler(
                handler, request_deserializer=request.FromString,
                response_serializer=lambda message: message.SerializeToString())

        server.add_generic_rpc_handlers((
            grpc.method_handlers_generic_handler("containerd.services.namespaces.v1.Namespaces", {
                "List": unary(self._namespaces, namespace_pb2.ListNamespacesRequest)}),
            grpc.method_handlers_generic_handler("containerd.services.tasks.v1.Tasks", {
                "List": unary(self._tasks, tasks_pb2.ListTasksRequest)}),
            grpc.method_handlers_generic_handler("containerd.services.containers.v1.Containers", {
                "Get": unary(self._get, containers_pb2.GetContainerRequest)}),
            grpc.method_handlers_generic_handler("containerd.services.events.v1.Events", {
                "Subscribe": grpc.unary_stream_rpc_method_handler(
                    self._subscribe, request_deserializer=events_pb2.SubscribeRequest.FromString,
                    response_serializer=lambda message: message.SerializeToString())}),
        ))
        server.add_insecure_port(f"unix:{self.socket_path}")
        await server.start()
        self._server = server

    async def stop(self) -> None:
        self._stopping.set()
        if self._server is not None:
            await self._server.stop(grace=None)
            self._server = None
