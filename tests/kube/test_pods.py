"""The pure half of the pod watch: pod objects into PodMeta, watch events onto the pod map."""

from collections.abc import Mapping
from types import MappingProxyType
from typing import Any

import pytest

from gpu_enricher.kube.events import WatchEvent, parse_event_line
from gpu_enricher.kube.pods import apply_pod_event, bare_container_id, index_pods, parse_pod
from gpu_enricher.kube.watch_kind import ListWatchOptions, backoff_delay
from gpu_enricher.model import PodMeta
from gpu_enricher.sim.fake_api.objects import (
    Selector,
    node_of,
    parse_field_selector,
    pod_object,
    selection_event,
)

C1 = "40c03570b6f4c30bc8d69923d37ee698f5cfcced92c7b7df1c47f6f7887378a9"
C2 = "f33f47b0db740bb647cb3e7ac62d96c74966dbb99cbfaf4563bfd42d387e8b44"
C3 = "b5b6f2da8008be266864f896f93789762b2ce50792114a5c5f2cc3315af0bc70"
UID = "4a163a05-439d-484b-8e53-2968bc15824f"
MIRROR = "b53dfa9e2dc9b890f7fadb2770857b03"


def api_pod(**status: Any) -> dict[str, Any]:
    """A pod as the API server sends it, trimmed to what matters plus some noise."""
    return {
        "kind": "Pod",
        "metadata": {
            "name": "trainer-0", "namespace": "ml", "uid": UID, "resourceVersion": "42",
            "labels": {"app": "trainer", "team": "vision"},
            "annotations": {"kubernetes.io/config.mirror": MIRROR, "other": "x"},
            "managedFields": [{"manager": "kubelet"}],
        },
        "spec": {"nodeName": "gpu-1", "containers": [{"name": "main"}]},
        "status": {"phase": "Running", **status},
    }


def test_parse_pod_keeps_identity_labels_phase_and_every_container_kind() -> None:
    pod = api_pod(
        containerStatuses=[{"name": "main", "containerID": f"containerd://{C1.upper()}"}],
        initContainerStatuses=[{"name": "fetch", "containerID": f"cri-o://{C2}"}],
        ephemeralContainerStatuses=[{"name": "debug", "containerID": f"docker://{C3}"}],
    )
    assert parse_pod(pod) == PodMeta(
        uid=UID, namespace="ml", name="trainer-0", labels={"app": "trainer", "team": "vision"},
        phase="Running", containers={C1: "main", C2: "fetch", C3: "debug"}, mirror_uid=MIRROR)


def test_parse_pod_skips_containers_without_an_id_yet() -> None:
    pod = api_pod(containerStatuses=[
        {"name": "main", "containerID": f"containerd://{C1}"},
        {"name": "sidecar", "state": {"waiting": {"reason": "ContainerCreating"}}},
        {"name": "empty", "containerID": ""},
    ])
    meta = parse_pod(pod)
    assert meta is not None and meta.containers == {C1: "main"}


def test_parse_pod_lowercases_the_uid_and_tolerates_a_pending_pod() -> None:
    pod = {"metadata": {"name": "p", "namespace": "n", "uid": UID.upper()}}
    assert parse_pod(pod) == PodMeta(uid=UID, namespace="n", name="p")


@pytest.mark.parametrize("container_id, bare", [
    (f"containerd://{C1}", C1), (f"cri-o://{C2.upper()}", C2), (f"docker://{C3}", C3),
    (C1.upper(), C1),
])
def test_bare_container_id(container_id: str, bare: str) -> None:
    assert bare_container_id(container_id) == bare


MALFORMED_PODS: list[Any] = [
    {}, {"metadata": None}, {"metadata": []}, {"metadata": {"uid": UID}},
    {"metadata": {"uid": 7, "name": "p", "namespace": "n"}},
    {"metadata": {"uid": UID, "name": ["p"], "namespace": "n"}},
    {"metadata": {"uid": "", "name": "p", "namespace": "n"}},
    "a string", None, 42, ["metadata"],
]


