"""One gRPC answer as it arrives over HTTP/2 (PROTOCOL-HTTP2.md in grpc/grpc): its headers,
its one length-prefixed message, its trailers, and the status they end with, as `CallError`
when it is not OK. Blocking-free and socket-free: `wire` feeds it what the stream carries.

The message is received into memory of its own (`message_buffer`); a large one is mapped and
given back at once by `release` (issue 13, defect 2).
"""

import contextlib
import mmap
from typing import Final
from urllib.parse import unquote

from .statuses import from_http_status, status_name

SOCKET_MISSING: Final = "SOCKET_MISSING"  # reason labels next to gRPC's status code names
SOCKET_ERROR: Final = "SOCKET_ERROR"
TOO_LARGE: Final = "TOO_LARGE"
"""An answer above the receive limit (gRPC's own client says RESOURCE_EXHAUSTED, as for the
kubelet's rate limit: a reason of its own tells them apart)."""

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


class CallError(Exception):
    """A call that failed, named as gRPC names it (`code`), its message naming the peer."""

    def __init__(self, code: str, message: str) -> None:
        super().__init__(message)
        self.code = code  # gRPC status name (UNAVAILABLE, RESOURCE_EXHAUSTED, …) or ours above


class Answer:
    """One call's answer as it arrives: headers, the one length-prefixed message, trailers."""

    def __init__(self, method: str, max_bytes: int, peer: str) -> None:
        self.method = method
        self.max_bytes = max_bytes
        self.peer = peer  # who answers, as messages name it: "the kubelet", "containerd"
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
                raise CallError("INTERNAL", "INTERNAL: the answer is compressed, and no "
                                "compression was offered")
            size = int.from_bytes(self._prefix[1:5], "big")
            if size > self.max_bytes:
                name = self.method.rsplit("/", 1)[-1]
                raise CallError(TOO_LARGE, f"the {name} answer ({size:,} bytes) is larger "
                                f"than the {self.max_bytes / (1 << 20):g} MiB limit; "
                                f"{self.peer} lists more than this exporter accepts")
            self._size = size
            self.message = message_buffer(size)
            self._view = memoryview(self.message)
        end = self._filled + len(view)
        if end > self._size:
            raise CallError("INTERNAL", "INTERNAL: more than one message in a unary answer")
        self._view[self._filled:end] = view
        self._filled = end

    def result(self) -> Message:
        """The message, or the error the answer stands for."""
        ended(self.headers, self.trailers, self.peer)
        if self.message is None:
            raise CallError("INTERNAL", "INTERNAL: the answer has no message")
        if self._filled < self._size:
            raise CallError("INTERNAL", "INTERNAL: the answer ended inside its message")
        self._view.release()
        return self.message

    def release(self) -> None:
        """Give the message's memory back now (the call failed)."""
        self._view.release()
        if self.message is not None:
            release(self.message)


def ended(headers: dict[bytes, bytes], trailers: dict[bytes, bytes], peer: str) -> None:
    """Nothing when a call ended OK; else the CallError its status (in the trailers, or in the
    headers of a "trailers-only" answer) or its HTTP status stands for."""
    status = trailers.get(b"grpc-status", headers.get(b"grpc-status"))
    if status is None:  # a status given is used whatever the HTTP status (the doc's rule)
        http_status = headers.get(b":status", b"")
        code = from_http_status(http_status)
        if http_status != b"200":
            raise CallError(code, f"{code}: HTTP status {http_status.decode('latin-1')} "
                            f"from {peer}'s socket, not a gRPC answer")
        raise CallError(code, f"{code}: the answer ended without a gRPC status")
    code = status_name(int(status)) if status.isdigit() else "UNKNOWN"
    if code != "OK":
        # Percent-encoded ASCII; whatever else arrives is shown, never an error of its own.
        details = unquote(trailers.get(b"grpc-message", headers.get(
            b"grpc-message", b"")).decode("latin-1"))
        raise CallError(code, f"{code}: {details}")
