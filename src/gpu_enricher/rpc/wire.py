"""gRPC unary calls over HTTP/2 on a unix socket, blocking, for a client's own thread (the
kubelet's pod-resources API, containerd's API).

Why not grpcio's client (issue 13): its C core starts an EventEngine pool of clamp(CPUs, 4, 16)
threads plus two more on the first channel (22 threads on a 192-CPU node, sized by `sysconf`,
which no option, variable, affinity or cgroup limit changes), adds ~21 MiB of RSS on import,
and copies a received message while holding the GIL (~0.55 ms per MB: 27 ms for a 50 MB
`List`). The pod-resources API needs two unary calls on a local socket: a request is one
HEADERS and one DATA frame, an answer HEADERS, DATA and trailers. `frames` builds and reads
the frames, `hpack` codes the header blocks; this module keeps the stream's rules (flow
control, SETTINGS and PING acknowledged, GOAWAY and RST_STREAM, CONTINUATION) and gRPC's
(PROTOCOL-HTTP2.md in grpc/grpc): the 5-byte message prefix, `grpc-status` / `grpc-message`,
the call's deadline (sent as `grpc-timeout`, kept over the whole call, the stream cancelled at
it); `statuses` names a failure as gRPC does (HTTP statuses, stream resets).

One connection per call: nothing idle to go stale (a restarted kubelet or containerd is found
at once, no GOAWAY or keepalive to handle), at the cost of one local connect per call. `answer`
assembles what the stream carries.
"""

import contextlib
import socket
import threading
import time
from collections.abc import Iterator, Sequence
from pathlib import Path
from typing import Final

from hpack import Decoder, Encoder, HPACKError

from .answer import Answer, CallError, Message
from .frames import (
    CONTINUATION,
    DATA,
    ENABLE_PUSH,
    END_HEADERS,
    END_STREAM,
    GOAWAY,
    HEADERS,
    INITIAL_WINDOW_SIZE,
    MAX_HEADER_LIST_SIZE,
    PUSH_PROMISE,
    RST_STREAM,
    ConnectionClosed,
    FrameReader,
    ProtocolError,
    acknowledge,
    client_start,
    frame,
    header_block,
    unpadded,
    window_updates,
)
from .statuses import CANCEL, from_reset, http2_error_name

WINDOW: Final = 16 << 20
"""Flow-control window, per stream and for the connection: a large answer streams without
waiting for a WINDOW_UPDATE every 64 KiB (HTTP/2's default); both are topped up once half is
used."""
MAX_HEADER_LIST: Final = 64 << 10
STREAM: Final = 1  # the one stream of a connection


def request_frames(method: str, request: bytes, metadata: Sequence[tuple[bytes, bytes]],
                   window: int, timeout_seconds: float | None) -> bytes:
    """All a call sends, for a new connection: the preface and SETTINGS (no push, `window` for
    the stream and the connection), the request's HEADERS, and its one message in a DATA frame
    that half-closes the stream. `metadata`: custom headers (lowercase ASCII names, gRPC's
    metadata; containerd's `containerd-namespace`)."""
    fields = [
        (b":method", b"POST"), (b":scheme", b"http"), (b":path", method.encode()),
        (b":authority", b"localhost"), (b"te", b"trailers"),
        (b"content-type", b"application/grpc"), (b"user-agent", b"gpu-enricher"),
    ]
    if timeout_seconds is not None:
        # The server may give up too once the answer is of no use (ms, up to 8 digits).
        fields.append((b"grpc-timeout",
                       f"{min(_ceil_ms(timeout_seconds), 99_999_999)}m".encode()))
    return b"".join((
        client_start({ENABLE_PUSH: 0, INITIAL_WINDOW_SIZE: window,
                      MAX_HEADER_LIST_SIZE: MAX_HEADER_LIST}, window),
        frame(HEADERS, END_HEADERS, STREAM, Encoder().encode([*fields, *metadata])),
        frame(DATA, END_STREAM, STREAM, b"\x00" + len(request).to_bytes(4, "big") + request),
    ))


@contextlib.contextmanager
def named_failures(peer: str, socket_path: Path, method: str) -> Iterator[None]:
    """A connection's failures as the CallError gRPC's client would raise (UNAVAILABLE); the
    call's deadline (TimeoutError, an OSError too) is the caller's to name."""
    try:
        yield
    except TimeoutError:
        raise
    except ConnectionClosed:
        raise CallError("UNAVAILABLE", f"UNAVAILABLE: {peer} closed the connection before "
                        f"answering {method} whole") from None
    except (ProtocolError, HPACKError) as exc:
        raise CallError("UNAVAILABLE", f"UNAVAILABLE: {peer}'s socket does not speak HTTP/2 "
                        f"as gRPC does ({exc})") from None
    except OSError as exc:
        raise CallError("UNAVAILABLE", f"UNAVAILABLE: {socket_path}: {exc.strerror or exc}"
                        ) from None


