"""GPU processes → pods: resolution order, host and vanished processes, allocation, MIG keys,
finished holders and the per-pod sums."""

import pytest

from gpu_enricher.attribution.devices import Attribution, EntityKey, Holder
from gpu_enricher.attribution.workloads import (
    EMPTY_INDEX,
    MPS_SERVER,
    Allocation,
    GpuProcess,
    PodIndex,
    Workload,
    gpu_processes,
    live_holders,
    per_pod,
    resolve,
)
from gpu_enricher.model import (
    ContainerRef,
    DeviceIdentity,
    GpuInstance,
    GpuSnapshot,
    HostProcess,
    NodeSnapshot,
    PodDirectory,
    PodMeta,
    ProcessSample,
    ProcessTable,
)

UUID0 = "GPU-c2f76b33-7953-256e-8f33-1343419b1a1c"
UUID1 = "GPU-0451a3f1-7953-256e-8f33-1343419b1a1c"
MIG1 = "MIG-5c89852c-d268-c3f3-8ea0-7d07e1a7cf25"
MIG5 = "MIG-a3c7e1a8-1b1d-5b2e-9c3f-2e6f4b4b8d10"
CID_A = "40c03570b6f4c30bc8d69923d37ee698f5cfcced92c7b7df1c47f6f7887378a9"
CID_B = "f45298cd514d1930c4fe3afc4412e59547f7e3148fddd22ca33cefce046eb830"
UID_A = "4a163a05-439d-484b-8e53-2968bc15824f"
UID_B = "dde1244b-5bb5-4297-b544-85f3bc0d80bf"
STATIC_HASH = "b53dfa9e2dc9b890f7fadb2770857b03"
STATIC_API_UID = "9d2c7f57-1d3a-4b7e-a0c1-6f0e4b1d2c3e"
MIB = 1 << 20


def holder(pod: str, container: str = "main", namespace: str = "ml",
           device: str = UUID0, replica: str | None = None) -> Holder:
    return Holder(namespace, pod, container, "nvidia.com/gpu", device, replica)


def directory(*pods: PodMeta) -> PodDirectory:
    return PodDirectory(pods, synced=True)


API_TRAIN = PodMeta(UID_A, "ml", "train-0", containers={CID_A: "trainer"}, phase="Running")
API_TRAIN_NO_STATUS = PodMeta(UID_A, "ml", "train-0", phase="Pending")
LOG_TRAIN = PodMeta(UID_A, "ml", "train-0", containers={CID_A: "trainer-from-logs"})
LOG_TRAIN_NO_UID = PodMeta("", "ml", "train-0", containers={CID_A: "trainer-from-logs"})
API_STATIC = PodMeta(STATIC_API_UID, "kube-system", "kube-apiserver-node1",
                     mirror_uid=STATIC_HASH)
API_STATIC_RUNNING = PodMeta(STATIC_API_UID, "kube-system", "kube-apiserver-node1",
                             containers={CID_B: "kube-apiserver"}, mirror_uid=STATIC_HASH)
LOG_STATIC = PodMeta(STATIC_HASH, "kube-system", "kube-apiserver-node1",
                     containers={CID_B: "kube-apiserver"})
REF_A = ContainerRef(UID_A, CID_A)
REF_STATIC = ContainerRef(STATIC_HASH, CID_B)


