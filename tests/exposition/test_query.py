"""`/api/v1/gpus`: the document, its namespace/pod filter, `gpu-enricher inspect`'s tables and
URL (one whole cycle: test_compose.py)."""

import json
from typing import Any

import pytest

from gpu_enricher.attribution.devices import Attribution, Holder
from gpu_enricher.attribution.workloads import Allocation, PodIndex, gpu_processes
from gpu_enricher.cli.inspect import api_url, tables
from gpu_enricher.exposition.query import (
    Billed,
    OutsidePods,
    encode,
    filtered,
    gpus_document,
    with_accounts,
)
from gpu_enricher.model import (
    JobMapping,
    ProcessTable,
)
from tests.exposition.query_node import (
    ATTRIBUTION,
    MIB,
    MIG1,
    MIG5,
    NODE,
    PODS,
    TABLE,
    UID_NOTE,
    UID_TRAIN,
    UUID0,
    UUID1,
)


def managed(attribution: Attribution) -> Allocation:
    """Every device of NODE is one the device plugin hands out."""
    keys = {(g.identity.index, None) for g in NODE.gpus}
    keys |= {(g.identity.index, i.gpu_instance_id) for g in NODE.gpus for i in g.instances}
    return Allocation(attribution.holders, frozenset(keys))


def document(attribution: Attribution = ATTRIBUTION) -> dict[str, Any]:
    index = PodIndex.of(PODS)
    procs = gpu_processes(NODE, TABLE, [index], managed(attribution))
    return gpus_document(NODE, attribution, procs, index, "node-a", 1700000000.5, True)


def test_document_gpu_with_holder_and_processes() -> None:
    doc = document()
    assert {k: doc[k] for k in ("api_version", "hostname", "collected_at", "process_metrics")} \
        == {"api_version": "v1", "hostname": "node-a", "collected_at": 1700000000.5,
            "process_metrics": True}
    assert doc["gpus"][0] == {
        "index": 0, "uuid": UUID0, "model": "NVIDIA L4", "pci_bus_id": "00000000:31:00.0",
        "healthy": True, "error": None,
        "memory_total_bytes": 23034 * MIB, "memory_used_bytes": 1500 * MIB,
        "utilization_ratio": 0.42, "mig_enabled": False, "mig_instances": [],
        "holders": [{"namespace": "ml", "pod": "train-0", "container": "trainer",
                     "pod_uid": UID_TRAIN, "resource": "nvidia.com/gpu", "device_id": UUID0,
                     "replica": None, "claim": None}],
        "processes": [
            {"pid": 100, "name": "python3", "type": "compute",
             "memory_used_bytes": 1024 * MIB, "sm_utilization_ratio": 0.4,
             "memory_utilization_ratio": 0.1, "namespace": "ml", "pod": "train-0",
             "container": "trainer", "pod_uid": UID_TRAIN, "user": None, "allocated": True},
            {"pid": 200, "name": "Xorg", "type": "graphics", "memory_used_bytes": 64 * MIB,
             "sm_utilization_ratio": None, "memory_utilization_ratio": None,
             "namespace": None, "pod": None, "container": None, "pod_uid": None,
             "user": None, "allocated": None},
            {"pid": 300, "name": "jupyter", "type": "compute", "memory_used_bytes": 256 * MIB,
             "sm_utilization_ratio": 0.02, "memory_utilization_ratio": None,
             "namespace": "dev", "pod": "notebook", "container": "jupyter",
             "pod_uid": UID_NOTE, "user": None, "allocated": False},
        ],
        "hpc_jobs": [], "containers": [], "users": [],
    }


def test_document_mig_instances() -> None:
    gpu = document()["gpus"][1]
    assert (gpu["memory_used_bytes"], gpu["utilization_ratio"]) == (None, 0.07)
    assert gpu["holders"] == [] and gpu["processes"] == []  # all on instances
    first, second = gpu["mig_instances"]
    assert {k: v for k, v in first.items() if k != "holders"} == {
        "gpu_instance_id": 1, "compute_instance_id": 0, "profile": "4g.40gb", "uuid": MIG1,
        "memory_total_bytes": 40192 * MIB, "memory_used_bytes": 0, "utilization_ratio": None,
        "processes": [], "hpc_jobs": [], "containers": [], "users": []}
    assert [h["pod"] for h in first["holders"]] == ["notebook"]
    assert second["memory_used_bytes"] == 512 * MIB
    assert [(p["pid"], p["pod"], p["allocated"]) for p in second["processes"]] == [
        (400, "infer-0", True)]
    assert second["holders"][0]["replica"] is None


