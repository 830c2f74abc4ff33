"""The simulated node's description: the built-in demo node and `--simulate FILE.yaml`.

Parsing is pure (`parse_scenario` takes the decoded YAML); errors name the file, the line where
the YAML was read from a file, and the key: `node.yaml:4: gpus[0].utilization: …`. Types are
strict (a string is not a number, a boolean not a number, a number not a string), and nothing
may appear twice where it would give two series one identity. The format is documented in
docs/simulate.md.
"""

import dataclasses
import re
from collections.abc import Mapping, Sequence
from importlib import resources
from pathlib import Path
from typing import Any, Final

from .churn import parse_churn
from .node import (
    MIG_COMPUTE_SLICES,
    PID_MAX,
    Scenario,
    SimGpu,
    SimInstance,
    SimPod,
    SimProcess,
    default_uuid,
    has_gpm,
)
from .scenario_containers import container_entries
from .scenario_pods import pod_entry
from .scenario_values import (
    At,
    as_bool,
    as_int,
    as_list,
    as_mapping,
    as_number,
    as_percent,
    as_pod_ref,
    as_range,
    as_ratio,
    as_text,
    as_user,
    check_keys,
    line_of,
    opt,
    opt_text,
    show,
)
from .scenario_values import ScenarioError as ScenarioError
from .scenario_yaml import decode_yaml, read_text

_GPU_KEYS: Final = frozenset({
    "model", "uuid", "pci_bus_id", "memory_mib", "utilization", "memory_used_mib",
    "power_watts", "temperature", "sm_clock_mhz", "mem_clock_mhz", "lost", "mig", "processes",
    "gpm", "xids", "thermal_slowdown", "hpc_jobs", "unbound_every_seconds",
})
_INSTANCE_KEYS: Final = frozenset({"gi", "profile", "memory_mib", "memory_used_mib", "activity"})
_PROCESS_KEYS: Final = frozenset({"pid", "used_memory_mib", "gi", "name", "pod", "container",
                                  "sm_utilization", "type", "docker", "user"})
_PROCESS_TYPES: Final = ("compute", "graphics", "mps")
"""NVML's lists; the MPS server is a compute process named `nvidia-cuda-mps-server`."""
_TOP_KEYS: Final = frozenset({"seed", "gpus", "driver_version", "period_seconds", "pods",
                              "churn", "containers", "runtime"})

# A GPU instance profile: compute slices, then memory (1g.10gb, 1g.10gb+me, 3g.40gb).
_PROFILE = re.compile(r"([1-9])g\.[0-9]+gb\S*")


def _gpu(raw: Any, index: int, seed: int, at: At) -> tuple[SimGpu, tuple[At, ...]]:
    """The GPU and where each of its processes was written."""
    spec = as_mapping(raw, at)
    check_keys(spec, _GPU_KEYS, at)
    model = opt_text(spec, at, "model", "NVIDIA H100 80GB HBM3", as_text)
    memory = opt(spec, at, "memory_mib", 81559, as_int)
    instances = _instances(spec, at, memory)
    processes, process_ats = _processes(spec, at, instances)
    xids_at = at.field(spec, "xids")
    xids = as_list(spec.get("xids"), xids_at)
    jobs_at = at.field(spec, "hpc_jobs")
    jobs = as_list(spec.get("hpc_jobs"), jobs_at)
    gpu = SimGpu(
        index=index,
        model=model,
        uuid=opt_text(spec, at, "uuid", default_uuid(seed, index), as_text),
        pci_bus_id=opt_text(spec, at, "pci_bus_id", f"00000000:{0x18 + 0x10 * index:02X}:00.0",
                        as_text),
        memory_mib=memory,
        utilization=opt(spec, at, "utilization", (0.0, 0.0), as_percent),
        memory_used_mib=opt(spec, at, "memory_used_mib", (0.0, 0.0), as_range),
        power_watts=opt(spec, at, "power_watts", (60.0, 70.0), as_range),
        temperature=opt(spec, at, "temperature", (30.0, 35.0), as_range),
        sm_clock_mhz=opt(spec, at, "sm_clock_mhz", (1410.0, 1410.0), as_range),
        mem_clock_mhz=opt(spec, at, "mem_clock_mhz", 2619, as_int),
        lost=opt(spec, at, "lost", False, as_bool),
        instances=instances,
        processes=processes,
        gpm=opt(spec, at, "gpm", has_gpm(model), as_bool),
        xids=tuple(as_int(x, xids_at.item(xids, n)) for n, x in enumerate(xids)),
        thermal_slowdown=opt(spec, at, "thermal_slowdown", False, as_bool),
        hpc_jobs=tuple(as_text(j, jobs_at.item(jobs, n)) for n, j in enumerate(jobs)),
        unbound_every_seconds=_unbound_every(spec, at),
    )
    return gpu, process_ats


def _unbound_every(spec: Mapping[str, Any], at: At) -> float | None:
    """A GPU bound to and unbound from the driver in turn (docs/flags.md: GPUs bound or
    unbound while running), at least a second each."""
    seconds: float | None = opt(spec, at, "unbound_every_seconds", None, as_number)
    if seconds is not None and not seconds >= 1:
        raise at.field(spec, "unbound_every_seconds").error(
            f"at least 1 (seconds), got {seconds}")
    return seconds