@pytest.mark.parametrize(
    ("api", "logs", "holders", "ref", "expected"),
    [
        pytest.param([API_TRAIN], [LOG_TRAIN], [holder("other", "x")], REF_A,
                     Workload("ml", "train-0", "trainer", UID_A), id="api-container-id-first"),
        pytest.param([], [LOG_TRAIN], [holder("other", "x")], REF_A,
                     Workload("ml", "train-0", "trainer-from-logs", UID_A),
                     id="log-names-without-api"),
        pytest.param([], [LOG_TRAIN_NO_UID], [], REF_A,
                     Workload("ml", "train-0", "trainer-from-logs", UID_A),
                     id="log-pod-without-uid-takes-cgroup-uid"),
        pytest.param([API_TRAIN_NO_STATUS], [LOG_TRAIN], [], REF_A,
                     Workload("ml", "train-0", "trainer-from-logs", UID_A),
                     id="api-uid-only-completed-by-log-container"),
        pytest.param([API_TRAIN_NO_STATUS], [], [holder("train-0", "cuda")], REF_A,
                     Workload("ml", "train-0", "cuda", UID_A),
                     id="api-uid-only-completed-by-its-own-holder"),
        pytest.param([API_TRAIN_NO_STATUS], [], [], REF_A,
                     Workload("ml", "train-0", "", UID_A), id="api-uid-only-no-container"),
        pytest.param([API_TRAIN_NO_STATUS], [], [holder("someone-else")], REF_A,
                     Workload("ml", "train-0", "", UID_A),
                     id="api-uid-only-other-pods-holder-ignored"),
        pytest.param([], [], [holder("train-0", "z-side"), holder("train-0", "a-main")], REF_A,
                     Workload("ml", "train-0", "a-main", UID_A),
                     id="single-holder-pod-first-container-sorted-cgroup-uid-kept"),
        pytest.param([], [], [holder("pod-a"), holder("pod-b")], REF_A, None,
                     id="two-holder-pods-no-fallback"),
        pytest.param([], [], [holder("pod-a", namespace="n1"), holder("pod-a", namespace="n2")],
                     REF_A, None, id="same-name-other-namespace-is-another-pod"),
        pytest.param([], [], [], REF_A, None, id="nothing-known"),
        pytest.param([API_TRAIN], [], [], ContainerRef(UID_B, CID_B), None,
                     id="other-pod-unknown"),
        pytest.param([API_STATIC], [], [], REF_STATIC,
                     Workload("kube-system", "kube-apiserver-node1", "", STATIC_API_UID),
                     id="static-pod-by-mirror-uid"),
        pytest.param([API_STATIC_RUNNING], [], [], REF_STATIC,
                     Workload("kube-system", "kube-apiserver-node1", "kube-apiserver",
                              STATIC_API_UID),
                     id="static-pod-by-container-id"),
        pytest.param([API_STATIC], [LOG_STATIC], [], REF_STATIC,
                     Workload("kube-system", "kube-apiserver-node1", "kube-apiserver",
                              STATIC_API_UID),
                     id="static-pod-mirror-uid-completed-by-log-keeps-api-uid"),
    ],
)
def test_resolution_order(api: list[PodMeta], logs: list[PodMeta], holders: list[Holder],
                          ref: ContainerRef, expected: Workload | None) -> None:
    indexes = [PodIndex.of(directory(*api)), PodIndex.of(directory(*logs))]
    assert resolve(ref, indexes, sorted(holders)) == expected


def test_pod_index_of_nothing_is_empty() -> None:
    index = PodIndex.of(None)
    assert (index.by_container, index.by_uid, index.by_name) == ({}, {}, {})
    assert index.workload(REF_A) is None
    assert EMPTY_INDEX.workload(REF_A) is None


def test_pod_index_keys_a_static_pod_by_both_uids() -> None:
    index = PodIndex.of(directory(API_STATIC, API_TRAIN))
    assert index.by_uid == {STATIC_API_UID: API_STATIC, STATIC_HASH: API_STATIC,
                            UID_A: API_TRAIN}
    assert index.by_name[("kube-system", "kube-apiserver-node1")] is API_STATIC
    assert index.by_container == {CID_A: (API_TRAIN, "trainer")}


# --- gpu_processes -----------------------------------------------------------------------

def gpu(index: int = 0, uuid: str = UUID0, *samples: ProcessSample,
        healthy: bool = True) -> GpuSnapshot:
    return GpuSnapshot(DeviceIdentity(index, uuid, f"00000000:{index}1:00.0", "NVIDIA L4"),
                       healthy=healthy, processes=samples)


def mig_gpu(*samples: ProcessSample, enabled: bool = True) -> GpuSnapshot:
    return GpuSnapshot(
        DeviceIdentity(1, UUID1, "00000000:41:00.0", "NVIDIA A100"), mig_enabled=enabled,
        instances=(GpuInstance(1, 0, "4g.40gb", MIG1), GpuInstance(5, 0, "1g.10gb", MIG5)),
        processes=samples)


def table(*procs: HostProcess) -> ProcessTable:
    return ProcessTable({p.pid: p for p in procs})


