"""`/api/v1/gpus`: the document, its namespace/pod filter, `gpu-enricher inspect`'s tables and
URL, and one whole cycle (`cycle.compose`) from snapshots to families and document."""

import json
from typing import Any

import pytest

from gpu_enricher.attribution.devices import Attribution, Holder
from gpu_enricher.attribution.podlabels import PodLabelPolicy
from gpu_enricher.attribution.workloads import Allocation, PodIndex, gpu_processes
from gpu_enricher.cli.inspect import api_url, tables
from gpu_enricher.collector.cycle import CycleInputs, JoinOptions, compose
from gpu_enricher.exposition.query import encode, filtered, gpus_document
from gpu_enricher.exposition.render import Exposition
from gpu_enricher.fields.counters import parse_counters, plan_counters
from gpu_enricher.fields.table import IMPLEMENTED
from gpu_enricher.model import (
    AssignmentSnapshot,
    ClaimAllocation,
    ContainerRef,
    DeviceIdentity,
    GpuInstance,
    GpuSnapshot,
    HostProcess,
    JobMapping,
    NodeSnapshot,
    PodAssignment,
    PodDirectory,
    PodMeta,
    ProcessSample,
    ProcessTable,
    SliceDevice,
    SliceDirectory,
)

UUID0 = "GPU-c2f76b33-7953-256e-8f33-1343419b1a1c"
UUID1 = "GPU-0451a3f1-7953-256e-8f33-1343419b1a1c"
MIG1 = "MIG-5c89852c-d268-c3f3-8ea0-7d07e1a7cf25"
MIG5 = "MIG-a3c7e1a8-1b1d-5b2e-9c3f-2e6f4b4b8d10"
CID_TRAIN = "40c03570b6f4c30bc8d69923d37ee698f5cfcced92c7b7df1c47f6f7887378a9"
CID_NOTE = "f45298cd514d1930c4fe3afc4412e59547f7e3148fddd22ca33cefce046eb830"
CID_INFER = "cb1eadb7abe3a6545e9856411207073277838e1bdc003337c2f8685faeedc32c"
UID_TRAIN = "4a163a05-439d-484b-8e53-2968bc15824f"
UID_NOTE = "dde1244b-5bb5-4297-b544-85f3bc0d80bf"
UID_INFER = "74ba62da-1a3d-11e7-bb11-080027cb0e22"
MIB = 1 << 20