def _instances(spec: Mapping[str, Any], at: At, gpu_memory: int) -> tuple[SimInstance, ...]:
    """The GPU instances: distinct ids (two with one id would be two series of one instance),
    and together no more compute slices or memory than the GPU has."""
    mig_at = at.field(spec, "mig")
    mig = as_list(spec.get("mig"), mig_at)
    instances: list[SimInstance] = []
    first: dict[int, str] = {}
    for n, raw in enumerate(mig):
        item_at = mig_at.item(mig, n)
        inst = _instance(raw, item_at)
        if inst.gpu_instance_id in first:
            raise item_at.field(raw, "gi").error(
                f"GPU instance {inst.gpu_instance_id} is already {first[inst.gpu_instance_id]}")
        first[inst.gpu_instance_id] = item_at.key
        instances.append(inst)
    slices = sum(_slices(inst.profile) for inst in instances)
    if slices > MIG_COMPUTE_SLICES:
        raise mig_at.error(f"the GPU instances take {slices} compute slices; a GPU has "
                           f"{MIG_COMPUTE_SLICES}")
    memory = sum(inst.memory_mib for inst in instances)
    if memory > gpu_memory:
        raise mig_at.error(f"the GPU instances hold {memory} MiB; the GPU has {gpu_memory}")
    return tuple(instances)


def _slices(profile: str) -> int:
    """The profile's compute slices: the 3 of 3g.40gb (parse_scenario checked the form)."""
    match = _PROFILE.fullmatch(profile)
    return int(match.group(1)) if match else 0


def _instance(raw: Any, at: At) -> SimInstance:
    spec = as_mapping(raw, at)
    check_keys(spec, _INSTANCE_KEYS, at)
    profile_at = at.field(spec, "profile")
    profile = spec.get("profile")
    if profile is None:
        raise profile_at.error("required (e.g. 1g.10gb)")
    if not isinstance(profile, str) or not _PROFILE.fullmatch(profile):
        raise profile_at.error(f"expected a MIG profile such as 1g.10gb, got {show(profile)}")
    return SimInstance(
        gpu_instance_id=as_int(spec.get("gi"), at.field(spec, "gi")),
        profile=profile,
        memory_mib=opt(spec, at, "memory_mib", 9984, as_int),
        memory_used_mib=opt(spec, at, "memory_used_mib", (0.0, 0.0), as_range),
        activity=opt(spec, at, "activity", (0.0, 0.0), as_ratio),
    )


def _processes(spec: Mapping[str, Any], at: At, instances: tuple[SimInstance, ...]
               ) -> tuple[tuple[SimProcess, ...], tuple[At, ...]]:
    """The GPU's processes (one entry per pid: NVML lists a process once per GPU), each on one
    of its GPU instances when the GPU is in MIG mode, and where each was written."""
    list_at = at.field(spec, "processes")
    raws = as_list(spec.get("processes"), list_at)
    gis = {inst.gpu_instance_id for inst in instances}
    processes: list[SimProcess] = []
    ats: list[At] = []
    first: dict[int, str] = {}
    for n, raw in enumerate(raws):
        item_at = list_at.item(raws, n)
        proc = _process(raw, item_at)
        gi_at = item_at.field(raw, "gi")
        if proc.pid in first:
            raise item_at.field(raw, "pid").error(f"pid {proc.pid} is already {first[proc.pid]}")
        if proc.gpu_instance_id is None and gis:
            raise gi_at.error("required on a GPU in MIG mode")
        if proc.gpu_instance_id is not None and proc.gpu_instance_id not in gis:
            raise gi_at.error(f"no GPU instance {proc.gpu_instance_id} on this GPU"
                              + ("" if gis else " (it is not in MIG mode)"))
        first[proc.pid] = item_at.key
        processes.append(proc)
        ats.append(item_at)
    return tuple(processes), tuple(ats)


def _process(raw: Any, at: At) -> SimProcess:
    spec = as_mapping(raw, at)
    check_keys(spec, _PROCESS_KEYS, at)
    gi = spec.get("gi")
    kind = opt_text(spec, at, "type", "compute", as_text)
    if kind not in _PROCESS_TYPES:
        raise at.field(spec, "type").error(
            f"one of {', '.join(_PROCESS_TYPES)}, got {show(kind)}")
    return SimProcess(
        pid=as_int(spec.get("pid"), at.field(spec, "pid"), PID_MAX),
        used_memory_mib=opt(spec, at, "used_memory_mib", 0, as_int),
        gpu_instance_id=None if gi is None else as_int(gi, at.field(spec, "gi")),
        name=opt_text(spec, at, "name", "python", as_text)[:15],  # comm holds 15 characters
        pod=opt_text(spec, at, "pod", None, as_pod_ref),
        container=opt_text(spec, at, "container", None, as_text),
        sm_utilization=opt(spec, at, "sm_utilization", (0.0, 0.0), as_ratio),
        kind=kind,
        docker=opt_text(spec, at, "docker", None, as_text),
        user=opt_text(spec, at, "user", "root", as_user),
    )


