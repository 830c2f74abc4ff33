"""The parts of the fake API server that every kind shares: a store of objects with their
history, a watch's line queue, and streaming that queue as a chunked watch body.

A kind is served through a `View`: which store, the `kind`/`apiVersion` it is served as, and
how a stored object is rendered in that version (identity for pods; ResourceSlices are stored
in one neutral shape and rendered per version).
"""

from __future__ import annotations

import asyncio
import json
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from typing import Any, Final

from aiohttp import web

from ...kube.events import ADDED, BOOKMARK, object_uid
from .objects import (
    STATUS_REASONS,
    Json,
    Selector,
    event_line,
    selection_event,
    status_object,
    with_resource_version,
)

END: Final = b""  # queued to a watch: end it normally
DROP: Final = b"drop"  # queued to a watch: cut the connection


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
class Change:
    version: int
    old: Json | None  # None: created
    new: Json | None  # None: deleted

    def event_for(self, selector: Selector) -> tuple[str, Json] | None:
        return selection_event(self.old, self.new, self.version, selector)


@dataclass(eq=False)
class Store:
    """One kind's objects (uid → stored object, with its resourceVersion) and changes."""

    objects: dict[str, Json] = field(default_factory=dict)
    changes: list[Change] = field(default_factory=list)

    def put(self, obj: Mapping[str, Any], version: int) -> Change:
        """Create or replace `obj` (keyed by `metadata.uid`) at `version`."""
        uid = object_uid(obj)
        if uid is None:
            raise ValueError("an object needs metadata.uid")
        stored = with_resource_version(obj, version)
        change = Change(version, self.objects.get(uid), stored)
        self.objects[uid] = stored
        self.changes.append(change)
        return change

    def remove(self, uid: str, version: int) -> Change:
        old = self.objects.pop(uid.lower(), None)
        if old is None:
            raise KeyError(uid)
        change = Change(version, old, None)
        self.changes.append(change)
        return change

    def selected(self, selector: Selector) -> list[Json]:
        return [o for o in self.objects.values() if selector.selects(o)]

    def backlog(self, since: int, selector: Selector) -> list[tuple[str, Json]]:
        """What a new watch from `since` sees first: the changes after it or, from 0 (no
        version), the current objects as ADDED."""
        if not since:
            return [(ADDED, o) for o in self.selected(selector)]
        events = (c.event_for(selector) for c in self.changes if c.version > since)
        return [e for e in events if e is not None]


@dataclass(frozen=True, slots=True)
class View:
    """A store as one request sees it."""

    store: Store
    kind: str  # `Pod`, `ResourceSlice`
    api_version: str  # `v1`, `resource.k8s.io/v1beta1`
    render: Callable[[Json], Json]

    def line(self, event: tuple[str, Json]) -> bytes:
        kind, obj = event
        return event_line(kind, self.render(obj))

    def bookmark(self, version: int) -> bytes:
        return event_line(BOOKMARK, {"kind": self.kind, "apiVersion": self.api_version,
                                     "metadata": {"resourceVersion": str(version)}})

    def list_body(self, items: list[Json], version: int) -> Json:
        return {"kind": f"{self.kind}List", "apiVersion": self.api_version,
                "items": [self.render(i) for i in items],
                "metadata": {"resourceVersion": str(version)}}


@dataclass(eq=False)
class Watch:
    view: View
    selector: Selector
    bookmarks: bool
    silent: bool
    lines: asyncio.Queue[bytes] = field(default_factory=asyncio.Queue)


def json_response(status: int, body: Mapping[str, Any]) -> web.Response:
    return web.Response(status=status, text=json.dumps(body), content_type="application/json")


def error_response(status: int, message: str) -> web.Response:
    return json_response(status, status_object(status, STATUS_REASONS.get(status, "Unknown"),
                                               message))


async def stream(request: web.Request, response: web.StreamResponse, watch: Watch,
                 lasts_seconds: float | None) -> web.StreamResponse:
    """Write the watch's queued lines until END (or `lasts_seconds`), or cut at DROP."""
    loop = asyncio.get_running_loop()
    deadline = None if lasts_seconds is None else loop.time() + lasts_seconds
    while True:
        remaining = None if deadline is None else deadline - loop.time()
        try:
            async with asyncio.timeout(remaining):  # not wait_for: see SourceSet.refresh
                line = await watch.lines.get()
        except TimeoutError:
            line = END
        if line == DROP:
            if request.transport is not None:
                request.transport.abort()
            return response
        if line == END:
            await response.write_eof()
            return response
        await response.write(line)
