"""Pod objects, as the API server sends them in lists and watch events, into `PodMeta`. Pure.

We keep only what attribution needs: identity, labels, phase and the runtime's container IDs.
Everything else in a pod (often tens of kilobytes of spec and managed fields) is dropped as
soon as the line is parsed.
"""

from collections.abc import Iterable, Mapping
from typing import Any, Final

from ..model import PodMeta
from .events import JsonObject, WatchEvent, apply_event, index_objects, mapping, object_uid, text

MIRROR_ANNOTATION: Final = "kubernetes.io/config.mirror"
"""On a static pod's mirror: the config hash, which is the UID its cgroup and logs carry."""

STATUS_LISTS: Final = ("containerStatuses", "initContainerStatuses", "ephemeralContainerStatuses")
"""Every kind of container a GPU process can run in (an init container may hold a GPU)."""


def bare_container_id(container_id: str) -> str:
    """`containerd://ABC…` → `abc…`: the form cgroup paths name containers in.

    Every runtime prefixes its scheme (`containerd://`, `cri-o://`, `docker://`); an ID without
    one is taken as it is.
    """
    _, sep, rest = container_id.partition("://")
    return (rest if sep else container_id).strip().lower()


def _containers(status: Mapping[str, Any]) -> dict[str, str]:
    """Container ID → name over all status lists; a container not started yet has no ID."""
    containers: dict[str, str] = {}
    for key in STATUS_LISTS:
        entries = status.get(key)
        if not isinstance(entries, list):
            continue
        for entry in entries:
            entry = mapping(entry)
            name, raw_id = text(entry.get("name")), text(entry.get("containerID"))
            container_id = bare_container_id(raw_id) if raw_id else ""
            if name and container_id:
                containers[container_id] = name
    return containers


def parse_pod(obj: JsonObject) -> PodMeta | None:
    """A pod object as the API returns it; None without a uid, name or namespace."""
    if not isinstance(obj, Mapping):
        return None
    metadata = mapping(obj.get("metadata"))
    uid = object_uid(obj)
    name, namespace = text(metadata.get("name")), text(metadata.get("namespace"))
    if uid is None or not name or not namespace:
        return None
    labels = {k: v for k, v in mapping(metadata.get("labels")).items()
              if isinstance(k, str) and isinstance(v, str)}
    mirror = text(mapping(metadata.get("annotations")).get(MIRROR_ANNOTATION)).strip().lower()
    status = mapping(obj.get("status"))
    return PodMeta(uid=uid, namespace=namespace, name=name, labels=labels,
                   phase=text(status.get("phase")), containers=_containers(status),
                   mirror_uid=mirror or None)


def index_pods(items: Iterable[JsonObject]) -> Mapping[str, PodMeta]:
    """A pod list's items as an immutable uid → PodMeta map."""
    return index_objects(items, parse_pod)


def apply_pod_event(pods: Mapping[str, PodMeta], event: WatchEvent) -> Mapping[str, PodMeta]:
    """The pods after one watch event (ADDED/MODIFIED/DELETED/BOOKMARK/ERROR); never raises."""
    return apply_event(pods, event, parse_pod)
