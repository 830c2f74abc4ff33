"""A fake Kubernetes API server: pods and ResourceSlices, list and watch over HTTP on
127.0.0.1, from memory; ResourceClaims by `GET` (`claims.py`).

It answers `GET /api/v1/pods` and `GET /apis/resource.k8s.io/<version>/resourceslices` the
way the API server does for the calls the exporter makes (kubernetes_asyncio's
`list_pod_for_all_namespaces`, `Resource<Version>Api.list_resource_slice`): a list with the
current resourceVersion, or with `watch=true` a chunked body of one JSON event per line,
replaying the changes after the asked resourceVersion, then live ones, until `timeoutSeconds`.
ConfigMaps are listed and watched per namespace (`/api/v1/namespaces/<ns>/configmaps`).
The `spec.nodeName=<node>` and `metadata.name=<name>` field selectors are honoured, with the API
server's rule that an object entering or leaving the selection is ADDED or DELETED for that
watch. `resource.k8s.io` is served in the versions of `resource_versions` (none: its discovery
and paths answer 404), one stored slice rendered in each version's shape; resourceVersions are
shared by all kinds, as etcd's revision is.

Controls make it misbehave as a real one does: bookmarks, watches ended (normally, or dropped
when it stops), 410 Gone (HTTP or an ERROR event in the stream), injected failures (403, 500,
…; lists and watches only, never discovery), watches held open in silence or ended at
once, and stop/start on the same port. These apply to every kind. Every request is recorded.

Start it inside the event loop of its user (a test, the simulated node).
"""

from __future__ import annotations

from collections.abc import Iterable
from types import TracebackType
from typing import Final, Self

from aiohttp import web

from ...kube.events import ERROR
from ...kube.slices import API_GROUP
from .claims import ClaimStore
from .objects import (
    Selector,
    event_line,
    parse_field_selector,
    status_object,
)
from .slices import KIND as SLICE_KIND
from .slices import group_document, render_slice
from .state import StoredObjects
from .watch import (
    DROP,
    END,
    RecordedRequest,
    View,
    Watch,
    error_response,
    json_response,
    stream,
)

HOST: Final = "127.0.0.1"
__all__ = ["HOST", "FakeKubeApi", "RecordedRequest"]  # RecordedRequest: tests use it from here


