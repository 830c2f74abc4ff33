"""A fake Kubernetes API server: pods list and watch over HTTP on 127.0.0.1, from memory.

It answers `GET /api/v1/pods` the way the API server does for the calls the exporter makes
(kubernetes_asyncio's `list_pod_for_all_namespaces`): a list with the current
resourceVersion, or with `watch=true` a chunked body of one JSON event per line, replaying the
changes after the asked resourceVersion, then live ones, until `timeoutSeconds`. The
`spec.nodeName=<node>` field selector is honoured, with the API server's rule that a pod
entering or leaving the selection is ADDED or DELETED for that watch.

Controls make it misbehave as a real one does: bookmarks, watches ended (normally, or dropped
when it stops), 410 Gone (HTTP or an ERROR event in the stream), injected failures (403, 500,
…), watches held open in silence or ended at once, and stop/start on the same port. Every
request is recorded.

Start it inside the event loop of its user (a test, the simulated node).
"""

from __future__ import annotations

import asyncio
import json
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from types import TracebackType
from typing import Any, Final, Self

from aiohttp import web

from .events import ADDED, BOOKMARK, ERROR, object_uid
from .fake_objects import (
    STATUS_REASONS,
    Json,
    event_line,
    node_of,
    parse_node_selector,
    selection_event,
    status_object,
    with_resource_version,
)

HOST: Final = "127.0.0.1"
_END: Final = b""  # queued to a watch: end it normally
_DROP: Final = b"drop"  # queued to a watch: cut the connection


@dataclass(frozen=True, slots=True)
class RecordedRequest:
    method: str
    path: str
    query_string: str
    """As sent, still percent-encoded."""
    query: Mapping[str, str]
    authorization: str | None

    @property
    def watch(self) -> bool:
        return self.query.get("watch", "").lower() in ("true", "1")


@dataclass(frozen=True, slots=True)
class _Change:
    version: int
    old: Json | None  # None: created
    new: Json | None  # None: deleted

    def event_for(self, node: str | None) -> tuple[str, Json] | None:
        return selection_event(self.old, self.new, self.version, node)


@dataclass(eq=False)
class _Watch:
    node: str | None
    bookmarks: bool
    silent: bool
    lines: asyncio.Queue[bytes] = field(default_factory=asyncio.Queue)


def _json(status: int, body: Mapping[str, Any]) -> web.Response:
    return web.Response(status=status, text=json.dumps(body), content_type="application/json")


def _error(status: int, message: str) -> web.Response:
    return _json(status, status_object(status, STATUS_REASONS.get(status, "Unknown"), message))


