"""The simulated node's description: the built-in demo node and `--simulate FILE.yaml`.

Parsing is pure (`parse_scenario` takes the decoded YAML); errors name the file and the key.
The format is documented in docs/simulate.md.
"""

import difflib
from collections.abc import Collection, Mapping
from importlib import resources
from pathlib import Path
from typing import Any, Final

import yaml

from .model import PodAssignment
from .sim_model import (
    Range,
    Scenario,
    SimGpu,
    SimInstance,
    SimPod,
    SimProcess,
    default_uuid,
    has_gpm,
    mig_uuid,
    pod_uid,
)


class ScenarioError(ValueError):
    pass


def _range(raw: Any, where: str) -> Range:
    if isinstance(raw, int | float) and not isinstance(raw, bool):
        return (float(raw), float(raw))
    if (isinstance(raw, list) and len(raw) == 2
            and all(isinstance(v, int | float) and not isinstance(v, bool) for v in raw)):
        low, high = float(raw[0]), float(raw[1])
        if low <= high:
            return (low, high)
    raise ScenarioError(f"{where}: expected a number or [low, high] with low <= high, got {raw!r}")


def _int(raw: Any, where: str) -> int:
    if isinstance(raw, int) and not isinstance(raw, bool) and raw >= 0:
        return raw
    raise ScenarioError(f"{where}: expected a non-negative integer, got {raw!r}")


_GPU_KEYS: Final = frozenset({
    "model", "uuid", "pci_bus_id", "memory_mib", "utilization", "memory_used_mib",
    "power_watts", "temperature", "sm_clock_mhz", "mem_clock_mhz", "lost", "mig", "processes",
    "gpm", "xids",
})


_POD_KEYS: Final = frozenset({
    "namespace", "pod", "container", "resource", "gpus", "replica", "mig", "device_ids", "uid",
    "labels", "claim",
})
_INSTANCE_KEYS: Final = frozenset({"gi", "profile", "memory_mib", "memory_used_mib", "activity"})
_PROCESS_KEYS: Final = frozenset({"pid", "used_memory_mib", "gi", "name", "pod", "container",
                                  "sm_utilization"})
_TOP_KEYS: Final = frozenset({"seed", "gpus", "driver_version", "period_seconds", "pods"})


def _mapping(raw: Any, where: str) -> Mapping[str, Any]:
    if not isinstance(raw, Mapping):
        raise ScenarioError(f"{where}: expected a mapping, got {type(raw).__name__}")
    return raw


def _check_keys(spec: Mapping[str, Any], allowed: Collection[str], where: str) -> None:
    """Name every unknown key, with the known one it was probably meant to be."""
    unknown = sorted(str(k) for k in set(spec) - set(allowed))
    if not unknown:
        return
    hints = [f"{k!r} (did you mean {close[0]!r}?)" if close else repr(k)
             for k in unknown for close in [difflib.get_close_matches(k, allowed, n=1)]]
    raise ScenarioError(f"{where}: unknown key{'s' if len(unknown) > 1 else ''} "
                        f"{', '.join(hints)}; known: {', '.join(sorted(allowed))}")


def _gpu(raw: Any, index: int, seed: int, where: str) -> SimGpu:
    spec = _mapping(raw, where)
    _check_keys(spec, _GPU_KEYS, where)
    instances = tuple(
        _instance(m, f"{where}.mig[{n}]") for n, m in enumerate(spec.get("mig") or [])
    )
    processes = tuple(
        _process(p, f"{where}.processes[{n}]")
        for n, p in enumerate(spec.get("processes") or [])
    )
    model = str(spec.get("model", "NVIDIA H100 80GB HBM3"))
    gpm = spec.get("gpm", has_gpm(model))
    if not isinstance(gpm, bool):
        raise ScenarioError(f"{where}.gpm: expected true or false, got {gpm!r}")
    return SimGpu(
        index=index,
        model=model,
        uuid=str(spec.get("uuid") or default_uuid(seed, index)),
        pci_bus_id=str(spec.get("pci_bus_id") or f"00000000:{0x18 + 0x10 * index:02X}:00.0"),
        memory_mib=_int(spec.get("memory_mib", 81559), f"{where}.memory_mib"),
        utilization=_range(spec.get("utilization", 0), f"{where}.utilization"),
        memory_used_mib=_range(spec.get("memory_used_mib", 0), f"{where}.memory_used_mib"),
        power_watts=_range(spec.get("power_watts", [60, 70]), f"{where}.power_watts"),
        temperature=_range(spec.get("temperature", [30, 35]), f"{where}.temperature"),
        sm_clock_mhz=_range(spec.get("sm_clock_mhz", 1410), f"{where}.sm_clock_mhz"),
        mem_clock_mhz=_int(spec.get("mem_clock_mhz", 2619), f"{where}.mem_clock_mhz"),
        lost=bool(spec.get("lost", False)),
        instances=instances,
        processes=processes,
        gpm=gpm,
        xids=tuple(_int(x, f"{where}.xids[{n}]") for n, x in enumerate(spec.get("xids") or [])),
    )


