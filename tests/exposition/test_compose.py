"""One whole cycle (`cycle.compose`): from snapshots to families and the /api/v1/gpus
document."""

from typing import Any

from gpu_enricher.attribution.podlabels import PodLabelPolicy
from gpu_enricher.collector.cycle import CycleInputs, JoinOptions, compose
from gpu_enricher.exposition.render import Exposition
from gpu_enricher.fields.counters import parse_counters, plan_counters
from gpu_enricher.fields.table import IMPLEMENTED
from gpu_enricher.model import (
    AssignmentSnapshot,
    ClaimAllocation,
    DeviceIdentity,
    GpuSnapshot,
    NodeSnapshot,
    PodAssignment,
    PodDirectory,
    PodMeta,
    ProcessSample,
    ProcessTable,
    SliceDevice,
    SliceDirectory,
)
from tests.exposition.query_node import (
    CID_NOTE,
    CID_TRAIN,
    MIB,
    TABLE,
    UID_NOTE,
    UID_TRAIN,
    UUID0,
)

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