def _check_gpus(gpus: tuple[SimGpu, ...], ats: list[At], specs: Sequence[Any]) -> None:
    """One GPU per UUID and per bus id: the UUID is the kubelet's device id and a label."""
    uuids: dict[str, str] = {}
    buses: dict[str, str] = {}
    for gpu, at, spec in zip(gpus, ats, specs, strict=True):
        for seen, value, key in ((uuids, gpu.uuid, "uuid"), (buses, gpu.pci_bus_id, "pci_bus_id")):
            if value in seen:
                raise at.field(spec, key).error(f"{value!r} is already {seen[value]}")
            seen[value] = at.key


def _check_processes(gpus: tuple[SimGpu, ...], process_ats: list[tuple[At, ...]],
                     pods: tuple[SimPod, ...]) -> None:
    """A process names a pod (and container) of `pods:`; a pid on several GPUs is one process."""
    containers: dict[tuple[str, str], list[str]] = {}
    for spec in pods:
        containers.setdefault((spec.namespace, spec.pod), []).append(spec.container)
    first: dict[int, tuple[SimProcess, str]] = {}
    for gpu, ats in zip(gpus, process_ats, strict=True):
        for proc, at in zip(gpu.processes, ats, strict=True):
            identity = (proc.name, proc.pod, proc.container)
            if proc.pid in first and identity != (
                    (seen := first[proc.pid][0]).name, seen.pod, seen.container):
                raise at.error(f"pid {proc.pid} is {first[proc.pid][1]} with another name or pod")
            first.setdefault(proc.pid, (proc, at.key))
            if proc.pod is None:
                continue
            known = containers.get(proc.pod)
            if known is None:
                raise at.error(f"pod: no pod {'/'.join(proc.pod)} in pods:")
            if proc.container is not None and proc.container not in known:
                raise at.error(f"container: pod {'/'.join(proc.pod)} has no container "
                               f"{proc.container!r}; it has {', '.join(known)}")


def parse_scenario(raw: Any, path: str) -> Scenario:
    """The scenario of decoded YAML (`files.YamlMap`/`YamlSeq` from a file carry lines for the
    errors)."""
    at = At(path, "", line_of(raw))
    top = as_mapping(raw, at)
    check_keys(top, _TOP_KEYS, at)  # first: a misspelt `gpus` is named, not "missing"
    seed = opt(top, at, "seed", 1, as_int)
    gpus_at = at.field(top, "gpus")
    gpus_raw = top.get("gpus")
    if not isinstance(gpus_raw, list) or not gpus_raw:
        raise gpus_at.error("expected a non-empty list")
    gpu_ats = [gpus_at.item(gpus_raw, i) for i in range(len(gpus_raw))]
    parsed = [_gpu(g, i, seed, gpu_ats[i]) for i, g in enumerate(gpus_raw)]
    gpus = tuple(gpu for gpu, _ in parsed)
    _check_gpus(gpus, gpu_ats, gpus_raw)
    period = opt(top, at, "period_seconds", 120.0, as_number)
    if period < 1:
        raise at.field(top, "period_seconds").error(f"at least 1 (seconds), got {period}")
    pods_at = at.field(top, "pods")
    pods_raw = as_list(top.get("pods"), pods_at)
    pods = [pod_entry(p, gpus, pods_at.item(pods_raw, i)) for i, p in enumerate(pods_raw)]
    specs = tuple(spec for _, spec in pods)
    _check_processes(gpus, [ats for _, ats in parsed], specs)
    scenario = Scenario(
        gpus=gpus,
        seed=seed,
        driver_version=opt_text(top, at, "driver_version", "580.105.08", as_text),
        period_seconds=period,
        # The kubelet lists device-plugin devices; claimed ones come as dynamic_resources.
        pods=tuple(p for p, spec in pods if p.device_ids and spec.claim is None),
        pod_specs=specs,
        containers=container_entries(top, at, parsed),
    )
    churn = parse_churn(top.get("churn"), at.field(top, "churn"), scenario)
    return dataclasses.replace(scenario, churn_pods_per_second=churn) if churn else scenario


def load_scenario(path: Path) -> Scenario:
    """The scenario file's node; every problem is one ScenarioError line naming the file."""
    return parse_scenario(decode_yaml(read_text(path), str(path)), str(path))


BUNDLED: Final = {"docker-host": "docker-host.yaml", "containerd-host": "containerd-host.yaml"}
"""Scenarios shipped beside the built-in one, by the name `--simulate NAME` gives them."""


def builtin_scenario(name: str = "builtin") -> Scenario:
    """The built-in node, or a bundled scenario by its name (`BUNDLED`)."""
    file = BUNDLED.get(name, "builtin-scenario.yaml")
    text = resources.files(__package__).joinpath(file).read_text("utf-8")
    return parse_scenario(decode_yaml(text, f"<{name} scenario>"), f"<{name} scenario>")
