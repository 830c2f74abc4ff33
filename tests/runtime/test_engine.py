"""The Engine API's answers → which container labels which series: dcgm-exporter 4.8.3's
`container_runtime_test.go` restated (its GPUs `GPU-0`, `GPU-1`, a MIG GPU with GPU instance
8), and what it leaves out (the MIG UUID form)."""

import json
from typing import Any

from hypothesis import given
from hypothesis import strategies as st

from gpu_enricher.attribution.containers import (
    GpuRequest,
    RuntimeContainer,
    RuntimeContainers,
    occupants,
)
from gpu_enricher.model import DeviceIdentity, GpuInstance, GpuSnapshot, NodeSnapshot
from gpu_enricher.runtime.engine import (
    MAX_LABEL_BYTES,
    compose_of,
    container_changed,
    inspected,
    label_value,
    listed,
    listed_compose,
    own_container,
)


def gpu(index: int, *instances: GpuInstance) -> GpuSnapshot:
    return GpuSnapshot(DeviceIdentity(index, f"GPU-{index}", f"0000:{index}:00.0", "H100"),
                       mig_enabled=bool(instances), instances=instances)


NODE = NodeSnapshot((gpu(0), gpu(1)))
MIG_NODE = NodeSnapshot((gpu(0, GpuInstance(8, 5, "1g.10gb", "MIG-4c2a-8")), gpu(1)))


def names(node: NodeSnapshot, *inspects: dict[str, Any]) -> dict[tuple[int, int | None],
                                                                 tuple[str, ...]]:
    """dcgm-exporter's ContainersByGPU, as our keys: each inspect answer as the runtime gives
    it, listed in this order."""
    found = []
    for answer in inspects:
        name, request = inspected(json.loads(json.dumps(answer)))
        if request is not None:
            found.append(RuntimeContainer(answer["Id"], label_value(name, answer["Id"]), request))
    return {key: tuple(name for label, name in found_here if label == "container")
            for key, found_here in occupants(node, RuntimeContainers(tuple(found))).items()}


def env(*variables: str) -> dict[str, Any]:
    return {"Env": list(variables)}


def test_explicit_ids_all_and_a_count_alone() -> None:
    got = names(NODE,
                {"Id": "c1", "Name": "/trainer", "HostConfig": {"DeviceRequests": [
                    {"Driver": "nvidia", "DeviceIDs": ["GPU-0"], "Capabilities": [["gpu"]]}]}},
                {"Id": "c2", "Name": "/all-gpus", "Config": env("NVIDIA_VISIBLE_DEVICES=all")},
                {"Id": "c3", "Name": "/count-only", "HostConfig": {"DeviceRequests": [
                    {"Driver": "nvidia", "Count": 1, "Capabilities": [["gpu"]]}]}})
    assert got == {(0, None): ("trainer", "all-gpus"), (1, None): ("all-gpus",)}


def test_tokens_are_normalised_to_one_key_per_gpu() -> None:
    assert names(NODE,
                 {"Id": "c1", "Name": "/numeric", "Config": env("NVIDIA_VISIBLE_DEVICES=0,9")},
                 {"Id": "c2", "Name": "/prefer-uuid",
                  "Config": env("NVIDIA_VISIBLE_DEVICES=GPU-1,1")},
                 {"Id": "c3", "Name": "/none", "Config": env("NVIDIA_VISIBLE_DEVICES=none")},
                 ) == {(0, None): ("numeric",), (1, None): ("prefer-uuid",)}
    assert names(NODE, {"Id": "c1", "Name": "/mixed",
                        "Config": env("NVIDIA_VISIBLE_DEVICES=GPU-1,0")}) == {
        (0, None): ("mixed",), (1, None): ("mixed",)}
    assert names(NODE, {"Id": "c1", "Name": "/dev",
                        "Config": env("NVIDIA_VISIBLE_DEVICES=nvidia1, void,,")}) == {
        (1, None): ("dev",)}


def test_mig_forms_name_the_gpu_instance() -> None:
    legacy = names(MIG_NODE, {"Id": "c1", "Name": "/mig-container",
                              "Config": env("NVIDIA_VISIBLE_DEVICES=MIG-GPU-0/8/5")})
    assert legacy == {(0, 8): ("mig-container",)}
    # Beyond dcgm-exporter: the MIG UUID NVML and nvidia-container-toolkit use today.
    modern = names(MIG_NODE, {"Id": "c1", "Name": "/mig-uuid",
                              "Config": env("NVIDIA_VISIBLE_DEVICES=MIG-4c2a-8")},
                   {"Id": "c2", "Name": "/whole", "Config": env("NVIDIA_VISIBLE_DEVICES=0")})
    assert modern == {(0, 8): ("mig-uuid", "whole"), (0, None): ("whole",)}, \
        "an instance's own containers first, then its GPU's"
    assert names(MIG_NODE, {"Id": "c1", "Name": "/bad", "Config": env(
        "NVIDIA_VISIBLE_DEVICES=MIG-GPU-0/not-a-number/5,MIG-GPU-0/7/0,999")}) == {}