@pytest.mark.parametrize("obj", MALFORMED_PODS)
def test_parse_pod_returns_none_for_objects_without_identity(obj: Any) -> None:
    assert parse_pod(obj) is None


@pytest.mark.parametrize("noise", [
    {"labels": ["a"]}, {"labels": {"a": 1, 2: "b", "ok": "yes"}}, {"annotations": "x"},
    {"annotations": {"kubernetes.io/config.mirror": 5}},
])
def test_parse_pod_drops_malformed_metadata_fields(noise: dict[str, Any]) -> None:
    pod = {"metadata": {"uid": UID, "name": "p", "namespace": "n", **noise}}
    meta = parse_pod(pod)
    assert meta is not None
    assert dict(meta.labels) in ({}, {"ok": "yes"}) and meta.mirror_uid is None


@pytest.mark.parametrize("status", [
    None, [], "Running", {"phase": 3}, {"containerStatuses": {"name": "x"}},
    {"containerStatuses": ["x", None, 5, {"name": 3, "containerID": "containerd://a"},
                           {"name": "ok", "containerID": 5}]},
])
def test_parse_pod_survives_malformed_status(status: Any) -> None:
    meta = parse_pod({"metadata": {"uid": UID, "name": "p", "namespace": "n"}, "status": status})
    assert meta == PodMeta(uid=UID, namespace="n", name="p")


def meta(uid: str, name: str, **fields: Any) -> PodMeta:
    """A running pod's PodMeta (`pod_object` makes every pod without a phase Running)."""
    return PodMeta(uid=uid, namespace="ml", name=name, **{"phase": "Running", **fields})


def event(kind: str, pod: Mapping[str, Any]) -> WatchEvent:
    return WatchEvent(kind, pod)


def test_events_add_modify_and_delete_without_touching_the_old_map() -> None:
    a = meta("a", "pod-a", labels={"v": "1"}, containers={C1: "main"})
    b = meta("b", "pod-b")
    pods0: Mapping[str, PodMeta] = MappingProxyType({})
    pods1 = apply_pod_event(pods0, event("ADDED", pod_object(a, "gpu-1")))
    pods2 = apply_pod_event(pods1, event("ADDED", pod_object(b, "gpu-1")))
    relabelled = meta("a", "pod-a", labels={"v": "2"}, containers={C1: "main"})
    pods3 = apply_pod_event(pods2, event("MODIFIED", pod_object(relabelled, "gpu-1")))
    pods4 = apply_pod_event(pods3, event("DELETED", pod_object(b, "gpu-1")))
    assert dict(pods0) == {}
    assert dict(pods1) == {"a": a}
    assert dict(pods2) == {"a": a, "b": b}
    assert pods3["a"].labels == {"v": "2"} and pods2["a"].labels == {"v": "1"}
    assert dict(pods4) == {"a": relabelled}
    with pytest.raises(TypeError):
        pods4["b"] = b  # type: ignore[index]


def test_delete_needs_only_the_uid_and_unknown_deletes_change_nothing() -> None:
    pods = index_pods([pod_object(meta("a", "pod-a"), "gpu-1")])
    assert dict(apply_pod_event(pods, event("DELETED", {"metadata": {"uid": "A"}}))) == {}
    assert apply_pod_event(pods, event("DELETED", {"metadata": {"uid": "zz"}})) is pods


@pytest.mark.parametrize("ignored", [
    event("BOOKMARK", {"kind": "Pod", "metadata": {"resourceVersion": "99"}}),
    event("ERROR", {"kind": "Status", "code": 410}),
    event("MODIFIED", {"metadata": {"uid": "a"}}),  # no name: not a pod we can use
    event("ADDED", {"metadata": "broken"}),
    event("DELETED", {}),
])
def test_bookmarks_errors_and_malformed_events_leave_the_pods_alone(ignored: WatchEvent) -> None:
    pods = index_pods([pod_object(meta("a", "pod-a"), "gpu-1")])
    assert apply_pod_event(pods, ignored) is pods


