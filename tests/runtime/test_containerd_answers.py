"""runtime/containerd.py: containerd's answers (built with the stubs containerd's own wire
format is checked against in test_containerd.py) → running tasks, names, GPUs, cgroups; and
runtime/probe.py: what answers on a socket, from its first bytes and over a real socket."""

import asyncio
import json
from pathlib import Path
from typing import Any

import pytest

from gpu_enricher.attribution.containers import GpuRequest
from gpu_enricher.rpc._generated.containerd.services.containers.v1 import containers_pb2
from gpu_enricher.rpc._generated.containerd.services.events.v1 import events_pb2
from gpu_enricher.rpc._generated.containerd.services.namespaces.v1 import namespace_pb2
from gpu_enricher.rpc._generated.containerd.services.tasks.v1 import tasks_pb2
from gpu_enricher.rpc._generated.containerd.types.task import task_pb2
from gpu_enricher.runtime.containerd import (
    cgroup_path,
    changed_topic,
    described,
    get_request,
    namespaces,
    running_tasks,
    subscribe_request,
)
from gpu_enricher.runtime.probe import CONTAINERD, ENGINE, kind_of, socket_kind
from gpu_enricher.runtime.reader import RuntimeFailure

HEX = "c0ffee" + "0" * 58


def container(container_id: str, spec: Any, **labels: str) -> bytes:
    value = spec if isinstance(spec, bytes) else json.dumps(spec).encode()
    message = containers_pb2.GetContainerResponse(container=containers_pb2.Container(
        id=container_id, labels=labels, image="docker.io/library/python:3.12"))
    message.container.spec.type_url = "types.containerd.io/opencontainers/runtime-spec/1/Spec"
    message.container.spec.value = value
    wire: bytes = message.SerializeToString()
    return wire


def spec(env: list[str], cgroups_path: str | None = None) -> dict[str, Any]:
    linux = {"cgroupsPath": cgroups_path} if cgroups_path is not None else {}
    return {"ociVersion": "1.0.2", "process": {"args": ["python"], "env": env}, "linux": linux}


@pytest.mark.parametrize(("written", "expected"), [
    ("/lab/trainer", "/lab/trainer"),                                  # ctr's default
    ("lab/trainer", "/lab/trainer"),                                   # relative: the root's
    ("system.slice:nerdctl:abc", "/system.slice/nerdctl-abc.scope"),   # nerdctl, systemd
    (":nerdctl:abc", "/system.slice/nerdctl-abc.scope"),               # systemd's default slice
    ("kubepods-besteffort.slice:cri-containerd:abc",                   # a slice of a slice
     "/kubepods.slice/kubepods-besteffort.slice/cri-containerd-abc.scope"),
    ("-.slice:p:abc", "/p-abc.scope"),                                 # the root slice
    ("", None),
])
def test_a_spec_cgroups_path_is_where_its_processes_run(written: str,
                                                        expected: str | None) -> None:
    assert cgroup_path(written) == expected


def test_a_container_is_named_by_nerdctl_else_by_its_id() -> None:
    named = described(container(HEX, spec(["PATH=/bin", "NVIDIA_VISIBLE_DEVICES=GPU-1,2"],
                                          "/default/" + HEX), **{"nerdctl/name": "trainer"}), HEX)
    assert (named.label, named.gpus, named.cgroup) == \
        ("trainer", GpuRequest(("GPU-1", "2")), "/default/" + HEX)
    anonymous = described(container(HEX, spec(["NVIDIA_VISIBLE_DEVICES=all"])), HEX)
    assert (anonymous.label, anonymous.gpus, anonymous.cgroup) == \
        (HEX[:12], GpuRequest(every_gpu=True), None), "Docker's short form of a 64-hex ID"
    short = described(container("indexer", spec(["NVIDIA_VISIBLE_DEVICES=void"])), "indexer")
    assert (short.label, short.gpus) == ("indexer", None)
    bare = described(container("x", b""), "x")
    assert (bare.label, bare.gpus, bare.cgroup) == ("x", None, None), "no spec: nothing given"


