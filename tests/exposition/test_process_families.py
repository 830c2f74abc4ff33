"""Process and per-pod families in exact exposition lines, and the virtual-GPU split of a shared
device's DCGM series per holding pod."""

import pytest

from gpu_enricher.attribution.devices import Attribution, EntityKey, Holder
from gpu_enricher.attribution.podlabels import NO_POLICY, PodLabelPolicy
from gpu_enricher.attribution.workloads import GpuProcess, PodIndex, Workload
from gpu_enricher.exposition.join import PodContext, dcgm_families
from gpu_enricher.exposition.process_families import process_families
from gpu_enricher.exposition.render import Exposition, Family
from gpu_enricher.fields.counters import CounterPlan, parse_counters, plan_counters
from gpu_enricher.fields.namings import with_base_units
from gpu_enricher.fields.table import IMPLEMENTED
from gpu_enricher.model import (
    DeviceIdentity,
    GpuInstance,
    GpuSnapshot,
    NodeSnapshot,
    PodDirectory,
    PodMeta,
    ProcessSample,
)

UUID0 = "GPU-c2f76b33-7953-256e-8f33-1343419b1a1c"
UUID1 = "GPU-0451a3f1-7953-256e-8f33-1343419b1a1c"
UID_A = "4a163a05-439d-484b-8e53-2968bc15824f"
UID_B = "dde1244b-5bb5-4297-b544-85f3bc0d80bf"
MIB = 1 << 20
P = "gpu_enricher_"

GPU0 = GpuSnapshot(DeviceIdentity(0, UUID0, "00000000:31:00.0", "NVIDIA L4"))
INST5 = GpuInstance(5, 0, "1g.10gb", "MIG-5c89852c-d268-c3f3-8ea0-7d07e1a7cf25")
GPU1 = GpuSnapshot(DeviceIdentity(1, UUID1, "00000000:41:00.0", "NVIDIA A100"),
                   mig_enabled=True, instances=(INST5,))
TRAIN = Workload("ml", "train-0", "trainer", UID_A)
G0 = f'gpu="0",UUID="{UUID0}"'
G1 = f'gpu="1",UUID="{UUID1}",GPU_I_PROFILE="1g.10gb",GPU_I_ID="5"'


def proc(pid: int, memory: int | None, sm: float | None, workload: Workload | None,
         allocated: bool | None = None, name: str = "python3", mig: bool = False) -> GpuProcess:
    gpu, inst, key = (GPU1, INST5, (1, 5)) if mig else (GPU0, None, (0, None))
    sample = ProcessSample(pid, memory, gpu_instance_id=5 if mig else None, sm_utilization=sm)
    return GpuProcess(key, gpu, inst, sample, name, workload, allocated)


def text(families: list[Family]) -> str:
    return Exposition.from_families(families).text.decode()


def lines(families: list[Family], family: str) -> list[str]:
    return [line for line in text(families).splitlines()
            if line.startswith(f"{P}{family}{{")]


@pytest.mark.parametrize(
    ("process", "policy", "labels"),
    [
        pytest.param(proc(100, 3 * MIB, 0.25, TRAIN), NO_POLICY,
                     f'{G0},pid="100",process_name="python3",process_type="compute",container="trainer",'
                     'namespace="ml",pod="train-0"', id="pod-process"),
        pytest.param(proc(100, 3 * MIB, 0.25, TRAIN), PodLabelPolicy(uid=True),
                     f'{G0},pid="100",process_name="python3",process_type="compute",container="trainer",'
                     f'namespace="ml",pod="train-0",pod_uid="{UID_A}"', id="pod-uid-enabled"),
        pytest.param(proc(100, 3 * MIB, 0.25, TRAIN), PodLabelPolicy(labels=True),
                     f'{G0},pid="100",process_name="python3",process_type="compute",container="trainer",'
                     'namespace="ml",pod="train-0"', id="pod-labels-only-no-uid"),
        pytest.param(proc(100, 3 * MIB, 0.25, Workload("ml", "train-0", "", "")),
                     PodLabelPolicy(uid=True),
                     f'{G0},pid="100",process_name="python3",process_type="compute",namespace="ml",pod="train-0"',
                     id="container-and-uid-unknown"),
        pytest.param(proc(200, 3 * MIB, 0.25, None, name="Xorg"), PodLabelPolicy(uid=True),
                     f'{G0},pid="200",process_name="Xorg",process_type="compute"',
                     id="host-process"),
        pytest.param(proc(300, 3 * MIB, 0.25, TRAIN, mig=True), NO_POLICY,
                     f'{G1},pid="300",process_name="python3",process_type="compute",'
                     'container="trainer",'
                     'namespace="ml",pod="train-0"', id="mig-process"),
        pytest.param(proc(400, 3 * MIB, 0.25, None, name='we"ird\\'), NO_POLICY,
                     f'{G0},pid="400",process_name="we\\"ird\\\\",process_type="compute"',
                     id="escaped-name"),
    ],
)
def test_process_series_labels(process: GpuProcess, policy: PodLabelPolicy,
                               labels: str) -> None:
    families = process_families([process], policy)
    assert lines(families, "process_memory_used_bytes") == [
        f"{P}process_memory_used_bytes{{{labels}}} 3145728"]
    assert lines(families, "process_sm_utilization_ratio") == [
        f"{P}process_sm_utilization_ratio{{{labels}}} 0.250000"]


