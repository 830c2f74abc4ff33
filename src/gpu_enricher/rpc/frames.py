"""HTTP/2 framing for a client of one stream (RFC 9113), blocking, for a gRPC client's
thread: the bytes a client sends first, frames built and read. What the frames mean for a
gRPC call is `wire`'s business.

Read in large chunks: a frame of a 50 MB answer is split with a few integer operations (h2,
which did this before, spent ~40 µs on each 16 KiB frame, 0.15 s of the thread's CPU per
50 MB; issue 13, defect 2). The GIL is given away between chunks (`gil_pacer`).
"""

import socket
import time
from typing import Final

from .gil import gil_pacer

RECEIVE_CHUNK: Final = 256 << 10
MAX_FRAME: Final = 16_384
"""HTTP/2's default largest frame, which we keep (grpc-go writes no larger DATA frames)."""
PREFACE: Final = b"PRI * HTTP/2.0\r\n\r\nSM\r\n\r\n"

# Frame types and flags (RFC 9113, section 6).
DATA, HEADERS, RST_STREAM, SETTINGS, PUSH_PROMISE, PING, GOAWAY, WINDOW_UPDATE, \
    CONTINUATION = 0x0, 0x1, 0x3, 0x4, 0x5, 0x6, 0x7, 0x8, 0x9
END_STREAM, ACK, END_HEADERS, PADDED, PRIORITY = 0x1, 0x1, 0x4, 0x8, 0x20
ENABLE_PUSH, INITIAL_WINDOW_SIZE, MAX_HEADER_LIST_SIZE = 0x2, 0x4, 0x6


class ProtocolError(Exception):
    """The peer broke HTTP/2's framing rules."""


class ConnectionClosed(Exception):
    """The peer closed the connection before the frame being read was whole."""


def frame(kind: int, flags: int, stream: int, payload: bytes) -> bytes:
    return len(payload).to_bytes(3, "big") + bytes((kind, flags)) + \
        stream.to_bytes(4, "big") + payload


def client_start(settings: dict[int, int], connection_window: int) -> bytes:
    """What a client sends before its first request: the preface, its SETTINGS, and a
    WINDOW_UPDATE that opens the connection's window from 64 KiB to `connection_window`."""
    return PREFACE + frame(SETTINGS, 0, 0, b"".join(
        key.to_bytes(2, "big") + value.to_bytes(4, "big") for key, value in settings.items())) \
        + frame(WINDOW_UPDATE, 0, 0, (connection_window - 65_535).to_bytes(4, "big"))


def unpadded(payload: memoryview, flags: int) -> memoryview:
    """A DATA or HEADERS payload without its padding (RFC 9113, section 6.1)."""
    if not flags & PADDED:
        return payload
    if not payload or payload[0] >= len(payload):
        raise ProtocolError("padding longer than its frame")
    return payload[1:len(payload) - payload[0]]


class FrameReader:
    """Frames from the socket, read `RECEIVE_CHUNK` at a time until `deadline` (monotonic):
    past it, TimeoutError however fast the frames come. None: no deadline (a stream that lasts
    as long as its server, ended by closing the socket)."""

    def __init__(self, sock: socket.socket, deadline: float | None) -> None:
        self._sock = sock
        self._deadline = deadline
        self._buffer = bytearray(RECEIVE_CHUNK)
        self._view = memoryview(self._buffer)
        self._start = self._end = 0
        self._maybe_pause = gil_pacer()

    def next(self) -> tuple[int, int, int, memoryview]:
        """(type, flags, stream, payload); the payload is valid until the next call."""
        self._fill(9)
        head = self._buffer[self._start:self._start + 9]
        size = int.from_bytes(head[:3], "big")
        if size > MAX_FRAME:
            raise ProtocolError(f"a frame of {size:,} bytes, above the {MAX_FRAME:,} allowed")
        self._fill(9 + size)
        payload = self._view[self._start + 9:self._start + 9 + size]
        self._start += 9 + size
        return head[3], head[4], int.from_bytes(head[5:9], "big") & 0x7FFF_FFFF, payload

    def _fill(self, need: int) -> None:
        """At least `need` bytes from `_start` in the buffer."""
        if self._end - self._start >= need:
            return
        # Move what is left to the front (less than one frame), then receive after it.
        left = self._end - self._start
        self._buffer[:left] = self._buffer[self._start:self._end]
        self._start, self._end = 0, left
        while self._end < need:
            # The deadline is the whole call's: an answer that never pauses would pass a
            # per-read timeout forever (issue 24: 50 MB ran 0.6-1.4 s on a 0.5 s deadline).
            if self._deadline is not None:
                remaining = self._deadline - time.monotonic()
                if remaining <= 0:
                    raise TimeoutError("the call's deadline passed")
                self._sock.settimeout(remaining)
            received = self._sock.recv_into(self._view[self._end:])
            if not received:
                raise ConnectionClosed("the peer closed the connection")
            self._end += received
            self._maybe_pause()


def acknowledge(sock: socket.socket, kind: int, flags: int, payload: memoryview) -> bool:
    """Answer what the connection asks of a client, whatever the stream: a SETTINGS frame is
    acknowledged, a PING echoed (RFC 9113, sections 6.5 and 6.7). Whether `kind` was one."""
    if kind == SETTINGS and not flags & ACK:
        if len(payload) % 6:
            raise ProtocolError("a SETTINGS frame of a length not a multiple of 6")
        sock.sendall(frame(SETTINGS, ACK, 0, b""))
        return True
    if kind == PING and not flags & ACK:
        sock.sendall(frame(PING, ACK, 0, bytes(payload)))
        return True
    return False


def header_block(reader: FrameReader, flags: int, payload: memoryview) -> bytes:
    """A HEADERS frame's whole header block: without its padding and priority, joined with the
    CONTINUATION frames that must follow it, nothing between (RFC 9113, section 6.10)."""
    block = bytes(unpadded(payload, flags)[5 if flags & PRIORITY else 0:])
    while not flags & END_HEADERS:
        kind, flags, _, fragment = reader.next()
        if kind != CONTINUATION:
            raise ProtocolError("a header block cut by another frame")
        block += fragment
    return block


def window_updates(increment: int, stream: int) -> bytes:
    """WINDOW_UPDATE frames giving `increment` bytes back to the connection and to `stream`,
    once a receiver has taken them (RFC 9113, section 6.9)."""
    size = increment.to_bytes(4, "big")
    return frame(WINDOW_UPDATE, 0, 0, size) + frame(WINDOW_UPDATE, 0, stream, size)