POD_PROC = HostProcess(100, 5000, "python3", REF_A)
HOST_PROC = HostProcess(200, 10, "Xorg", None)
API = [PodIndex.of(directory(API_TRAIN))]


# Every device of the test GPUs is one the device plugin hands out.
MANAGED = frozenset({(0, None), (1, None), (1, 1), (1, 5)})


def alloc(attribution: Attribution | None,
          managed: frozenset[EntityKey] = MANAGED) -> Allocation | None:
    return None if attribution is None else Allocation(attribution.holders, managed)


def single(node: NodeSnapshot, procs: ProcessTable,
           attribution: Attribution | None) -> GpuProcess:
    found = gpu_processes(node, procs, API, alloc(attribution))
    assert len(found) == 1
    return found[0]


def test_pod_process_is_attributed() -> None:
    sample = ProcessSample(100, 3 * MIB, sm_utilization=0.5)
    proc = single(NodeSnapshot((gpu(0, UUID0, sample),)), table(POD_PROC),
                  Attribution({(0, None): (holder("train-0", "trainer"),)}))
    assert proc.key == (0, None)
    assert proc.instance is None
    assert proc.sample is sample
    assert proc.name == "python3"
    assert proc.workload == Workload("ml", "train-0", "trainer", UID_A)
    assert proc.allocated is True


@pytest.mark.parametrize(
    "attribution",
    [
        pytest.param(None, id="no-kubelet"),
        pytest.param(Attribution({}), id="free-gpu"),
        # The holder fallback is for containers without names, never for host processes.
        pytest.param(Attribution({(0, None): (holder("train-0", "trainer"),)}), id="held-gpu"),
    ],
)
def test_host_process_has_no_workload(attribution: Attribution | None) -> None:
    proc = single(NodeSnapshot((gpu(0, UUID0, ProcessSample(200, MIB)),)), table(HOST_PROC),
                  attribution)
    assert (proc.name, proc.workload, proc.allocated) == ("Xorg", None, None)


def test_vanished_pid_is_unattributed_with_empty_name() -> None:
    attribution = Attribution({(0, None): (holder("train-0", "trainer"),)})
    proc = single(NodeSnapshot((gpu(0, UUID0, ProcessSample(999, MIB)),)), table(POD_PROC),
                  attribution)
    assert (proc.name, proc.workload, proc.allocated) == ("", None, None)


@pytest.mark.parametrize(
    ("holders", "expected"),
    [
        pytest.param({(0, None): (holder("train-0", "trainer"),)}, True, id="its-own-gpu"),
        pytest.param({(0, None): (holder("train-0", "other-container"),)}, True,
                     id="held-by-another-container-of-the-pod"),
        pytest.param({(0, None): (holder("pod-a"), holder("train-0", replica="1"))}, True,
                     id="one-of-several-holders"),
        pytest.param({(0, None): (holder("pod-a"),)}, False, id="another-pods-gpu"),
        pytest.param({(0, None): (holder("train-0", namespace="other-ns"),)}, False,
                     id="same-name-other-namespace"),
        pytest.param({}, False, id="nobody-holds-it"),
        pytest.param({(1, None): (holder("train-0", "trainer", device=UUID1),)}, False,
                     id="pod-holds-a-different-gpu"),
    ],
)
def test_allocated(holders: dict[EntityKey, tuple[Holder, ...]], expected: bool) -> None:
    node = NodeSnapshot((gpu(0, UUID0, ProcessSample(100, MIB)), gpu(1, UUID1)))
    assert single(node, table(POD_PROC), Attribution(holders)).allocated is expected


def test_allocated_unknown_without_attribution() -> None:
    proc = single(NodeSnapshot((gpu(0, UUID0, ProcessSample(100, MIB)),)), table(POD_PROC),
                  None)
    assert proc.workload == Workload("ml", "train-0", "trainer", UID_A)
    assert proc.allocated is None