def test_host_process_has_no_pod_labels_at_all() -> None:
    out = text(process_families([proc(200, MIB, None, None, name="Xorg")], NO_POLICY))
    for absent in ("container=", "namespace=", "pod=", "pod_uid="):
        assert absent not in out
    assert f"{P}pod_memory_used_bytes" not in out  # no pod, no per-pod sum


def test_full_exposition() -> None:
    other = Workload("dev", "notebook", "jupyter", UID_B)
    processes = [
        proc(100, 1 * MIB, 0.7, TRAIN, allocated=True),
        proc(101, 2 * MIB, 0.5, TRAIN, allocated=True),
        proc(200, 4 * MIB, None, None, name="Xorg"),
        proc(300, 8 * MIB, None, other, allocated=False, mig=True),
        proc(301, None, 0.125, other, allocated=None, mig=True),
    ]
    py = 'process_name="python3",process_type="compute"'
    train = 'container="trainer",namespace="ml",pod="train-0"'
    note = 'container="jupyter",namespace="dev",pod="notebook"'
    assert text(process_families(processes, NO_POLICY)) == f"""\
# HELP {P}process_memory_used_bytes GPU memory used by a process, with its pod and container \
when it runs in one.
# TYPE {P}process_memory_used_bytes gauge
{P}process_memory_used_bytes{{{G0},pid="100",{py},{train}}} 1048576
{P}process_memory_used_bytes{{{G0},pid="101",{py},{train}}} 2097152
{P}process_memory_used_bytes{{{G0},pid="200",process_name="Xorg",process_type="compute"}} 4194304
{P}process_memory_used_bytes{{{G1},pid="300",{py},{note}}} 8388608
# HELP {P}process_sm_utilization_ratio Share of time the process used the GPU's SMs since the \
previous pass (0-1); absent when NVML had no sample.
# TYPE {P}process_sm_utilization_ratio gauge
{P}process_sm_utilization_ratio{{{G0},pid="100",{py},{train}}} 0.700000
{P}process_sm_utilization_ratio{{{G0},pid="101",{py},{train}}} 0.500000
{P}process_sm_utilization_ratio{{{G1},pid="301",{py},{note}}} 0.125000
# HELP {P}pod_memory_used_bytes GPU memory used by a pod's processes on this GPU or GPU instance.
# TYPE {P}pod_memory_used_bytes gauge
{P}pod_memory_used_bytes{{{G0},namespace="ml",pod="train-0"}} 3145728
{P}pod_memory_used_bytes{{{G1},namespace="dev",pod="notebook"}} 8388608
# HELP {P}pod_sm_utilization_ratio Sum of the SM utilisation of a pod's processes on this GPU \
(0-1).
# TYPE {P}pod_sm_utilization_ratio gauge
{P}pod_sm_utilization_ratio{{{G0},namespace="ml",pod="train-0"}} 1.000000
{P}pod_sm_utilization_ratio{{{G1},namespace="dev",pod="notebook"}} 0.125000
# HELP {P}unallocated_process_info A pod's process uses a GPU that pod-resources does not \
assign to that pod (e.g. NVIDIA_VISIBLE_DEVICES=all); the value is always 1.
# TYPE {P}unallocated_process_info gauge
{P}unallocated_process_info{{gpu="1",UUID="{UUID1}",pid="300",namespace="dev",pod="notebook",\
container="jupyter"}} 1
"""


