"""gRPC unary calls over HTTP/2 on a unix socket, blocking, for the kubelet client's thread.

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

One connection per call: nothing idle to go stale (a restarted kubelet is found at once, no
GOAWAY or keepalive to handle), at the cost of one local connect per `List`.
"""

import contextlib
import mmap
import socket
import threading
import time
from pathlib import Path
from typing import Final
from urllib.parse import unquote

from hpack import Decoder, Encoder, HPACKError

from .frames import (
    ACK,
    CONTINUATION,
    DATA,
    ENABLE_PUSH,
    END_HEADERS,
    END_STREAM,
    GOAWAY,
    HEADERS,
    INITIAL_WINDOW_SIZE,
    MAX_HEADER_LIST_SIZE,
    PING,
    PRIORITY,
    PUSH_PROMISE,
    RST_STREAM,
    SETTINGS,
    WINDOW_UPDATE,
    ConnectionClosed,
    FrameReader,
    ProtocolError,
    client_start,
    frame,
    unpadded,
)
from .statuses import CANCEL, from_http_status, from_reset, http2_error_name, status_name

SOCKET_MISSING: Final = "SOCKET_MISSING"  # reason labels next to gRPC's status code names
SOCKET_ERROR: Final = "SOCKET_ERROR"
TOO_LARGE: Final = "TOO_LARGE"
"""An answer above the receive limit (gRPC's own client says RESOURCE_EXHAUSTED, as for the
kubelet's rate limit: a reason of its own tells them apart)."""

WINDOW: Final = 16 << 20
"""Flow-control window, per stream and for the connection: a large answer streams without
waiting for a WINDOW_UPDATE every 64 KiB (HTTP/2's default); both are topped up once half is
used."""
MAX_HEADER_LIST: Final = 64 << 10
STREAM: Final = 1  # the one stream of a connection

Message = bytearray | mmap.mmap
"""An answer's message: a large one in memory mapped for it alone (`message_buffer`)."""
MAPPED_FROM: Final = 1 << 20


def message_buffer(size: int) -> Message:
    """Room for a message of `size` bytes. From 1 MiB up, pages mapped for it alone and given
    back by `release` with the GIL released: a 50 MB bytearray was zeroed whole when allocated
    (25 ms with the GIL held) and unmapped whole when freed (3.5 ms, the same). Mapped pages
    are zeroed by the kernel as they are first written, a few at a time (issue 13, defect 2)."""
    return mmap.mmap(-1, size, flags=mmap.MAP_PRIVATE) if size >= MAPPED_FROM \
        else bytearray(size)


def release(message: Message) -> None:
    """Unmap a mapped message now, on this thread (mmap.close gives the GIL away meanwhile);
    a bytearray goes with its last reference. Views of it must have been released."""
    if isinstance(message, mmap.mmap):
        # A view still held (an exception's traceback) defers the unmap to the last reference.
        with contextlib.suppress(BufferError):
            message.close()


class KubeletError(Exception):
    def __init__(self, code: str, message: str) -> None:
        super().__init__(message)
        self.code = code  # gRPC status name (UNAVAILABLE, RESOURCE_EXHAUSTED, …) or ours above


