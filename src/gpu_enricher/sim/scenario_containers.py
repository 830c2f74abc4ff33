"""A scenario's `containers:` entries (sim/scenario.py reads the rest): the containers of a
Docker host, as its Engine API describes them, given GPUs the ways `docker run` gives them; or,
with `runtime: containerd`, of a containerd host, in its namespaces. Pure.

    containers:
      - {name: trainer, visible_devices: "GPU-…"}   # the nvidia runtime's variable
      - {name: indexer, gpus: ["1"]}                # --gpus device=1 (IDs or UUIDs)
      - {name: everything, gpus: all}               # --gpus all
      - {name: counted, count: 1}                   # --gpus 1: named by its processes
    gpus:
      - processes: [{pid: 4100, docker: counted}]   # a process of that container, on GPU 0

    runtime: containerd
    containers:
      - {name: trainer, nerdctl: true, visible_devices: "0"}  # nerdctl run: a 64-hex ID
      - {name: batch, namespace: lab}                         # ctr -n lab run … batch
"""

from collections.abc import Mapping, Sequence
from typing import Any, Final

from .node import SimContainer, SimGpu, docker_id
from .scenario_values import (
    At,
    as_bool,
    as_int,
    as_list,
    as_mapping,
    as_text,
    check_keys,
    opt,
    opt_text,
)

_KEYS: Final = frozenset({"name", "visible_devices", "gpus", "count", "compose"})
_CONTAINERD_KEYS: Final = frozenset({"name", "visible_devices", "namespace", "nerdctl", "compose"})
RUNTIMES: Final = ("docker", "containerd")


def _request(device_ids: list[str], count: int) -> dict[str, object]:
    return {"Driver": "", "Count": count, "DeviceIDs": device_ids, "Capabilities": [["gpu"]],
            "Options": {}}


def _compose(spec: Mapping[str, Any], at: At) -> dict[str, str]:
    """`compose: project/service` → the labels Compose gives the containers it starts."""
    if "compose" not in spec:
        return {}
    value_at = at.field(spec, "compose")
    project, slash, service = as_text(spec["compose"], value_at).partition("/")
    if not (project and slash and service):
        raise value_at.error("expected project/service")
    return {"com.docker.compose.project": project, "com.docker.compose.service": service}


def container_entry(raw: Any, at: At, runtime: str = "docker") -> SimContainer:
    spec = as_mapping(raw, at)
    check_keys(spec, _CONTAINERD_KEYS if runtime == "containerd" else _KEYS, at)
    name = opt_text(spec, at, "name", "", as_text)
    if not name:
        raise at.field(spec, "name").error("required")
    env: tuple[str, ...] = ()
    if "visible_devices" in spec:
        devices = as_text(spec["visible_devices"], at.field(spec, "visible_devices"), empty=True)
        env = (f"NVIDIA_VISIBLE_DEVICES={devices}",)
    labels = _compose(spec, at)
    if runtime == "containerd":
        # ctr names a container by its ID; nerdctl gives it a 64-hex ID and its name as a label.
        nerdctl = opt(spec, at, "nerdctl", False, as_bool)
        return SimContainer(docker_id(name) if nerdctl else name, name, env,
                            namespace=opt_text(spec, at, "namespace", "default", as_text),
                            labels=labels)
    requests: list[dict[str, object]] = []
    gpus_at = at.field(spec, "gpus")
    if spec.get("gpus") == "all":
        requests.append(_request([], -1))
    elif "gpus" in spec:
        ids = as_list(spec["gpus"], gpus_at)
        requests.append(_request([as_text(str(i), gpus_at.item(ids, n))
                                  for n, i in enumerate(ids)], 0))
    if "count" in spec:
        requests.append(_request([], as_int(spec["count"], at.field(spec, "count"))))
    return SimContainer(docker_id(name), name, env, tuple(requests), labels=labels)


def container_entries(top: Any, at: At, gpus: Sequence[tuple[SimGpu, tuple[At, ...]]],
                      ) -> tuple[SimContainer, ...]:
    """The entries, each name once; a GPU process's `docker:` names one of them."""
    runtime = opt_text(top, at, "runtime", "docker", as_text)
    if runtime not in RUNTIMES:
        raise at.field(top, "runtime").error(f"expected one of {', '.join(RUNTIMES)}, got "
                                             f"{runtime!r}")
    containers_at = at.field(top, "containers")
    raw = as_list(top.get("containers"), containers_at)
    found = tuple(container_entry(c, containers_at.item(raw, i), runtime)
                  for i, c in enumerate(raw))
    names = [c.name for c in found]
    for i, name in enumerate(names):
        if name in names[:i]:
            raise containers_at.item(raw, i).error(f"a second container named {name!r}")
    for gpu, process_ats in gpus:
        for process, process_at in zip(gpu.processes, process_ats, strict=True):
            if process.docker is not None and process.docker not in names:
                raise process_at.error(f"docker: no container {process.docker!r} in "
                                       "containers:")
    return found