@pytest.mark.parametrize(
    ("sms", "expected"),
    [
        pytest.param([None, None], None, id="no-sample-no-series"),
        pytest.param([0.0, None], "0.000000", id="a-zero-sample"),
        pytest.param([0.1234567, None], "0.123457", id="six-decimals"),
        pytest.param([0.25, 0.5], "0.750000", id="summed"),
        pytest.param([0.75, 0.5], "1.000000", id="capped-at-1"),
    ],
)
def test_pod_sm_ratio(sms: list[float | None], expected: str | None) -> None:
    processes = [proc(100 + i, MIB, sm, TRAIN) for i, sm in enumerate(sms)]
    found = lines(process_families(processes, NO_POLICY), "pod_sm_utilization_ratio")
    labels = f'{G0},namespace="ml",pod="train-0"'
    assert found == ([] if expected is None else
                     [f"{P}pod_sm_utilization_ratio{{{labels}}} {expected}"])


@pytest.mark.parametrize(
    ("allocated", "present"),
    [(True, False), (None, False), (False, True)],
)
def test_unallocated_only_for_allocated_false(allocated: bool | None, present: bool) -> None:
    found = lines(process_families([proc(100, MIB, None, TRAIN, allocated)], NO_POLICY),
                  "unallocated_process_info")
    assert len(found) == int(present)


def test_unallocated_without_a_known_container_has_no_container_label() -> None:
    pod_only = Workload("ml", "train-0", "", "uid-1")  # the pod's status lists no container yet
    found = lines(process_families([proc(100, MIB, None, pod_only, False)], NO_POLICY),
                  "unallocated_process_info")
    assert found == [f'{P}unallocated_process_info{{{G0},pid="100",namespace="ml",'
                     'pod="train-0"} 1']


def test_all_families_present_even_when_empty() -> None:
    families = process_families([], NO_POLICY)
    assert [f.name for f in families] == [
        f"{P}process_memory_used_bytes", f"{P}process_sm_utilization_ratio",
        f"{P}pod_memory_used_bytes", f"{P}pod_sm_utilization_ratio",
        f"{P}unallocated_process_info"]
    assert all(f.prom_type == "gauge" and f.samples == () for f in families)
    assert text(families) == ""


# --- exposition/join.py: the virtual-GPU split ----------------------------------------------------

CSV = """
DCGM_FI_DEV_FB_USED, gauge, Framebuffer memory used (in MiB).
DCGM_FI_DEV_GPU_UTIL, gauge, GPU utilization (in %).
DCGM_FI_DEV_GPU_TEMP, gauge, GPU temperature (in C).
"""
NVML = {"DCGM_FI_DEV_FB_USED": 30000, "DCGM_FI_DEV_GPU_UTIL": 90, "DCGM_FI_DEV_GPU_TEMP": 40}
SHARED = GpuSnapshot(DeviceIdentity(0, UUID0, "00000000:31:00.0", "NVIDIA L4"), values=NVML)
EXCLUSIVE = GpuSnapshot(DeviceIdentity(1, UUID1, "00000000:41:00.0", "NVIDIA L4"),
                        values={"DCGM_FI_DEV_FB_USED": 500, "DCGM_FI_DEV_GPU_UTIL": 12,
                                "DCGM_FI_DEV_GPU_TEMP": 41})
MIG_SHARED = GpuSnapshot(
    DeviceIdentity(2, "GPU-2", "00000000:51:00.0", "NVIDIA A100"), mig_enabled=True,
    values={"DCGM_FI_DEV_GPU_UTIL": 33, "DCGM_FI_DEV_GPU_TEMP": 42},
    instances=(GpuInstance(5, 0, "1g.10gb", "MIG-x", {"DCGM_FI_DEV_FB_USED": 900}),))