# GPU 0: held by ml/train-0, used by it, by dev/notebook (NVIDIA_VISIBLE_DEVICES=all) and by
# Xorg on the host. GPU 1 in MIG mode: instance 1 held by dev/notebook, instance 5 by
# ml/infer-0 (running on it). GPU 2: free, no process. GPU 3: lost.
NODE = NodeSnapshot((
    GpuSnapshot(DeviceIdentity(0, UUID0, "00000000:31:00.0", "NVIDIA L4"),
                values={"DCGM_FI_DEV_FB_TOTAL": 23034, "DCGM_FI_DEV_FB_USED": 1500,
                        "DCGM_FI_DEV_GPU_UTIL": 42},
                processes=(ProcessSample(100, 1024 * MIB, sm_utilization=0.4,
                                         memory_utilization=0.1),
                           ProcessSample(200, 64 * MIB, kind="graphics"),
                           ProcessSample(300, 256 * MIB, sm_utilization=0.02))),
    GpuSnapshot(DeviceIdentity(1, UUID1, "00000000:41:00.0", "NVIDIA A100"),
                values={"DCGM_FI_DEV_FB_TOTAL": 81920, "DCGM_FI_DEV_GPU_UTIL": 7},
                mig_enabled=True,
                instances=(GpuInstance(1, 0, "4g.40gb", MIG1,
                                       {"DCGM_FI_DEV_FB_TOTAL": 40192,
                                        "DCGM_FI_DEV_FB_USED": 0}),
                           GpuInstance(5, 0, "1g.10gb", MIG5,
                                       {"DCGM_FI_DEV_FB_TOTAL": 9728,
                                        "DCGM_FI_DEV_FB_USED": 512})),
                processes=(ProcessSample(400, 512 * MIB, gpu_instance_id=5),)),
    GpuSnapshot(DeviceIdentity(2, "GPU-free", "00000000:51:00.0", "NVIDIA L4")),
    GpuSnapshot(DeviceIdentity(3, "GPU-lost", "00000000:61:00.0", "NVIDIA L4"),
                healthy=False, error="GPU is lost"),
))
PODS = PodDirectory((
    PodMeta(UID_TRAIN, "ml", "train-0", containers={CID_TRAIN: "trainer"}, phase="Running"),
    PodMeta(UID_NOTE, "dev", "notebook", containers={CID_NOTE: "jupyter"}, phase="Running"),
    PodMeta(UID_INFER, "ml", "infer-0", containers={CID_INFER: "server"}, phase="Running"),
), synced=True)
TABLE = ProcessTable({
    100: HostProcess(100, 1, "python3", ContainerRef(UID_TRAIN, CID_TRAIN)),
    200: HostProcess(200, 1, "Xorg", None),
    300: HostProcess(300, 1, "jupyter", ContainerRef(UID_NOTE, CID_NOTE)),
    400: HostProcess(400, 1, "tritonserver", ContainerRef(UID_INFER, CID_INFER)),
})
ASSIGNMENTS = (
    PodAssignment("ml", "train-0", "trainer", "nvidia.com/gpu", (UUID0,)),
    PodAssignment("dev", "notebook", "jupyter", "nvidia.com/mig-4g.40gb", (MIG1,)),
    PodAssignment("ml", "infer-0", "server", "nvidia.com/mig-1g.10gb", (MIG5,)),
)
HOLD_TRAIN = Holder("ml", "train-0", "trainer", "nvidia.com/gpu", UUID0)
HOLD_NOTE = Holder("dev", "notebook", "jupyter", "nvidia.com/mig-4g.40gb", MIG1)
HOLD_INFER = Holder("ml", "infer-0", "server", "nvidia.com/mig-1g.10gb", MIG5)
ATTRIBUTION = Attribution({(0, None): (HOLD_TRAIN,), (1, 1): (HOLD_NOTE,),
                           (1, 5): (HOLD_INFER,)})


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
             "container": "trainer", "pod_uid": UID_TRAIN, "allocated": True},
            {"pid": 200, "name": "Xorg", "type": "graphics", "memory_used_bytes": 64 * MIB,
             "sm_utilization_ratio": None, "memory_utilization_ratio": None,
             "namespace": None, "pod": None, "container": None, "pod_uid": None,
             "allocated": None},
            {"pid": 300, "name": "jupyter", "type": "compute", "memory_used_bytes": 256 * MIB,
             "sm_utilization_ratio": 0.02, "memory_utilization_ratio": None,
             "namespace": "dev", "pod": "notebook", "container": "jupyter",
             "pod_uid": UID_NOTE, "allocated": False},
        ],
        "hpc_jobs": [],
    }


def test_document_mig_instances() -> None:
    gpu = document()["gpus"][1]
    assert (gpu["memory_used_bytes"], gpu["utilization_ratio"]) == (None, 0.07)
    assert gpu["holders"] == [] and gpu["processes"] == []  # all on instances
    first, second = gpu["mig_instances"]
    assert {k: v for k, v in first.items() if k != "holders"} == {
        "gpu_instance_id": 1, "compute_instance_id": 0, "profile": "4g.40gb", "uuid": MIG1,
        "memory_total_bytes": 40192 * MIB, "memory_used_bytes": 0, "utilization_ratio": None,
        "processes": [], "hpc_jobs": []}
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

def rows(out: str, first_header: str) -> dict[str, list[str]]:
    """The table starting with `first_header`, keyed by its third column (GI or PID)."""
    block = out.split("\n\n")[0 if first_header == "GPU  GI  MODEL" else 1]
    assert block.startswith(first_header)
    return {line.split()[2]: line.split() for line in block.splitlines()[1:] if line}


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


# --- one whole cycle -----------------------------------------------------------------------

CSV = """
DCGM_FI_DEV_FB_USED, gauge, Framebuffer memory used (in MiB).
DCGM_FI_DEV_GPU_UTIL, gauge, GPU utilization (in %).
"""
SHARED_NODE = NodeSnapshot((
    GpuSnapshot(DeviceIdentity(0, UUID0, "00000000:31:00.0", "NVIDIA L4"),
                values={"DCGM_FI_DEV_FB_USED": 9000, "DCGM_FI_DEV_GPU_UTIL": 80},
                processes=(ProcessSample(100, 3 * MIB, sm_utilization=0.3),
                           ProcessSample(300, 5 * MIB, sm_utilization=0.2),
                           ProcessSample(200, 7 * MIB))),
))
# Log names only: train-0's container is not in the API's status yet.
LOG_PODS = PodDirectory((PodMeta(UID_TRAIN, "ml", "train-0", containers={CID_TRAIN: "trainer"}),),
                        synced=True)
