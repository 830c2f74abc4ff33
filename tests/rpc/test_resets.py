"""How a kubelet call ends when the stream is reset or the deadline passes, as gRPC's
PROTOCOL-HTTP2.md says ("Errors", "Client Cancellation"): each RST_STREAM code from a real
HTTP/2 server (h2) on a real unix socket, a grpc-go server resetting at the deadline we sent,
an answer that streams past our deadline (cut at it, the stream cancelled), and the real
grpc.aio kubelet keeping a deadline of its own."""

import asyncio
import time
from collections.abc import Awaitable, Callable
from pathlib import Path

import grpc
import pytest
from h2.config import H2Configuration
from h2.connection import H2Connection
from h2.events import RequestReceived, StreamReset
from h2.exceptions import StreamClosedError
from hpack import Encoder
from hyperframe.frame import DataFrame, HeadersFrame, RstStreamFrame

from gpu_enricher.collector.loop import Collector
from gpu_enricher.rpc import wire
from gpu_enricher.rpc.answer import CallError
from gpu_enricher.rpc.statuses import from_reset
from gpu_enricher.rpc.wire import UnaryChannel
from gpu_enricher.sim.backend import SimulatedBackend
from gpu_enricher.sim.fake_kubelet.server import FakeKubelet
from tests.kubelet.test_kubelet import SIM, Clock, make_collector, text_of
from tests.kubelet.test_kubelet import collectors as collectors  # the fixture
from tests.kubelet.test_kubelet import kubelet as kubelet  # the fixture
from tests.kubelet.test_kubelet import socket_dir as socket_dir  # the fixture
from tests.rpc.test_wire import GRPC_HEADERS, LIST, Http2Server, RawServer, call, message
from tests.samples import value

Script = Callable[["ScriptedServer", H2Connection, int, asyncio.StreamWriter], Awaitable[None]]
"""Answers the request on a stream, over time: it writes what the connection has to send."""