ID0 = f'gpu="0",UUID="{UUID0}",pci_bus_id="00000000:31:00.0",device="nvidia0",modelName="NVIDIA L4"'
ID1 = f'gpu="1",UUID="{UUID1}",pci_bus_id="00000000:41:00.0",device="nvidia1",modelName="NVIDIA L4"'
ID2 = ('gpu="2",UUID="GPU-2",pci_bus_id="00000000:51:00.0",device="nvidia2",'
       'modelName="NVIDIA A100",GPU_I_PROFILE="1g.10gb",GPU_I_ID="5"')


def plan() -> CounterPlan:
    found, _ = plan_counters(parse_counters(CSV, "t.csv"), frozenset(IMPLEMENTED), "test")
    return found


def shared_holder(pod: str, replica: str, device: str = f"{UUID0}::") -> Holder:
    return Holder("ml", pod, "main", "nvidia.com/gpu", f"{device}{replica}", replica)


ATTRIBUTION = Attribution({
    (0, None): (shared_holder("pod-a", "0"), shared_holder("pod-b", "1"),
                shared_holder("pod-c", "2")),
    (1, None): (Holder("ml", "pod-d", "main", "nvidia.com/gpu", UUID1),),
})
Usage = dict[tuple[EntityKey, str, str], tuple[int, float | None]]
USAGE: Usage = {
    ((0, None), "ml", "pod-a"): (3 * MIB + 5, 0.456),
    ((0, None), "ml", "pod-b"): (1 * MIB, None),
    ((1, None), "ml", "pod-d"): (7 * MIB, 0.99),  # exclusive: NVML's values stay
}


def series(families: list[Family], name: str) -> list[str]:
    return [line for line in text(families).splitlines() if line.startswith(name + "{")]


def holder_labels(pod: str, replica: str | None) -> str:
    vgpu = f',vgpu="{replica}"' if replica is not None else ""
    return f'container="main",namespace="ml",pod="{pod}"{vgpu}'


@pytest.mark.parametrize(
    ("usage", "field", "expected"),
    [
        pytest.param(USAGE, "DCGM_FI_DEV_FB_USED", {"pod-a": "3", "pod-b": "1", "pod-c": "0",
                                                    "pod-d": "500"}, id="memory-split-mib"),
        # pod-b's process has no utilisation sample (an MPS client on a real GPU): the GPU's
        # own value stays, never a 0 nobody measured; pod-c has no process: 0.
        pytest.param(USAGE, "DCGM_FI_DEV_GPU_UTIL", {"pod-a": "46", "pod-b": "90", "pod-c": "0",
                                                     "pod-d": "12"}, id="util-split-percent"),
        pytest.param(USAGE, "DCGM_FI_DEV_GPU_TEMP", {"pod-a": "40", "pod-b": "40",
                                                     "pod-c": "40", "pod-d": "41"},
                     id="hardware-values-repeated"),
        pytest.param(None, "DCGM_FI_DEV_FB_USED", {"pod-a": "30000", "pod-b": "30000",
                                                   "pod-c": "30000", "pod-d": "500"},
                     id="no-usage-memory-repeated"),
        pytest.param(None, "DCGM_FI_DEV_GPU_UTIL", {"pod-a": "90", "pod-b": "90",
                                                    "pod-c": "90", "pod-d": "12"},
                     id="no-usage-util-repeated"),
        pytest.param({}, "DCGM_FI_DEV_FB_USED", {"pod-a": "0", "pod-b": "0", "pod-c": "0",
                                                 "pod-d": "500"},
                     id="usage-known-but-no-process"),
    ],
)
def test_virtual_gpu_split(usage: Usage | None, field: str, expected: dict[str, str]) -> None:
    node = NodeSnapshot((SHARED, EXCLUSIVE))
    families = dcgm_families(node, plan(), None, ATTRIBUTION, True, PodContext(usage=usage))
    replicas = {"pod-a": "0", "pod-b": "1", "pod-c": "2", "pod-d": None}
    assert series(families, field) == [
        f"{field}{{{ID0 if pod != 'pod-d' else ID1},{holder_labels(pod, replicas[pod])}}} {value}"
        for pod, value in expected.items()]