API_PODS = PodDirectory((
    PodMeta(UID_TRAIN, "ml", "train-0", labels={"team": "vision"}, phase="Running"),
    PodMeta(UID_NOTE, "dev", "notebook", containers={CID_NOTE: "jupyter"}, phase="Running"),
    PodMeta("u-old", "ml", "old-job", phase="Succeeded"),
), synced=True)


def assignments(age: float | None) -> AssignmentSnapshot:
    return AssignmentSnapshot(
        (PodAssignment("ml", "train-0", "trainer", "nvidia.com/gpu", (f"{UUID0}::0",)),
         PodAssignment("dev", "notebook", "jupyter", "nvidia.com/gpu", (f"{UUID0}::1",)),
         PodAssignment("ml", "old-job", "main", "nvidia.com/gpu", (f"{UUID0}::2",))),
        age, True, None, "v1")


def cycle(age: float | None, process_metrics: bool = True) -> tuple[str, dict[str, Any]]:
    plan, _ = plan_counters(parse_counters(CSV, "t.csv"), frozenset(IMPLEMENTED), "test")
    out = compose(
        CycleInputs(SHARED_NODE, plan, assignments(age), API_PODS, LOG_PODS, TABLE, 12.5),
        JoinOptions("node-a", virtual_gpus=True, process_metrics=process_metrics,
                    pod_policy=PodLabelPolicy(labels=True, uid=True)))
    return Exposition.from_families(out.families).text.decode(), out.document


def test_compose_end_to_end() -> None:
    text, doc = cycle(age=1.0)
    ident = (f'gpu="0",UUID="{UUID0}",pci_bus_id="00000000:31:00.0",device="nvidia0",'
             'modelName="NVIDIA L4",Hostname="node-a"')
    train = (f'team="vision",container="trainer",namespace="ml",pod="train-0",'
             f'pod_uid="{UID_TRAIN}",vgpu="0"')
    note = f'container="jupyter",namespace="dev",pod="notebook",pod_uid="{UID_NOTE}",vgpu="1"'
    lines = text.splitlines()
    # Holders in sorted order (dev before ml); old-job finished: its holder is dropped.
    assert [line for line in lines if line.startswith("DCGM_FI_")] == [
        f"DCGM_FI_DEV_FB_USED{{{ident},{note}}} 5",
        f"DCGM_FI_DEV_FB_USED{{{ident},{train}}} 3",
        f"DCGM_FI_DEV_GPU_UTIL{{{ident},{note}}} 20",
        f"DCGM_FI_DEV_GPU_UTIL{{{ident},{train}}} 30",
    ]
    # train-0's container name came from the log names, its UID from the API.
    assert (f'gpu_enricher_process_memory_used_bytes{{gpu="0",UUID="{UUID0}",pid="100",'
            'process_name="python3",process_type="compute",container="trainer",namespace="ml",pod="train-0",'
            f'pod_uid="{UID_TRAIN}"}} 3145728') in lines
    assert (f'gpu_enricher_process_memory_used_bytes{{gpu="0",UUID="{UUID0}",pid="200",'
            'process_name="Xorg",process_type="compute"} 7340032') in lines
    assert not any(line.startswith("gpu_enricher_unallocated_process_info{") for line in lines)
    gpu = doc["gpus"][0]
    assert [h["pod"] for h in gpu["holders"]] == ["notebook", "train-0"]
    assert [(p["pid"], p["pod"], p["container"], p["allocated"]) for p in gpu["processes"]] == [
        (100, "train-0", "trainer", True), (300, "notebook", "jupyter", True),
        (200, None, None, None)]
    assert (doc["hostname"], doc["collected_at"], doc["process_metrics"]) == ("node-a", 12.5,
                                                                              True)


def test_compose_stale_kubelet_answer_calls_nothing_unallocated() -> None:
    _, doc = cycle(age=None)
    assert [p["allocated"] for p in doc["gpus"][0]["processes"]] == [None, None, None]


def test_compose_without_process_metrics_still_splits() -> None:
    text, doc = cycle(age=1.0, process_metrics=False)
    assert "gpu_enricher_process_" not in text
    assert doc["process_metrics"] is False
    assert [p["pid"] for p in doc["gpus"][0]["processes"]] == [100, 300, 200]
    assert 'pod="notebook",pod_uid="' + UID_NOTE + '",vgpu="1"} 20' in text


