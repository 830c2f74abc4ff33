"""Which containers a container runtime gave which GPUs, on hosts without Kubernetes
(`--container-labels`, dcgm-exporter 4.8.3's container mapper): the containers as the runtime
describes them, and the series each one labels. Pure; runtime/ asks the runtime.

dcgm-exporter's rules (`internal/pkg/transformation/container_runtime.go`, container.go):
a container's GPUs are its explicit device IDs, else "all", else nothing for a count alone;
a token is a GPU UUID (`GPU-…`), an NVML index (`0`, `nvidia0`) or the legacy MIG form
`MIG-GPU-<uuid>/<gpu instance>/<compute instance>`; a series is labelled by the containers keyed
by its GPU instance first, then by its GPU, each name once. Beyond it, the MIG UUID that NVML and
nvidia-container-toolkit use today (`MIG-<uuid>`) names its GPU instance too.
"""

from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Final

from ..fields.names import LABEL_CONTAINER, LABEL_USER
from ..model import HostProcess, NodeSnapshot, ProcessTable
from .devices import EntityKey

Occupant = tuple[str, str]
"""(`container`, its name) or (`user`, the name of who runs a process in no container)."""
Occupants = Mapping[EntityKey, tuple[Occupant, ...]]
"""GPU (index, None) or GPU instance (index, id) → the occupant each copy of its series
carries."""

NO_OCCUPANTS: Final[Occupants] = {}


@dataclass(frozen=True, slots=True)
class GpuRequest:
    """The GPUs a container was given, as its runtime records them."""

    tokens: tuple[str, ...] = ()
    """Device IDs (`DeviceRequests[].DeviceIDs`, or `NVIDIA_VISIBLE_DEVICES`), as written."""
    every_gpu: bool = False
    """`--gpus all` (a count of -1) or `NVIDIA_VISIBLE_DEVICES=all`."""


@dataclass(frozen=True, slots=True)
class RuntimeContainer:
    """A running container with GPUs given explicitly (or all of them)."""

    container_id: str
    name: str
    """The `container` label's value: the runtime's name, else the 12-character short ID."""
    gpus: GpuRequest


@dataclass(frozen=True, slots=True)
class RuntimeContainers:
    """One answer of the runtime: its running containers that were given GPUs, in its order,
    and the label of every running container by ID and, where the runtime says it (containerd),
    by cgroup path: those found through their processes."""

    containers: tuple[RuntimeContainer, ...] = ()
    names: Mapping[str, str] = field(default_factory=dict)
    cgroups: Mapping[str, str] = field(default_factory=dict)
    """A container's cgroup path (`/lab/trainer`, `/system.slice/nerdctl-<id>.scope`) → its
    label: containerd's own IDs (`ctr run … trainer`) are not the 64-hex IDs a cgroup path
    can be searched for, so its processes are found by their cgroup."""
    compose: Mapping[str, tuple[str, str]] = field(default_factory=dict)
    """A container's label → its Compose project and service, where Compose (Docker's, or
    nerdctl's) started it (`com.docker.compose.project`, `com.docker.compose.service`)."""

    def name_of(self, host: HostProcess) -> str | None:
        """The label of the container a process outside any pod runs in, if the runtime lists
        it: by the ID its cgroup names, else by the cgroup it sits in or under."""
        if host.runtime_container is not None and host.runtime_container in self.names:
            return self.names[host.runtime_container]
        path = host.cgroup
        if not self.cgroups or not path:
            return None
        outside = path.startswith("/../")
        if outside:
            # The exporter in a cgroup namespace of its own (nerdctl's default on cgroup v2)
            # sees other cgroups relative to its own: `/../../lab/trainer`. Without what sits
            # above, the path is matched by its end.
            while path.startswith("/../"):
                path = path[3:]
        while path and path != "/":
            if path in self.cgroups:
                return self.cgroups[path]
            if outside:
                found = [n for known, n in self.cgroups.items() if known.endswith(path)]
                if len(found) == 1:
                    return found[0]
            path = path.rpartition("/")[0]
        return None


def _legacy_mig(token: str, node: NodeSnapshot) -> EntityKey | None:
    """`MIG-GPU-<uuid>/<gi>/<ci>` (a `::…` suffix ignored) → that GPU instance, if it is here."""
    parts = token.partition("::")[0].removeprefix("MIG-").split("/")
    if len(parts) < 2 or not parts[0].startswith("GPU-") or not parts[1].isdigit():
        return None
    gpu = next((g for g in node.gpus if g.identity.uuid == parts[0]), None)
    if gpu is None:
        return None
    instance = int(parts[1])
    found = any(i.gpu_instance_id == instance for i in gpu.instances)
    return (gpu.identity.index, instance) if found else None