def test_document_hpc_jobs_per_gpu_and_instance() -> None:
    jobs = JobMapping({(0, None): ("4242", "4243"), (1, None): ("9",), (1, 5): ("77",)})
    doc = gpus_document(NODE, ATTRIBUTION, (), PodIndex.of(PODS), None, None, False, jobs)
    first, mig = doc["gpus"][:2]
    assert first["hpc_jobs"] == ["4242", "4243"]
    assert mig["hpc_jobs"] == ["9"], "a MIG GPU's own file, as its whole-GPU series"
    assert [i["hpc_jobs"] for i in mig["mig_instances"]] == [[], ["77"]]
    assert doc["gpus"][2]["hpc_jobs"] == []


def test_document_free_and_lost_gpus() -> None:
    free, lost = document()["gpus"][2:]
    assert (free["holders"], free["processes"], free["memory_total_bytes"],
            free["utilization_ratio"]) == ([], [], None, None)
    assert (lost["healthy"], lost["error"], lost["processes"]) == (False, "GPU is lost", [])


def test_document_holder_unknown_to_the_api_has_no_uid() -> None:
    stranger = Holder("x", "y", "z", "nvidia.com/gpu", "GPU-free::3", "3")
    doc = document(Attribution({(2, None): (stranger,)}))
    assert doc["gpus"][2]["holders"] == [{"namespace": "x", "pod": "y", "container": "z",
                                          "pod_uid": None, "resource": "nvidia.com/gpu",
                                          "device_id": "GPU-free::3", "replica": "3",
                                          "claim": None}]


def test_document_without_node() -> None:
    doc = gpus_document(None, ATTRIBUTION, (), PodIndex.of(None), None, None, False)
    assert doc == {"api_version": "v1", "hostname": None, "collected_at": None,
                   "process_metrics": False, "gpus": []}


def test_encode_is_compact_json() -> None:
    doc = document()
    body = encode(doc)
    assert json.loads(body) == doc
    assert b": " not in body and b", " not in body
    # In pieces (issue 33), the same bytes as one json.dumps of the whole.
    assert body == json.dumps(doc, separators=(",", ":")).encode()
    assert encode({"gpus": [], "hostname": None}) == b'{"gpus":[],"hostname":null}'


def shape(doc: dict[str, Any]) -> list[tuple[int, list[int]]]:
    return [(g["index"], [i["gpu_instance_id"] for i in g["mig_instances"]])
            for g in doc["gpus"]]


@pytest.mark.parametrize(
    ("namespace", "pod", "expected"),
    [
        pytest.param(None, None, [(0, []), (1, [1, 5]), (2, []), (3, [])], id="no-filter"),
        pytest.param("ml", None, [(0, []), (1, [5])], id="namespace-holders-and-processes"),
        pytest.param("dev", None, [(0, []), (1, [1])], id="namespace-via-a-process"),
        pytest.param(None, "notebook", [(0, []), (1, [1])], id="pod-any-namespace"),
        pytest.param("ml", "infer-0", [(1, [5])], id="only-the-involved-instance"),
        pytest.param("ml", "train-0", [(0, [])], id="whole-gpu"),
        pytest.param("dev", "train-0", [], id="pod-in-another-namespace"),
        pytest.param("nobody", None, [], id="nothing"),
    ],
)
def test_filtered(namespace: str | None, pod: str | None,
                  expected: list[tuple[int, list[int]]]) -> None:
    doc = document()
    result = filtered(doc, namespace, pod)
    assert shape(result) == expected
    assert {k: v for k, v in result.items() if k != "gpus"} == \
        {k: v for k, v in doc.items() if k != "gpus"}
    assert shape(doc) == [(0, []), (1, [1, 5]), (2, []), (3, [])]  # not changed in place