class _Answer:
    """One call's answer as it arrives: headers, the one length-prefixed message, trailers."""

    def __init__(self, method: str, max_bytes: int) -> None:
        self.method = method
        self.max_bytes = max_bytes
        self.headers: dict[bytes, bytes] = {}
        self.trailers: dict[bytes, bytes] = {}
        self.ended = False
        self._headers_received = False
        self._prefix = bytearray()
        self.message: Message | None = None
        self._view = memoryview(b"")
        self._size = self._filled = 0

    def add_headers(self, fields: dict[bytes, bytes]) -> None:
        """The first header block holds the headers, a second the trailers. An informational
        (1xx) block comes before the headers and is skipped (RFC 9113, section 8.1)."""
        if self._headers_received:
            self.trailers = fields
        elif not fields.get(b":status", b"").startswith(b"1"):
            self.headers, self._headers_received = fields, True

    def status(self) -> bytes | None:
        """The `grpc-status` received, if any: in the trailers, or in the headers of a
        "trailers-only" answer (an error before any message)."""
        return self.trailers.get(b"grpc-status", self.headers.get(b"grpc-status"))

    def take(self, data: bytes | memoryview) -> None:
        view = memoryview(data)
        if self.message is None:
            need = 5 - len(self._prefix)
            self._prefix += view[:need]
            view = view[need:]
            if len(self._prefix) < 5:
                return
            if self._prefix[0] != 0:
                raise KubeletError("INTERNAL", "INTERNAL: the answer is compressed, and no "
                                   "compression was offered")
            size = int.from_bytes(self._prefix[1:5], "big")
            if size > self.max_bytes:
                name = self.method.rsplit("/", 1)[-1]
                raise KubeletError(TOO_LARGE, f"the {name} answer ({size:,} bytes) is larger "
                                   f"than the {self.max_bytes / (1 << 20):g} MiB limit; the "
                                   "kubelet lists more pods and devices than this exporter "
                                   "accepts")
            self._size = size
            self.message = message_buffer(size)
            self._view = memoryview(self.message)
        end = self._filled + len(view)
        if end > self._size:
            raise KubeletError("INTERNAL", "INTERNAL: more than one message in a unary answer")
        self._view[self._filled:end] = view
        self._filled = end

    def result(self) -> Message:
        """The message, or the error the answer stands for."""
        status = self.status()
        if status is None:  # a status given is used whatever the HTTP status (the doc's rule)
            http_status = self.headers.get(b":status", b"")
            code = from_http_status(http_status)
            if http_status != b"200":
                raise KubeletError(code, f"{code}: HTTP status {http_status.decode('latin-1')} "
                                   "from the kubelet's socket, not a gRPC answer")
            raise KubeletError(code, f"{code}: the answer ended without a gRPC status")
        code = status_name(int(status)) if status.isdigit() else "UNKNOWN"
        if code != "OK":
            # Percent-encoded ASCII; whatever else arrives is shown, never an error of its own.
            details = unquote(self.trailers.get(b"grpc-message", self.headers.get(
                b"grpc-message", b"")).decode("latin-1"))
            raise KubeletError(code, f"{code}: {details}")
        if self.message is None:
            raise KubeletError("INTERNAL", "INTERNAL: the answer has no message")
        if self._filled < self._size:
            raise KubeletError("INTERNAL", "INTERNAL: the answer ended inside its message")
        self._view.release()
        return self.message

    def release(self) -> None:
        """Give the message's memory back now (the call failed)."""
        self._view.release()
        if self.message is not None:
            release(self.message)


