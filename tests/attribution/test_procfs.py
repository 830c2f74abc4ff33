"""The /proc parse half: every real cgroup line of cgroup-paths.md, hybrid files, the stat
format's traps, and properties (total on any text; generated paths parse back)."""

import string

import pytest
from hypothesis import given
from hypothesis import strategies as st

from gpu_enricher.attribution.procfs import parse_cgroup, parse_cgroup_path, parse_start_time
from gpu_enricher.model import ContainerRef

ID_A = "40c03570b6f4c30bc8d69923d37ee698f5cfcced92c7b7df1c47f6f7887378a9"

# Every "Real lines" row of /work/shared/reference/cgroup-paths.md, verbatim.
REAL_LINES = [
    pytest.param(
        "0::/kubepods.slice/kubepods-burstable.slice/kubepods-burstable-poddde1244b_5bb5_4297_"
        f"b544_85f3bc0d80bf.slice/cri-containerd-{ID_A}.scope",
        ContainerRef("dde1244b-5bb5-4297-b544-85f3bc0d80bf", ID_A),
        id="containerd-systemd-v2-eks"),
    pytest.param(
        f"0::/kubepods/burstable/pod4a163a05-439d-484b-8e53-2968bc15824f/{ID_A}",
        ContainerRef("4a163a05-439d-484b-8e53-2968bc15824f", ID_A),
        id="containerd-cgroupfs-v2-gke"),
    pytest.param(
        f"0::/kubepods/burstable/podb53dfa9e2dc9b890f7fadb2770857b03/{ID_A}",
        ContainerRef("b53dfa9e2dc9b890f7fadb2770857b03", ID_A),
        id="containerd-cgroupfs-v2-static-pod"),
    pytest.param(
        "11:cpuset:/kubepods.slice/kubepods-besteffort.slice/kubepods-besteffort-poddd1bf9d1_"
        "241d_47f5_8e25_12de83135812.slice/cri-containerd-f45298cd514d1930c4fe3afc4412e59547f7e"
        "3148fddd22ca33cefce046eb830.scope",
        ContainerRef("dd1bf9d1-241d-47f5-8e25-12de83135812",
                     "f45298cd514d1930c4fe3afc4412e59547f7e3148fddd22ca33cefce046eb830"),
        id="containerd-systemd-v1-bottlerocket"),
    pytest.param(
        "0::/kubepods.slice/kubepods-burstable.slice/kubepods-burstable-pod042efd86_1f3b_4f2f_"
        "8736_f31c58e95bbc.slice/crio-f33f47b0db740bb647cb3e7ac62d96c74966dbb99cbfaf4563bfd42d3"
        "87e8b44.scope",
        ContainerRef("042efd86-1f3b-4f2f-8736-f31c58e95bbc",
                     "f33f47b0db740bb647cb3e7ac62d96c74966dbb99cbfaf4563bfd42d387e8b44"),
        id="crio-systemd-v2"),
    pytest.param(
        "1:name=systemd:/kubepods.slice/kubepods-burstable.slice/kubepods-burstable-pod90d81341_"
        "92de_11e7_8cf2_507b9d4141fa.slice/crio-2227daf62df6694645fee5df53c1f91271546a9560e8600"
        "a525690ae252b7f63.scope",
        ContainerRef("90d81341-92de-11e7-8cf2-507b9d4141fa",
                     "2227daf62df6694645fee5df53c1f91271546a9560e8600a525690ae252b7f63"),
        id="crio-systemd-v1"),
    pytest.param(
        "8:memory:/kubepods.slice/kubepods-besteffort.slice/kubepods-besteffort-pod045b1e35_"
        "7f13_11e7_ac42_0050568ffca0.slice/docker-b5b6f2da8008be266864f896f93789762b2ce50792114"
        "a5c5f2cc3315af0bc70.scope",
        ContainerRef("045b1e35-7f13-11e7-ac42-0050568ffca0",
                     "b5b6f2da8008be266864f896f93789762b2ce50792114a5c5f2cc3315af0bc70"),
        id="docker-systemd-v1"),
    pytest.param(
        "11:devices:/kubepods/besteffort/pod74ba62da-1a3d-11e7-bb11-080027cb0e22/cb1eadb7abe3a6"
        "545e9856411207073277838e1bdc003337c2f8685faeedc32c",
        ContainerRef("74ba62da-1a3d-11e7-bb11-080027cb0e22",
                     "cb1eadb7abe3a6545e9856411207073277838e1bdc003337c2f8685faeedc32c"),
        id="docker-cgroupfs-v1"),
    pytest.param(
        "0::/kubepods.slice/kubepods-pod7f282c81_59bd_4373_a196_3a1f7e0a526a.slice/docker-ee82e"
        "2aba6a09214a9f0e766b6c0bcb3647cc922ee2e95d552314b117bfe7a5e.scope",
        ContainerRef("7f282c81-59bd-4373-a196-3a1f7e0a526a",
                     "ee82e2aba6a09214a9f0e766b6c0bcb3647cc922ee2e95d552314b117bfe7a5e"),
        id="guaranteed-hybrid"),
    pytest.param(
        "0::/docker/8afe480d66074930353da456a1344caca810fe31c1e31f6e08c95a66887235d6/kubelet.sl"
        "ice/kubelet-kubepods.slice/kubelet-kubepods-besteffort.slice/kubelet-kubepods-besteff"
        f"ort-pod44c76ce5_f953_4bd3_bc89_12621681af49.slice/cri-containerd-{ID_A}.scope",
        ContainerRef("44c76ce5-f953-4bd3-bc89-12621681af49", ID_A),  # not the KinD node's ID
        id="kind"),
    pytest.param(
        "0::/../../kubepods-besteffort-podfd698699_eabf_4c23_92ef_cf0bbdb78261.slice/docker-2cc"
        "65c162ca1388b6b8d5ccfb701d22fc96675ccf8b2f1590c490c2c4039547f.scope",
        ContainerRef("fd698699-eabf-4c23-92ef-cf0bbdb78261",
                     "2cc65c162ca1388b6b8d5ccfb701d22fc96675ccf8b2f1590c490c2c4039547f"),
        id="cgroup-namespace-relative"),
    pytest.param(
        "11:freezer:/kubepods/besteffort/podf8a694f2-7c08-11e9-98da-000c29077430/c04e0a88a1de06"
        "7f25bece337d4dbb897396e0b623c2a65330850fc9823f1903/kube-proxy",
        ContainerRef("f8a694f2-7c08-11e9-98da-000c29077430",
                     "c04e0a88a1de067f25bece337d4dbb897396e0b623c2a65330850fc9823f1903"),
        id="sub-cgroup"),
    pytest.param(
        "0::/system.slice/crio-conmon-5819a498721cf8bb7e334809c9e48aa310bfc98801eb8017034ad17fb"
        "0749920.scope", None, id="crio-conmon"),
    pytest.param("0::/system.slice/containerd.service", None, id="host-containerd"),
    pytest.param("1:name=systemd:/user.slice/user-0.slice/session-14.scope", None,
                 id="host-session"),
]