def test_index_pods_leaves_out_what_does_not_parse() -> None:
    good = pod_object(meta("a", "pod-a"), "gpu-1")
    assert list(index_pods([good, {"metadata": {"uid": "b"}}, {}])) == ["a"]


@pytest.mark.parametrize("line", [
    b"", b"not json", b"[1, 2]", b'{"type": "ADDED"}', b'{"type": "NOPE", "object": {}}',
    b'{"type": "ADDED", "object": []}', b"\xff\xfe", b'{"type": 1, "object": {}}',
])
def test_parse_event_line_rejects_malformed_lines(line: bytes) -> None:
    assert parse_event_line(line) is None


def test_parse_event_line_reads_an_event() -> None:
    line = b'{"type":"BOOKMARK","object":{"metadata":{"resourceVersion":"7"}}}\n'
    parsed = parse_event_line(line)
    assert parsed == WatchEvent("BOOKMARK", {"metadata": {"resourceVersion": "7"}})


def test_pod_object_round_trips_through_parse_pod() -> None:
    original = meta("u-1", "pod", labels={"a": "b"}, phase="Pending",
                    containers={C1: "main", C2: "side"}, mirror_uid=MIRROR)
    for runtime in ("containerd", "cri-o", "docker"):
        obj = pod_object(original, "gpu-1", runtime=runtime)
        assert parse_pod(obj) == original and node_of(obj) == "gpu-1"


def test_selection_event_follows_the_field_selector() -> None:
    on_a, on_b = {"spec": {"nodeName": "a"}}, {"spec": {"nodeName": "b"}}
    unbound: dict[str, Any] = {"spec": {}}
    a = Selector(node="a")
    assert selection_event(None, on_a, 2, a) == ("ADDED", on_a)
    assert selection_event(unbound, on_a, 2, a) == ("ADDED", on_a)
    assert selection_event(on_a, on_a, 2, a) == ("MODIFIED", on_a)
    assert selection_event(None, on_b, 2, a) is None
    kind, obj = selection_event(on_a, None, 5, a) or ("", {})
    assert kind == "DELETED" and obj["metadata"]["resourceVersion"] == "5"
    assert selection_event(None, on_b, 2, Selector()) == ("ADDED", on_b)
    # A ConfigMap watch: one name in one namespace.
    mine = Selector(name="metrics", namespace="ops")
    cm = {"metadata": {"name": "metrics", "namespace": "ops"}}
    other = {"metadata": {"name": "metrics", "namespace": "dev"}}
    assert selection_event(None, cm, 2, mine) == ("ADDED", cm)
    assert selection_event(None, other, 2, mine) is None


@pytest.mark.parametrize("selector, expected", [
    (None, Selector()), ("", Selector()), ("spec.nodeName=gpu-1", Selector(node="gpu-1")),
    ("spec.nodeName==gpu-1", Selector(node="gpu-1")), ("metadata.name=x", Selector(name="x")),
])
def test_parse_field_selector(selector: str | None, expected: Selector) -> None:
    assert parse_field_selector(selector) == expected


@pytest.mark.parametrize("selector", ["metadata.uid=x", "spec.nodeName", "spec.nodeName=a,b=c"])
def test_parse_field_selector_refuses_what_the_fake_does_not_serve(selector: str) -> None:
    with pytest.raises(ValueError):
        parse_field_selector(selector)


def test_backoff_doubles_to_the_cap_and_operator_failures_get_there_fast() -> None:
    options = ListWatchOptions(backoff_initial_seconds=1.0, backoff_max_seconds=60.0)

    def delays(reason: str) -> list[float]:
        return [backoff_delay(n, reason, options, lambda low, high: 1.0) for n in range(1, 9)]

    assert delays("unavailable") == [1, 2, 4, 8, 16, 32, 60, 60]
    assert delays("forbidden") == [1, 8, 60, 60, 60, 60, 60, 60]
    assert backoff_delay(10_000, "unavailable", options, lambda low, high: 1.0) == 60
    jittered = backoff_delay(3, "timeout", options)
    assert 3.2 <= jittered <= 4.8