@pytest.mark.parametrize(
    ("mig_enabled", "gi", "key", "profile"),
    [
        pytest.param(True, 5, (1, 5), "1g.10gb", id="instance-5"),
        pytest.param(True, 1, (1, 1), "4g.40gb", id="instance-1"),
        pytest.param(True, 7, (1, None), None, id="unknown-instance-whole-gpu"),
        pytest.param(True, None, (1, None), None, id="no-instance-id"),
        pytest.param(False, 5, (1, None), None, id="mig-disabled"),
    ],
)
def test_mig_processes_are_keyed_to_their_instance(
        mig_enabled: bool, gi: int | None, key: EntityKey, profile: str | None) -> None:
    node = NodeSnapshot((mig_gpu(ProcessSample(100, MIB, gpu_instance_id=gi),
                                 enabled=mig_enabled),))
    attribution = Attribution({(1, 5): (holder("train-0", "trainer", device=MIG5),)})
    proc = single(node, table(POD_PROC), attribution)
    assert proc.key == key
    assert (proc.instance.profile if proc.instance is not None else None) == profile
    # A process whose instance is unknown on a MIG GPU may be any instance's: the pod holds
    # one of them, so it is not called unallocated.
    assert proc.allocated is (key == (1, 5) or (mig_enabled and key == (1, None)))


def test_a_device_the_plugin_does_not_manage_is_undecided() -> None:
    """A GPU given through DRA (or one the kubelet does not report) has no device-plugin
    holders: its processes are neither allocated nor unallocated."""
    node = NodeSnapshot((gpu(0, UUID0, ProcessSample(100, MIB)),))
    proc = gpu_processes(node, table(POD_PROC), API,
                         Allocation({}, frozenset({(1, None)})))[0]
    assert proc.workload is not None and proc.allocated is None


def test_the_holder_fallback_never_names_another_pods_process() -> None:
    """A thief's container is unknown to every source, but its cgroup UID is not the sole
    holder's: it must not take the holder's name (which would hide it)."""
    thief = HostProcess(100, 5000, "python3", ContainerRef(UID_B, CID_B))
    node = NodeSnapshot((gpu(0, UUID0, ProcessSample(100, MIB)),))
    held = Attribution({(0, None): (holder("train-0", "trainer"),)})  # UID_A per the API
    proc = gpu_processes(node, table(thief), API, alloc(held))[0]
    assert proc.workload is None and proc.allocated is None
    # Without any UID for the holder (no API, no log names) the fallback is all there is.
    blind = gpu_processes(node, table(thief), [], alloc(held))[0]
    assert blind.workload == Workload("ml", "train-0", "trainer", UID_B)


def test_mig_holder_fallback_uses_the_instances_holders() -> None:
    unnamed = HostProcess(100, 5000, "python3", ContainerRef(UID_B, CID_B))
    node = NodeSnapshot((mig_gpu(ProcessSample(100, MIB, gpu_instance_id=5),
                                 ProcessSample(100, MIB, gpu_instance_id=1)),))
    attribution = Attribution({(1, 5): (holder("pod-b", "worker", device=MIG5),),
                               (1, 1): (holder("pod-a", device=MIG1),
                                        holder("pod-c", device=MIG1))})
    procs = gpu_processes(node, table(unnamed), API, alloc(attribution))
    assert [(p.key, p.workload, p.allocated) for p in procs] == [
        ((1, 5), Workload("ml", "pod-b", "worker", UID_B), True),
        ((1, 1), None, None),
    ]


def test_unhealthy_gpus_are_skipped_and_order_is_kept() -> None:
    node = NodeSnapshot((
        gpu(0, UUID0, ProcessSample(100, MIB), ProcessSample(200, 2 * MIB)),
        gpu(1, UUID1, ProcessSample(100, MIB), healthy=False),
        gpu(2, "GPU-2", ProcessSample(200, 3 * MIB)),
    ))
    procs = gpu_processes(node, table(POD_PROC, HOST_PROC), API, None)
    assert [(p.key, p.sample.pid) for p in procs] == [((0, None), 100), ((0, None), 200),
                                                       ((2, None), 200)]


# --- live_holders -------------------------------------------------------------------------

