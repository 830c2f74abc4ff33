"""What a client may hold without sending requests (issue 13, defect 10: slowloris).

aiohttp bounds a connection idle between requests (its keep-alive timeout) but not one that
sends a request head slowly or not at all, and neither it nor asyncio limits how many
connections are open. Here every accepted connection passes through `_Connection`, a plain
asyncio protocol in front of aiohttp's own, which only sees the bytes go by:

- the request head: a connection must deliver a complete head (through its blank line) within
  the header timeout of connecting and of the first byte of each later request, else it is
  aborted and counted (`phase="header"`);
- TLS: the loop's handshake gets the same time, or less where the read or write timeout is
  shorter (`ssl_handshake_timeout`, Go's tlsHandshakeTimeout), then the head its own. Neither
  asyncio nor uvloop tells the application of a handshake that failed or timed out, so those
  are not counted, and a TLS connection counts against the limit from its
  handshake's end. (Running the handshake here, `loop.start_tls` from `connection_made`, would
  count them, but uvloop resumes reading as `connection_made` returns: the client's hello would
  reach this protocol before `start_tls` could take over.)
- the limit: past `max_connections` open connections a new one is aborted at once and counted.
  The newest is refused rather than the oldest idle one closed: whether a connection is idle
  (its response fully written) is known only inside aiohttp, and eviction would let anyone who
  opens connections fast tear down Prometheus's keep-alive connection. A client refused gets an
  immediate close it can retry, where an unaccepted one would wait in the listen backlog. Every
  slot is freed by one of the timeouts unless its client keeps sending whole requests.

A body announced by Content-Length is skipped unread (aiohttp's lingering time bounds it);
a chunked body reads as lines ending in a blank one, so it gets the header timeout too.

dcgm-exporter's --web-read-timeout and --web-write-timeout are Go net/http's ReadTimeout and
WriteTimeout, kept here as Go keeps them:

- read: the whole request, head and Content-Length body, is due within the read timeout of
  the moment the header timeout starts counting (connecting, or a later request's first byte:
  Go starts both deadlines together in readRequest); aborted and counted (`phase="read"`).
- write: from the end of a request's head, the response must have left the process within the
  write timeout. Go's deadline makes a write that is still blocked at that moment fail and the
  connection close; here, at the deadline, a connection whose transport still holds unsent
  bytes (its client is not reading them) is aborted and counted (`phase="write"`), and one
  that has sent everything is left alone, as Go leaves a finished response. Our handlers hand
  out bytes made before the request came, so a response that is late is always one the client
  does not read. 0 switches either off, as in Go.
"""

import asyncio
import contextlib
import logging
import resource
import socket
import ssl
from collections.abc import Callable
from dataclasses import dataclass
from typing import Final, cast

from aiohttp import web
from yarl import URL

from ..exposition.ownmetrics import HTTP, HttpCounts

log = logging.getLogger(__name__)

_LINE_KEEP: Final = 64
"""Bytes of a head line kept while it arrives: enough to read a Content-Length."""
_REFUSAL_WARNING_SECONDS: Final = 60.0
"""At most one WARNING a minute about refused connections; the rest at DEBUG."""


FILES_BESIDE_CONNECTIONS: Final = 256
"""Descriptors the rest of the process may hold besides client connections: the listening
sockets, NVML's device files, the kubelet's and the API server's connections, /proc reads."""


def make_room_for(max_connections: int) -> None:
    """Raise the soft open-file limit so that `max_connections` can be reached, as Go programs
    (node_exporter among them) do at start: a soft limit of 1024, common outside Kubernetes,
    would make the 1,000th connection fail with EMFILE, and asyncio then stops accepting for a
    second, before the connection limit could refuse it cleanly. Warns once when the hard
    limit is too low to make room."""
    wanted = max_connections + FILES_BESIDE_CONNECTIONS
    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    if soft != resource.RLIM_INFINITY and soft < wanted:
        raised = wanted if hard == resource.RLIM_INFINITY else min(wanted, hard)
        with contextlib.suppress(OSError, ValueError):
            resource.setrlimit(resource.RLIMIT_NOFILE, (raised, hard))
            soft = raised
    if soft != resource.RLIM_INFINITY and soft < wanted:
        log.warning("the open-file limit is %d (hard %d): --web-max-connections %d needs %d; "
                    "past about %d connections new ones fail", soft, hard, max_connections,
                    wanted, max(soft - FILES_BESIDE_CONNECTIONS, 0))