def test_virtual_gpu_split_under_4_9_names() -> None:
    """The same split under dcgm-exporter 4.9's names (issue 31): memory in bytes, exactly the
    pod's processes' bytes (not MiB * 2^20), utilisation as the ratio of the split percent."""
    csv = ("DCGM_FI_DEV_FB_USED_BYTES, gauge, Framebuffer memory used (in bytes).\n"
           "DCGM_FI_DEV_GPU_UTIL_RATIO, gauge, GPU utilization (ratio 0-1).\n")
    plan_49, _ = plan_counters(parse_counters(csv, "t.csv"), frozenset(IMPLEMENTED), "test")
    shared = GpuSnapshot(SHARED.identity, values={**NVML, **with_base_units(NVML)})
    exclusive = GpuSnapshot(EXCLUSIVE.identity,
                            values={**EXCLUSIVE.values, **with_base_units(EXCLUSIVE.values)})
    families = dcgm_families(NodeSnapshot((shared, exclusive)), plan_49, None, ATTRIBUTION,
                             True, PodContext(usage=USAGE))
    values = {line.split('pod="')[1].split('"')[0]: line.rsplit(" ", 1)[1]
              for line in series(families, "DCGM_FI_DEV_FB_USED_BYTES")}
    assert values == {"pod-a": str(3 * MIB + 5), "pod-b": str(MIB), "pod-c": "0",
                      "pod-d": str(500 * MIB)}
    ratios = {line.split('pod="')[1].split('"')[0]: line.rsplit(" ", 1)[1]
              for line in series(families, "DCGM_FI_DEV_GPU_UTIL_RATIO")}
    assert ratios == {"pod-a": "0.460000", "pod-b": "0.900000", "pod-c": "0.000000",
                      "pod-d": "0.120000"}


def test_split_util_capped_at_100() -> None:
    usage: Usage = {((0, None), "ml", "pod-a"): (0, 1.7)}
    families = dcgm_families(NodeSnapshot((SHARED,)), plan(), None, ATTRIBUTION, True,
                             PodContext(usage=usage))
    assert series(families, "DCGM_FI_DEV_GPU_UTIL")[0].endswith(
        f'{holder_labels("pod-a", "0")}}} 100')


def test_two_containers_of_one_pod_are_not_a_shared_device() -> None:
    attribution = Attribution({(0, None): (
        Holder("ml", "pod-a", "a", "nvidia.com/gpu", f"{UUID0}::0", "0"),
        Holder("ml", "pod-a", "b", "nvidia.com/gpu", f"{UUID0}::1", "1"))})
    families = dcgm_families(NodeSnapshot((SHARED,)), plan(), None, attribution, True,
                             PodContext(usage={((0, None), "ml", "pod-a"): (MIB, 0.1)}))
    assert [line.rsplit(" ", 1)[1] for line in series(families, "DCGM_FI_DEV_FB_USED")] == [
        "30000", "30000"]


def test_without_virtual_gpus_the_first_holder_keeps_nvml_values() -> None:
    families = dcgm_families(NodeSnapshot((SHARED,)), plan(), None, ATTRIBUTION, False,
                             PodContext(usage=USAGE))
    assert series(families, "DCGM_FI_DEV_FB_USED") == [
        f"DCGM_FI_DEV_FB_USED{{{ID0},{holder_labels('pod-a', None)}}} 30000"]


def test_shared_mig_instance_split_keeps_gpu_util_absent() -> None:
    """GPU_UTIL does not exist per MIG instance; the split must not invent it."""
    attribution = Attribution({(2, 5): (shared_holder("pod-a", "0", "MIG-x::"),
                                        shared_holder("pod-b", "1", "MIG-x::"))})
    usage: Usage = {((2, 5), "ml", "pod-a"): (2 * MIB, None)}
    families = dcgm_families(NodeSnapshot((MIG_SHARED,)), plan(), None, attribution, True,
                             PodContext(usage=usage))
    assert series(families, "DCGM_FI_DEV_GPU_UTIL") == []
    assert series(families, "DCGM_FI_DEV_FB_USED") == [
        f"DCGM_FI_DEV_FB_USED{{{ID2},{holder_labels('pod-a', '0')}}} 2",
        f"DCGM_FI_DEV_FB_USED{{{ID2},{holder_labels('pod-b', '1')}}} 0"]
    assert series(families, "DCGM_FI_DEV_GPU_TEMP") == [
        f"DCGM_FI_DEV_GPU_TEMP{{{ID2},{holder_labels('pod-a', '0')}}} 42",
        f"DCGM_FI_DEV_GPU_TEMP{{{ID2},{holder_labels('pod-b', '1')}}} 42"]


