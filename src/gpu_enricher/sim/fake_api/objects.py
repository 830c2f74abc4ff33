"""The pure half of the fake API server: pod and ConfigMap objects, Status objects, watch lines,
selectors.

A pod object here has the shape the API server sends (the fields `parse_pod` reads and the
ones a reader expects beside them), so the fake exercises the real parsing path.
"""

import json
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any, Final

from ...kube.events import ADDED, DELETED, MODIFIED
from ...kube.pods import MIRROR_ANNOTATION
from ...model import PodMeta

Json = dict[str, Any]

RUNTIME_SCHEMES: Final = {"containerd": "containerd://", "cri-o": "cri-o://",
                          "docker": "docker://"}
_NODE_FIELD: Final = "spec.nodeName"
_NAME_FIELD: Final = "metadata.name"


@dataclass(frozen=True, slots=True)
class Selector:
    """What one request selects: a field selector (`spec.nodeName=`, `metadata.name=`) and,
    for a namespaced path, the namespace."""

    node: str | None = None
    name: str | None = None
    namespace: str | None = None

    def selects(self, obj: Mapping[str, Any] | None) -> bool:
        if obj is None:
            return False
        metadata = obj.get("metadata")
        metadata = metadata if isinstance(metadata, Mapping) else {}
        return ((self.node is None or node_of(obj) == self.node)
                and (self.name is None or metadata.get("name") == self.name)
                and (self.namespace is None or metadata.get("namespace") == self.namespace))


ALL: Final = Selector()


def pod_object(meta: PodMeta, node_name: str, *, runtime: str = "containerd",
               resource_version: str | None = None) -> Json:
    """A pod as the API server returns it, bound to `node_name`, from `meta`.

    Each of `meta.containers` is a running container (status and spec); the ID gets the
    runtime's scheme, as the kubelet reports it.
    """
    scheme = RUNTIME_SCHEMES[runtime]
    metadata: Json = {"name": meta.name, "namespace": meta.namespace, "uid": meta.uid}
    if meta.labels:
        metadata["labels"] = dict(meta.labels)
    if meta.mirror_uid is not None:
        metadata["annotations"] = {MIRROR_ANNOTATION: meta.mirror_uid}
    if resource_version is not None:
        metadata["resourceVersion"] = resource_version
    names = sorted(set(meta.containers.values()))
    statuses = [{"name": name, "containerID": f"{scheme}{cid}", "ready": True,
                 "restartCount": 0, "state": {"running": {}}}
                for cid, name in sorted(meta.containers.items(), key=lambda item: item[1])]
    return {
        "kind": "Pod",
        "apiVersion": "v1",
        "metadata": metadata,
        "spec": {"nodeName": node_name, "containers": [{"name": n, "image": "fake"}
                                                       for n in names]},
        "status": {"phase": meta.phase or "Running", "containerStatuses": statuses},
    }


def node_of(obj: Mapping[str, Any] | None) -> str | None:
    """`spec.nodeName` of a pod object; None when unbound (or no object)."""
    if obj is None:
        return None
    spec = obj.get("spec")
    node = spec.get("nodeName") if isinstance(spec, Mapping) else None
    return node if isinstance(node, str) and node else None


def parse_field_selector(field_selector: str | None, namespace: str | None = None) -> Selector:
    """A `spec.nodeName=<node>` or `metadata.name=<name>` field selector (or none), within
    `namespace` (None: all).

    ValueError for any other selector: the fake serves only what the exporter asks for.
    """
    if not field_selector:
        return Selector(namespace=namespace)
    key, sep, value = field_selector.partition("=")
    value = value.removeprefix("=")  # `==` is also accepted by the API server
    if not sep or key not in (_NODE_FIELD, _NAME_FIELD) or "," in value:
        raise ValueError(f"unsupported fieldSelector {field_selector!r}")
    if key == _NODE_FIELD:
        return Selector(node=value, namespace=namespace)
    return Selector(name=value, namespace=namespace)


def status_object(code: int, reason: str, message: str) -> Json:
    """A `Status` object, as the API server answers errors (and sends ERROR events)."""
    return {"kind": "Status", "apiVersion": "v1", "metadata": {}, "status": "Failure",
            "message": message, "reason": reason, "code": code}


STATUS_REASONS: Final = {400: "BadRequest", 401: "Unauthorized", 403: "Forbidden",
                         404: "NotFound", 410: "Expired", 429: "TooManyRequests",
                         500: "InternalError", 503: "ServiceUnavailable", 504: "Timeout"}


def event_line(event_type: str, obj: Mapping[str, Any]) -> bytes:
    """One line of a watch body."""
    return json.dumps({"type": event_type, "object": obj}, separators=(",", ":")).encode() + b"\n"


def with_resource_version(obj: Mapping[str, Any], version: int) -> Json:
    """A copy of `obj` with `metadata.resourceVersion` set (nested dicts copied as needed)."""
    copy = json.loads(json.dumps(obj))
    if not isinstance(copy.get("metadata"), dict):
        copy["metadata"] = {}
    copy["metadata"]["resourceVersion"] = str(version)
    return dict(copy)


def selection_event(old: Json | None, new: Json | None, version: int,
                    selector: Selector) -> tuple[str, Json] | None:
    """The event a watch of what `selector` selects sees for one change, or None.

    `old`/`new` are the object before and after (None: created, deleted). As the API server
    does for a field selector, an object entering the selection is ADDED, one leaving it
    DELETED.
    """
    was = selector.selects(old)
    if new is not None and selector.selects(new):
        return (MODIFIED if was else ADDED), new
    if was:
        last = new if new is not None else old
        assert last is not None
        return DELETED, with_resource_version(last, version)
    return None


def config_map_object(namespace: str, name: str, values: Mapping[str, str], *,
                      uid: str | None = None) -> Json:
    """A ConfigMap as the API server returns it."""
    return {"kind": "ConfigMap", "apiVersion": "v1",
            "metadata": {"namespace": namespace, "name": name,
                         "uid": uid or f"cm-{namespace}-{name}"},
            "data": dict(values)}
