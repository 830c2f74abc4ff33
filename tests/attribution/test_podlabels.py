"""A pod's Kubernetes labels and UID as metric labels: sanitising, reserved-name collisions,
the allowlist, the UID switch and duplicates after sanitising."""

import re

import pytest
from hypothesis import given
from hypothesis import strategies as st

from gpu_enricher.attribution.podlabels import NO_POLICY, PodLabelPolicy, sanitize
from gpu_enricher.fields import names
from gpu_enricher.model import PodMeta

UID = "4a163a05-439d-484b-8e53-2968bc15824f"
PROM_NAME = re.compile(r"[a-zA-Z_][a-zA-Z0-9_]*")
LABELS_ON = PodLabelPolicy(labels=True)


def pod(labels: dict[str, str], uid: str = UID) -> PodMeta:
    return PodMeta(uid, "ml", "train-0", labels=labels)


@pytest.mark.parametrize(
    ("label", "expected"),
    [
        ("app.kubernetes.io/name", "app_kubernetes_io_name"),
        ("pod-template-hash", "pod_template_hash"),
        ("team", "team"),
        ("_private", "_private"),
        ("Team", "Team"),
        ("naïve", "na_ve"),
        # Names the exporter sets itself.
        ("pod", "pod_label_pod"),
        ("namespace", "pod_label_namespace"),
        ("container", "pod_label_container"),
        ("gpu", "pod_label_gpu"),
        ("UUID", "pod_label_UUID"),
        ("Hostname", "pod_label_Hostname"),
        # Either spelling of the host label (--hostname-label-name), whichever is chosen.
        ("hostname", "pod_label_hostname"),
        ("modelName", "pod_label_modelName"),
        ("pci_bus_id", "pod_label_pci_bus_id"),
        ("device", "pod_label_device"),
        ("GPU_I_PROFILE", "pod_label_GPU_I_PROFILE"),
        ("GPU_I_ID", "pod_label_GPU_I_ID"),
        ("vgpu", "pod_label_vgpu"),
        ("pod_uid", "pod_label_pod_uid"),
        ("pid", "pod_label_pid"),
        ("process_name", "pod_label_process_name"),
        ("pod.uid", "pod_label_pod_uid"),  # collides only after sanitising
        # Case matters: these are not the reserved names.
        ("uuid", "uuid"),
        ("HOSTNAME", "HOSTNAME"),
        ("POD", "POD"),
        # Names Prometheus would reject or reserve.
        ("2fa", "pod_label_2fa"),
        ("0", "pod_label_0"),
        ("__meta", "pod_label___meta"),
        ("--x", "pod_label___x"),
        ("_x", "_x"),
        ("", "pod_label_"),
    ],
)
def test_sanitize(label: str, expected: str) -> None:
    assert sanitize(label, names.RESERVED_LABELS) == expected
    assert LABELS_ON.pairs(pod({label: "v"})) == [(expected, "v")]


def test_sanitize_takes_the_given_reserved_set() -> None:
    reserved = names.RESERVED_LABELS | {"DCGM_FI_DRIVER_VERSION"}
    policy = PodLabelPolicy(labels=True, reserved=reserved)
    labels = {"DCGM_FI_DRIVER_VERSION": "x", "DCGM.FI.DRIVER.VERSION": "y"}
    assert policy.pairs(pod(labels)) == [("pod_label_DCGM_FI_DRIVER_VERSION", "y")]
    assert LABELS_ON.pairs(pod({"DCGM_FI_DRIVER_VERSION": "x"})) == [
        ("DCGM_FI_DRIVER_VERSION", "x")]


@pytest.mark.parametrize(
    ("allowlist", "kept"),
    [
        pytest.param((), ["app_kubernetes_io_name", "myapp", "team", "tier"], id="none-allows-all"),
        pytest.param(("app",), ["app_kubernetes_io_name", "myapp"], id="unanchored-search"),
        pytest.param(("^app",), ["app_kubernetes_io_name"], id="anchored-start"),
        pytest.param(("^team$",), ["team"], id="anchored-both"),
        pytest.param((r"app\.kubernetes",), ["app_kubernetes_io_name"],
                     id="matches-the-original-name"),
        pytest.param(("app_kubernetes",), [], id="not-the-sanitised-name"),
        pytest.param(("^team$", "^tier$"), ["team", "tier"], id="any-pattern"),
        pytest.param(("nothing-matches",), [], id="none-kept"),
    ],
)
def test_allowlist(allowlist: tuple[str, ...], kept: list[str]) -> None:
    labels = {"app.kubernetes.io/name": "a", "myapp": "b", "team": "c", "tier": "d"}
    policy = PodLabelPolicy(labels=True, allowlist=allowlist)
    assert [name for name, _ in policy.pairs(pod(labels))] == kept


