"""containerd's answers → its running containers and the GPUs each was given. Pure.

`Namespaces.List` names every namespace (`default`, nerdctl's, `moby` under Docker, `k8s.io`
under a kubelet); `Tasks.List` in each names its running tasks; `Containers.Get` describes a
container: its labels (nerdctl's name, `nerdctl/name`) and its OCI spec, JSON in a
`google.protobuf.Any`, whose environment may hold `NVIDIA_VISIBLE_DEVICES` and whose
`linux.cgroupsPath` says where its processes run. The label is the name, else the ID (as
Docker's: the 12-character short ID of a 64-hex one).
"""

import json
import re
from dataclasses import dataclass
from typing import Any, Final

from ..attribution.containers import GpuRequest
from ..rpc._generated.containerd.services.containers.v1 import containers_pb2
from ..rpc._generated.containerd.services.events.v1 import events_pb2
from ..rpc._generated.containerd.services.namespaces.v1 import namespace_pb2
from ..rpc._generated.containerd.services.tasks.v1 import tasks_pb2
from ..rpc._generated.containerd.types.task import task_pb2
from .engine import compose_of, label_value, visible_devices
from .reader import RuntimeFailure

NAME_LABEL: Final = "nerdctl/name"
UPDATE_TOPIC: Final = "/containers/update"
"""A container's labels changed (`nerdctl rename` rewrites its name label)."""
CHANGE_TOPICS: Final = ("/tasks/start", "/tasks/exit", "/tasks/delete", "/containers/delete",
                        UPDATE_TOPIC)
"""The events after which the running tasks, or their names, differ (`ctr events` shows all)."""
RUNNING: Final[int] = task_pb2.RUNNING
_SLICE: Final = re.compile(r"[\w.@\\:-]+\.slice")


@dataclass(frozen=True, slots=True)
class DescribedContainer:
    """What `Containers.Get` says of one container."""

    label: str
    gpus: GpuRequest | None
    cgroup: str | None
    """The cgroup its processes run in, as a path (`/lab/trainer`); None when unsaid."""
    compose: tuple[str, str] | None = None  # nerdctl compose's project and service


def _parse(message_type: Any, wire: bytes, what: str) -> Any:
    try:
        return message_type.FromString(wire)
    except Exception as exc:  # protobuf's DecodeError, which it ships no types for
        raise RuntimeFailure("answer", f"containerd's {what} answer does not parse: {exc}"
                             ) from None


def namespaces(wire: bytes) -> list[str]:
    answer = _parse(namespace_pb2.ListNamespacesResponse, wire, "Namespaces.List")
    return [ns.name for ns in answer.namespaces if ns.name]


def running_tasks(wire: bytes) -> list[tuple[str, int]]:
    """(container ID, PID) of each running task, in containerd's order. A task's `id` is its
    container's ID (containerd 1.6 and 1.7 leave `container_id` empty in this answer)."""
    answer = _parse(tasks_pb2.ListTasksResponse, wire, "Tasks.List")
    return [(cid, task.pid) for task in answer.tasks
            if task.status == RUNNING and (cid := task.id or task.container_id)]


def get_request(container_id: str) -> bytes:
    message: bytes = containers_pb2.GetContainerRequest(id=container_id).SerializeToString()
    return message


def systemd_cgroup(slice_name: str, prefix: str, name: str) -> str:
    """runc's systemd form `slice:prefix:name` → the cgroup path systemd makes of it: the slice
    expanded by its dashes (`a-b.slice` → `/a.slice/a-b.slice`), then `prefix-name.scope`."""
    slice_name = slice_name or "system.slice"
    path = ""
    if slice_name != "-.slice" and _SLICE.fullmatch(slice_name):
        stem = slice_name.removesuffix(".slice")
        parts = stem.split("-")
        path = "".join("/" + "-".join(parts[:i + 1]) + ".slice" for i in range(len(parts)))
    unit = f"{prefix}-{name}.scope" if prefix else name
    return f"{path}/{unit}"


def cgroup_path(cgroups_path: str) -> str | None:
    """An OCI spec's `linux.cgroupsPath` → the cgroup path a process of it shows in
    `/proc/<pid>/cgroup`: as written (cgroupfs, `/lab/trainer`), or from the systemd form."""
    value = cgroups_path.strip()
    if not value:
        return None
    if not value.startswith("/") and value.count(":") == 2:
        return systemd_cgroup(*value.split(":"))
    return "/" + value.strip("/")


def described(wire: bytes, container_id: str) -> DescribedContainer:
    container = _parse(containers_pb2.GetContainerResponse, wire, "Containers.Get").container
    try:
        spec = json.loads(container.spec.value) if container.spec.value else {}
    except (ValueError, RecursionError):
        # One container's spec that is not the OCI JSON costs its GPUs and cgroup, never the
        # other containers' labels: it is named, and given nothing.
        spec = {}
    spec = spec if isinstance(spec, dict) else {}
    process = spec.get("process")
    env = process.get("env") if isinstance(process, dict) else None
    linux = spec.get("linux")
    path = linux.get("cgroupsPath") if isinstance(linux, dict) else None
    return DescribedContainer(
        label_value(container.labels.get(NAME_LABEL, ""), container.id or container_id),
        visible_devices(env if isinstance(env, list) else []),
        cgroup_path(path) if isinstance(path, str) else None,
        compose_of(dict(container.labels)))


def subscribe_request() -> bytes:
    """`Events.Subscribe` for the topics that change the running tasks, every namespace."""
    filters = [f'topic=="{topic}"' for topic in CHANGE_TOPICS]  # any one of them
    message: bytes = events_pb2.SubscribeRequest(filters=filters).SerializeToString()
    return message


def changed_topic(wire: bytes) -> str | None:
    """The topic of one `Envelope` of the stream when it says the running tasks or a
    container's labels changed; None for any other."""
    topic = _parse(events_pb2.Envelope, wire, "Events.Subscribe").topic
    return topic if topic in CHANGE_TOPICS else None
