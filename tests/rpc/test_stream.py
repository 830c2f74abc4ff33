"""rpc/stream.py: a server-streaming call (containerd's `Events.Subscribe`) against real HTTP/2
servers (h2, server side) on a real unix socket: messages cut anywhere across DATA frames come
whole and in order, the request says what a gRPC client says, a status ends the call as gRPC
names it, and `close` from another thread ends a call that waits. The real containerd covers
the rest (tests/runtime/test_containerd.py)."""

import asyncio
import threading
from pathlib import Path

import pytest
from h2.connection import H2Connection

from gpu_enricher.rpc.answer import CallError
from gpu_enricher.rpc.stream import ServerStream
from tests.rpc.test_wire import GRPC_HEADERS, OK_TRAILERS, Answer, Http2Server, message

SUBSCRIBE = "/containerd.services.events.v1.Events/Subscribe"


def stream(path: Path, **kwargs: int) -> ServerStream:
    return ServerStream(path, "containerd", **kwargs)


def collect(path: Path, max_message_bytes: int = 1 << 20) -> list[bytes]:
    channel = stream(path, max_message_bytes=max_message_bytes)
    return list(channel.messages(SUBSCRIBE, b"\x0a\x01x", [(b"containerd-namespace", b"lab")]))


def pieces(*chunks: bytes, trailers: list[tuple[bytes, bytes]] | None = OK_TRAILERS) -> Answer:
    def answer(connection: H2Connection, stream_id: int) -> None:
        connection.send_headers(stream_id, GRPC_HEADERS)
        for chunk in chunks:
            connection.send_data(stream_id, chunk)
        if trailers is not None:
            connection.send_headers(stream_id, trailers, end_stream=True)

    return answer


@pytest.fixture
def path(tmp_path: Path) -> Path:
    return tmp_path / "containerd.sock"


async def test_messages_come_whole_wherever_the_frames_cut_them(path: Path) -> None:
    wire = message(b"first") + message(b"") + message(b"third" * 1000)
    async with Http2Server(path, pieces(wire[:3], wire[3:11], wire[11:])) as server:
        assert await asyncio.to_thread(collect, path) == [b"first", b"", b"third" * 1000]
    request = server.requests[0]
    assert request[b":path"] == SUBSCRIBE.encode() and request[b"te"] == b"trailers"
    assert request[b"containerd-namespace"] == b"lab", "metadata travels as headers"
    assert b"grpc-timeout" not in request, "a subscription has no deadline"


@pytest.mark.parametrize(("answer", "code"), [
    (pieces(message(b"a"), trailers=[(b"grpc-status", b"14"), (b"grpc-message", b"bye")]),
     "UNAVAILABLE"),
    (pieces(message(b"a", compressed=True)), "INTERNAL"),
    (pieces(message(b"a" * 100)), "RESOURCE_EXHAUSTED"),
])
async def test_a_stream_ends_as_its_status_or_its_faults_say(path: Path, answer: Answer,
                                                             code: str) -> None:
    async with Http2Server(path, answer):
        with pytest.raises(CallError) as caught:
            await asyncio.to_thread(collect, path, 64)
    assert caught.value.code == code


async def test_close_ends_a_subscription_that_waits(path: Path) -> None:
    channel = stream(path)
    got: list[object] = []
    first = threading.Event()

    def listen() -> None:
        try:
            for received in channel.messages(SUBSCRIBE, b""):
                got.append(received)
                first.set()
        except CallError as exc:
            got.append(exc.code)

    async with Http2Server(path, pieces(message(b"one"), trailers=None)):
        thread = threading.Thread(target=listen)
        thread.start()
        assert await asyncio.to_thread(first.wait, 5.0)
        channel.close()
        await asyncio.to_thread(thread.join, 5.0)
    assert got == [b"one", "UNAVAILABLE"]
    with pytest.raises(CallError, match="UNAVAILABLE"):
        list(stream(path.with_name("absent.sock")).messages(SUBSCRIBE, b""))


async def test_opened_is_told_once_the_server_answers_and_a_cut_message_is_an_error(
        path: Path) -> None:
    told: list[str] = []
    channel = stream(path)
    async with Http2Server(path, pieces(message(b"whole"), message(b"cut")[:6])):
        with pytest.raises(CallError, match="INTERNAL: the stream ended inside a message"):
            for received in await asyncio.to_thread(
                    lambda: list(channel.messages(SUBSCRIBE, b"",
                                                  opened=lambda: told.append("opened")))):
                told.append(received.decode())
    assert told == ["opened"], "opened before any message; nothing handed out after a fault"


def test_a_stream_closed_before_it_begins_never_connects(path: Path) -> None:
    channel = stream(path)
    channel.close()
    with pytest.raises(CallError, match="closed before it began"):
        list(channel.messages(SUBSCRIBE, b""))
