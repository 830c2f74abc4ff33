"""The Docker Engine API's answers → the containers that were given GPUs. Pure.

`GET /containers/json` lists the running containers; `GET /containers/<id>/json` says which GPUs
one was given: `HostConfig.DeviceRequests` of the `nvidia` driver or the `gpu` capability (what
`docker run --gpus` and Compose's `deploy.resources.reservations.devices` write), else
`NVIDIA_VISIBLE_DEVICES` in `Config.Env` (the nvidia runtime's own variable). The rules and
the label's form are dcgm-exporter 4.8.3's (`container_runtime.go`).
"""

import json
import re
import unicodedata
from collections.abc import Mapping, Sequence
from typing import Any, Final

from ..attribution.containers import GpuRequest
from .reader import RuntimeFailure

MAX_LABEL_BYTES: Final = 128
CONTAINER_CHANGES: Final = ("start", "die", "destroy", "remove", "rename")
"""The events after which the running containers, or their names, differ (Docker's `destroy`
is Podman's `remove`)."""
COMPOSE_PROJECT: Final = "com.docker.compose.project"
COMPOSE_SERVICE: Final = "com.docker.compose.service"
SHORT_ID: Final = 12
_NO_DEVICES: Final = frozenset({"", "none", "void"})
# The files a runtime bind-mounts into its container from the container's own directory:
# Docker's /var/lib/docker/containers/<id>/hostname, Podman's …/overlay-containers/<id>/userdata/.
_OWN_FILES: Final = re.compile(
    r"/([0-9a-f]{64})/(?:userdata/)?(?:hostname|hosts|resolv\.conf)\s")


class EngineAnswerError(RuntimeFailure):
    """An answer that is not the JSON the Engine API documents."""

    def __init__(self, message: str) -> None:
        super().__init__("answer", message)


def decode(body: bytes, path: str) -> Any:
    try:
        return json.loads(body)
    except (ValueError, RecursionError) as exc:  # UnicodeDecodeError included; too deep
        raise EngineAnswerError(f"{path}: not JSON ({exc})") from None


def listed(answer: Any) -> list[tuple[str, str]]:
    """`/containers/json` → (ID, first name) of each running container, in the runtime's order."""
    if not isinstance(answer, list):
        raise EngineAnswerError("/containers/json: not a list")
    result: list[tuple[str, str]] = []
    for item in answer:
        if not isinstance(item, dict) or not isinstance(item.get("Id"), str) or not item["Id"]:
            continue
        names = item.get("Names")
        first = names[0] if isinstance(names, list) and names and isinstance(names[0], str) \
            else ""
        result.append((item["Id"], first))
    return result


def compose_of(labels: Any) -> tuple[str, str] | None:
    """(project, service) from a container's labels, where Compose started it (Docker's and
    nerdctl's Compose write the same two labels)."""
    if not isinstance(labels, Mapping):
        return None
    project, service = labels.get(COMPOSE_PROJECT), labels.get(COMPOSE_SERVICE)
    if not isinstance(project, str) or not isinstance(service, str) or not project:
        return None
    return label_value(project, ""), label_value(service, "")


def listed_compose(answer: Any) -> dict[str, tuple[str, str]]:
    """`/containers/json` → (project, service) by container ID, of those Compose started."""
    found: dict[str, tuple[str, str]] = {}
    for item in answer if isinstance(answer, list) else ():
        if isinstance(item, dict) and isinstance(item.get("Id"), str) and \
                (compose := compose_of(item.get("Labels"))) is not None:
            found[item["Id"]] = compose
    return found


def container_changed(line: bytes) -> bool:
    """Whether one line of `GET /events` says a container started, stopped, was removed or
    renamed (Docker's `Action`, Podman's compatible `status`); anything else, garbage
    included, says nothing."""
    try:
        event = json.loads(line)
    except (ValueError, RecursionError):
        return False
    if not isinstance(event, dict) or event.get("Type", "container") != "container":
        return False
    action = event.get("Action") or event.get("status")
    return isinstance(action, str) and action.partition(":")[0] in CONTAINER_CHANGES


def label_value(name: str, container_id: str) -> str:
    """The name without Docker's leading `/`, else the short ID; control characters as `_`; at
    most 128 bytes, never a split UTF-8 character."""
    value = name.removeprefix("/").strip() or container_id.strip()[:SHORT_ID]
    value = "".join("_" if unicodedata.category(c) == "Cc" else c for c in value)
    encoded = value.encode()
    if len(encoded) > MAX_LABEL_BYTES:
        value = encoded[:MAX_LABEL_BYTES].decode(errors="ignore")
    return value


def _is_gpu_request(request: Mapping[str, Any]) -> bool:
    if str(request.get("Driver") or "").lower() == "nvidia":
        return True
    groups = request.get("Capabilities") or []
    return any(str(c).lower() == "gpu" for group in groups if isinstance(group, list)
               for c in group)


def visible_devices(env: Sequence[Any]) -> GpuRequest | None:
    """`NVIDIA_VISIBLE_DEVICES` in a container's environment (`NAME=value` entries) → the GPUs
    it names (None: none, `none`, `void`, or no such variable)."""
    for entry in env:
        if isinstance(entry, str) and entry.startswith("NVIDIA_VISIBLE_DEVICES="):
            tokens = [t.strip() for t in entry.partition("=")[2].split(",")]
            kept = tuple(t for t in tokens if t.lower() not in _NO_DEVICES | {"all"})
            every = any(t.lower() == "all" for t in tokens)
            return GpuRequest(kept, every) if kept or every else None
    return None


def inspected(inspect: Any) -> tuple[str, GpuRequest | None]:
    """`/containers/<id>/json` → its name (as written, `/trainer`; "" if none) and the GPUs it
    was given (None: none named; a count alone, as `--gpus 1`, names none)."""
    if not isinstance(inspect, dict):
        raise EngineAnswerError("/containers/<id>/json: not an object")
    name = inspect.get("Name")
    return (name if isinstance(name, str) else ""), _gpu_request(inspect)


def _gpu_request(inspect: dict[str, Any]) -> GpuRequest | None:
    host = inspect.get("HostConfig") or {}
    requests = host.get("DeviceRequests") or [] if isinstance(host, dict) else []
    explicit: list[str] = []
    every = counted = False
    for request in requests:
        if not isinstance(request, dict) or not _is_gpu_request(request):
            continue
        ids = request.get("DeviceIDs") or []
        if ids:
            explicit += [str(i) for i in ids]
        elif isinstance(request.get("Count"), int) and request["Count"] < 0:
            every = True
        elif isinstance(request.get("Count"), int) and request["Count"] > 0:
            counted = True
    if explicit:
        return GpuRequest(tuple(explicit))
    if every:
        return GpuRequest(every_gpu=True)
    if counted:
        return None
    config = inspect.get("Config") or {}
    env = config.get("Env") or [] if isinstance(config, dict) else []
    return visible_devices(env if isinstance(env, list) else [])


def own_container(mountinfo: str) -> str | None:
    """The ID of the container this process runs in, from its /proc/self/mountinfo (the
    runtime's bind mounts of /etc/hostname and friends); None outside a container. The
    exporter's own container is given every GPU (`NVIDIA_VISIBLE_DEVICES=all`, to read them),
    which is no use of them: it is left out (dcgm-exporter copies its own series too)."""
    found = _OWN_FILES.search(mountinfo)
    return found[1] if found else None
