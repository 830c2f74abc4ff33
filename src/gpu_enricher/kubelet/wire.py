"""gRPC unary calls over HTTP/2 on a unix socket, blocking, for the kubelet client's thread.

Why not grpcio's client (issue 13): its C core starts an EventEngine pool of clamp(CPUs, 4, 16)
threads plus two more on the first channel (22 threads on a 192-CPU node, sized by `sysconf`,
which no option, variable, affinity or cgroup limit changes), adds ~21 MiB of RSS on import,
and copies a received message while holding the GIL (~0.55 ms per MB: 27 ms for a 50 MB
`List`). The pod-resources API needs two unary calls on a local socket: a request is one
HEADERS and one DATA frame, an answer HEADERS, DATA and trailers. `h2` (pure Python) keeps
the HTTP/2 state, frames and HPACK; this module keeps the gRPC rules (PROTOCOL-HTTP2.md in
grpc/grpc): the 5-byte message prefix, `grpc-timeout`, `grpc-status` / `grpc-message`, and
the HTTP status mapping for answers that are not gRPC.

One connection per call: nothing idle to go stale (a restarted kubelet is found at once, no
GOAWAY or keepalive to handle), at the cost of one local connect per `List`. The thread gives
the GIL away between received chunks (`gil_pacer`), so the event loop waits for it only briefly.
"""

import contextlib
import socket
import threading
import time
from pathlib import Path
from typing import Final
from urllib.parse import unquote

from h2.config import H2Configuration
from h2.connection import H2Connection
from h2.events import (
    ConnectionTerminated,
    DataReceived,
    Event,
    ResponseReceived,
    StreamEnded,
    StreamReset,
    TrailersReceived,
)
from h2.exceptions import H2Error
from h2.settings import SettingCodes

from ..worker import gil_pacer

SOCKET_MISSING: Final = "SOCKET_MISSING"  # reason labels next to gRPC's status code names
SOCKET_ERROR: Final = "SOCKET_ERROR"
TOO_LARGE: Final = "TOO_LARGE"
"""An answer above the receive limit (gRPC's own client says RESOURCE_EXHAUSTED, as for the
kubelet's rate limit: a reason of its own tells them apart)."""

STATUS_NAMES: Final = (
    "OK", "CANCELLED", "UNKNOWN", "INVALID_ARGUMENT", "DEADLINE_EXCEEDED", "NOT_FOUND",
    "ALREADY_EXISTS", "PERMISSION_DENIED", "RESOURCE_EXHAUSTED", "FAILED_PRECONDITION",
    "ABORTED", "OUT_OF_RANGE", "UNIMPLEMENTED", "INTERNAL", "UNAVAILABLE", "DATA_LOSS",
    "UNAUTHENTICATED")
"""gRPC status codes by number (grpc/grpc doc/statuscodes.md)."""
_HTTP_STATUS_CODES: Final = {400: "INTERNAL", 401: "UNAUTHENTICATED", 403: "PERMISSION_DENIED",
                             404: "UNIMPLEMENTED", 429: "UNAVAILABLE", 502: "UNAVAILABLE",
                             503: "UNAVAILABLE", 504: "UNAVAILABLE"}
"""An HTTP status other than 200, as gRPC maps it (doc/http-grpc-status-mapping.md); UNKNOWN
for the rest."""

RECEIVE_CHUNK: Final = 256 << 10
WINDOW: Final = 16 << 20
"""Flow-control window, per stream and for the connection: a large answer streams without
waiting for a WINDOW_UPDATE every 64 KiB (HTTP/2's default). Frames stay at HTTP/2's
16 KiB: a larger size would apply only once the server acknowledged it, and h2 checks a frame
read in the same chunk as that acknowledgement against the old size."""
MAX_HEADER_LIST: Final = 64 << 10


class KubeletError(Exception):
    def __init__(self, code: str, message: str) -> None:
        super().__init__(message)
        self.code = code  # gRPC status name (UNAVAILABLE, RESOURCE_EXHAUSTED, …) or ours above


def status_name(number: int) -> str:
    return STATUS_NAMES[number] if 0 <= number < len(STATUS_NAMES) else "UNKNOWN"


