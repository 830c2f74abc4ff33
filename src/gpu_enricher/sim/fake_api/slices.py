"""The pure half of the fake API server's ResourceSlices: slice objects in each served shape,
and the `resource.k8s.io` discovery document.

The fake stores a slice in one neutral shape (v1's, without `apiVersion` and `kind`) and
renders it in the version a request asks for, so one stored slice is served as v1, v1beta2 or
v1beta1 (whose devices nest their attributes and capacity under `basic`).
"""

import json
import uuid
from collections.abc import Iterable, Mapping, Sequence
from typing import Any, Final

from ...kube.slices import (
    API_GROUP,
    ATTR_PARENT_UUID,
    ATTR_PROFILE,
    ATTR_TYPE,
    ATTR_UUID,
)
from ...model import SliceDevice
from .objects import Json

KIND: Final = "ResourceSlice"
NESTED_VERSIONS: Final = frozenset({"v1beta1", "v1alpha3"})
"""Versions whose devices nest attributes and capacity under `basic`."""
_NAMESPACE: Final = uuid.UUID("0b7f5a2c-6a9e-4c1e-9d51-3b1f0c2e7a44")  # fake uids only


def _device(device: SliceDevice, index: int, prefix: str) -> Json:
    attributes: Json = {ATTR_TYPE: {"string": device.kind}, ATTR_UUID: {"string": device.uuid},
                        # Non-string attributes, as the NVIDIA driver publishes beside them.
                        "index": {"int": index}, "driverVersion": {"version": "580.95.5"}}
    if device.parent_uuid is not None:
        attributes[ATTR_PARENT_UUID] = {"string": device.parent_uuid}
    if device.profile is not None:
        attributes[ATTR_PROFILE] = {"string": device.profile}
    return {"name": device.name,
            "attributes": {f"{prefix}{k}": v for k, v in attributes.items()},
            "capacity": {"memory": {"value": "80Gi"}}}


def slice_object(node: str, driver: str, pool: str, devices: Sequence[SliceDevice],
                 version: str = "v1", *, name: str | None = None, uid: str | None = None,
                 generation: int = 1, qualified: bool = False) -> Json:
    """A ResourceSlice as the API server serves it in `version`, publishing `devices` (their
    own `driver` and `pool` are not used) for `node`.

    `qualified`: attribute names carry the driver's domain (`gpu.nvidia.com/uuid`).
    """
    name = name or f"{node}-{driver.replace('.', '-')}-{pool}"
    neutral: Json = {
        "metadata": {"name": name, "uid": uid or str(uuid.uuid5(_NAMESPACE, name))},
        "spec": {
            "driver": driver, "nodeName": node,
            "pool": {"name": pool, "generation": generation, "resourceSliceCount": 1},
            "devices": [_device(d, i, f"{driver}/" if qualified else "")
                        for i, d in enumerate(devices)],
        },
    }
    return render_slice(neutral, version)


def render_slice(stored: Mapping[str, Any], version: str) -> Json:
    """A neutral slice in `version`'s shape (a copy)."""
    copy: Json = json.loads(json.dumps(stored))
    spec = copy.get("spec")
    nested = version in NESTED_VERSIONS
    if nested and isinstance(spec, dict) and isinstance(spec.get("devices"), list):
        spec["devices"] = [{"name": d.get("name"),
                            "basic": {k: v for k, v in d.items() if k != "name"}}
                           for d in spec["devices"] if isinstance(d, dict)]
    return {"apiVersion": f"{API_GROUP}/{version}", "kind": KIND, **copy}


def neutral_slice(obj: Mapping[str, Any]) -> Json:
    """A slice of any served shape in the neutral one (a copy)."""
    copy: Json = json.loads(json.dumps(obj))
    copy.pop("apiVersion", None)
    copy.pop("kind", None)
    spec = copy.get("spec")
    if isinstance(spec, dict) and isinstance(spec.get("devices"), list):
        spec["devices"] = [{"name": d.get("name"), **d["basic"]}
                           if isinstance(d, dict) and isinstance(d.get("basic"), dict) else d
                           for d in spec["devices"]]
    return copy


def group_document(versions: Iterable[str]) -> Json:
    """The APIGroup discovery document of `resource.k8s.io` serving `versions` (best first)."""
    entries = [{"groupVersion": f"{API_GROUP}/{v}", "version": v} for v in versions]
    return {"kind": "APIGroup", "apiVersion": "v1", "name": API_GROUP, "versions": entries,
            "preferredVersion": entries[0] if entries else {}}
