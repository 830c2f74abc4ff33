"""A gRPC server-streaming call over HTTP/2 on a unix socket, blocking, for a client's own
thread: containerd's `Events.Subscribe`, whose answer is one message per event for as long as
containerd runs. Its request is `wire`'s (`request_frames`, without a deadline); its answer is
HEADERS, then length-prefixed messages cut anywhere across DATA frames, then trailers whose
status ends the call (`answer.ended`), as PROTOCOL-HTTP2.md in grpc/grpc says. The call lasts
until the server ends it, or `close` (from any thread, before or during it) shuts the socket,
which ends it as UNAVAILABLE. One object, one call.
"""

import contextlib
import socket
import threading
from collections.abc import Callable, Iterator, Sequence
from pathlib import Path
from typing import Final

from hpack import Decoder

from .answer import CallError, ended
from .frames import (
    CONTINUATION,
    DATA,
    END_STREAM,
    GOAWAY,
    HEADERS,
    PUSH_PROMISE,
    RST_STREAM,
    FrameReader,
    ProtocolError,
    acknowledge,
    header_block,
    unpadded,
    window_updates,
)
from .statuses import from_reset, http2_error_name
from .wire import MAX_HEADER_LIST, STREAM, named_failures, request_frames

WINDOW: Final = 1 << 20  # per stream and connection; topped up once half is used


class ServerStream:
    """One server-streaming call to one unix socket."""

    def __init__(self, socket_path: Path, peer: str, max_message_bytes: int = 1 << 20) -> None:
        self.socket_path = socket_path
        self.peer = peer  # who answers, as error messages name it
        self.max_message_bytes = max_message_bytes
        self._lock = threading.Lock()
        self._socket: socket.socket | None = None
        self._closed = False

    def close(self) -> None:
        """End the call, in progress or still to come (from any thread)."""
        with self._lock:
            self._closed = True
            sock = self._socket
        if sock is not None:
            with contextlib.suppress(OSError):
                sock.shutdown(socket.SHUT_RDWR)

    def messages(self, method: str, request: bytes,
                 metadata: Sequence[tuple[bytes, bytes]] = (),
                 opened: Callable[[], object] | None = None,
                 connect_timeout: float = 2.0) -> Iterator[bytes]:
        """Each message as it comes; CallError when the call fails or ends other than OK.
        `opened`: called once the server has answered the call's headers (it is subscribed)."""
        sock = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        with self._lock:
            closed, self._socket = self._closed, sock
        try:
            if closed:
                raise CallError("UNAVAILABLE", f"UNAVAILABLE: {method} closed before it began")
            with named_failures(self.peer, self.socket_path, method):
                sock.settimeout(connect_timeout)
                sock.connect(str(self.socket_path))
                sock.settimeout(None)
                sock.sendall(request_frames(method, request, metadata, WINDOW, None))
                yield from self._receive(sock, opened)
        finally:
            with self._lock:
                self._socket = None
            sock.close()

    def _receive(self, sock: socket.socket,
                 opened: Callable[[], object] | None) -> Iterator[bytes]:
        reader = FrameReader(sock, None)
        decoder = Decoder(MAX_HEADER_LIST)
        headers: dict[bytes, bytes] | None = None
        pending = bytearray()  # the stream's DATA not yet a whole message
        unacknowledged = 0  # DATA bytes of every stream since the last WINDOW_UPDATE
        while True:
            kind, flags, stream, payload = reader.next()
            if kind == DATA:
                if stream == 0:
                    raise ProtocolError("DATA on stream 0")
                unacknowledged += len(payload)
                if stream == STREAM:
                    pending += unpadded(payload, flags)
                    yield from self._whole(pending)
                    if flags & END_STREAM:  # no trailers: the status is missing
                        self._end(pending, headers or {}, {})
                        return
                if unacknowledged >= WINDOW // 2:
                    sock.sendall(window_updates(unacknowledged, STREAM))
                    unacknowledged = 0
            elif kind == HEADERS:
                end = bool(flags & END_STREAM)
                fields = dict(decoder.decode(header_block(reader, flags, payload), raw=True))
                if stream != STREAM or fields.get(b":status", b"").startswith(b"1"):
                    continue  # another stream's, or informational (1xx)
                if headers is None and not end:
                    headers = fields
                    if opened is not None:
                        opened()
                elif end:  # the trailers, or a trailers-only answer: the call is over
                    self._end(pending, headers if headers is not None else fields, fields)
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
            elif kind in (PUSH_PROMISE, CONTINUATION):
                raise ProtocolError(f"an unexpected frame of type {kind}")
            # PRIORITY, WINDOW_UPDATE, unknown types, frames of other streams: nothing to do.

    def _end(self, pending: bytearray, headers: dict[bytes, bytes],
             trailers: dict[bytes, bytes]) -> None:
        ended(headers, trailers, self.peer)
        if pending:
            raise CallError("INTERNAL", "INTERNAL: the stream ended inside a message")

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