def test_compose_without_a_process_table_repeats_values() -> None:
    plan, _ = plan_counters(parse_counters(CSV, "t.csv"), frozenset(IMPLEMENTED), "test")
    out = compose(CycleInputs(SHARED_NODE, plan, assignments(1.0), API_PODS),
                  JoinOptions(None, virtual_gpus=True))
    values = [line.rsplit(" ", 1)[1]
              for line in Exposition.from_families(out.families).text.decode().splitlines()
              if line.startswith("DCGM_FI_")]
    assert values == ["9000", "9000", "80", "80"]
    assert out.processes == ()
    assert out.attribution is not None and len(out.attribution.holders[(0, None)]) == 2


def test_compose_without_kubelet() -> None:
    plan, _ = plan_counters(parse_counters(CSV, "t.csv"), frozenset(IMPLEMENTED), "test")
    out = compose(CycleInputs(SHARED_NODE, plan, None, API_PODS, LOG_PODS, TABLE),
                  JoinOptions(None, process_metrics=True))
    assert out.attribution is None
    assert [(p.workload.pod if p.workload else None, p.allocated) for p in out.processes] == [
        ("train-0", None), ("notebook", None), (None, None)]
    assert out.document["gpus"][0]["holders"] == []


def test_compose_with_an_unusable_proc_root_repeats_values() -> None:
    """The exporter's own /proc instead of the host's: none of NVML's PIDs are found, so a
    shared GPU's values are repeated per pod, not split into zeros."""
    plan, _ = plan_counters(parse_counters(CSV, "t.csv"), frozenset(IMPLEMENTED), "test")
    out = compose(CycleInputs(SHARED_NODE, plan, assignments(1.0), API_PODS, LOG_PODS,
                              ProcessTable({})), JoinOptions(None, virtual_gpus=True))
    values = [line.rsplit(" ", 1)[1]
              for line in Exposition.from_families(out.families).text.decode().splitlines()
              if line.startswith("DCGM_FI_")]
    assert values == ["9000", "9000", "80", "80"]


def test_compose_prefixes_a_pod_label_named_like_a_label_field() -> None:
    csv = CSV + "DCGM_FI_DRIVER_VERSION, label, Driver version.\n"
    plan, _ = plan_counters(parse_counters(csv, "t.csv"), frozenset(IMPLEMENTED), "test")
    pods = PodDirectory((PodMeta(UID_NOTE, "dev", "notebook",
                                 labels={"DCGM_FI_DRIVER_VERSION": "mine"}),), synced=True)
    node = NodeSnapshot((GpuSnapshot(DeviceIdentity(0, UUID0, "00000000:31:00.0", "NVIDIA L4"),
                                     values={"DCGM_FI_DEV_FB_USED": 1,
                                             "DCGM_FI_DRIVER_VERSION": "580.1"}),))
    held = AssignmentSnapshot((PodAssignment("dev", "notebook", "jupyter", "nvidia.com/gpu",
                                             (UUID0,)),), 1.0, True, None, "v1")
    out = compose(CycleInputs(node, plan, held, pods),
                  JoinOptions(None, pod_policy=PodLabelPolicy(labels=True)))
    line = Exposition.from_families(out.families).text.decode().splitlines()[2]
    assert 'DCGM_FI_DRIVER_VERSION="580.1"' in line
    assert 'pod_label_DCGM_FI_DRIVER_VERSION="mine"' in line


def test_compose_a_renamed_shared_resource_still_counts_as_allocated() -> None:
    """`nvidia.com/gpu.shared` without --nvidia-resource-names: its series carry no pod labels,
    but its pods' processes are not called unallocated (no false theft alarm)."""
    plan, _ = plan_counters(parse_counters(CSV, "t.csv"), frozenset(IMPLEMENTED), "test")
    shared = AssignmentSnapshot(
        (PodAssignment("ml", "train-0", "trainer", "nvidia.com/gpu.shared", (f"{UUID0}::0",)),
         PodAssignment("dev", "notebook", "jupyter", "nvidia.com/gpu.shared",
                       (f"{UUID0}::1",))), 1.0, True, None, "v1")
    out = compose(CycleInputs(SHARED_NODE, plan, shared, API_PODS, LOG_PODS, TABLE),
                  JoinOptions(None, process_metrics=True))
    assert [(p.sample.pid, p.allocated) for p in out.processes] == [
        (100, True), (300, True), (200, None)]
    text = Exposition.from_families(out.families).text.decode()
    assert 'pod="' not in "".join(ln for ln in text.splitlines() if ln.startswith("DCGM_FI_"))


