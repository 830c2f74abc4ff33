"""The pure half of a list+watch: watch lines into events, events onto a map of objects.

Generic over the kind: objects are keyed by `metadata.uid` (every Kubernetes object has one)
and turned into our own immutable values by a parse function that returns None for what it
cannot use. Nothing here raises on malformed input; bad objects are skipped.
"""

import json
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass
from types import MappingProxyType
from typing import Any, Final, TypeVar

T = TypeVar("T")

ADDED: Final = "ADDED"
MODIFIED: Final = "MODIFIED"
DELETED: Final = "DELETED"
BOOKMARK: Final = "BOOKMARK"
ERROR: Final = "ERROR"
EVENT_TYPES: Final = frozenset({ADDED, MODIFIED, DELETED, BOOKMARK, ERROR})

JsonObject = Mapping[str, Any]
Parse = Callable[[JsonObject], T | None]


@dataclass(frozen=True, slots=True)
class WatchEvent:
    """One line of a watch stream: `{"type": ..., "object": {...}}`."""

    type: str
    object: JsonObject


def parse_event_line(line: bytes) -> WatchEvent | None:
    """One JSON line of a watch body; None for anything that is not a well-formed event."""
    try:
        data = json.loads(line)
    except ValueError:  # JSONDecodeError and UnicodeDecodeError both are
        return None
    if not isinstance(data, dict):
        return None
    kind, obj = data.get("type"), data.get("object")
    if kind not in EVENT_TYPES or not isinstance(obj, dict):
        return None
    return WatchEvent(kind, obj)


def mapping(value: Any) -> Mapping[str, Any]:
    """A JSON object, or an empty one for anything else: parsers never raise on bad shapes."""
    return value if isinstance(value, Mapping) else {}


def text(value: Any) -> str:
    """A JSON string, or "" for anything else."""
    return value if isinstance(value, str) else ""


def _metadata(obj: JsonObject) -> JsonObject:
    return mapping(obj.get("metadata"))


def object_uid(obj: JsonObject) -> str | None:
    """`metadata.uid`, lowercase (the form cgroup paths are matched in); None when absent."""
    uid = _metadata(obj).get("uid")
    return uid.lower() if isinstance(uid, str) and uid else None


def resource_version(obj: JsonObject) -> str | None:
    """`metadata.resourceVersion` of an object, a list or a bookmark; None when absent.

    Opaque to clients: compared only for equality, never ordered.
    """
    version = _metadata(obj).get("resourceVersion")
    return version if isinstance(version, str) and version else None


def index_objects(items: Iterable[JsonObject], parse: Parse[T]) -> Mapping[str, T]:
    """A list answer's items as an immutable uid → value map; unparseable items left out."""
    index: dict[str, T] = {}
    for item in items:
        uid, value = object_uid(item), parse(item)
        if uid is not None and value is not None:
            index[uid] = value
    return MappingProxyType(index)


def apply_event(objects: Mapping[str, T], event: WatchEvent, parse: Parse[T]) -> Mapping[str, T]:
    """The map after `event`; `objects` itself is never changed.

    A copy per change costs O(objects), which for one node's pods is a few hundred entries,
    and lets readers hold a snapshot without locks. BOOKMARK and ERROR change no object (the
    caller takes a bookmark's resourceVersion and acts on errors); an ADDED or MODIFIED object
    that does not parse is ignored rather than guessed at, a DELETED one needs only its uid.
    """
    uid = object_uid(event.object)
    if uid is None or event.type in (BOOKMARK, ERROR):
        return objects
    if event.type == DELETED:
        if uid not in objects:
            return objects
        return MappingProxyType({k: v for k, v in objects.items() if k != uid})
    value = parse(event.object)
    if value is None:
        return objects
    return MappingProxyType({**objects, uid: value})