@pytest.mark.parametrize("wire", [b"{not json", b"[1, 2]", b"[" * 100_000])
def test_a_spec_that_is_no_json_object_names_the_container_and_gives_it_nothing(
        wire: bytes) -> None:
    """One container's odd spec never costs the other containers' labels (every read would
    fail on it): it is named, with no GPUs and no cgroup."""
    found = described(container("x", wire, **{"nerdctl/name": "odd"}), "x")
    assert (found.label, found.gpus, found.cgroup) == ("odd", None, None)


def test_only_running_tasks_are_listed_by_their_container_id() -> None:
    answer = tasks_pb2.ListTasksResponse(tasks=[
        task_pb2.Process(id="a", pid=10, status=task_pb2.RUNNING),
        task_pb2.Process(id="b", pid=11, status=task_pb2.STOPPED),
        task_pb2.Process(id="c", pid=12, status=task_pb2.CREATED),
        task_pb2.Process(container_id="d", pid=13, status=task_pb2.RUNNING),
        task_pb2.Process(id="e", pid=14, status=task_pb2.PAUSED),
    ]).SerializeToString()
    assert running_tasks(answer) == [("a", 10), ("d", 13)]
    listing = namespace_pb2.ListNamespacesResponse(namespaces=[
        namespace_pb2.Namespace(name="default"), namespace_pb2.Namespace(name="moby"),
        namespace_pb2.Namespace(name="")]).SerializeToString()
    assert namespaces(listing) == ["default", "moby"]
    assert containers_pb2.GetContainerRequest.FromString(get_request("a")).id == "a"


@pytest.mark.parametrize("parse", [namespaces, running_tasks])
def test_garbage_is_a_clear_failure(parse: Any) -> None:
    with pytest.raises(RuntimeFailure, match="does not parse") as caught:
        parse(b"\xff\xff\xff")
    assert caught.value.reason == "answer"


def test_the_kind_is_told_by_the_first_bytes() -> None:
    assert kind_of(b"HTTP/1.1 200 OK\r\nApi-Version: 1.41\r\n") == ENGINE
    assert kind_of(b"\x00\x00\x06\x04\x00\x00\x00\x00\x00\x00\x05") == CONTAINERD
    assert kind_of(b"SSH-2.0-OpenSSH_9.2\r\n") is None
    assert kind_of(b"") is None


async def _serve(path: Path, answer: bytes) -> asyncio.AbstractServer:
    async def handle(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        await reader.readuntil(b"\r\n\r\n")
        writer.write(answer)
        await writer.drain()
        writer.close()

    return await asyncio.start_unix_server(handle, str(path))


async def test_the_kind_is_asked_of_the_socket(tmp_path: Path) -> None:
    engine = await _serve(tmp_path / "e.sock", b"HTTP/1.0 200 OK\r\n\r\nOK")
    other = await _serve(tmp_path / "o.sock", b"SSH-2.0-OpenSSH_9.2\r\n")
    async with engine, other:
        assert await socket_kind(str(tmp_path / "e.sock"), 2.0) == ENGINE
        with pytest.raises(RuntimeFailure, match="speaks neither") as caught:
            await socket_kind(str(tmp_path / "o.sock"), 2.0)
        assert caught.value.reason == "answer"
    with pytest.raises(RuntimeFailure) as absent:
        await socket_kind(str(tmp_path / "absent.sock"), 2.0)
    assert absent.value.reason == "unavailable"


def test_the_subscription_asks_for_the_topics_that_change_running_tasks() -> None:
    request = events_pb2.SubscribeRequest.FromString(subscribe_request())
    assert list(request.filters) == [
        'topic=="/tasks/start"', 'topic=="/tasks/exit"', 'topic=="/tasks/delete"',
        'topic=="/containers/delete"', 'topic=="/containers/update"']

    def envelope(topic: str) -> bytes:
        wire: bytes = events_pb2.Envelope(namespace="lab", topic=topic).SerializeToString()
        return wire

    assert changed_topic(envelope("/tasks/exit")) == "/tasks/exit"
    assert changed_topic(envelope("/containers/update")) == "/containers/update", "a rename"
    assert changed_topic(envelope("/tasks/exec-started")) is None
    with pytest.raises(RuntimeFailure, match=r"Events\.Subscribe answer does not parse"):
        changed_topic(b"\xff\xff")