@pytest.mark.parametrize(
    ("policy", "attrs"),
    [
        pytest.param(NO_POLICY, 'container="main",namespace="ml",pod="pod-a",vgpu="0"',
                     id="no-policy"),
        pytest.param(PodLabelPolicy(uid=True),
                     f'container="main",namespace="ml",pod="pod-a",pod_uid="{UID_A}",vgpu="0"',
                     id="uid"),
        # dcgm-exporter copies pod labels into its label map (with the label-type fields),
        # before the attribute map (container, namespace, pod, pod_uid, vgpu); each sorted.
        pytest.param(PodLabelPolicy(labels=True, uid=True),
                     'Team="x",app_kubernetes_io_name="trainer",pod_label_pod="clash",zone="z",'
                     f'container="main",namespace="ml",pod="pod-a",pod_uid="{UID_A}",vgpu="0"',
                     id="labels-then-attributes"),
        pytest.param(PodLabelPolicy(labels=True, allowlist=("^zone$",)),
                     'zone="z",container="main",namespace="ml",pod="pod-a",vgpu="0"',
                     id="allowlisted"),
    ],
)
def test_pod_labels_before_the_attribute_labels(policy: PodLabelPolicy, attrs: str) -> None:
    meta = PodMeta(UID_A, "ml", "pod-a", labels={
        "zone": "z", "app.kubernetes.io/name": "trainer", "Team": "x", "pod": "clash"})
    context = PodContext(PodIndex.of(PodDirectory((meta,), synced=True)), policy)
    attribution = Attribution({(0, None): (shared_holder("pod-a", "0"),)})
    families = dcgm_families(NodeSnapshot((SHARED,)), plan(), "node-a", attribution, True,
                             context)
    assert series(families, "DCGM_FI_DEV_GPU_TEMP") == [
        f'DCGM_FI_DEV_GPU_TEMP{{{ID0},Hostname="node-a",{attrs}}} 40']


def test_pod_unknown_to_the_api_gets_no_pod_labels() -> None:
    context = PodContext(PodIndex.of(None), PodLabelPolicy(labels=True, uid=True))
    attribution = Attribution({(0, None): (shared_holder("pod-a", "0"),)})
    families = dcgm_families(NodeSnapshot((SHARED,)), plan(), None, attribution, True, context)
    assert series(families, "DCGM_FI_DEV_GPU_TEMP") == [
        f"DCGM_FI_DEV_GPU_TEMP{{{ID0},{holder_labels('pod-a', '0')}}} 40"]


def test_a_pod_holding_two_replicas_counts_its_use_once() -> None:
    """pod-a holds replicas 0 and 2 of a GPU shared with pod-b: its memory and utilisation
    go on its first replica's series and 0 on the other, so sum by (pod) is its real use."""
    holders = Attribution({(0, None): (shared_holder("pod-a", "0"), shared_holder("pod-a", "2"),
                                       shared_holder("pod-b", "1"))})
    families = dcgm_families(NodeSnapshot((SHARED,)), plan(), None, holders, True,
                             PodContext(usage=USAGE))
    assert series(families, "DCGM_FI_DEV_FB_USED") == [
        f"DCGM_FI_DEV_FB_USED{{{ID0},{holder_labels('pod-a', '0')}}} 3",
        f"DCGM_FI_DEV_FB_USED{{{ID0},{holder_labels('pod-a', '2')}}} 0",
        f"DCGM_FI_DEV_FB_USED{{{ID0},{holder_labels('pod-b', '1')}}} 1"]


def test_pod_uid_from_the_log_names_when_the_api_does_not_know_the_pod() -> None:
    context = PodContext(PodIndex.of(None), PodLabelPolicy(uid=True),
                         uids={("ml", "pod-a"): UID_A})
    holders = Attribution({(0, None): (shared_holder("pod-a", "0"),)})
    families = dcgm_families(NodeSnapshot((SHARED,)), plan(), None, holders, False, context)
    assert series(families, "DCGM_FI_DEV_GPU_TEMP") == [
        f'DCGM_FI_DEV_GPU_TEMP{{{ID0},container="main",namespace="ml",pod="pod-a",'
        f'pod_uid="{UID_A}"}} 40']
