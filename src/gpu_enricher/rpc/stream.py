"""A gRPC server-streaming call over HTTP/2 on a unix socket, blocking, for a client's own
thread: containerd's `Events.Subscribe`, whose answer is one message per event for as long as
containerd runs. The same rules as `wire`'s unary calls (PROTOCOL-HTTP2.md in grpc/grpc): the
request is one HEADERS and one DATA frame that half-closes the stream; the answer is HEADERS,
then length-prefixed messages cut anywhere across DATA frames, then trailers with the status.
No deadline: the call lasts until the server ends it or `close` (from any thread) shuts the
socket, which ends it as UNAVAILABLE.
"""

import contextlib
import socket
import threading
from collections.abc import Iterator, Sequence
from pathlib import Path
from typing import Final

from hpack import Decoder, Encoder, HPACKError

from .answer import CallError, ended
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
    PRIORITY,
    RST_STREAM,
    WINDOW_UPDATE,
    ConnectionClosed,
    FrameReader,
    ProtocolError,
    acknowledge,
    client_start,
    frame,
    unpadded,
)
from .statuses import from_reset, http2_error_name

WINDOW: Final = 1 << 20  # per stream and connection; topped up once half is used
MAX_HEADER_LIST: Final = 64 << 10
STREAM: Final = 1


class ServerStream:
    """One server-streaming call at a time to one unix socket."""

    def __init__(self, socket_path: Path, peer: str, max_message_bytes: int = 1 << 20) -> None:
        self.socket_path = socket_path
        self.peer = peer  # who answers, as error messages name it
        self.max_message_bytes = max_message_bytes
        self._lock = threading.Lock()
        self._socket: socket.socket | None = None

    def close(self) -> None:
        """End the call in progress (from any thread)."""
        with self._lock:
            sock = self._socket
        if sock is not None:
            with contextlib.suppress(OSError):
                sock.shutdown(socket.SHUT_RDWR)

    def messages(self, method: str, request: bytes,
                 metadata: Sequence[tuple[bytes, bytes]] = (),
                 connect_timeout: float = 2.0) -> Iterator[bytes]:
        """Each message as it comes; CallError when the call fails or ends other than OK."""
        sock = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        with self._lock:
            self._socket = sock
        try:
            sock.settimeout(connect_timeout)
            sock.connect(str(self.socket_path))
            sock.settimeout(None)
            headers = Encoder().encode([
                (b":method", b"POST"), (b":scheme", b"http"), (b":path", method.encode()),
                (b":authority", b"localhost"), (b"te", b"trailers"),
                (b"content-type", b"application/grpc"), (b"user-agent", b"gpu-enricher"),
                *metadata,
            ])
            sock.sendall(b"".join((
                client_start({ENABLE_PUSH: 0, INITIAL_WINDOW_SIZE: WINDOW,
                              MAX_HEADER_LIST_SIZE: MAX_HEADER_LIST}, WINDOW),
                frame(HEADERS, END_HEADERS, STREAM, headers),
                frame(DATA, END_STREAM, STREAM,
                      b"\x00" + len(request).to_bytes(4, "big") + request),
            )))
            yield from self._receive(sock)
        except ConnectionClosed:
            raise CallError("UNAVAILABLE", f"UNAVAILABLE: {self.peer} closed the stream "
                            f"{method}") from None
        except (ProtocolError, HPACKError) as exc:
            raise CallError("UNAVAILABLE", f"UNAVAILABLE: {self.peer}'s socket does not speak "
                            f"HTTP/2 as gRPC does ({exc})") from None
        except OSError as exc:
            raise CallError("UNAVAILABLE", f"UNAVAILABLE: {self.socket_path}: "
                            f"{exc.strerror or exc}") from None
        finally:
            with self._lock:
                self._socket = None
            sock.close()

    def _receive(self, sock: socket.socket) -> Iterator[bytes]:
        reader = FrameReader(sock, None)
        decoder = Decoder(MAX_HEADER_LIST)
        blocks: list[dict[bytes, bytes]] = []  # the headers, then the trailers
        pending = bytearray()  # the stream's DATA not yet a whole message
        unacknowledged = 0
        while True:
            kind, flags, stream, payload = reader.next()
            if kind == DATA and stream == STREAM:
                pending += unpadded(payload, flags)
                yield from self._whole(pending)
                unacknowledged += len(payload)
                if unacknowledged >= WINDOW // 2:
                    increment = unacknowledged.to_bytes(4, "big")
                    sock.sendall(frame(WINDOW_UPDATE, 0, 0, increment) +
                                 frame(WINDOW_UPDATE, 0, STREAM, increment))
                    unacknowledged = 0
                if flags & END_STREAM:
                    ended(blocks[0] if blocks else {}, {}, self.peer)
                    return
            elif kind == HEADERS:
                block = bytes(unpadded(payload, flags)[5 if flags & PRIORITY else 0:])
                end = bool(flags & END_STREAM)
                while not flags & END_HEADERS:
                    kind, flags, _, fragment = reader.next()
                    if kind != CONTINUATION:
                        raise ProtocolError("a header block cut by another frame")
                    block += fragment
                fields = dict(decoder.decode(block, raw=True))
                if stream != STREAM or fields.get(b":status", b"").startswith(b"1"):
                    continue
                blocks.append(fields)
                if end:  # the trailers (or a trailers-only answer): the call is over
                    ended(blocks[0], blocks[-1] if len(blocks) > 1 else {}, self.peer)
                    return
            elif acknowledge(sock, kind, flags, payload):
                pass
            elif kind == RST_STREAM and stream == STREAM:
                error = int.from_bytes(payload[:4], "big")
                code = from_reset(error, False)
                raise CallError(code, f"{code}: {self.peer} reset the stream "
                                f"(RST_STREAM {http2_error_name(error)})")
            elif kind == GOAWAY and int.from_bytes(payload[:4], "big") & 0x7FFF_FFFF < STREAM:
                raise CallError("UNAVAILABLE", f"UNAVAILABLE: {self.peer} closed the "
                                "connection before taking the call")

    def _whole(self, pending: bytearray) -> Iterator[bytes]:
        """The whole messages at the front of `pending`, taken off it."""
        while len(pending) >= 5:
            if pending[0] != 0:
                raise CallError("INTERNAL", "INTERNAL: a compressed message, and no "
                                "compression was offered")
            size = int.from_bytes(pending[1:5], "big")
            if size > self.max_message_bytes:
                raise CallError("RESOURCE_EXHAUSTED", f"RESOURCE_EXHAUSTED: a message of "
                                f"{size:,} bytes from {self.peer}, above "
                                f"{self.max_message_bytes:,}")
            if len(pending) < 5 + size:
                return
            message = bytes(pending[5:5 + size])
            del pending[:5 + size]
            yield message
