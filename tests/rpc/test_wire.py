"""The kubelet client's gRPC-over-HTTP/2 calls (rpc/wire.py) against answers the fake
kubelet (a real grpc.aio server) never gives: HTTP errors, compressed or cut-off messages,
lying length prefixes, silence, a reset stream. Each server here is a real HTTP/2 server (h2,
server side) on a real unix socket; the real grpc.aio kubelet covers the rest in
test_kubelet*.py."""

import asyncio
import time
from collections.abc import Callable
from pathlib import Path
from typing import Self

import pytest
from h2.config import H2Configuration
from h2.connection import H2Connection
from h2.events import PingAckReceived, RequestReceived
from hpack import Encoder
from hyperframe.frame import DataFrame, GoAwayFrame, HeadersFrame

from gpu_enricher.kubelet.client import PodResourcesClient
from gpu_enricher.rpc.answer import TOO_LARGE, CallError
from gpu_enricher.rpc.wire import UnaryChannel
from gpu_enricher.sim.fake_kubelet.server import FakeKubelet
from tests.kubelet.test_kubelet import kubelet as kubelet  # the fixture
from tests.kubelet.test_kubelet import socket_dir as socket_dir  # the fixture
from tests.kubelet.test_large import crowd

LIST = "/v1.PodResourcesLister/List"
Answer = Callable[[H2Connection, int], None]
"""Writes one answer on the connection for the request on the stream."""

OK_TRAILERS = [(b"grpc-status", b"0")]
GRPC_HEADERS = [(b":status", b"200"), (b"content-type", b"application/grpc")]


def message(payload: bytes, compressed: bool = False, claimed: int | None = None) -> bytes:
    size = len(payload) if claimed is None else claimed
    return bytes([compressed]) + size.to_bytes(4, "big") + payload