@pytest.mark.parametrize(("line", "expected"), REAL_LINES)
def test_every_real_line(line: str, expected: ContainerRef | None) -> None:
    assert parse_cgroup(line) == expected
    assert parse_cgroup(line + "\n") == expected  # as the file ends


POD = "pod4a163a05-439d-484b-8e53-2968bc15824f"
UID = "4a163a05-439d-484b-8e53-2968bc15824f"
SYSTEMD_POD = "kubepods-burstable-pod4a163a05_439d_484b_8e53_2968bc15824f.slice"


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        pytest.param("0::/", None, id="own-file-in-a-namespace"),
        pytest.param("", None, id="empty"),
        pytest.param("\n\n", None, id="blank-lines"),
        pytest.param("not a cgroup file", None, id="garbage"),
        pytest.param(f"/kubepods/{POD}/{ID_A}", None, id="path-without-hierarchy-fields"),
        pytest.param(f"0::/kubepods/burstable/{POD}", None, id="pod-level-no-container"),
        pytest.param(f"0::/kubepods.slice/kubepods-burstable.slice/{SYSTEMD_POD}", None,
                     id="systemd-pod-slice-itself"),
        pytest.param(f"0::/kubepods.slice/{SYSTEMD_POD}/crio-conmon-{ID_A}.scope", None,
                     id="conmon-in-the-pod-slice"),
        pytest.param(f"0::/kubepods/{POD}/{ID_A[:63]}", None, id="id-too-short"),
        pytest.param(f"0::/kubepods/{POD}/{ID_A}0", None, id="id-too-long"),
        pytest.param(f"0::/kubepods/{POD}/kube-proxy/{ID_A}", None, id="id-not-right-after-pod"),
        pytest.param(f"0::/docker/{ID_A}", None, id="plain-docker-no-pod"),
        pytest.param(f"0::/kubepods/{POD}/{ID_A}", ContainerRef(UID, ID_A), id="guaranteed-cgfs"),
        pytest.param(f"0::/kubepods/besteffort/{POD}/crio-{ID_A}", ContainerRef(UID, ID_A),
                     id="crio-cgroupfs"),
        pytest.param(f"0::/kubepods/{POD.upper().replace('POD', 'pod')}/{ID_A.upper()}",
                     ContainerRef(UID, ID_A), id="uppercase-lowered"),
        pytest.param(f"0::/kubepods/{POD}/{ID_A}/sub:with:colons", ContainerRef(UID, ID_A),
                     id="colons-in-path"),
        pytest.param(
            # A KinD cluster inside a pod: the innermost pod is the workload's.
            f"0::/kubepods/{POD}/{'b' * 64}/kubelet.slice/kubelet-kubepods.slice/kubelet-kube"
            f"pods-pod11111111_2222_3333_4444_555555555555.slice/cri-containerd-{ID_A}.scope",
            ContainerRef("11111111-2222-3333-4444-555555555555", ID_A), id="nested-clusters"),
    ],
)
def test_edge_cases(text: str, expected: ContainerRef | None) -> None:
    assert parse_cgroup(text) == expected