def _ceil_ms(seconds: float) -> int:
    """`seconds` in whole milliseconds, rounded up: the kubelet's deadline is never before ours,
    so at ours we cancel, rather than racing its reset."""
    return -(-round(seconds * 1_000_000) // 1000)


class UnaryChannel:
    """Unary calls to one unix socket, one at a time, on the calling thread. `close` (from any
    thread) ends a call in progress at once, as UNAVAILABLE."""

    def __init__(self, socket_path: Path, max_receive_bytes: int) -> None:
        self.socket_path = socket_path
        self.max_receive_bytes = max_receive_bytes
        self._lock = threading.Lock()
        self._socket: socket.socket | None = None

    def close(self) -> None:
        with self._lock:
            sock = self._socket
        if sock is not None:
            with contextlib.suppress(OSError):  # not connected yet, or already closed
                sock.shutdown(socket.SHUT_RDWR)  # wakes the thread blocked in recv

    def call(self, method: str, request: bytes, timeout_seconds: float) -> Message:
        """The answer's message bytes; KubeletError for any failure."""
        deadline = time.monotonic() + timeout_seconds
        sock = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        with self._lock:
            self._socket = sock
        try:
            return self._exchange(sock, method, request, deadline, timeout_seconds)
        except TimeoutError:
            raise KubeletError("DEADLINE_EXCEEDED", f"DEADLINE_EXCEEDED: {method} not answered "
                               f"whole within {timeout_seconds:g}s") from None
        except ConnectionClosed:
            raise KubeletError("UNAVAILABLE", f"UNAVAILABLE: the kubelet closed the connection "
                               f"before answering {method}") from None
        except (ProtocolError, HPACKError) as exc:
            raise KubeletError("UNAVAILABLE", "UNAVAILABLE: the kubelet's socket does not speak "
                               f"HTTP/2 as gRPC does ({exc})") from None
        except OSError as exc:
            raise KubeletError("UNAVAILABLE", f"UNAVAILABLE: {self.socket_path}: "
                               f"{exc.strerror or exc}") from None
        finally:
            with self._lock:
                self._socket = None
            sock.close()

    def _exchange(self, sock: socket.socket, method: str, request: bytes, deadline: float,
                  timeout_seconds: float) -> Message:
        sock.settimeout(timeout_seconds)
        sock.connect(str(self.socket_path))
        sock.settimeout(max(deadline - time.monotonic(), 0.001))
        headers = Encoder().encode([
            (b":method", b"POST"), (b":scheme", b"http"), (b":path", method.encode()),
            (b":authority", b"localhost"), (b"te", b"trailers"),
            (b"content-type", b"application/grpc"), (b"user-agent", b"gpu-enricher"),
            # The kubelet may give up too once the answer is of no use (ms, up to 8 digits).
            (b"grpc-timeout", f"{min(_ceil_ms(timeout_seconds), 99_999_999)}m".encode()),
        ])
        sock.sendall(b"".join((
            client_start({ENABLE_PUSH: 0, INITIAL_WINDOW_SIZE: WINDOW,
                          MAX_HEADER_LIST_SIZE: MAX_HEADER_LIST}, WINDOW),
            frame(HEADERS, END_HEADERS, STREAM, headers),
            frame(DATA, END_STREAM, STREAM,
                  b"\x00" + len(request).to_bytes(4, "big") + request),
        )))
        answer = _Answer(method, self.max_receive_bytes)
        try:
            return self._receive(sock, answer, deadline)
        except TimeoutError:
            # Our deadline: cancel as a client does, so the kubelet stops sending at once
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
    def _receive(sock: socket.socket, answer: _Answer, deadline: float) -> Message:
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
                    increment = unacknowledged.to_bytes(4, "big")
                    sock.sendall(frame(WINDOW_UPDATE, 0, 0, increment) +
                                 frame(WINDOW_UPDATE, 0, STREAM, increment))
                    unacknowledged = 0
            elif kind == HEADERS:
                block = bytes(unpadded(payload, flags)[5 if flags & PRIORITY else 0:])
                ended = bool(flags & END_STREAM)
                while not flags & END_HEADERS:  # the rest of the block, in CONTINUATIONs
                    kind, flags, _, fragment = reader.next()
                    if kind != CONTINUATION:
                        raise ProtocolError("a header block cut by another frame")
                    block += fragment
                fields = dict(decoder.decode(block, raw=True))
                if stream == STREAM:
                    answer.add_headers(fields)
                    answer.ended = ended
            elif kind == SETTINGS and not flags & ACK:
                if len(payload) % 6:
                    raise ProtocolError("a SETTINGS frame of a length not a multiple of 6")
                sock.sendall(frame(SETTINGS, ACK, 0, b""))
            elif kind == PING and not flags & ACK:
                sock.sendall(frame(PING, ACK, 0, bytes(payload)))
            elif kind == RST_STREAM and stream == STREAM:
                error = int.from_bytes(payload[:4], "big")
                if error == 0 and answer.status() is not None:
                    break  # NO_ERROR after a status: the call ended with that status
                code = from_reset(error, time.monotonic() >= deadline)
                raise KubeletError(code, f"{code}: the kubelet reset the call "
                                   f"(RST_STREAM {http2_error_name(error)})")
            elif kind == GOAWAY:
                last_stream = int.from_bytes(payload[:4], "big") & 0x7FFF_FFFF
                if last_stream < STREAM:  # else ours was accepted and runs until the close
                    name = http2_error_name(int.from_bytes(payload[4:8], "big"))
                    raise KubeletError("UNAVAILABLE", "UNAVAILABLE: the kubelet closed the "
                                       f"connection before taking the call (GOAWAY {name})")
            elif kind in (PUSH_PROMISE, CONTINUATION):
                raise ProtocolError(f"an unexpected frame of type {kind}")
            # PRIORITY, WINDOW_UPDATE (our request fits the initial window), unknown types,
            # frames of other streams: nothing to do.
        return answer.result()