def _token_key(token: str, node: NodeSnapshot) -> EntityKey | None:
    if token.startswith("MIG-"):
        for gpu in node.gpus:  # MIG-<uuid>: NVML's own name of the instance
            for inst in gpu.instances:
                if inst.uuid == token:
                    return (gpu.identity.index, inst.gpu_instance_id)
        return _legacy_mig(token, node)
    if token.startswith("GPU-"):
        return next(((g.identity.index, None) for g in node.gpus if g.identity.uuid == token),
                    None)
    number = token.removeprefix("nvidia")
    if not number.isdigit():
        return None
    return next(((g.identity.index, None) for g in node.gpus
                 if g.identity.index == int(number)), None)


def granted(request: GpuRequest, node: NodeSnapshot) -> list[EntityKey]:
    """The GPUs and GPU instances a request names on this node, each once, in its order."""
    if request.every_gpu:
        return [(g.identity.index, None) for g in node.gpus]
    keys: list[EntityKey] = []
    for token in request.tokens:
        key = _token_key(token.strip(), node)
        if key is not None and key not in keys:
            keys.append(key)
    return keys


def _who(host: HostProcess, found: RuntimeContainers) -> Occupant | None:
    """The label that names a process in no pod: its container, else its user."""
    if host.container is not None:
        return None  # a pod's: the pod's labels name it
    container = found.name_of(host)
    if container is not None:
        return (LABEL_CONTAINER, container)
    if host.runtime_container is None and host.user is not None:
        return (LABEL_USER, host.user)
    return None  # a container the runtime does not list (yet): unnamed


def _using(node: NodeSnapshot,
           outside: Mapping[int, Occupant]) -> dict[EntityKey, list[Occupant]]:
    """Who NVML saw using each GPU or GPU instance, in its order: the containers whose
    processes run there (/proc's cgroup names the container, the runtime its name: a container
    started with a count, `--gpus 1`, or one using a GPU it was never given), and the people
    whose processes run there in no container (issue 34)."""
    using: dict[EntityKey, list[Occupant]] = {}
    for gpu in node.gpus:
        for sample in gpu.processes:
            who = outside.get(sample.pid)
            if who is None:
                continue
            gi = sample.gpu_instance_id if gpu.instances else None
            found = using.setdefault((gpu.identity.index, gi), [])
            if who not in found:
                found.append(who)
    return using


def occupants(node: NodeSnapshot, found: RuntimeContainers,
              outside: Mapping[int, Occupant] | None = None) -> Occupants:
    """Each GPU's and GPU instance's occupants: the containers given an instance first, then
    those given its whole GPU (the runtime's order within each), then the containers and people
    found using it through their processes (`outside`: `outside_pods`'s); each once."""
    by_key: dict[EntityKey, list[Occupant]] = {}
    for container in found.containers:
        for key in granted(container.gpus, node):
            given = by_key.setdefault(key, [])
            if (LABEL_CONTAINER, container.name) not in given:
                given.append((LABEL_CONTAINER, container.name))
    using = _using(node, outside or {})
    result: dict[EntityKey, tuple[Occupant, ...]] = {}
    for gpu in node.gpus:
        index = gpu.identity.index
        whole = by_key.get((index, None), [])
        keys: list[EntityKey] = [(index, i.gpu_instance_id) for i in gpu.instances]
        if gpu.instances and whole:
            result[(index, None)] = tuple(whole)  # the GPU shown whole (`-d g`)
        for key in keys or [(index, None)]:  # a whole GPU's `own` is `whole`: kept once
            found_here = list(dict.fromkeys([*by_key.get(key, []), *whole,
                                             *using.get(key, [])]))
            if found_here:
                result[key] = tuple(found_here)
    return result


def outside_pods(found: RuntimeContainers | None,
                 processes: ProcessTable | None) -> dict[int, Occupant]:
    """PID → the label that names a process in no pod, for the process families: the name of
    its container (`container`, with `--container-labels`), else its user (`user`; a host
    process on a machine people share)."""
    if processes is None:
        return {}
    runtime = found if found is not None else RuntimeContainers()
    return {pid: who for pid, host in processes.processes.items()
            if (who := _who(host, runtime)) is not None}