@dataclass(frozen=True, slots=True)
class ConnectionLimits:
    header_timeout_seconds: float
    max_connections: int
    read_timeout_seconds: float = 0.0  # 0: none, as Go's ReadTimeout
    write_timeout_seconds: float = 0.0  # 0: none, as Go's WriteTimeout

    @property
    def handshake_seconds(self) -> float:
        """A TLS handshake's bound: the least timeout set, as Go's tlsHandshakeTimeout."""
        return min(t for t in (self.header_timeout_seconds, self.read_timeout_seconds,
                               self.write_timeout_seconds) if t > 0)


class ConnectionGuard:
    """The limits and the count of open connections, shared by every listening socket of one
    server: the limit is the process's, whichever address a client connects to."""

    def __init__(self, limits: ConnectionLimits, counts: HttpCounts = HTTP) -> None:
        self.limits = limits
        self.counts = counts
        self.open = 0
        self._warned_at: float | None = None

    def admit(self) -> bool:
        """Whether a new connection may stay; counted either way."""
        if self.open >= self.limits.max_connections:
            self.counts.connections_refused += 1
            now = asyncio.get_running_loop().time()
            if self._warned_at is None or now - self._warned_at >= _REFUSAL_WARNING_SECONDS:
                self._warned_at = now
                log.warning("%d connections open: refusing new ones (--web-max-connections; "
                            "counted in gpu_enricher_http_connections_refused_total)", self.open)
            else:
                log.debug("%d connections open: refused one", self.open)
            return False
        self.open += 1
        self.counts.connections += 1
        return True

    def release(self) -> None:
        self.open -= 1
        self.counts.connections -= 1


class _Connection(asyncio.Protocol):
    """One client connection: aiohttp's handler (made only once admitted) behind a watch on
    the request heads. Every event is passed on unchanged."""

    __slots__ = ("_admitted", "_guard", "_handler", "_handlers", "_length", "_line",
                 "_read_timer", "_skip", "_started", "_timer", "_transport", "_write_timer")

    def __init__(self, guard: ConnectionGuard, handlers: Callable[[], asyncio.Protocol]) -> None:
        self._guard = guard
        self._handlers = handlers
        self._handler: asyncio.Protocol | None = None
        self._transport: asyncio.Transport | None = None
        self._admitted = False
        self._timer: asyncio.TimerHandle | None = None  # set while a head is due
        self._line = b""  # the start of the head line still arriving
        self._started = False  # the head has a non-blank line
        self._length = 0  # its Content-Length
        self._skip = 0  # body bytes still to pass
        self._read_timer: asyncio.TimerHandle | None = None  # set while a request is due
        self._write_timer: asyncio.TimerHandle | None = None  # set while a response is due

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        # With TLS this comes after the handshake (the loop's, bounded by the same timeout).
        self._transport = cast(asyncio.Transport, transport)
        if not self._guard.admit():
            self._transport.abort()
            return
        self._admitted = True
        self._handler = self._handlers()
        self._handler.connection_made(transport)
        self._due()

    def _due(self) -> None:
        """A head is now due within the header timeout, the whole request within the read
        timeout."""
        limits = self._guard.limits
        self._timer = _later(limits.header_timeout_seconds, self._header_timed_out)
        _cancel(self._read_timer)
        self._read_timer = _later(limits.read_timeout_seconds, self._read_timed_out)

    def _head_read(self) -> None:
        """A request head has arrived: its response is now due within the write timeout (Go
        sets the write deadline once a request's head is read)."""
        _cancel(self._write_timer)
        self._write_timer = _later(self._guard.limits.write_timeout_seconds, self._write_due)

    def _read_timed_out(self) -> None:
        self._read_timer = None
        self._time_out("read", "no complete request within the read timeout of %g s",
                       self._guard.limits.read_timeout_seconds)

    def _write_due(self) -> None:
        self._write_timer = None
        if self._transport is not None and self._transport.get_write_buffer_size() > 0:
            self._time_out("write", "response not taken within the write timeout of %g s",
                           self._guard.limits.write_timeout_seconds)

    def _time_out(self, phase: str, why: str, seconds: float) -> None:
        if self._transport is None:
            return
        self._guard.counts.timeouts[phase] += 1
        log.debug("closed %s: " + why, _peer(self._transport), seconds)
        self._transport.abort()  # not close(): nothing to flush, and TLS would await the peer

    def _header_timed_out(self) -> None:
        self._timer = None
        self._time_out("header", "no complete request head within %g s",
                       self._guard.limits.header_timeout_seconds)

    def data_received(self, data: bytes) -> None:
        if self._handler is None:  # refused
            return
        self._watch(data)
        self._handler.data_received(data)

    def _watch(self, data: bytes) -> None:
        """Follow the heads line by line, keeping at most `_LINE_KEEP` bytes of one line."""
        pos, end = 0, len(data)
        while pos < end:
            if self._skip:
                step = min(self._skip, end - pos)
                self._skip -= step
                pos += step
                if not self._skip:  # the request's body is in
                    _cancel(self._read_timer)
                    self._read_timer = None
                continue
            if self._timer is None:  # the first byte of a request
                self._due()
            newline = data.find(b"\n", pos)
            if newline < 0:
                self._line += data[pos:pos + max(0, _LINE_KEEP - len(self._line))]
                return
            line = self._line + data[pos:min(newline, pos + _LINE_KEEP)]
            self._line = b""
            pos = newline + 1
            if line not in (b"", b"\r"):
                self._started = True
                if line[:15].lower() == b"content-length:":
                    digits = line[15:].strip()
                    self._length = int(digits) if digits.isdigit() else 0
            elif self._started:  # the blank line that ends the head
                _cancel(self._timer)
                self._timer = None
                self._skip, self._length, self._started = self._length, 0, False
                self._head_read()
                if not self._skip:  # no body: the request is in
                    _cancel(self._read_timer)
                    self._read_timer = None

    def eof_received(self) -> bool | None:
        return self._handler.eof_received() if self._handler is not None else None

    def pause_writing(self) -> None:
        if self._handler is not None:
            self._handler.pause_writing()

    def resume_writing(self) -> None:
        if self._handler is not None:
            self._handler.resume_writing()

    def connection_lost(self, exc: Exception | None) -> None:
        self._transport = None
        for timer in (self._timer, self._read_timer, self._write_timer):
            _cancel(timer)
        self._timer = self._read_timer = self._write_timer = None
        if self._admitted:
            self._admitted = False
            self._guard.release()
        if self._handler is not None:
            self._handler.connection_lost(exc)


