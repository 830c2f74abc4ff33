"""A scenario's `pods:` entries (sim/scenario.py reads the rest): each the device-plugin
assignment the fake kubelet lists and the pod the fake API serves, its devices named by GPU
index, MIG pair or literal device ID, held through the device plugin or a DRA claim. Pure.
"""

from typing import Any, Final

from ..model import PodAssignment
from .node import (
    SimGpu,
    SimPod,
    mig_uuid,
    pod_uid,
)
from .scenario_values import (
    At,
    as_bool,
    as_int,
    as_labels,
    as_list,
    as_mapping,
    as_text,
    check_keys,
    opt,
    opt_text,
    refuse_null,
    show,
)

_POD_KEYS: Final = frozenset({
    "namespace", "pod", "container", "resource", "gpus", "replica", "mig", "device_ids", "uid",
    "labels", "claim", "admin_access",
})


def _gpu_index(raw: Any, gpus: tuple[SimGpu, ...], at: At) -> int:
    if isinstance(raw, int) and not isinstance(raw, bool) and 0 <= raw < len(gpus):
        return raw
    raise at.error(f"no GPU {show(raw)} in this scenario")


def _mig_pair(raw: Any, gpus: tuple[SimGpu, ...], at: At) -> tuple[int, int]:
    if isinstance(raw, list) and len(raw) == 2 and all(
            isinstance(v, int) and not isinstance(v, bool) for v in raw):
        index, gi = raw
        if 0 <= index < len(gpus) and gi in {i.gpu_instance_id for i in gpus[index].instances}:
            return (index, gi)
    raise at.error(f"no GPU instance {show(raw)} in this scenario")


def pod_entry(raw: Any, gpus: tuple[SimGpu, ...], at: At) -> tuple[PodAssignment, SimPod]:
    """A container holding devices: `gpus: [0]` (with `replica: N` for time-slicing),
    `mig: [[gpu, gi]]`, or literal `device_ids` as a kubelet would report them; and the pod as
    the Kubernetes API describes it."""
    spec = as_mapping(raw, at)
    check_keys(spec, _POD_KEYS, at)
    namespace, pod, container = (opt_text(spec, at, key, "", as_text) for key in (
        "namespace", "pod", "container"))
    for key, value in (("namespace", namespace), ("pod", pod), ("container", container)):
        if not value:
            raise at.field(spec, key).error("required")
    replica = opt(spec, at, "replica", None, as_int)
    suffix = "" if replica is None else f"::{replica}"
    ids_at, gpus_at, mig_at = (at.field(spec, k) for k in ("device_ids", "gpus", "mig"))
    ids, indices, pairs = (as_list(spec.get(k), a) for k, a in (
        ("device_ids", ids_at), ("gpus", gpus_at), ("mig", mig_at)))
    device_ids = [as_text(d, ids_at.item(ids, n)) for n, d in enumerate(ids)]
    held = [_gpu_index(i, gpus, gpus_at.item(indices, n)) for n, i in enumerate(indices)]
    slices = [_mig_pair(p, gpus, mig_at.item(pairs, n)) for n, p in enumerate(pairs)]
    device_ids += [gpus[i].uuid + suffix for i in held]
    device_ids += [mig_uuid(gpus[g].uuid, gi) + suffix for g, gi in slices]
    default_resource = "nvidia.com/gpu"
    if slices and not held:
        g, gi = slices[0]
        profile = next(i.profile for i in gpus[g].instances if i.gpu_instance_id == gi)
        default_resource = f"nvidia.com/mig-{profile}"
    refuse_null(spec, at, "claim")
    claim = spec.get("claim")
    if claim is not None and (not isinstance(claim, str) or not claim or ids):
        raise at.field(spec, "claim").error("a claim name, with gpus or mig (not device_ids)")
    devices: tuple[tuple[int, int | None], ...] = (
        () if claim is None else (*((i, None) for i in held), *slices))
    admin = opt(spec, at, "admin_access", False, as_bool)
    if admin and claim is None:
        raise at.field(spec, "admin_access").error("admin access is a claim's: set claim too")
    assignment = PodAssignment(namespace, pod, container,
                               opt_text(spec, at, "resource", default_resource, as_text),
                               tuple(device_ids))
    return assignment, SimPod(namespace, pod, container,
                              opt_text(spec, at, "uid", pod_uid(namespace, pod), as_text),
                              opt(spec, at, "labels", {}, as_labels), claim, devices, admin)