def _ceil_ms(seconds: float) -> int:
    """`seconds` in whole milliseconds, rounded up: the server's deadline is never before ours,
    so at ours we cancel, rather than racing its reset."""
    return -(-round(seconds * 1_000_000) // 1000)


class UnaryChannel:
    """Unary calls to one unix socket, one at a time, on the calling thread. `close` (from any
    thread) ends a call in progress at once, as UNAVAILABLE."""

    def __init__(self, socket_path: Path, max_receive_bytes: int, peer: str) -> None:
        self.socket_path = socket_path
        self.max_receive_bytes = max_receive_bytes
        self.peer = peer  # who answers, as error messages name it
        self._lock = threading.Lock()
        self._socket: socket.socket | None = None

    def close(self) -> None:
        with self._lock:
            sock = self._socket
        if sock is not None:
            with contextlib.suppress(OSError):  # not connected yet, or already closed
                sock.shutdown(socket.SHUT_RDWR)  # wakes the thread blocked in recv

    def call(self, method: str, request: bytes, timeout_seconds: float,
             metadata: Sequence[tuple[bytes, bytes]] = ()) -> Message:
        """The answer's message bytes; CallError for any failure. `metadata`: custom headers
        (lowercase ASCII names, as gRPC's metadata; containerd's `containerd-namespace`)."""
        deadline = time.monotonic() + timeout_seconds
        sock = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        with self._lock:
            self._socket = sock
        try:
            with named_failures(self.peer, self.socket_path, method):
                return self._exchange(sock, method, request, metadata, deadline,
                                      timeout_seconds)
        except TimeoutError:
            raise CallError("DEADLINE_EXCEEDED", f"DEADLINE_EXCEEDED: {method} not answered "
                            f"whole within {timeout_seconds:g}s") from None
        finally:
            with self._lock:
                self._socket = None
            sock.close()

    def _exchange(self, sock: socket.socket, method: str, request: bytes,
                  metadata: Sequence[tuple[bytes, bytes]], deadline: float,
                  timeout_seconds: float) -> Message:
        sock.settimeout(timeout_seconds)
        sock.connect(str(self.socket_path))
        sock.settimeout(max(deadline - time.monotonic(), 0.001))
        sock.sendall(request_frames(method, request, metadata, WINDOW, timeout_seconds))
        answer = Answer(method, self.max_receive_bytes, self.peer)
        try:
            return self._receive(sock, answer, deadline)
        except TimeoutError:
            # Our deadline: cancel as a client does, so the server stops sending at once
            # (PROTOCOL-HTTP2.md, "Client Cancellation"); never waiting for room to send it.
            answer.release()
            with contextlib.suppress(OSError):
                sock.setblocking(False)
                sock.send(frame(RST_STREAM, 0, STREAM, CANCEL.to_bytes(4, "big")))
            raise
        except BaseException:
            answer.release()
            raise

    @staticmethod
    def _receive(sock: socket.socket, answer: Answer, deadline: float) -> Message:
        reader = FrameReader(sock, deadline)
        decoder = Decoder(MAX_HEADER_LIST)
        unacknowledged = 0  # DATA bytes received since the last WINDOW_UPDATE
        while not answer.ended:
            kind, flags, stream, payload = reader.next()
            if kind == DATA:
                unacknowledged += len(payload)
                if stream == STREAM:
                    answer.take(unpadded(payload, flags))
                    answer.ended = bool(flags & END_STREAM)
                elif stream == 0:
                    raise ProtocolError("DATA on stream 0")
                if unacknowledged >= WINDOW // 2 and not answer.ended:
                    sock.sendall(window_updates(unacknowledged, STREAM))
                    unacknowledged = 0
            elif kind == HEADERS:
                ended = bool(flags & END_STREAM)
                fields = dict(decoder.decode(header_block(reader, flags, payload), raw=True))
                if stream == STREAM:
                    answer.add_headers(fields)
                    answer.ended = ended
            elif acknowledge(sock, kind, flags, payload):
                pass
            elif kind == RST_STREAM and stream == STREAM:
                error = int.from_bytes(payload[:4], "big")
                if error == 0 and answer.status() is not None:
                    break  # NO_ERROR after a status: the call ended with that status
                code = from_reset(error, time.monotonic() >= deadline)
                raise CallError(code, f"{code}: {answer.peer} reset the call "
                                f"(RST_STREAM {http2_error_name(error)})")
            elif kind == GOAWAY:
                last_stream = int.from_bytes(payload[:4], "big") & 0x7FFF_FFFF
                if last_stream < STREAM:  # else ours was accepted and runs until the close
                    name = http2_error_name(int.from_bytes(payload[4:8], "big"))
                    raise CallError("UNAVAILABLE", f"UNAVAILABLE: {answer.peer} closed the "
                                    f"connection before taking the call (GOAWAY {name})")
            elif kind in (PUSH_PROMISE, CONTINUATION):
                raise ProtocolError(f"an unexpected frame of type {kind}")
            # PRIORITY, WINDOW_UPDATE (our request fits the initial window), unknown types,
            # frames of other streams: nothing to do.
        return answer.result()