def _later(seconds: float, callback: Callable[[], None]) -> asyncio.TimerHandle | None:
    """A timer, or none for a limit of 0 (switched off)."""
    return asyncio.get_running_loop().call_later(seconds, callback) if seconds > 0 else None


def _cancel(timer: asyncio.TimerHandle | None) -> None:
    if timer is not None:
        timer.cancel()


def _peer(transport: asyncio.BaseTransport) -> str:
    peer = transport.get_extra_info("peername")
    return f"{peer[0]}:{peer[1]}" if isinstance(peer, tuple) else str(peer)


class GuardedSite(web.BaseSite):
    """aiohttp's SockSite (an already bound socket, its backlog, its shutdown) with every
    connection behind `guard`; TLS with `ssl_context`, its handshake bounded by the guard's
    header timeout."""

    __slots__ = ("_guard", "_name", "_sock")

    def __init__(self, runner: web.BaseRunner, sock: socket.socket, guard: ConnectionGuard, *,
                 ssl_context: ssl.SSLContext | None = None, backlog: int = 128) -> None:
        super().__init__(runner, ssl_context=ssl_context, backlog=backlog)
        self._sock = sock
        self._guard = guard
        host, port = sock.getsockname()[:2]
        self._name = str(URL.build(scheme="https" if ssl_context else "http", host=host,
                                   port=port))

    @property
    def name(self) -> str:
        return self._name

    async def start(self) -> None:
        await super().start()
        server = self._runner.server
        assert server is not None  # BaseSite refuses a runner not set up
        guard, tls = self._guard, self._ssl_context
        self._server = await asyncio.get_running_loop().create_server(
            lambda: _Connection(guard, server), sock=self._sock, backlog=self._backlog,
            ssl=tls, ssl_handshake_timeout=guard.limits.handshake_seconds if tls else None)