@pytest.mark.parametrize(
    ("allowlist", "label", "allowed"),
    [((), "anything", True), (("app",), "app.kubernetes.io/name", True),
     (("app",), "myapp", True), (("^app$",), "myapp", False), (("a", "z"), "zzz", True),
     (("x",), "abc", False)],
)
def test_allowed(allowlist: tuple[str, ...], label: str, allowed: bool) -> None:
    assert PodLabelPolicy(allowlist=allowlist).allowed(label) is allowed


@pytest.mark.parametrize(
    ("policy", "meta", "uid", "expected"),
    [
        pytest.param(NO_POLICY, pod({"team": "a"}), "", [], id="off"),
        pytest.param(PodLabelPolicy(uid=True), pod({"team": "a"}), "", [("pod_uid", UID)],
                     id="uid-only"),
        pytest.param(PodLabelPolicy(labels=True), pod({"team": "a"}), "", [("team", "a")],
                     id="labels-only"),
        pytest.param(PodLabelPolicy(labels=True, uid=True), pod({"team": "a"}), "",
                     [("pod_uid", UID), ("team", "a")], id="both"),
        pytest.param(PodLabelPolicy(uid=True), pod({}, uid=""), "", [], id="pod-without-uid"),
        pytest.param(PodLabelPolicy(labels=True, uid=True), None, "", [], id="unknown-pod"),
        pytest.param(PodLabelPolicy(labels=True, uid=True), None, "u-1", [("pod_uid", "u-1")],
                     id="unknown-pod-given-uid"),
        pytest.param(PodLabelPolicy(labels=True), None, "u-1", [], id="given-uid-not-enabled"),
        pytest.param(PodLabelPolicy(uid=True), pod({}), "ignored", [("pod_uid", UID)],
                     id="pod-uid-beats-given-uid"),
    ],
)
def test_uid_only_when_enabled(policy: PodLabelPolicy, meta: PodMeta | None, uid: str,
                               expected: list[tuple[str, str]]) -> None:
    assert policy.pairs(meta, uid) == expected


@pytest.mark.parametrize(
    ("policy", "enabled"),
    [(NO_POLICY, False), (PodLabelPolicy(labels=True), True), (PodLabelPolicy(uid=True), True),
     (PodLabelPolicy(allowlist=("x",)), False)],
)
def test_enabled(policy: PodLabelPolicy, enabled: bool) -> None:
    assert policy.enabled is enabled


@pytest.mark.parametrize(
    ("labels", "expected"),
    [
        # '-' < '.' < '_': the first original name in sorted order wins.
        pytest.param({"a_b": "3", "a.b": "2", "a-b": "1"}, [("a_b", "1")], id="three-way"),
        pytest.param({"a.b": "2", "a_b": "3"}, [("a_b", "2")], id="dot-before-underscore"),
        pytest.param({"pod_label_pod": "own", "pod": "renamed"}, [("pod_label_pod", "renamed")],
                     id="prefixed-collides-with-a-literal"),
        pytest.param({"z": "1", "b/c": "2", "A": "3"}, [("A", "3"), ("b_c", "2"), ("z", "1")],
                     id="sorted-by-original-name"),
    ],
)
def test_duplicates_after_sanitising(labels: dict[str, str],
                                     expected: list[tuple[str, str]]) -> None:
    assert LABELS_ON.pairs(pod(labels)) == expected
    reversed_insertion = dict(reversed(list(labels.items())))
    assert LABELS_ON.pairs(pod(reversed_insertion)) == expected


LABEL_KEYS = st.one_of(
    st.text(max_size=12),
    st.sampled_from(sorted(names.RESERVED_LABELS)),
    st.sampled_from(sorted(names.RESERVED_LABELS)).map(lambda n: n.replace("_", ".")),
    st.from_regex(r"[0-9_.\-/]{1,4}[a-z]{0,3}", fullmatch=True),
)


@given(st.dictionaries(LABEL_KEYS, st.text(max_size=4), max_size=8), st.booleans())
def test_every_produced_name_is_valid_and_not_reserved(labels: dict[str, str],
                                                       uid: bool) -> None:
    result = PodLabelPolicy(labels=True, uid=uid).pairs(pod(labels))
    produced = [name for name, _ in result]
    label_names = produced[1:] if uid else produced
    assert len(set(produced)) == len(produced)
    assert set(label_names).isdisjoint(names.RESERVED_LABELS)
    for name in produced:
        assert PROM_NAME.fullmatch(name), name
        assert not name.startswith("__"), name
    assert {v for _, v in result[1 if uid else 0:]} <= set(labels.values())
    assert bool(labels) == bool(label_names)
