"""The kubelet's log names → pods and containers, without the API server."""

import asyncio
import logging
import threading
import time
from pathlib import Path

import pytest
from hypothesis import given
from hypothesis import strategies as st

from gpu_enricher.attribution import podlogs
from gpu_enricher.attribution.podlogs import (
    ContainerLogName,
    LogNameSource,
    PodLogDir,
    parse_container_log_name,
    parse_pod_log_dir,
    pod_directory,
)
from gpu_enricher.model import PodDirectory, PodMeta

ID_A = "40c03570b6f4c30bc8d69923d37ee698f5cfcced92c7b7df1c47f6f7887378a9"
ID_B = "f45298cd514d1930c4fe3afc4412e59547f7e3148fddd22ca33cefce046eb830"
ID_C = "cb1eadb7abe3a6545e9856411207073277838e1bdc003337c2f8685faeedc32c"
UID = "4a163a05-439d-484b-8e53-2968bc15824f"
UID_OLD = "dde1244b-5bb5-4297-b544-85f3bc0d80bf"
STATIC = "b53dfa9e2dc9b890f7fadb2770857b03"


@pytest.mark.parametrize(
    ("name", "expected"),
    [
        pytest.param(f"nginx-7c5ddbdf54-x2kq9_default_nginx-{ID_A}.log",
                     ContainerLogName("nginx-7c5ddbdf54-x2kq9", "default", "nginx", ID_A),
                     id="deployment-pod"),
        pytest.param(f"train-0_ml_cuda-worker-2-{ID_A}.log",
                     ContainerLogName("train-0", "ml", "cuda-worker-2", ID_A),
                     id="dashes-in-container"),
        pytest.param(f"kube-apiserver-node1_kube-system_kube-apiserver-{ID_B}.log",
                     ContainerLogName("kube-apiserver-node1", "kube-system", "kube-apiserver",
                                      ID_B), id="static-pod"),
        pytest.param(f"web.v1-0_team-a_app-{ID_A}.log",
                     ContainerLogName("web.v1-0", "team-a", "app", ID_A), id="dots-in-pod"),
        pytest.param(f"p_ns_c-{ID_A.upper()}.log", ContainerLogName("p", "ns", "c", ID_A),
                     id="uppercase-id-lowered"),
        pytest.param(f"p_ns_c-{ID_A}", None, id="no-suffix"),
        pytest.param(f"p_ns_c-{ID_A}.log.1", None, id="rotated"),
        pytest.param(f"p_ns_c-{ID_A[:63]}.log", None, id="short-id"),
        pytest.param(f"p_ns_c{ID_A}.log", None, id="no-dash-before-id"),
        pytest.param(f"p_ns_-{ID_A}.log", None, id="empty-container"),
        pytest.param(f"p_ns_x_c-{ID_A}.log", None, id="extra-underscore"),
        pytest.param(f"ns_c-{ID_A}.log", None, id="no-namespace"),
        pytest.param("", None, id="empty"),
    ],
)
def test_container_log_names(name: str, expected: ContainerLogName | None) -> None:
    assert parse_container_log_name(name) == expected


@pytest.mark.parametrize(
    ("name", "expected"),
    [
        pytest.param(f"default_nginx-7c5ddbdf54-x2kq9_{UID}",
                     PodLogDir("default", "nginx-7c5ddbdf54-x2kq9", UID), id="uuid"),
        pytest.param(f"kube-system_kube-apiserver-node1_{STATIC}",
                     PodLogDir("kube-system", "kube-apiserver-node1", STATIC), id="static-pod"),
        pytest.param(f"ns_p_{UID.upper()}", PodLogDir("ns", "p", UID), id="uppercase-lowered"),
        pytest.param(f"ns_p_{UID.replace('-', '_')}", None, id="systemd-style-uid"),
        pytest.param(f"ns_p_{UID[:-1]}", None, id="short-uid"),
        pytest.param(f"ns_p_{STATIC}0", None, id="33-hex"),
        pytest.param(f"ns_{UID}", None, id="no-pod"),
        pytest.param(f"a_ns_p_{UID}", None, id="extra-underscore"),
        pytest.param("lost+found", None, id="other-entry"),
    ],
)
def test_pod_log_dirs(name: str, expected: PodLogDir | None) -> None:
    assert parse_pod_log_dir(name) == expected