class _Answer:
    """One call's answer as it arrives: headers, the one length-prefixed message, trailers."""

    def __init__(self, method: str, max_bytes: int) -> None:
        self.method = method
        self.max_bytes = max_bytes
        self.headers: dict[bytes, bytes] = {}
        self.trailers: dict[bytes, bytes] = {}
        self.ended = False
        self._prefix = bytearray()
        self.message: bytearray | None = None
        self._size = 0

    def take(self, data: bytes) -> None:
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
            # Grown as frames arrive, not allocated whole: bytearray(size) zeroes every page at
            # once with the GIL held (25 ms for 50 MB), and glibc grows a large block by
            # remapping its pages, not copying them.
            self.message = bytearray()
        if len(self.message) + len(view) > self._size:
            raise KubeletError("INTERNAL", "INTERNAL: more than one message in a unary answer")
        self.message += view

    def result(self) -> bytearray:
        """The message, or the error the answer stands for."""
        http_status = self.headers.get(b":status", b"")
        # A "trailers-only" answer (an error before any message) has its status in the headers.
        status = self.trailers.get(b"grpc-status", self.headers.get(b"grpc-status"))
        if status is None:
            if http_status != b"200":
                code = _HTTP_STATUS_CODES.get(int(http_status or 0), "UNKNOWN")
                raise KubeletError(code, f"{code}: HTTP status {http_status.decode()} from the "
                                   "kubelet's socket, not a gRPC answer")
            raise KubeletError("INTERNAL", "INTERNAL: the answer ended without a gRPC status")
        code = status_name(int(status)) if status.isdigit() else "UNKNOWN"
        if code != "OK":
            details = unquote(self.trailers.get(b"grpc-message",
                                                self.headers.get(b"grpc-message", b"")).decode())
            raise KubeletError(code, f"{code}: {details}")
        if self.message is None:
            raise KubeletError("INTERNAL", "INTERNAL: the answer has no message")
        if len(self.message) < self._size:
            raise KubeletError("INTERNAL", "INTERNAL: the answer ended inside its message")
        return self.message


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

    def call(self, method: str, request: bytes, timeout_seconds: float) -> bytearray:
        """The answer's message bytes; KubeletError for any failure."""
        deadline = time.monotonic() + timeout_seconds
        sock = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        with self._lock:
            self._socket = sock
        try:
            return self._exchange(sock, method, request, deadline, timeout_seconds)
        except TimeoutError:
            raise KubeletError("DEADLINE_EXCEEDED", f"DEADLINE_EXCEEDED: no answer to {method} "
                               f"within {timeout_seconds:g}s") from None
        except H2Error as exc:
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
                  timeout_seconds: float) -> bytearray:
        sock.settimeout(timeout_seconds)
        sock.connect(str(self.socket_path))
        connection = H2Connection(H2Configuration(client_side=True, header_encoding=None))
        connection.initiate_connection()
        connection.update_settings({SettingCodes.ENABLE_PUSH: 0,
                                    SettingCodes.INITIAL_WINDOW_SIZE: WINDOW,
                                    SettingCodes.MAX_HEADER_LIST_SIZE: MAX_HEADER_LIST})
        connection.increment_flow_control_window(WINDOW - 65_535)
        stream = connection.get_next_available_stream_id()
        connection.send_headers(stream, [
            (b":method", b"POST"), (b":scheme", b"http"), (b":path", method.encode()),
            (b":authority", b"localhost"), (b"te", b"trailers"),
            (b"content-type", b"application/grpc"), (b"user-agent", b"gpu-enricher"),
            # The kubelet may give up too once the answer is of no use (ms, up to 8 digits).
            (b"grpc-timeout", f"{min(int(timeout_seconds * 1000), 99_999_999)}m".encode()),
        ])
        connection.send_data(stream, b"\x00" + len(request).to_bytes(4, "big") + request,
                             end_stream=True)
        sock.sendall(connection.data_to_send())
        answer = _Answer(method, self.max_receive_bytes)
        maybe_pause = gil_pacer()
        while not answer.ended:
            sock.settimeout(max(deadline - time.monotonic(), 0.001))
            chunk = sock.recv(RECEIVE_CHUNK)
            if not chunk:
                raise KubeletError("UNAVAILABLE", f"UNAVAILABLE: the kubelet closed the "
                                   f"connection before answering {method}")
            for event in connection.receive_data(chunk):
                self._on(event, stream, answer, connection)
            if pending := connection.data_to_send():  # SETTINGS and PING acks, WINDOW_UPDATEs
                sock.sendall(pending)
            maybe_pause()
        return answer.result()

    @staticmethod
    def _on(event: Event, stream: int, answer: _Answer, connection: H2Connection) -> None:
        if isinstance(event, ResponseReceived) and event.stream_id == stream:
            answer.headers = dict(event.headers or ())
        elif isinstance(event, DataReceived) and event.stream_id == stream:
            answer.take(event.data or b"")
            connection.acknowledge_received_data(event.flow_controlled_length or 0, stream)
        elif isinstance(event, TrailersReceived) and event.stream_id == stream:
            answer.trailers = dict(event.headers or ())
        elif isinstance(event, StreamEnded) and event.stream_id == stream:
            answer.ended = True
        elif isinstance(event, StreamReset) and event.stream_id == stream:
            # REFUSED_STREAM (7): not processed, safe to retry; anything else broke the call.
            code = "UNAVAILABLE" if event.error_code == 7 else "INTERNAL"
            raise KubeletError(code, f"{code}: the kubelet reset the call (HTTP/2 error "
                               f"{event.error_code})")
        elif isinstance(event, ConnectionTerminated) and (
                event.last_stream_id is None or event.last_stream_id < stream
                or event.error_code):
            raise KubeletError("UNAVAILABLE", "UNAVAILABLE: the kubelet closed the connection "
                               f"(GOAWAY, HTTP/2 error {event.error_code})")