@pytest.mark.parametrize(
    ("phase", "kept"),
    [("Running", True), ("Pending", True), ("", True), ("Unknown", True),
     ("Succeeded", False), ("Failed", False)],
)
def test_live_holders_drops_finished_pods(phase: str, kept: bool) -> None:
    old = holder("old-job")
    new = holder("new-job")
    pods = PodIndex.of(directory(PodMeta("u1", "ml", "old-job", phase=phase),
                                 PodMeta("u2", "ml", "new-job", phase="Running")))
    attribution = Attribution({(0, None): (new, old), (1, None): (old,)}, unmatched=("x",))
    result = live_holders(attribution, pods)
    if kept:
        assert result.holders == attribution.holders
    else:
        assert result.holders == {(0, None): (new,)}  # a key left without holders is absent
    assert result.unmatched == ("x",)


def test_live_holders_keeps_pods_the_api_does_not_know() -> None:
    attribution = Attribution({(0, None): (holder("unknown"),)})
    assert live_holders(attribution, PodIndex.of(directory())).holders == attribution.holders


# --- per_pod ------------------------------------------------------------------------------

def process(key: EntityKey, pid: int, memory: int | None, sm: float | None,
            workload: Workload | None) -> GpuProcess:
    return GpuProcess(key, gpu(key[0]), None, ProcessSample(pid, memory, sm_utilization=sm),
                      "p", workload, None)


def test_per_pod_sums_memory_and_sm_per_device_and_pod() -> None:
    a = Workload("ml", "pod-a", "main", UID_A)
    a_side = Workload("ml", "pod-a", "sidecar", UID_A)
    b = Workload("ml", "pod-b", "main", UID_B)
    other_ns = Workload("dev", "pod-a", "main", "u")
    procs = [
        process((0, None), 1, 1 * MIB, 0.25, a),
        process((0, None), 2, 2 * MIB, 0.5, a_side),  # another container, same pod
        process((0, None), 3, 4 * MIB, None, b),
        process((0, None), 4, None, 0.125, b),  # memory unknown counts 0
        process((0, None), 5, 8 * MIB, 0.9, None),  # a host process is in no pod's sum
        process((1, None), 6, 16 * MIB, None, a),
        process((1, 5), 7, 32 * MIB, 0.0, a),
        process((0, None), 8, 64 * MIB, None, other_ns),
    ]
    assert per_pod(procs) == {
        ((0, None), "ml", "pod-a"): (3 * MIB, 0.75),
        ((0, None), "ml", "pod-b"): (4 * MIB, 0.125),
        ((1, None), "ml", "pod-a"): (16 * MIB, None),  # no sample: None, not 0
        ((1, 5), "ml", "pod-a"): (32 * MIB, 0.0),  # a sample of 0 is 0, not None
        ((0, None), "dev", "pod-a"): (64 * MIB, None),
    }


def test_per_pod_of_nothing_is_empty() -> None:
    assert per_pod([]) == {}
    assert per_pod([process((0, None), 1, MIB, 0.5, None)]) == {}


@pytest.mark.parametrize("comm", ["nvidia-cuda-mps", "nvidia-cuda-mps-server"[:15]])
def test_the_mps_server_is_infrastructure(comm: str) -> None:
    """Its pod (the device plugin's daemon) holds no GPU: not flagged, not in its pod's sums;
    an MPS client beside it is an ordinary pod process."""
    server = HostProcess(300, 5000, comm, REF_A)
    node = NodeSnapshot((gpu(0, UUID0, ProcessSample(300, 300 * MIB, sm_utilization=0.6),
                             ProcessSample(100, 3 * MIB, sm_utilization=0.2, kind="mps")),))
    found = gpu_processes(node, table(server, POD_PROC), API, alloc(Attribution({})))
    assert [(p.sample.pid, p.sample.kind, p.allocated) for p in found] == [
        (300, MPS_SERVER, None), (100, "mps", False)]
    assert found[0].workload == Workload("ml", "train-0", "trainer", UID_A)
    assert per_pod(found) == {((0, None), "ml", "train-0"): (3 * MIB, pytest.approx(0.2))}


def test_only_the_daemons_comm_is_the_mps_server() -> None:
    """A name that only resembles it (here one character short) is an ordinary process."""
    other = HostProcess(300, 5000, "nvidia-cuda-mp", REF_A)
    node = NodeSnapshot((gpu(0, UUID0, ProcessSample(300, MIB)),))
    (found,) = gpu_processes(node, table(other), API, None)
    assert found.sample.kind == "compute"