def test_hybrid_file_any_line_with_the_pod_wins() -> None:
    v1 = f"/kubepods/burstable/{POD}/{ID_A}"
    for text in (
        f"12:pids:{v1}\n11:cpuset:{v1}\n1:name=systemd:{v1}\n0::/\n",  # v2 line lacks the pod
        f"12:pids:/\n1:name=systemd:/\n0::{v1}\n",  # only the unified line has it
        f"12:pids:{v1}/kube-proxy\n0::{v1}\n",
    ):
        assert parse_cgroup(text) == ContainerRef(UID, ID_A), text


def test_parse_cgroup_path_alone() -> None:
    assert parse_cgroup_path(f"/kubepods/{POD}/{ID_A}") == ContainerRef(UID, ID_A)
    assert parse_cgroup_path("/") is None


def stat_line(pid: int, comm: str, start_time: int) -> str:
    """A /proc/<pid>/stat line: fields 3..21, then the start time (22), then more."""
    middle = " ".join(["S", "1", str(pid), str(pid)] + ["0"] * 15)
    return f"{pid} ({comm}) {middle} {start_time} 1234567 890 18446744073709551615\n"


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        pytest.param(stat_line(42, "python3", 98765), 98765, id="plain"),
        pytest.param(stat_line(42, "my app", 7), 7, id="space-in-comm"),
        pytest.param(stat_line(42, "a) S 1 2 3", 11), 11, id="paren-and-fields-in-comm"),
        pytest.param(stat_line(42, ")))", 12), 12, id="only-parens"),
        pytest.param(stat_line(42, "", 13), 13, id="empty-comm"),
        pytest.param(
            # A real line (pid 1 of a Linux VM), start time 24 ticks after boot.
            "1 (process_api) S 0 0 0 0 -1 4194560 73587 18843637 0 4469 121 619 70837 27738 20 "
            "0 13 0 24 43720704 3311 18446744073709551615 1 1 0 0 0 0 0 4096 1256 0 0 0 17 1 0 "
            "0 0 0 0 0 0 0 0 0 0 0 0\n", 24, id="real-pid-1"),
        pytest.param("", None, id="empty"),
        pytest.param("42 python S 1", None, id="no-parens"),
        pytest.param("42 (python) S 1 2 3", None, id="too-few-fields"),
        pytest.param(stat_line(42, "x", 1).replace(" 1 1234567", " -1 1234567"), None,
                     id="negative"),
        pytest.param("42 (x) " + " ".join(["0"] * 19) + " ١٢ 0", None, id="non-ascii-digits"),
        pytest.param("42 (x) " + " ".join(["0"] * 19) + " " + "9" * 5000, None, id="huge"),
        pytest.param(") " + " ".join(["0"] * 25), None, id="no-opening-paren"),
    ],
)
def test_start_time(text: str, expected: int | None) -> None:
    assert parse_start_time(text) == expected


