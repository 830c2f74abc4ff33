"""ResourceSlice objects, as the API server sends them, into `SliceDevice`s. Pure.

Every served shape is read: `resource.k8s.io/v1beta1` keeps a device's attributes under
`spec.devices[].basic.attributes`, `v1beta2` and `v1` directly under `spec.devices[].attributes`.
Each attribute value is a one-key object (`{"string": "GPU-…"}`, or `int`, `bool`, `version`);
we read strings only. An attribute name is unqualified (`uuid`) or qualified with a domain
(`gpu.nvidia.com/uuid`); an unqualified name is in the driver's own domain, so both spellings
are the same attribute when the domain is the driver's. Nothing here raises on malformed input.
"""

from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from typing import Any, Final

from ..model import SliceDevice
from .events import JsonObject, mapping, text

API_GROUP: Final = "resource.k8s.io"
VERSIONS: Final = ("v1", "v1beta2", "v1beta1")
"""The versions we read, best first: v1 (1.34+), then the betas older clusters serve."""
NVIDIA_DRIVER: Final = "gpu.nvidia.com"

ATTR_UUID: Final = "uuid"
ATTR_TYPE: Final = "type"
ATTR_PARENT_UUID: Final = "parentUUID"
ATTR_PROFILE: Final = "profile"


@dataclass(frozen=True, slots=True)
class ParsedSlice:
    """What one ResourceSlice says about its devices."""

    node: str
    driver: str
    pool: str
    generation: int
    """`spec.pool.generation`: a pool's slices of an older generation are outdated."""
    devices: tuple[SliceDevice, ...]
    skipped: int
    """Devices left out: no name, or no `uuid` attribute."""


def _attribute(attributes: Mapping[str, Any], driver: str, name: str) -> str:
    """A string attribute by its bare name or qualified with the driver's domain; "" if
    absent or not a string."""
    for key in (name, f"{driver}/{name}"):
        value = text(mapping(attributes.get(key)).get("string"))
        if value:
            return value
    return ""


def _attributes(device: Mapping[str, Any]) -> Mapping[str, Any]:
    # v1beta1 nests them in `basic`; v1beta2 and v1 do not.
    basic = device.get("basic")
    holder = basic if isinstance(basic, Mapping) else device
    return mapping(holder.get("attributes"))


def parse_device(device: Any, driver: str, pool: str) -> SliceDevice | None:
    """One entry of `spec.devices`; None without a name, or without anything that names a
    GPU: a `uuid`, or for a MIG device its `parentUUID` and `profile` (the driver publishes
    MIG slices it creates on demand that way: they have no UUID until they exist)."""
    device = mapping(device)
    name = text(device.get("name"))
    attributes = _attributes(device)
    uuid = _attribute(attributes, driver, ATTR_UUID)
    parent = _attribute(attributes, driver, ATTR_PARENT_UUID) or None
    profile = _attribute(attributes, driver, ATTR_PROFILE) or None
    if not name or not (uuid or (parent and profile)):
        return None
    return SliceDevice(driver=driver, pool=pool, name=name, uuid=uuid,
                       kind=_attribute(attributes, driver, ATTR_TYPE),
                       parent_uuid=parent, profile=profile)


def parse_slice(obj: JsonObject) -> ParsedSlice | None:
    """A ResourceSlice of any served version; None only for what is not an object at all.

    A slice whose spec cannot be read becomes one with no devices: a change that garbles a
    slice must drop the devices it listed, not keep them.
    """
    if not isinstance(obj, Mapping):
        return None
    spec = mapping(obj.get("spec"))
    driver = text(spec.get("driver"))
    pool_spec = mapping(spec.get("pool"))
    pool = text(pool_spec.get("name"))
    generation = pool_spec.get("generation")
    entries = spec.get("devices")
    entries = entries if isinstance(entries, list) else []
    devices = [parse_device(entry, driver, pool) for entry in entries]
    kept = tuple(d for d in devices if d is not None)
    return ParsedSlice(node=text(spec.get("nodeName")), driver=driver, pool=pool,
                       generation=generation if isinstance(generation, int) else 0,
                       devices=kept, skipped=len(devices) - len(kept))


def current_slices(slices: Iterable[ParsedSlice], node: str,
                   drivers: frozenset[str]) -> tuple[ParsedSlice, ...]:
    """The slices of `node` and `drivers`, each pool's newest generation only.

    While a driver republishes a pool, slices of the old and the new generation coexist; the
    old ones are outdated (the ResourceSlice API's rule) and may name devices that are gone.
    """
    mine = [s for s in slices if s.node == node and s.driver in drivers]
    newest: dict[tuple[str, str], int] = {}
    for s in mine:
        key = (s.driver, s.pool)
        newest[key] = max(newest.get(key, s.generation), s.generation)
    return tuple(s for s in mine if s.generation == newest[(s.driver, s.pool)])


def slice_devices(slices: Iterable[ParsedSlice]) -> tuple[SliceDevice, ...]:
    """All devices of `slices`, in a stable order (driver, pool, name)."""
    devices = [d for s in slices for d in s.devices]
    return tuple(sorted(devices, key=lambda d: (d.driver, d.pool, d.name)))


def served_versions(document: Any) -> tuple[str, ...]:
    """`versions[].version` of an APIGroup discovery document."""
    versions = mapping(document).get("versions")
    if not isinstance(versions, list):
        return ()
    return tuple(v for v in (text(mapping(e).get("version")) for e in versions) if v)


def choose_version(document: Any) -> str | None:
    """The best of `VERSIONS` the server serves; None when it serves none of them."""
    served = served_versions(document)
    return next((v for v in VERSIONS if v in served), None)