def test_compose_a_failing_kubelet_calls_nothing_unallocated() -> None:
    """The last List failed: its answer (still within max age for the labels) may predate the
    pod's allocation, so no process is flagged."""
    plan, _ = plan_counters(parse_counters(CSV, "t.csv"), frozenset(IMPLEMENTED), "test")
    failing = AssignmentSnapshot((), 2.0, False, None, "v1")
    out = compose(CycleInputs(SHARED_NODE, plan, failing, API_PODS, LOG_PODS, TABLE),
                  JoinOptions(None, process_metrics=True))
    assert [p.allocated for p in out.processes] == [None, None, None]


def test_compose_decides_processes_on_a_dra_gpu_against_its_claim_holders() -> None:
    """The GPU is the DRA driver's (published in a slice, offered by no device plugin): the
    claim holder's process is allocated, another pod's process is not, and the series carry
    the claim's dra_* labels."""
    plan, _ = plan_counters(parse_counters(CSV, "t.csv"), frozenset(IMPLEMENTED), "test")
    claimed = ClaimAllocation("ml", "train-0", "trainer", "gpu-claim", "ml", "gpu.nvidia.com",
                              "node-a", "gpu-0")
    answer = AssignmentSnapshot((), 1.0, True, (), "v1", claims=(claimed,))
    slices = SliceDirectory((SliceDevice("gpu.nvidia.com", "node-a", "gpu-0", UUID0, "gpu"),),
                            synced=True)
    out = compose(CycleInputs(SHARED_NODE, plan, answer, API_PODS, LOG_PODS, TABLE,
                              slices=slices),
                  JoinOptions(None, process_metrics=True,
                              dra_drivers=frozenset({"gpu.nvidia.com"})))
    assert [(p.sample.pid, p.allocated) for p in out.processes] == [
        (100, True), (300, False), (200, None)]
    text = Exposition.from_families(out.families).text.decode()
    assert 'dra_claim_name="gpu-claim"' in text and 'pod="train-0"' in text
    # DRA off: the same answer attributes nothing, and decides nothing on that GPU.
    off = compose(CycleInputs(SHARED_NODE, plan, answer, API_PODS, LOG_PODS, TABLE,
                              slices=slices), JoinOptions(None, process_metrics=True))
    assert [p.allocated for p in off.processes] == [None, None, None]


def test_compose_pod_uid_and_labels_on_a_dra_series_and_no_flags_without_claims() -> None:
    """dcgm-exporter #718: pod_uid and the pod's labels belong on DRA series too; a pod label
    named like a dra_* label is prefixed (a duplicate label name fails the whole scrape). A
    kubelet that reports no claims at all (a 1.32/1.33 kubelet without the gate) leaves
    processes on a DRA GPU undecided rather than flagged."""
    plan, _ = plan_counters(parse_counters(CSV, "t.csv"), frozenset(IMPLEMENTED), "test")
    claimed = ClaimAllocation("ml", "train-0", "trainer", "gpu-claim", "ml", "gpu.nvidia.com",
                              "node-a", "gpu-0")
    slices = SliceDirectory((SliceDevice("gpu.nvidia.com", "node-a", "gpu-0", UUID0, "gpu"),),
                            synced=True)
    pods = PodDirectory((PodMeta(UID_TRAIN, "ml", "train-0",
                                 labels={"dra_pool_name": "mine", "team": "vision"}),),
                        synced=True)
    options = JoinOptions(None, process_metrics=True, dra_drivers=frozenset({"gpu.nvidia.com"}),
                          pod_policy=PodLabelPolicy(labels=True, uid=True))
    with_claim = AssignmentSnapshot((), 1.0, True, (), "v1", claims=(claimed,))
    out = compose(CycleInputs(SHARED_NODE, plan, with_claim, pods, LOG_PODS, TABLE,
                              slices=slices), options)
    line = next(ln for ln in Exposition.from_families(out.families).text.decode().splitlines()
                if ln.startswith("DCGM_FI_DEV_FB_USED{"))
    assert ('pod_label_dra_pool_name="mine",team="vision",container="trainer",'
            'dra_claim_name="gpu-claim"') in line
    assert f'pod="train-0",pod_uid="{UID_TRAIN}"}}' in line
    no_claims = AssignmentSnapshot((), 1.0, True, (), "v1")
    out = compose(CycleInputs(SHARED_NODE, plan, no_claims, pods, LOG_PODS, TABLE,
                              slices=slices), options)
    assert [p.allocated for p in out.processes] == [None, None, None]