class ScriptedServer(Http2Server):
    """An HTTP/2 server (h2) that runs `script` for each request and records the client's
    requests and the error codes of the streams the client resets."""

    def __init__(self, path: Path, script: Script) -> None:
        super().__init__(path, None)
        self.script = script
        self.resets: list[int] = []

    async def _serve(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        connection = H2Connection(H2Configuration(client_side=False, header_encoding=None))
        connection.initiate_connection()
        writer.write(connection.data_to_send())
        answering: list[asyncio.Task[None]] = []
        try:
            while chunk := await reader.read(65536):
                for event in connection.receive_data(chunk):
                    if isinstance(event, RequestReceived):
                        self.requests.append(dict(event.headers or ()))
                        answering.append(asyncio.create_task(
                            self.script(self, connection, event.stream_id or 0, writer)))
                    elif isinstance(event, StreamReset):
                        self.resets.append(int(event.error_code or 0))
                writer.write(connection.data_to_send())
        except ConnectionError:
            pass
        finally:
            for task in answering:
                task.cancel()
            writer.close()


@pytest.fixture
def path(socket_dir: Path) -> Path:
    return socket_dir / "kubelet.sock"


def reset_with(code: int) -> Script:
    """Headers and part of the message, then RST_STREAM(code): the payload left incomplete."""
    async def script(_: ScriptedServer, connection: H2Connection, stream: int,
                     writer: asyncio.StreamWriter) -> None:
        connection.send_headers(stream, GRPC_HEADERS)
        connection.send_data(stream, message(b"", claimed=100) + b"partial")
        connection.reset_stream(stream, error_code=code)
        writer.write(connection.data_to_send())

    return script


async def reset_at_the_sent_deadline(server: ScriptedServer, connection: H2Connection,
                                     stream: int, writer: asyncio.StreamWriter) -> None:
    """What grpc-go (1.72 on) does when the deadline a call carries passes on the server."""
    timeout = server.requests[-1][b"grpc-timeout"]
    assert timeout.endswith(b"m")
    connection.send_headers(stream, GRPC_HEADERS)
    writer.write(connection.data_to_send())
    await asyncio.sleep(int(timeout[:-1]) / 1000)
    connection.reset_stream(stream, error_code=8)  # CANCEL
    writer.write(connection.data_to_send())


async def stream_without_end(_: ScriptedServer, connection: H2Connection, stream: int,
                             writer: asyncio.StreamWriter) -> None:
    """A 50 MB answer sent a 16 KiB frame every millisecond or so, never pausing long enough
    for a read to time out, until the client resets the stream or goes."""
    connection.send_headers(stream, GRPC_HEADERS)
    connection.send_data(stream, message(b"", claimed=50 << 20))
    try:
        while True:
            if connection.local_flow_control_window(stream) >= 16_384:
                connection.send_data(stream, bytes(16_384))
            writer.write(connection.data_to_send())
            await writer.drain()
            await asyncio.sleep(0.001)
    except (StreamClosedError, ConnectionError):
        pass


@pytest.mark.parametrize(("error", "code"), [
    (0x0, "INTERNAL"), (0x1, "INTERNAL"), (0x2, "INTERNAL"), (0x3, "INTERNAL"),
    (0x4, "INTERNAL"), (0x5, "INTERNAL"), (0x6, "INTERNAL"), (0x7, "UNAVAILABLE"),
    (0x8, "CANCELLED"), (0x9, "INTERNAL"), (0xA, "INTERNAL"), (0xB, "RESOURCE_EXHAUSTED"),
    (0xC, "PERMISSION_DENIED"), (0xD, "INTERNAL"), (0x42, "INTERNAL"),
], ids=["NO_ERROR", "PROTOCOL_ERROR", "INTERNAL_ERROR", "FLOW_CONTROL_ERROR",
        "SETTINGS_TIMEOUT", "STREAM_CLOSED", "FRAME_SIZE_ERROR", "REFUSED_STREAM", "CANCEL",
        "COMPRESSION_ERROR", "CONNECT_ERROR", "ENHANCE_YOUR_CALM", "INADEQUATE_SECURITY",
        "HTTP_1_1_REQUIRED", "unknown"])
async def test_each_reset_code_maps_as_grpc_says(path: Path, error: int, code: str) -> None:
    async with ScriptedServer(path, reset_with(error)):
        with pytest.raises(CallError) as caught:
            await asyncio.to_thread(call, path, 5.0)
    assert caught.value.code == code
    assert str(caught.value).startswith(f"{code}: the kubelet reset the call (RST_STREAM ")


async def test_no_error_after_the_status_ends_the_call_with_that_status(path: Path) -> None:
    """NO_ERROR is INTERNAL only when no status came: after trailers (here without
    END_STREAM, ended by the reset) the status stands."""
    encoder = Encoder()
    frames = (HeadersFrame(1, encoder.encode(GRPC_HEADERS), flags=["END_HEADERS"]).serialize()
              + DataFrame(1, message(b"\x0a\x00")).serialize()
              + HeadersFrame(1, encoder.encode([(b"grpc-status", b"0")]),
                             flags=["END_HEADERS"]).serialize()
              + RstStreamFrame(1, error_code=0).serialize())
    async with RawServer(path, frames):
        assert await asyncio.to_thread(call, path) == b"\x0a\x00"


async def test_a_server_resetting_at_the_deadline_we_sent_is_deadline_exceeded(
        path: Path) -> None:
    """grpc-go 1.72+ (the kubelet) resets a call with CANCEL at its deadline: that is our
    deadline passing, never INTERNAL (issue 24) nor CANCELLED. The `grpc-timeout` we send is
    rounded up (500.9 ms went as "500m" before), so that reset never comes before our own
    deadline."""
    started = time.monotonic()
    async with ScriptedServer(path, reset_at_the_sent_deadline) as server:
        with pytest.raises(CallError) as caught:
            await asyncio.to_thread(call, path, 0.5009)
    assert caught.value.code == "DEADLINE_EXCEEDED"
    assert time.monotonic() - started < 0.5 + 0.3
    assert server.requests[0][b"grpc-timeout"] == b"501m"


def test_a_cancel_is_deadline_exceeded_only_once_the_deadline_passed() -> None:
    assert from_reset(8, deadline_passed=False) == "CANCELLED"
    assert from_reset(8, deadline_passed=True) == "DEADLINE_EXCEEDED"
    assert from_reset(7, deadline_passed=True) == "UNAVAILABLE"


async def test_an_answer_streaming_past_the_deadline_is_cut_at_it_and_cancelled(
        path: Path) -> None:
    """The deadline is the whole call's, not each read's: the frames never pause, yet the call
    ends at the deadline as DEADLINE_EXCEEDED and the stream is reset with CANCEL, so the
    kubelet stops sending."""
    async with ScriptedServer(path, stream_without_end) as server:
        started = time.monotonic()
        with pytest.raises(CallError) as caught:
            await asyncio.to_thread(call, path, 0.5, 64 << 20)
        elapsed = time.monotonic() - started
        for _ in range(100):  # the server reads the reset after the call returned
            if server.resets:
                break
            await asyncio.sleep(0.01)
    assert str(caught.value) == "DEADLINE_EXCEEDED: /v1.PodResourcesLister/List not answered " \
        "whole within 0.5s"
    assert 0.5 <= elapsed < 0.5 + 0.3
    assert server.resets == [8], "the stream is cancelled as a client cancels (CANCEL)"


async def test_the_grpc_timeout_is_rounded_up_to_whole_milliseconds(path: Path) -> None:
    """Never a deadline on the kubelet's side before ours: at ours, we cancel."""
    async with ScriptedServer(path, reset_with(7)) as server:
        with pytest.raises(CallError):
            channel = UnaryChannel(path, 1 << 20, "the kubelet")
            await asyncio.to_thread(channel.call, LIST, b"", 0.2501)
    assert server.requests[0][b"grpc-timeout"] == b"251m"


async def test_the_grpc_aio_kubelet_keeping_its_own_deadline_is_deadline_exceeded(
        kubelet: FakeKubelet, monkeypatch: pytest.MonkeyPatch) -> None:
    """A real grpc.aio server whose deadline (what we sent, here cut to 300 ms) passes before
    ours (2 s) while the handler is still busy: it ends the call with DEADLINE_EXCEEDED in its
    trailers, at its deadline."""
    monkeypatch.setattr(wire, "_ceil_ms", lambda seconds: 300)
    kubelet.delay_seconds = 3.0
    started = time.monotonic()
    with pytest.raises(CallError) as caught:
        await asyncio.to_thread(call, kubelet.socket_path, 2.0)
    assert caught.value.code == "DEADLINE_EXCEEDED"
    assert time.monotonic() - started < 0.3 + 0.5


async def test_the_grpc_aio_kubelet_aborting_cancelled_is_cancelled(
        kubelet: FakeKubelet) -> None:
    kubelet.fail_next("v1.List", grpc.StatusCode.CANCELLED, details="shutting down")
    with pytest.raises(CallError) as caught:
        await asyncio.to_thread(call, kubelet.socket_path, 2.0)
    assert (caught.value.code, str(caught.value)) == ("CANCELLED", "CANCELLED: shutting down")


async def test_a_reset_at_the_deadline_counts_as_deadline_exceeded_in_self_metrics(
        path: Path, collectors: list[Collector]) -> None:
    clock = Clock()
    async with ScriptedServer(path, reset_at_the_sent_deadline):
        collector = make_collector(SimulatedBackend(SIM), path, clock=clock, timeout=0.5009)
        collectors.append(collector)
        text = await text_of(collector)
    errors = "gpu_enricher_collection_errors_total"
    assert value(text, errors, source="kubelet", reason="DEADLINE_EXCEEDED") == 1
    assert value(text, errors, source="kubelet", reason="INTERNAL") is None