def test_filter_keeps_the_whole_gpu_entry_of_an_involved_gpu() -> None:
    gpu0 = filtered(document(), "dev", "notebook")["gpus"][0]
    assert [p["pid"] for p in gpu0["processes"]] == [100, 200, 300]
    assert gpu0["holders"][0]["pod"] == "train-0"


# --- inspection ----------------------------------------------------------------------------

def rows(out: str, first_header: str, key: int = 2) -> dict[str, list[str]]:
    """The table starting with `first_header`, keyed by its column `key` (GI, PID, POD)."""
    (block,) = [b for b in out.split("\n\n") if b.startswith(first_header)]
    return {line.split()[key]: line.split() for line in block.splitlines()[1:] if line}


def test_tables() -> None:
    out = tables(document())
    assert out.endswith("\n")
    devices = [line.split("  ") for line in out.split("\n\n")[0].splitlines()]
    assert [c.strip() for c in devices[0] if c] == [
        "GPU", "GI", "MODEL/PROFILE", "UUID", "MEMORY MiB", "UTIL", "HELD BY"]
    assert "ml/train-0" in out.splitlines()[1] and "1500 / 23034" in out.splitlines()[1]
    assert "42%" in out.splitlines()[1]
    device_lines = out.split("\n\n")[0].splitlines()
    # Each GPU's UUID (its series' UUID label) and each MIG instance's own.
    column = device_lines[0].index("UUID")
    assert [[*line.split()[:2], line[column:].split()[0]] for line in device_lines[1:]] == [
        ["0", "-", UUID0], ["1", "-", UUID1], ["1", "1", MIG1], ["1", "5", MIG5],
        ["2", "-", "GPU-free"], ["3", "-", "GPU-lost"]]
    assert device_lines[3].split()[:4] == ["1", "1", "4g.40gb", MIG1]
    assert device_lines[3].rstrip().endswith("dev/notebook")
    assert device_lines[4].rstrip().endswith("ml/infer-0")
    assert device_lines[5].rstrip().endswith("-")  # the free GPU: nobody holds it
    assert "(lost)" in device_lines[6]
    procs = rows(out, "GPU  GI  PID")
    assert procs["100"] == ["0", "-", "100", "python3", "compute", "1024", "40%", "ml", "train-0",
                            "trainer", "yes"]
    assert procs["200"] == ["0", "-", "200", "Xorg", "graphics", "64", "-", "-", "-", "-", "-"]
    assert procs["300"] == ["0", "-", "300", "jupyter", "compute", "256", "2%", "dev", "notebook",
                            "jupyter", "NO"]
    assert procs["400"] == ["1", "5", "400", "tritonserver", "compute", "512", "-", "ml", "infer-0",
                            "server", "yes"]


def test_each_holder_gets_its_gpu_time_and_energy_and_inspect_shows_them() -> None:
    """Issue 32: the accounts of the same picture in the document and in inspect's third
    table; null where none is kept."""
    seconds = {("ml", "train-0", "trainer", "nvidia.com/gpu"): 3600.0,
               ("dev", "notebook", "jupyter", "nvidia.com/mig-4g.40gb"): 120.5}
    joules = {(0, "ml", "train-0", "trainer", None): 250000.0,
              (1, "dev", "notebook", "jupyter", 1): 900.0}
    billed = with_accounts(document(), Billed(seconds, joules))
    (holder,) = billed["gpus"][0]["holders"]
    assert (holder["gpu_seconds"], holder["energy_joules"]) == (3600.0, 250000.0)
    mig = next(i for i in billed["gpus"][1]["mig_instances"] if i["gpu_instance_id"] == 1)
    assert [(h["gpu_seconds"], h["energy_joules"]) for h in mig["holders"]] == [(120.5, 900.0)]
    other = next(i for i in billed["gpus"][1]["mig_instances"] if i["gpu_instance_id"] == 5)
    assert [(h["gpu_seconds"], h["energy_joules"]) for h in other["holders"]] == [(None, None)]
    billing = rows(tables(billed), "GPU  GI  NAMESPACE", key=3)
    assert billing["train-0"] == ["0", "-", "ml", "train-0", "trainer", "nvidia.com/gpu", "3600",
                                  "250000"]
    assert billing["infer-0"][-2:] == ["-", "-"]
    assert "GPU-SECONDS" not in tables(document()), "no accounts kept: no table"