class FakeKubeApi(StoredObjects):
    """Attributes tests may set: `stall_watches` (new watches get their headers, then
    silence until stopped), `end_watches_immediately` (new watches answer 200 with an empty
    body, as a misbehaving proxy or server may), `unwatchable`; `requests` holds every request
    in order."""

    def __init__(self, port: int = 0, resource_versions: Iterable[str] = ("v1",)) -> None:
        self.port = port
        self.stall_watches = False
        self.end_watches_immediately = False
        self.unwatchable: set[str] = set()
        """Resources (`configmaps`, `pods`) whose RBAC allows a list but forbids a watch, as the
        GPU Operator's Role gives configmaps `get, list` only: their watches answer 403."""
        self.resource_versions: tuple[str, ...] = tuple(resource_versions)
        """The `resource.k8s.io` versions served, best first; settable (an upgrade)."""
        self.requests: list[RecordedRequest] = []
        super().__init__()
        self.claims = ClaimStore()
        """ResourceClaims, read one by one (tests set them and their RBAC there)."""
        self._compacted = 0  # watches from before this version get 410
        self._expire_next: list[bool] = []  # True: as an ERROR event, False: as HTTP 410
        self._failures: list[tuple[int, bool | None]] = []
        self._runner: web.AppRunner | None = None

    # --- misbehaviour ------------------------------------------------------------------------

    def bookmark(self) -> None:
        """Send every watch that asked for bookmarks one at the current resourceVersion."""
        for watch in self._watches:
            if watch.bookmarks and not watch.silent:
                watch.lines.put_nowait(watch.view.bookmark(self.version))

    def end_watches(self) -> None:
        """End every open watch normally, as the server does at `timeoutSeconds`."""
        for watch in self._watches:
            watch.lines.put_nowait(END)

    def expire_next_watch(self, in_stream: bool = True) -> None:
        """The next watch answers 410 Gone: as an ERROR event (what API servers send for a
        compacted resourceVersion) or, `in_stream=False`, as an HTTP 410."""
        self._expire_next.append(in_stream)

    def compact(self, through: int | None = None) -> None:
        """Forget the history up to `through` (None: now): a watch from an older version gets
        410, as an ERROR event."""
        self._compacted = self.version if through is None else through
        for store in (self._pods, self._slices, self._config_maps):
            store.changes = [c for c in store.changes if c.version > self._compacted]

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
        app.router.add_get("/api/v1/namespaces/{namespace}/configmaps", self._config_maps_handler)
        app.router.add_get("/api/v1/namespaces/{namespace}/configmaps/{name}",
                           self._config_map_handler)
        # kubernetes_asyncio asks for the group with a trailing slash; kubectl without.
        app.router.add_get(f"/apis/{API_GROUP}", self._group_handler)
        app.router.add_get(f"/apis/{API_GROUP}/", self._group_handler)
        app.router.add_get(f"/apis/{API_GROUP}/{{version}}/resourceslices", self._slices_handler)
        app.router.add_get(f"/apis/{API_GROUP}/{{version}}/namespaces/{{namespace}}/"
                           "resourceclaims/{name}", self._claim_handler)
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
            watch.lines.put_nowait(DROP)
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

    def _record_request(self, request: web.Request) -> RecordedRequest:
        recorded = RecordedRequest(request.method, request.path, request.query_string,
                                   dict(request.query), request.headers.get("Authorization"))
        self.requests.append(recorded)
        return recorded

    async def _pods_handler(self, request: web.Request) -> web.StreamResponse:
        return await self._serve(request, self._record_request(request),
                                 View(self._pods, "Pod", "v1", dict))

    async def _config_maps_handler(self, request: web.Request) -> web.StreamResponse:
        return await self._serve(request, self._record_request(request),
                                 View(self._config_maps, "ConfigMap", "v1", dict))

    async def _config_map_handler(self, request: web.Request) -> web.StreamResponse:
        self._record_request(request)
        selector = Selector(name=request.match_info["name"],
                            namespace=request.match_info["namespace"])
        found = self._config_maps.selected(selector)
        if not found:
            return error_response(404, f'configmaps "{selector.name}" not found')
        return json_response(200, found[0])

    async def _group_handler(self, request: web.Request) -> web.StreamResponse:
        self._record_request(request)
        if not self.resource_versions:
            return error_response(404, "the server could not find the requested resource")
        return json_response(200, group_document(self.resource_versions))

    async def _slices_handler(self, request: web.Request) -> web.StreamResponse:
        recorded = self._record_request(request)
        version = request.match_info["version"]
        if version not in self.resource_versions:
            return error_response(404, "the server could not find the requested resource")
        return await self._serve(request, recorded, View(
            self._slices, SLICE_KIND, f"{API_GROUP}/{version}",
            lambda stored: render_slice(stored, version)))

    async def _claim_handler(self, request: web.Request) -> web.StreamResponse:
        self._record_request(request)
        return self.claims.answer(request, self.resource_versions)

    async def _serve(self, request: web.Request, recorded: RecordedRequest,
                     view: View) -> web.StreamResponse:
        status = self._injected(recorded.watch)
        if status is not None:
            return error_response(status, f"injected {status}")
        resource = recorded.path.rsplit("/", 1)[-1]
        if recorded.watch and resource in self.unwatchable:
            return error_response(403, f'{resource} is forbidden: User "system:serviceaccount:'
                                       f'exporter" cannot watch resource "{resource}"')
        try:
            selector = parse_field_selector(request.query.get("fieldSelector"),
                                            request.match_info.get("namespace"))
        except ValueError as exc:
            return error_response(400, str(exc))
        if not recorded.watch:
            return json_response(200, view.list_body(view.store.selected(selector),
                                                     self.version))
        return await self._serve_watch(request, view, selector)

    async def _serve_watch(self, request: web.Request, view: View,
                           selector: Selector) -> web.StreamResponse:
        query = request.query
        try:
            since = int(query.get("resourceVersion") or 0)
            timeout = float(query["timeoutSeconds"]) if "timeoutSeconds" in query else None
        except ValueError:
            return error_response(400, "bad resourceVersion or timeoutSeconds")
        expire = self._expire_next.pop(0) if self._expire_next else None
        if expire is False:
            return error_response(410, "too old resource version")
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
        watch = Watch(view, selector, query.get("allowWatchBookmarks", "").lower() in ("true", "1"),
                      self.stall_watches)
        if not watch.silent:
            for event in view.store.backlog(since, selector):
                watch.lines.put_nowait(view.line(event))
        self._watches.add(watch)
        try:
            return await stream(request, response, watch, None if watch.silent else timeout)
        finally:
            self._watches.discard(watch)
