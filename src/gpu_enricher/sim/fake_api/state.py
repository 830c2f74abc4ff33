"""The fake API server's objects (server.py): pods, ResourceSlices and ConfigMaps in stores that
keep their history, one resourceVersion shared by all kinds (as etcd's revision is), and each
change handed to the open watches it concerns. No I/O."""

from __future__ import annotations

from collections.abc import Callable, Iterable, Mapping
from typing import Any

from ...kube.events import object_uid
from .objects import Json
from .slices import neutral_slice
from .watch import Change, Store, Watch


class StoredObjects:
    def __init__(self) -> None:
        self.version = 1
        self._pods = Store()
        self._slices = Store()
        self._config_maps = Store()
        self._watches: set[Watch] = set()

    @property
    def pods(self) -> Mapping[str, Json]:
        """uid → the stored pod object (with its resourceVersion)."""
        return dict(self._pods.objects)

    def set_pods(self, pods: Iterable[Mapping[str, Any]]) -> None:
        """Replace all pods: missing ones are deleted, the rest upserted (events for each)."""
        self._set(self._pods, pods, self.upsert_pod)

    def upsert_pod(self, pod: Mapping[str, Any]) -> str:
        """Create or replace a pod (keyed by `metadata.uid`); returns its resourceVersion."""
        return self._upsert(self._pods, pod)

    def delete_pod(self, uid: str) -> None:
        self._delete(self._pods, uid)

    @property
    def slices(self) -> Mapping[str, Json]:
        """uid → the stored ResourceSlice, in the neutral shape (see `fake_slices.py`)."""
        return dict(self._slices.objects)

    def set_slices(self, slices: Iterable[Mapping[str, Any]]) -> None:
        """Replace all ResourceSlices (any served shape), as `set_pods` does pods."""
        self._set(self._slices, slices, self.upsert_slice)

    def upsert_slice(self, obj: Mapping[str, Any]) -> str:
        """Create or replace a ResourceSlice of any served shape (keyed by `metadata.uid`);
        returns its resourceVersion."""
        return self._upsert(self._slices, neutral_slice(obj))

    def delete_slice(self, uid: str) -> None:
        self._delete(self._slices, uid)

    def upsert_config_map(self, obj: Mapping[str, Any]) -> str:
        """Create or replace a ConfigMap (keyed by `metadata.uid`); returns its resourceVersion."""
        return self._upsert(self._config_maps, obj)

    def delete_config_map(self, uid: str) -> None:
        self._delete(self._config_maps, uid)

    def _set(self, store: Store, objects: Iterable[Mapping[str, Any]],
             upsert: Callable[[Mapping[str, Any]], str]) -> None:
        wanted = {object_uid(o): o for o in objects}
        for uid in [u for u in store.objects if u not in wanted]:
            self._delete(store, uid)
        for obj in wanted.values():
            upsert(obj)

    def _upsert(self, store: Store, obj: Mapping[str, Any]) -> str:
        self.version += 1
        self._record(store, store.put(obj, self.version))
        return str(self.version)

    def _delete(self, store: Store, uid: str) -> None:
        self._record(store, store.remove(uid, self.version + 1))
        self.version += 1

    def _record(self, store: Store, change: Change) -> None:
        for watch in self._watches:
            if watch.view.store is not store or watch.silent:
                continue
            event = change.event_for(watch.selector)
            if event is not None:
                watch.lines.put_nowait(watch.view.line(event))