def _instance(raw: Any, where: str) -> SimInstance:
    spec = _mapping(raw, where)
    _check_keys(spec, _INSTANCE_KEYS, where)
    profile = str(spec.get("profile") or "")
    if not profile:
        raise ScenarioError(f"{where}.profile: required (e.g. 1g.10gb)")
    return SimInstance(
        gpu_instance_id=_int(spec.get("gi"), f"{where}.gi"),
        profile=profile,
        memory_mib=_int(spec.get("memory_mib", 9984), f"{where}.memory_mib"),
        memory_used_mib=_range(spec.get("memory_used_mib", 0), f"{where}.memory_used_mib"),
        activity=_range(spec.get("activity", 0), f"{where}.activity"),
    )


def _process(raw: Any, where: str) -> SimProcess:
    spec = _mapping(raw, where)
    _check_keys(spec, _PROCESS_KEYS, where)
    gi = spec.get("gi")
    pod_ref = spec.get("pod")
    pod: tuple[str, str] | None = None
    if pod_ref is not None:
        namespace, slash, name = str(pod_ref).partition("/")
        if not slash or not namespace or not name:
            raise ScenarioError(f"{where}.pod: expected NAMESPACE/POD, got {pod_ref!r}")
        pod = (namespace, name)
    sm = _range(spec.get("sm_utilization", 0), f"{where}.sm_utilization")
    if sm[1] > 1:
        raise ScenarioError(f"{where}.sm_utilization: a ratio from 0 to 1, got {sm[1]}")
    return SimProcess(
        pid=_int(spec.get("pid"), f"{where}.pid"),
        used_memory_mib=_int(spec.get("used_memory_mib", 0), f"{where}.used_memory_mib"),
        gpu_instance_id=None if gi is None else _int(gi, f"{where}.gi"),
        name=str(spec.get("name") or "python")[:15],  # comm holds 15 characters
        pod=pod,
        container=None if spec.get("container") is None else str(spec["container"]),
        sm_utilization=sm,
    )


def _pod(raw: Any, gpus: tuple[SimGpu, ...], where: str) -> PodAssignment:
    """A container holding devices: `gpus: [0]` (with `replica: N` for time-slicing),
    `mig: [[gpu, gi]]`, or literal `device_ids` as a kubelet would report them."""
    spec = _mapping(raw, where)
    _check_keys(spec, _POD_KEYS, where)
    for key in ("namespace", "pod", "container"):
        if not isinstance(spec.get(key), str) or not spec[key]:
            raise ScenarioError(f"{where}.{key}: required")
    replica = spec.get("replica")
    suffix = "" if replica is None else f"::{_int(replica, f'{where}.replica')}"
    device_ids: list[str] = [str(d) for d in spec.get("device_ids") or []]
    for n, index in enumerate(spec.get("gpus") or []):
        if not isinstance(index, int) or not 0 <= index < len(gpus):
            raise ScenarioError(f"{where}.gpus[{n}]: no GPU {index!r} in this scenario")
        device_ids.append(gpus[index].uuid + suffix)
    for n, pair in enumerate(spec.get("mig") or []):
        gpu_index, gi = pair if isinstance(pair, list) and len(pair) == 2 else (None, None)
        gpu = gpus[gpu_index] if isinstance(gpu_index, int) and 0 <= gpu_index < len(gpus) \
            else None
        if gpu is None or gi not in {i.gpu_instance_id for i in gpu.instances}:
            raise ScenarioError(f"{where}.mig[{n}]: no GPU instance {pair!r} in this scenario")
        device_ids.append(mig_uuid(gpu.uuid, int(gi)) + suffix)
    default_resource = "nvidia.com/gpu"
    if spec.get("mig") and not spec.get("gpus"):
        first = next(i for i in gpus[spec["mig"][0][0]].instances
                     if i.gpu_instance_id == spec["mig"][0][1])
        default_resource = f"nvidia.com/mig-{first.profile}"
    return PodAssignment(spec["namespace"], spec["pod"], spec["container"],
                         str(spec.get("resource") or default_resource), tuple(device_ids))