# --- properties -----------------------------------------------------------------------------

CGROUPISH = st.text(alphabet=string.hexdigits + ":/_-.\n podslicekubecrntidocker=", max_size=400)


@given(st.one_of(st.text(), CGROUPISH))
def test_parse_cgroup_is_total(text: str) -> None:
    result = parse_cgroup(text)
    if result is not None:
        assert len(result.container_id) == 64
        assert result.container_id == result.container_id.lower()


@given(st.text())
def test_parse_start_time_is_total(text: str) -> None:
    result = parse_start_time(text)
    assert result is None or result >= 0


@given(pid=st.integers(1, 4_194_304), comm=st.text(max_size=64),
       start_time=st.integers(0, 2**64 - 1))
def test_start_time_round_trip(pid: int, comm: str, start_time: int) -> None:
    assert parse_start_time(stat_line(pid, comm, start_time)) == start_time


HEX64 = st.binary(min_size=32, max_size=32).map(bytes.hex)
QOS = st.sampled_from(["", "burstable", "besteffort"])
HIERARCHY = st.sampled_from(["0::", "11:cpuset:", "1:name=systemd:", "4:cpu,cpuacct:"])
ABOVE = st.sampled_from(["", "/../..", f"/docker/{'c' * 64}/kubelet.slice"])  # ns, KinD
BELOW = st.sampled_from(["", "/kube-proxy", "/a/b"])


@given(uid=st.uuids(), container_id=HEX64, qos=QOS, hierarchy=HIERARCHY, above=ABOVE,
       below=BELOW, runtime=st.sampled_from(["cri-containerd", "crio", "docker"]))
def test_systemd_path_round_trip(uid: object, container_id: str, qos: str, hierarchy: str,
                                 above: str, below: str, runtime: str) -> None:
    parent = "kubepods" + (f"-{qos}" if qos else "")
    slices = "/kubepods.slice" + (f"/{parent}.slice" if qos else "")
    path = (f"{above}{slices}/{parent}-pod{str(uid).replace('-', '_')}.slice/"
            f"{runtime}-{container_id}.scope{below}")
    assert parse_cgroup(f"{hierarchy}{path}\n") == ContainerRef(str(uid), container_id)


@given(uid=st.one_of(st.uuids().map(str), HEX64.map(lambda h: h[:32])), container_id=HEX64,
       qos=QOS, hierarchy=HIERARCHY, above=ABOVE, below=BELOW)
def test_cgroupfs_path_round_trip(uid: str, container_id: str, qos: str, hierarchy: str,
                                  above: str, below: str) -> None:
    level = f"/{qos}" if qos else ""
    path = f"{above}/kubepods{level}/pod{uid}/{container_id}{below}"
    assert parse_cgroup(f"{hierarchy}{path}") == ContainerRef(uid, container_id)