class Http2Server:
    """Answers every request with `answer`; `silent` accepts and never answers."""

    def __init__(self, path: Path, answer: Answer | None) -> None:
        self.path = path
        self.answer = answer
        self.requests: list[dict[bytes, bytes]] = []
        self.ping_acks: list[bytes] = []
        self._server: asyncio.AbstractServer | None = None

    async def _serve(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        connection = H2Connection(H2Configuration(client_side=False, header_encoding=None))
        connection.initiate_connection()
        writer.write(connection.data_to_send())
        try:
            while chunk := await reader.read(65536):
                for event in connection.receive_data(chunk):
                    if isinstance(event, RequestReceived):
                        self.requests.append(dict(event.headers or ()))
                        if self.answer is not None:
                            self.answer(connection, event.stream_id or 0)
                    elif isinstance(event, PingAckReceived):
                        self.ping_acks.append(event.ping_data or b"")
                writer.write(connection.data_to_send())
                await writer.drain()
        except (ConnectionError, asyncio.CancelledError):
            pass
        finally:
            writer.close()

    async def __aenter__(self) -> Self:
        self._server = await asyncio.start_unix_server(self._serve, str(self.path))
        return self

    async def __aexit__(self, *_: object) -> None:
        assert self._server is not None
        self._server.close()
        self.path.unlink(missing_ok=True)


@pytest.fixture
def path(tmp_path: Path) -> Path:
    return tmp_path / "kubelet.sock"


def call(path: Path, timeout: float = 5.0, max_bytes: int = 1 << 20) -> bytearray:
    return UnaryChannel(path, max_bytes, "the kubelet").call(LIST, b"", timeout)


async def failure(path: Path, answer: Answer | None, seconds: float = 5.0,
                  max_bytes: int = 1 << 20) -> CallError:
    async with Http2Server(path, answer):
        with pytest.raises(CallError) as caught:
            await asyncio.to_thread(call, path, seconds, max_bytes)
    return caught.value


def respond(headers: list[tuple[bytes, bytes]], body: bytes = b"",
            trailers: list[tuple[bytes, bytes]] | None = None) -> Answer:
    def answer(connection: H2Connection, stream: int) -> None:
        connection.send_headers(stream, headers, end_stream=not body and trailers is None)
        if body:
            connection.send_data(stream, body, end_stream=trailers is None)
        if trailers is not None:
            connection.send_headers(stream, trailers, end_stream=True)

    return answer


async def test_a_well_formed_answer_and_what_the_request_says(path: Path) -> None:
    async with Http2Server(path, respond(GRPC_HEADERS, message(b"\x0a\x00"),
                                         OK_TRAILERS)) as server:
        assert await asyncio.to_thread(call, path, 2.5) == b"\x0a\x00"
    request = server.requests[0]
    assert request[b":method"] == b"POST" and request[b":path"] == LIST.encode()
    assert request[b"content-type"] == b"application/grpc" and request[b"te"] == b"trailers"
    assert request[b"grpc-timeout"] == b"2500m", "the kubelet knows when to give up too"


@pytest.mark.parametrize(("http_status", "code"), [
    (b"503", "UNAVAILABLE"), (b"404", "UNIMPLEMENTED"), (b"403", "PERMISSION_DENIED"),
    (b"431", "INTERNAL"), (b"500", "UNKNOWN"), (b"abc", "UNKNOWN")])
async def test_an_http_error_without_a_grpc_status_maps_as_grpc_does(
        path: Path, http_status: bytes, code: str) -> None:
    error = await failure(path, respond([(b":status", http_status)]))
    assert error.code == code
    assert f"HTTP status {http_status.decode()}" in str(error)


async def test_a_grpc_error_reads_its_percent_encoded_message(path: Path) -> None:
    error = await failure(path, respond(
        [*GRPC_HEADERS, (b"grpc-status", b"8"),
         (b"grpc-message", b"rate limit 100%25 used: caf%C3%A9")]))
    assert error.code == "RESOURCE_EXHAUSTED"
    assert str(error) == "RESOURCE_EXHAUSTED: rate limit 100% used: café"


@pytest.mark.parametrize(("body", "trailers", "says"), [
    (message(b"abc", compressed=True), OK_TRAILERS, "compressed"),
    (message(b"abc", claimed=10), OK_TRAILERS, "ended inside its message"),
    (message(b"abc") + message(b"def"), OK_TRAILERS, "more than one message"),
    (b"", OK_TRAILERS, "has no message"),
], ids=["compressed", "cut-off", "two-messages", "no-message"])
async def test_a_malformed_answer_is_internal(
        path: Path, body: bytes, trailers: list[tuple[bytes, bytes]], says: str) -> None:
    error = await failure(path, respond(GRPC_HEADERS, body, trailers))
    assert error.code == "INTERNAL" and says in str(error), error


async def test_an_answer_without_a_grpc_status_is_unknown(path: Path) -> None:
    """HTTP 200 and no `grpc-status`: UNKNOWN, as gRPC's mapping says for 200 (a truly OK
    answer has a status)."""
    error = await failure(path, respond(GRPC_HEADERS, message(b"abc"), [(b"x-no", b"status")]))
    assert error.code == "UNKNOWN" and "without a gRPC status" in str(error), error


async def test_a_status_in_the_answer_wins_over_its_http_status(path: Path) -> None:
    error = await failure(path, respond([(b":status", b"503"), (b"grpc-status", b"5")]))
    assert error.code == "NOT_FOUND"


async def test_an_informational_header_block_is_skipped(path: Path) -> None:
    # ":status: 100" as a literal not indexed (HPACK 6.2.2), leaving the header table alone.
    informational = HeadersFrame(1, b"\x08\x03100", flags=["END_HEADERS"]).serialize()
    async with RawServer(path, informational + grpc_answer(b"\x0a\x00")):
        assert await asyncio.to_thread(call, path) == b"\x0a\x00"


async def test_a_length_prefix_above_the_limit_is_refused_before_anything_is_held(
        path: Path) -> None:
    # The prefix claims 2 GiB and nothing follows: refused at once, without waiting or holding.
    started = time.monotonic()
    error = await failure(path, respond(GRPC_HEADERS, message(b"", claimed=2 << 30)),
                          seconds=10.0)
    assert error.code == TOO_LARGE and "(2,147,483,648 bytes)" in str(error)
    assert "larger than the 1 MiB limit" in str(error)
    assert time.monotonic() - started < 5


async def test_silence_ends_at_the_deadline(path: Path) -> None:
    started = time.monotonic()
    error = await failure(path, None, seconds=0.5)
    assert error.code == "DEADLINE_EXCEEDED"
    assert 0.45 < time.monotonic() - started < 3


async def test_a_reset_stream_and_a_goaway_fail_the_call(path: Path) -> None:
    def reset(connection: H2Connection, stream: int) -> None:
        connection.reset_stream(stream, error_code=7)  # REFUSED_STREAM: safe to retry

    def go_away(connection: H2Connection, stream: int) -> None:
        connection.close_connection(error_code=2, last_stream_id=0)  # INTERNAL_ERROR

    assert (await failure(path, reset)).code == "UNAVAILABLE"
    assert (await failure(path, go_away)).code == "UNAVAILABLE"


async def test_close_ends_a_call_in_progress_at_once(path: Path) -> None:
    channel = UnaryChannel(path, 1 << 20, "the kubelet")
    async with Http2Server(path, None):
        waiting = asyncio.create_task(asyncio.to_thread(channel.call, LIST, b"", 30.0))
        await asyncio.sleep(0.3)  # connected, the request sent, waiting for an answer
        started = time.monotonic()
        channel.close()
        with pytest.raises(CallError) as caught:
            await waiting
        assert time.monotonic() - started < 1
    assert caught.value.code == "UNAVAILABLE"


def test_nothing_listening_on_the_socket_file_is_unavailable(path: Path) -> None:
    path.touch()  # a socket file whose server is gone reads the same: connection refused
    with pytest.raises(CallError) as caught:
        call(path)
    assert caught.value.code == "UNAVAILABLE"


async def test_a_large_answer_through_the_real_kubelet_arrives_whole(
        kubelet: FakeKubelet) -> None:
    """Past our 16 MiB flow-control window (so the client's WINDOW_UPDATEs count) and
    thousands of 16 KiB frames: every byte."""
    pods = crowd(10_000)
    kubelet.set_assignments(pods)
    client = PodResourcesClient(kubelet.socket_path, 10.0)
    try:
        listed = await client.list()
    finally:
        await client.close()
    assert kubelet.list_answer_bytes > 20 << 20
    assert listed.assignments == tuple(pods)


async def test_pings_padding_and_continuation_frames_are_understood(path: Path) -> None:
    """What a server may wrap an answer in (grpc-go pings to size its window; a large header
    block comes in CONTINUATION frames): the answer arrives whole and the ping is answered."""
    payload = bytes(range(256)) * 300  # several frames

    def answer(connection: H2Connection, stream: int) -> None:
        connection.ping(b"\x01\x02\x03\x04\x05\x06\x07\x08")
        # 40 kB of headers: a HEADERS and two CONTINUATION frames.
        connection.send_headers(stream, [*GRPC_HEADERS, (b"x-large", b"v" * 40_000)])
        body = message(payload)
        for at in range(0, len(body), 16_000):  # 200 bytes of padding in each frame
            connection.send_data(stream, body[at:at + 16_000], pad_length=200)
        connection.send_headers(stream, OK_TRAILERS, end_stream=True)

    async with Http2Server(path, answer) as server:
        assert await asyncio.to_thread(call, path) == payload
        for _ in range(50):  # the acknowledgement was sent before the answer was read whole
            if server.ping_acks:
                break
            await asyncio.sleep(0.01)
    assert server.ping_acks == [b"\x01\x02\x03\x04\x05\x06\x07\x08"]


class RawServer(Http2Server):
    """Writes `frames` (after its own SETTINGS) to each connection, whatever the client says:
    frames no HTTP/2 library would send."""

    def __init__(self, path: Path, frames: bytes) -> None:
        super().__init__(path, None)
        self.frames = frames

    async def _serve(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        writer.write(b"\x00\x00\x00\x04\x00\x00\x00\x00\x00" + self.frames)  # empty SETTINGS
        try:
            while await reader.read(65536):
                pass
        except ConnectionError:
            pass
        finally:
            writer.close()


def grpc_answer(body: bytes, before: bytes = b"") -> bytes:
    """A whole answer on stream 1, framed by hyperframe: headers (padded, with a priority,
    as a server may send them), `before`, body, trailers."""
    encoder = Encoder()
    headers = HeadersFrame(1, encoder.encode(GRPC_HEADERS), pad_length=7, depends_on=0,
                           stream_weight=15, flags=["END_HEADERS", "PADDED", "PRIORITY"])
    trailers = HeadersFrame(1, encoder.encode(OK_TRAILERS), flags=["END_HEADERS", "END_STREAM"])
    return headers.serialize() + before + DataFrame(1, message(body)).serialize() + \
        trailers.serialize()


@pytest.mark.parametrize("error", [0, 2], ids=["NO_ERROR", "INTERNAL_ERROR"])
async def test_unknown_frames_and_a_goaway_that_took_our_call_leave_the_answer_whole(
        path: Path, error: int) -> None:
    """A GOAWAY whose last stream is ours, whatever its code: the call was taken and may run
    until the connection closes (PROTOCOL-HTTP2.md, "GOAWAY Frame")."""
    unknown = b"\x00\x00\x09\x0b\x00\x00\x00\x00\x01ignore me"  # type 0xB on stream 1
    goaway = GoAwayFrame(0, last_stream_id=1, error_code=error).serialize()
    async with RawServer(path, grpc_answer(b"\x0a\x00", unknown + goaway)):
        assert await asyncio.to_thread(call, path) == b"\x0a\x00"


async def test_a_frame_above_the_size_we_allow_is_a_protocol_error(path: Path) -> None:
    """16 KiB is the largest frame we announce (HTTP/2's default): a larger one breaks the
    protocol, and is not read."""
    async with RawServer(path, grpc_answer(b"x" * 20_000)):
        with pytest.raises(CallError) as caught:
            await asyncio.to_thread(call, path)
    assert caught.value.code == "UNAVAILABLE"
    assert "does not speak HTTP/2" in str(caught.value) and "20,005 bytes" in str(caught.value)