def test_pod_directory_joins_both_listings() -> None:
    directory = pod_directory(
        container_logs=[f"train-0_ml_worker-{ID_A}.log", f"train-0_ml_sidecar-{ID_B}.log",
                        f"orphan_ml_main-{ID_C}.log", "README", f"bad_{ID_A}.log"],
        pod_dirs=[f"ml_train-0_{UID}", f"kube-system_etcd-node1_{STATIC}", "junk"],
    )
    assert directory == PodDirectory(
        pods=(
            PodMeta(STATIC, "kube-system", "etcd-node1"),  # logs directory only: no containers
            PodMeta("", "ml", "orphan", containers={ID_C: "main"}),  # no pods/ directory
            PodMeta(UID, "ml", "train-0", containers={ID_A: "worker", ID_B: "sidecar"}),
        ),
        synced=True,
    )


def test_a_recreated_pod_name_leaves_the_uid_to_the_cgroup() -> None:
    """Old and new UID of one StatefulSet pod: containers cannot be given to either."""
    directory = pod_directory([f"db-0_data_postgres-{ID_A}.log"],
                              [f"data_db-0_{UID}", f"data_db-0_{UID_OLD}"])
    assert directory.pods == (
        PodMeta(UID, "data", "db-0"),
        PodMeta(UID_OLD, "data", "db-0"),
        PodMeta("", "data", "db-0", containers={ID_A: "postgres"}),
    )


def test_empty_listings() -> None:
    assert pod_directory([], []) == PodDirectory((), synced=True)


# --- properties -----------------------------------------------------------------------------

DNS_LABEL = st.from_regex(r"[a-z0-9]([-a-z0-9]{0,30}[a-z0-9])?", fullmatch=True)
POD_NAME = st.from_regex(r"[a-z0-9]([-a-z0-9.]{0,40}[a-z0-9])?", fullmatch=True)
HEX64 = st.binary(min_size=32, max_size=32).map(bytes.hex)


@given(st.text())
def test_container_log_parser_is_total(name: str) -> None:
    parse_container_log_name(name)


@given(st.text())
def test_pod_dir_parser_is_total(name: str) -> None:
    parse_pod_log_dir(name)


@given(st.lists(st.text(max_size=120)), st.lists(st.text(max_size=120)))
def test_pod_directory_is_total(logs: list[str], dirs: list[str]) -> None:
    assert pod_directory(logs, dirs).synced


@given(pod=POD_NAME, namespace=DNS_LABEL, container=DNS_LABEL, container_id=HEX64)
def test_container_log_round_trip(pod: str, namespace: str, container: str,
                                  container_id: str) -> None:
    name = f"{pod}_{namespace}_{container}-{container_id}.log"
    assert parse_container_log_name(name) == ContainerLogName(pod, namespace, container,
                                                              container_id)


@given(namespace=DNS_LABEL, pod=POD_NAME,
       uid=st.one_of(st.uuids().map(str), HEX64.map(lambda h: h[:32])))
def test_pod_dir_round_trip(namespace: str, pod: str, uid: str) -> None:
    assert parse_pod_log_dir(f"{namespace}_{pod}_{uid}") == PodLogDir(namespace, pod, uid)


async def test_a_hung_listing_is_not_joined_by_more_threads(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
        caplog: pytest.LogCaptureFixture) -> None:
    (tmp_path / "pods" / f"ml_train-0_{UID}").mkdir(parents=True)
    source = LogNameSource(tmp_path)
    await source.refresh(None)
    hang = threading.Event()
    released = threading.Event()
    listed = podlogs.list_names

    def hung_listing(directory: Path) -> list[str] | None:  # as on a hung NFS /var/log
        if hang.is_set():
            released.wait(10.0)
        return listed(directory)

    monkeypatch.setattr(podlogs, "list_names", hung_listing)
    hang.set()
    try:
        with pytest.raises(TimeoutError):  # the collector's deadline on a refresh
            await asyncio.wait_for(source.refresh(None), 0.2)
        threads = threading.active_count()
        with caplog.at_level(logging.WARNING):
            for _ in range(2):
                started = time.perf_counter()
                await asyncio.wait_for(source.refresh(None), 1.0)
                assert time.perf_counter() - started < 0.1, "returned at once"
        assert threading.active_count() == threads, "no thread started behind the hung one"
        assert source.health().errors == {"busy": 2} and not source.health().up
        assert source.snapshot() == PodDirectory((PodMeta(UID, "ml", "train-0"),), synced=False)
        assert [r.getMessage().count("still running") for r in caplog.records] == [1]
    finally:
        hang.clear()
        released.set()  # the hung thread ends
    deadline = time.monotonic() + 3.0
    while not source.health().up:
        assert time.monotonic() < deadline, "the listing did not come back"
        await asyncio.sleep(0.01)
        await source.refresh(None)
    assert source.snapshot().synced and source.snapshot().pods == (
        PodMeta(UID, "ml", "train-0"),)