class FakeKubeApi:
    """Attributes tests may set: `stall_watches` (new watches get their headers, then
    silence until stopped), `end_watches_immediately` (new watches answer 200 with an empty
    body, as a misbehaving proxy or server may); `requests` holds every request in order."""

    def __init__(self, port: int = 0) -> None:
        self.port = port
        self.stall_watches = False
        self.end_watches_immediately = False
        self.requests: list[RecordedRequest] = []
        self.version = 1
        self._pods: dict[str, Json] = {}
        self._changes: list[_Change] = []
        self._compacted = 0  # watches from before this version get 410
        self._expire_next: list[bool] = []  # True: as an ERROR event, False: as HTTP 410
        self._failures: list[tuple[int, bool | None]] = []
        self._watches: set[_Watch] = set()
        self._runner: web.AppRunner | None = None

    # --- state -------------------------------------------------------------------------------

    @property
    def pods(self) -> Mapping[str, Json]:
        """uid → the stored pod object (with its resourceVersion)."""
        return dict(self._pods)

    def set_pods(self, pods: Iterable[Mapping[str, Any]]) -> None:
        """Replace all pods: missing ones are deleted, the rest upserted (events for each)."""
        wanted = {object_uid(p): p for p in pods}
        for uid in [u for u in self._pods if u not in wanted]:
            self.delete_pod(uid)
        for pod in wanted.values():
            self.upsert_pod(pod)

    def upsert_pod(self, pod: Mapping[str, Any]) -> str:
        """Create or replace a pod (keyed by `metadata.uid`); returns its resourceVersion."""
        uid = object_uid(pod)
        if uid is None:
            raise ValueError("a pod needs metadata.uid")
        self.version += 1
        stored = with_resource_version(pod, self.version)
        self._record(_Change(self.version, self._pods.get(uid), stored))
        self._pods[uid] = stored
        return str(self.version)

    def delete_pod(self, uid: str) -> None:
        old = self._pods.pop(uid.lower(), None)
        if old is None:
            raise KeyError(uid)
        self.version += 1
        self._record(_Change(self.version, old, None))

    def _record(self, change: _Change) -> None:
        self._changes.append(change)
        for watch in self._watches:
            event = None if watch.silent else change.event_for(watch.node)
            if event is not None:
                watch.lines.put_nowait(event_line(*event))

    # --- misbehaviour ------------------------------------------------------------------------

    def bookmark(self) -> None:
        """Send every watch that asked for bookmarks one at the current resourceVersion."""
        line = event_line(BOOKMARK, {"kind": "Pod", "apiVersion": "v1",
                                     "metadata": {"resourceVersion": str(self.version)}})
        for watch in self._watches:
            if watch.bookmarks and not watch.silent:
                watch.lines.put_nowait(line)

    def end_watches(self) -> None:
        """End every open watch normally, as the server does at `timeoutSeconds`."""
        for watch in self._watches:
            watch.lines.put_nowait(_END)

    def expire_next_watch(self, in_stream: bool = True) -> None:
        """The next watch answers 410 Gone: as an ERROR event (what API servers send for a
        compacted resourceVersion) or, `in_stream=False`, as an HTTP 410."""
        self._expire_next.append(in_stream)

    def compact(self, through: int | None = None) -> None:
        """Forget the history up to `through` (None: now): a watch from an older version gets
        410, as an ERROR event."""
        self._compacted = self.version if through is None else through
        self._changes = [c for c in self._changes if c.version > self._compacted]

    def fail_next(self, status: int, count: int = 1, *, watch: bool | None = None) -> None:
        """The next `count` requests (only watches, only lists, or None: any) answer `status`
        with a Status body."""
        self._failures.extend([(status, watch)] * count)

    def clear_failures(self) -> None:
        self._failures.clear()

    @property
    def open_watches(self) -> int:
        return len(self._watches)

    # --- lifecycle ---------------------------------------------------------------------------

    @property
    def url(self) -> str:
        return f"http://{HOST}:{self.port}"

    @property
    def running(self) -> bool:
        return self._runner is not None

    async def start(self) -> None:
        """Listen (on the same port again after `stop`: clients reconnect to it)."""
        if self._runner is not None:
            raise RuntimeError("FakeKubeApi is already running")
        app = web.Application()
        app.router.add_get("/api/v1/pods", self._pods_handler)
        # handler_cancellation: a watch whose client went away ends, as on an API server.
        runner = web.AppRunner(app, access_log=None, shutdown_timeout=1.0,
                               handler_cancellation=True)
        await runner.setup()
        site = web.TCPSite(runner, HOST, self.port)
        try:
            await site.start()
        except BaseException:
            await runner.cleanup()
            raise
        self._runner = runner
        self.port = int(runner.addresses[0][1])  # the ephemeral one, kept for a restart

    async def stop(self) -> None:
        """Go down: open watches are cut, not ended, as when an API server dies."""
        runner, self._runner = self._runner, None
        for watch in self._watches:
            watch.lines.put_nowait(_DROP)
        if runner is not None:
            await runner.cleanup()

    async def __aenter__(self) -> Self:
        await self.start()
        return self

    async def __aexit__(self, exc_type: type[BaseException] | None, exc: BaseException | None,
                        tb: TracebackType | None) -> None:
        await self.stop()

    # --- serving -----------------------------------------------------------------------------

    def _injected(self, is_watch: bool) -> int | None:
        for i, (status, only) in enumerate(self._failures):
            if only is None or only == is_watch:
                del self._failures[i]
                return status
        return None

    async def _pods_handler(self, request: web.Request) -> web.StreamResponse:
        recorded = RecordedRequest(request.method, request.path, request.query_string,
                                   dict(request.query), request.headers.get("Authorization"))
        self.requests.append(recorded)
        status = self._injected(recorded.watch)
        if status is not None:
            return _error(status, f"injected {status}")
        try:
            node = parse_node_selector(request.query.get("fieldSelector"))
        except ValueError as exc:
            return _error(400, str(exc))
        if not recorded.watch:
            items = [p for p in self._pods.values() if node is None or node_of(p) == node]
            return _json(200, {"kind": "PodList", "apiVersion": "v1", "items": items,
                               "metadata": {"resourceVersion": str(self.version)}})
        return await self._serve_watch(request, node)

    async def _serve_watch(self, request: web.Request, node: str | None) -> web.StreamResponse:
        query = request.query
        try:
            since = int(query.get("resourceVersion") or 0)
            timeout = float(query["timeoutSeconds"]) if "timeoutSeconds" in query else None
        except ValueError:
            return _error(400, "bad resourceVersion or timeoutSeconds")
        expire = self._expire_next.pop(0) if self._expire_next else None
        if expire is False:
            return _error(410, "too old resource version")
        response = web.StreamResponse(headers={"Content-Type": "application/json"})
        response.enable_chunked_encoding()
        await response.prepare(request)  # headers go out now, as the API server flushes them
        if expire or (since and since < self._compacted):
            await response.write(event_line(ERROR, status_object(
                410, "Expired", f"too old resource version: {since} ({self._compacted})")))
            await response.write_eof()
            return response
        if self.end_watches_immediately:
            await response.write_eof()
            return response
        watch = _Watch(node, query.get("allowWatchBookmarks", "").lower() in ("true", "1"),
                       self.stall_watches)
        if not watch.silent:
            if since:
                backlog = [c.event_for(node) for c in self._changes if c.version > since]
            else:  # no version: the current objects as ADDED, then changes
                backlog = [(ADDED, p) for p in self._pods.values()
                           if node is None or node_of(p) == node]
            for event in backlog:
                if event is not None:
                    watch.lines.put_nowait(event_line(*event))
        self._watches.add(watch)
        try:
            return await self._stream(request, response, watch,
                                      None if watch.silent else timeout)
        finally:
            self._watches.discard(watch)

    async def _stream(self, request: web.Request, response: web.StreamResponse, watch: _Watch,
                      lasts_seconds: float | None) -> web.StreamResponse:
        loop = asyncio.get_running_loop()
        deadline = None if lasts_seconds is None else loop.time() + lasts_seconds
        while True:
            remaining = None if deadline is None else deadline - loop.time()
            try:
                line = await asyncio.wait_for(watch.lines.get(), remaining)
            except TimeoutError:
                line = _END
            if line == _DROP:
                if request.transport is not None:
                    request.transport.abort()
                return response
            if line == _END:
                await response.write_eof()
                return response
            await response.write(line)