def _pod_spec(raw: Any, where: str) -> SimPod:
    spec = _mapping(raw, where)
    labels = _mapping(spec.get("labels") or {}, f"{where}.labels")
    uid = spec.get("uid") or pod_uid(spec["namespace"], spec["pod"])
    claim = spec.get("claim")
    devices: tuple[tuple[int, int | None], ...] = ()
    if claim is not None:
        if not isinstance(claim, str) or not claim or spec.get("device_ids"):
            raise ScenarioError(f"{where}.claim: a claim name, with gpus or mig (not device_ids)")
        devices = (*((int(i), None) for i in spec.get("gpus") or []),
                   *((int(g), int(gi)) for g, gi in spec.get("mig") or []))
    return SimPod(spec["namespace"], spec["pod"], spec["container"], str(uid),
                  {str(k): str(v) for k, v in labels.items()},
                  None if claim is None else str(claim), devices)


def _check_process_pods(gpus: tuple[SimGpu, ...], pods: tuple[SimPod, ...], path: str) -> None:
    """A process names a pod (and container) of `pods:`; an unknown one is an error."""
    containers: dict[tuple[str, str], list[str]] = {}
    for pod in pods:
        containers.setdefault((pod.namespace, pod.pod), []).append(pod.container)
    for gpu in gpus:
        for n, proc in enumerate(gpu.processes):
            where = f"{path}: gpus[{gpu.index}].processes[{n}]"
            if proc.pod is None:
                continue
            known = containers.get(proc.pod)
            if known is None:
                raise ScenarioError(f"{where}.pod: no pod {'/'.join(proc.pod)} in pods:")
            if proc.container is not None and proc.container not in known:
                raise ScenarioError(f"{where}.container: pod {'/'.join(proc.pod)} has no "
                                    f"container {proc.container!r}; it has {', '.join(known)}")


def parse_scenario(raw: Any, path: str) -> Scenario:
    top = _mapping(raw, path)
    _check_keys(top, _TOP_KEYS, path)  # first: a misspelt `gpus` is named, not "missing"
    seed = _int(top.get("seed", 1), f"{path}: seed")
    gpus_raw = top.get("gpus")
    if not isinstance(gpus_raw, list) or not gpus_raw:
        raise ScenarioError(f"{path}: gpus: expected a non-empty list")
    gpus = tuple(_gpu(g, i, seed, f"{path}: gpus[{i}]") for i, g in enumerate(gpus_raw))
    period = _range(top.get("period_seconds", 120), f"{path}: period_seconds")[0]
    if period <= 0:
        raise ScenarioError(f"{path}: period_seconds: must be positive")
    pods_raw = list(top.get("pods") or [])
    pods = tuple(_pod(p, gpus, f"{path}: pods[{i}]") for i, p in enumerate(pods_raw))
    specs = tuple(_pod_spec(p, f"{path}: pods[{i}]") for i, p in enumerate(pods_raw))
    _check_process_pods(gpus, specs, path)
    return Scenario(
        gpus=gpus,
        seed=seed,
        driver_version=str(top.get("driver_version", "580.105.08")),
        period_seconds=period,
        # The kubelet lists device-plugin devices; claimed ones come as dynamic_resources.
        pods=tuple(p for p, spec in zip(pods, specs, strict=True)
                   if p.device_ids and spec.claim is None),
        pod_specs=specs,
    )


def load_scenario(path: Path) -> Scenario:
    try:
        raw = yaml.safe_load(path.read_text(encoding="utf-8"))
    except OSError as exc:
        raise ScenarioError(f"{path}: cannot read scenario: {exc.strerror}") from None
    except yaml.MarkedYAMLError as exc:
        mark = exc.problem_mark
        where = f"{path}:{mark.line + 1}:{mark.column + 1}" if mark is not None else str(path)
        problem = " ".join(str(exc.problem or exc.context or "parse error").split())
        raise ScenarioError(f"{where}: invalid YAML: {problem}") from None
    except yaml.YAMLError as exc:
        raise ScenarioError(f"{path}: invalid YAML: {' '.join(str(exc).split())}") from None
    return parse_scenario(raw, str(path))


def builtin_scenario() -> Scenario:
    text = resources.files("gpu_enricher").joinpath("builtin-scenario.yaml").read_text("utf-8")
    return parse_scenario(yaml.safe_load(text), "<built-in scenario>")