def test_tables_columns_line_up() -> None:
    block = tables(document()).split("\n\n")[1].splitlines()
    pod_column = block[0].index("POD")
    assert all(line[pod_column - 2:pod_column] == "  " for line in block)
    assert {line[pod_column:].split()[0] for line in block[1:]} == {
        "train-0", "-", "notebook", "infer-0"}


@pytest.mark.parametrize(
    ("process_metrics", "message"),
    [(False, "No processes: start the exporter with --process-metrics."),
     (True, "No GPU processes.")],
)
def test_tables_without_processes(process_metrics: bool, message: str) -> None:
    doc = gpus_document(NODE, ATTRIBUTION, (), PodIndex.of(PODS), None, None, process_metrics)
    assert tables(doc).splitlines()[-1] == message


def test_tables_vanished_process_name() -> None:
    index = PodIndex.of(PODS)
    procs = gpu_processes(NODE, ProcessTable({}), [index], managed(ATTRIBUTION))
    doc = gpus_document(NODE, ATTRIBUTION, procs, index, None, None, True)
    assert rows(tables(doc), "GPU  GI  PID")["100"][3] == "?"


@pytest.mark.parametrize(
    ("base", "namespace", "pod", "url"),
    [
        ("http://localhost:9400", None, None, "http://localhost:9400/api/v1/gpus"),
        ("localhost:9400", None, None, "http://localhost:9400/api/v1/gpus"),
        ("10.0.0.5:9400/", None, None, "http://10.0.0.5:9400/api/v1/gpus"),
        ("https://gpu.example:9400//", None, None, "https://gpu.example:9400/api/v1/gpus"),
        ("http://h:9400/api/v1/gpus", None, None, "http://h:9400/api/v1/gpus"),
        ("http://h:9400/api/v1/gpus/", None, None, "http://h:9400/api/v1/gpus"),
        ("http://h:9400/prefix", None, None, "http://h:9400/prefix/api/v1/gpus"),
        ("h:9400", "ml", None, "http://h:9400/api/v1/gpus?namespace=ml"),
        ("h:9400", None, "train-0", "http://h:9400/api/v1/gpus?pod=train-0"),
        ("h:9400", "ml", "train-0", "http://h:9400/api/v1/gpus?namespace=ml&pod=train-0"),
        ("h:9400", "a b&c", "x/y", "http://h:9400/api/v1/gpus?namespace=a+b%26c&pod=x%2Fy"),
        ("h:9400", "", "", "http://h:9400/api/v1/gpus"),
    ],
)
def test_api_url(base: str, namespace: str | None, pod: str | None, url: str) -> None:
    assert api_url(base, namespace, pod) == url


def test_containers_and_people_outside_pods_get_their_accounts_and_inspect_shows_them() -> None:
    """Issue 34: on a host without Kubernetes each device's `accounts` are the GPU time (every
    device they use) and energy (this device) of the containers and people using it."""
    index = PodIndex.of(PODS)
    outside = OutsidePods({(0, None): (("container", "notebook"), ("user", "alice"))})
    doc = gpus_document(NODE, Attribution({}), (), index, "lab-1", 1700000000.5, True,
                        outside=outside)
    billed = with_accounts(doc, Billed(occupant_seconds={("container", "notebook"): 60.0},
                                       occupant_joules={(0, "user", "alice", None): 12.5}))
    assert billed["gpus"][0]["accounts"] == [
        {"container": "notebook", "gpu_seconds": 60.0, "energy_joules": None},
        {"user": "alice", "gpu_seconds": None, "energy_joules": 12.5}]
    assert billed["gpus"][1]["accounts"] == []
    billing = rows(tables(billed), "GPU  GI  NAMESPACE", key=4)
    assert billing["notebook"] == ["0", "-", "-", "-", "notebook", "-", "60", "-"]
    assert billing["user"] == ["0", "-", "-", "-", "user", "alice", "-", "-", "12"]