def test_device_requests_win_over_the_environment() -> None:
    request = {"Id": "c1", "Name": "/r", "Config": env("NVIDIA_VISIBLE_DEVICES=1"),
               "HostConfig": {"DeviceRequests": [{"Driver": "", "Count": -1,
                                                  "Capabilities": [["GPU"]]}]}}
    assert names(NODE, request) == {(0, None): ("r",), (1, None): ("r",)}
    other_driver = {**request, "HostConfig": {"DeviceRequests": [
        {"Driver": "amd", "DeviceIDs": ["0"], "Capabilities": [["compute"]]}]}}
    assert names(NODE, other_driver) == {(1, None): ("r",)}, "not a GPU request: the variable"


def test_the_label_is_the_name_else_the_short_id_sanitised() -> None:
    assert label_value("/" + "a" * 140 + "\ncontrol", "c1") == "a" * MAX_LABEL_BYTES
    assert label_value("/x\ty", "c1") == "x_y"
    utf8 = label_value("/" + "é" * 80, "c1")
    assert len(utf8.encode()) <= MAX_LABEL_BYTES and utf8 == "é" * 64
    assert label_value("", "bbbbbbbbbbbb9999") == "bbbbbbbbbbbb"
    assert label_value("/", "short") == "short"


@given(st.text(), st.text())
def test_any_name_makes_a_label_prometheus_takes(name: str, container_id: str) -> None:
    value = label_value(name, container_id)
    assert len(value.encode()) <= MAX_LABEL_BYTES
    assert not any(c < " " or "\x7f" <= c <= "\x9f" for c in value)


def test_the_listing_keeps_the_runtime_order_and_skips_what_has_no_id() -> None:
    assert listed([{"Id": "aaaaaaaaaaaa9999", "Names": ["/from-list"]}, {"Id": "b"},
                   {"Names": ["/no-id"]}, "garbage"]) == [
        ("aaaaaaaaaaaa9999", "/from-list"), ("b", "")]
    assert inspected({"Id": "x"}) == ("", None)


def test_a_request_is_plain_data() -> None:
    assert inspected({"Name": "/t", "Config": env("NVIDIA_VISIBLE_DEVICES=all,GPU-0")}) == (
        "/t", GpuRequest(("GPU-0",), every_gpu=True))


def test_the_exporter_s_own_container_is_found_from_its_mounts() -> None:
    docker = ("1620 1587 259:1 /var/lib/docker/containers/" + "a" * 64 +
              "/hostname /etc/hostname rw,relatime - ext4 /dev/root rw\n")
    podman = ("812 790 0:52 /containers/storage/overlay-containers/" + "b" * 64 +
              "/userdata/resolv.conf /etc/resolv.conf rw,nosuid - tmpfs tmpfs rw\n")
    host = "22 1 259:1 / / rw,relatime shared:1 - ext4 /dev/root rw\n"
    assert own_container(host + docker) == "a" * 64
    assert own_container(podman) == "b" * 64
    assert own_container(host) is None


def test_compose_s_project_and_service_come_from_the_listing() -> None:
    compose = {"com.docker.compose.project": "shop", "com.docker.compose.service": "web",
               "com.docker.compose.version": "2.20.2"}
    assert listed_compose([{"Id": "a", "Labels": compose}, {"Id": "b", "Labels": {}},
                           {"Id": "c", "Labels": None}, {"Labels": compose}, "garbage"]) == \
        {"a": ("shop", "web")}
    assert compose_of({"com.docker.compose.project": "shop"}) is None, "both or nothing"
    assert compose_of({"com.docker.compose.project": "", "com.docker.compose.service": "w"}) \
        is None
    assert compose_of({"com.docker.compose.project": "a\nb",
                       "com.docker.compose.service": "w"}) == ("a_b", "w"), "as a label value"


def test_an_event_says_the_containers_changed_only_when_they_did() -> None:
    def line(**event: object) -> bytes:
        return json.dumps(event).encode() + b"\n"

    for action in ("start", "die", "destroy", "remove", "rename"):
        assert container_changed(line(Type="container", Action=action, id="a"))
    assert container_changed(line(status="start", id="a")), "Podman's compatible form"
    assert container_changed(line(Type="container", Action="exec_start: sh -c true")) is False
    assert not container_changed(line(Type="container", Action="exec_die"))
    assert not container_changed(line(Type="network", Action="start"))
    assert not container_changed(b"{not json") and not container_changed(b"[1]\n")
