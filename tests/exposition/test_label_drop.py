"""`--drop-labels`: which names the flag takes and refuses, how the CLI reports them, and that a
whole cycle's families lose exactly the dropped labels without two series becoming one."""

from collections import Counter

import pytest
from prometheus_client.parser import text_string_to_metric_families

from gpu_enricher.attribution.podlabels import PodLabelPolicy
from gpu_enricher.cli.flag_values import UsageError, parse_drop_labels
from gpu_enricher.cli.main import EXIT_USAGE, main
from gpu_enricher.cli.settings import parse_config
from gpu_enricher.collector.cycle import CycleInputs, JoinOptions, compose
from gpu_enricher.exposition.label_drop import DROPPABLE, REFUSED, unknown_warning
from gpu_enricher.exposition.render import Exposition, Family
from gpu_enricher.fields.counters import parse_counters, plan_counters
from gpu_enricher.fields.names import Hostname, hostname_pairs
from gpu_enricher.fields.table import IMPLEMENTED
from gpu_enricher.model import (
    AssignmentSnapshot,
    ContainerRef,
    DeviceIdentity,
    GpuInstance,
    GpuSnapshot,
    HostProcess,
    NodeSnapshot,
    PodAssignment,
    PodDirectory,
    PodMeta,
    ProcessSample,
    ProcessTable,
)

# -- the parser ------------------------------------------------------------------------------


@pytest.mark.parametrize("name", [*DROPPABLE, "DCGM_FI_DRIVER_VERSION", "DCGM_FI_DEV_SERIAL",
                                  "team", "app_kubernetes_io_name", "pod_label_gpu"])
def test_labels_that_add_no_series_are_accepted(name: str) -> None:
    assert parse_drop_labels(f" {name} ,UUID") == {name, "UUID"}


@pytest.mark.parametrize("name", ["gpu", "GPU_I_ID", "pod", "namespace", "container", "vgpu",
                                  "pid", "dra_claim_name", "xid", "err_code", "clock_event",
                                  "health_watch", "peer_gpu", "err_msg", "job", "instance",
                                  "hpc_job", "user"])
def test_labels_that_tell_series_apart_are_refused(name: str) -> None:
    with pytest.raises(UsageError, match=f"^label '{name}' cannot be dropped: "):
        parse_drop_labels(f"UUID,{name}")


def test_every_refused_label_says_why() -> None:
    for name, why in REFUSED.items():
        with pytest.raises(UsageError) as caught:
            parse_drop_labels(name)
        assert why in str(caught.value) and "\n" not in str(caught.value)


@pytest.mark.parametrize("name", ["app.kubernetes.io/name", "9lives", "__name__"])
def test_what_no_series_can_carry_is_refused(name: str) -> None:
    with pytest.raises(UsageError, match=f"label '{name}' cannot be dropped"):
        parse_drop_labels(name)


def test_none_and_empty() -> None:
    assert parse_drop_labels("") == frozenset()
    config, _ = parse_config([], {"NODE_NAME": "n"})
    assert config.drop_labels == frozenset()


# -- the command line ------------------------------------------------------------------------


def test_flag_and_environment() -> None:
    config, warnings = parse_config(["--drop-labels", "UUID,pci_bus_id"], {"NODE_NAME": "n"})
    assert config.drop_labels == {"UUID", "pci_bus_id"} and warnings == []
    config, _ = parse_config([], {"GPU_ENRICHER_DROP_LABELS": "modelName", "NODE_NAME": "n"})
    assert config.drop_labels == {"modelName"}
    assert config.hostname == "n"


@pytest.mark.parametrize(("name", "kept"), [("Hostname", "hostname"), ("hostname", "Hostname")])
def test_dropping_one_host_label_keeps_the_other_and_both_is_no_hostname(
        name: str, kept: str) -> None:
    config, _ = parse_config(["--drop-labels", name], {"NODE_NAME": "n"})
    assert config.hostname is not None and hostname_pairs(config.hostname) == [(kept, "n")]
    config, _ = parse_config(["--drop-labels", "Hostname,hostname"], {"NODE_NAME": "n"})
    assert config.hostname is None
    config, _ = parse_config(["--drop-labels", name, "--hostname-label-name", name],
                             {"NODE_NAME": "n"})
    assert config.hostname is None, "the one name chosen, dropped: as -n"


def test_a_refused_label_exits_2_with_one_line(capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["--drop-labels", "UUID,pod"]) == EXIT_USAGE
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1, err
    assert err[0].startswith("gpu-enricher: error: --drop-labels=UUID,pod: label 'pod' cannot "
                             "be dropped: it identifies the pod"), err


def test_a_name_no_series_carries_is_warned_about() -> None:
    _, warnings = parse_config(["--drop-labels", "pci_busid"], {"NODE_NAME": "n"})
    assert len(warnings) == 1 and "pci_busid (did you mean pci_bus_id?)" in warnings[0]
    # With the pod's own labels exported it may be one of them: nothing to say.
    _, warnings = parse_config(["--drop-labels", "team", "--kubernetes-enable-pod-labels"],
                               {"NODE_NAME": "n"})
    assert warnings == []
    assert unknown_warning(frozenset({"UUID", "DCGM_FI_DRIVER_VERSION"}), False) is None


# -- a whole cycle ---------------------------------------------------------------------------

CSV = """
DCGM_FI_DEV_GPU_TEMP, gauge, GPU temperature (in C).
DCGM_FI_DEV_FB_USED, gauge, Framebuffer memory used (in MiB).
DCGM_FI_DEV_GPU_UTIL, gauge, GPU utilization (in %).
DCGM_FI_DEV_XID_ERRORS, gauge, Last XID.
DCGM_FI_DRIVER_VERSION, label, Driver Version
"""
UUID0, UUID1 = "GPU-00000000-0000-0000-0000-000000000000", "GPU-11111111-0000-0000-0000-0"
MIG1, MIG2 = "MIG-11111111-0000-0000-0000-000000000001", "MIG-11111111-0000-0000-0000-02"
UID_A, UID_B = "aaaaaaaa-0000-0000-0000-000000000000", "bbbbbbbb-0000-0000-0000-000000000000"
VALUES = {"DCGM_FI_DEV_GPU_TEMP": 40, "DCGM_FI_DEV_GPU_UTIL": 50, "DCGM_FI_DEV_FB_USED": 9,
          "DCGM_FI_DRIVER_VERSION": "580.105.08"}
# GPU 0 whole, held by ml/a, which runs two processes on it; GPU 1 in MIG mode, instance 1 held
# by ml/b (running on it), instance 2 free. Both pods carry labels and UIDs.
NODE = NodeSnapshot((
    GpuSnapshot(DeviceIdentity(0, UUID0, "00000000:31:00.0", "NVIDIA H100 80GB HBM3"),
                values=VALUES,
                processes=(ProcessSample(100, 1 << 30, sm_utilization=0.5),
                           ProcessSample(101, 1 << 29, sm_utilization=0.1))),
    GpuSnapshot(DeviceIdentity(1, UUID1, "00000000:41:00.0", "NVIDIA H100 80GB HBM3"),
                values=VALUES, mig_enabled=True,
                instances=(GpuInstance(1, 0, "3g.40gb", MIG1, {"DCGM_FI_DEV_FB_USED": 5}),
                           GpuInstance(2, 0, "3g.40gb", MIG2, {"DCGM_FI_DEV_FB_USED": 0})),
                processes=(ProcessSample(200, 1 << 28, gpu_instance_id=1),)),
))
PODS = PodDirectory((
    PodMeta(UID_A, "ml", "a", {"team": "x", "app": "train"}, "Running", {"c" * 64: "main"}),
    PodMeta(UID_B, "ml", "b", {"team": "x", "app": "infer"}, "Running", {"d" * 64: "main"}),
), synced=True)
TABLE = ProcessTable({
    100: HostProcess(100, 1, "python", ContainerRef(UID_A, "c" * 64)),
    101: HostProcess(101, 1, "python", ContainerRef(UID_A, "c" * 64)),
    200: HostProcess(200, 1, "triton", ContainerRef(UID_B, "d" * 64)),
})
KUBELET = AssignmentSnapshot((
    PodAssignment("ml", "a", "main", "nvidia.com/gpu", (UUID0,)),
    PodAssignment("ml", "b", "main", "nvidia.com/mig-3g.40gb", (MIG1,)),
), 1.0, True, None, "v1")
EVERYTHING = frozenset({"UUID", "pci_bus_id", "device", "modelName", "GPU_I_PROFILE",
                        "DCGM_FI_DRIVER_VERSION", "pod_uid", "process_name", "team"})

Series = tuple[str, frozenset[tuple[str, str]]]


def families(drop: frozenset[str]) -> list[Family]:
    plan, _ = plan_counters(parse_counters(CSV, "t.csv"), frozenset(IMPLEMENTED), "test")
    options = JoinOptions(Hostname("node-a"), process_metrics=True,
                          pod_policy=PodLabelPolicy(labels=True, uid=True), drop_labels=drop)
    return compose(CycleInputs(NODE, plan, KUBELET, PODS, None, TABLE), options).families


def series(found: list[Family]) -> Counter[Series]:
    """Each series as Prometheus identifies it (name and label set), counted."""
    body = Exposition.from_families(found).text.decode()
    return Counter((s.name, frozenset(s.labels.items()))
                   for f in text_string_to_metric_families(body) for s in f.samples)


def test_dropped_labels_are_gone_from_every_series_and_none_collide() -> None:
    full, dropped = series(families(frozenset())), series(families(EVERYTHING))
    assert max(dropped.values()) == 1, "a series is duplicated"
    assert sum(dropped.values()) == sum(full.values()) > 0
    every_label = {name for _, labels in full for name, _ in labels}
    assert every_label >= EVERYTHING, "the fixture shows every label dropped"
    assert not {name for _, labels in dropped for name, _ in labels} & EVERYTHING
    # The same series, less the dropped labels: nothing else moved.
    assert set(dropped) == {(n, frozenset(p for p in labels if p[0] not in EVERYTHING))
                            for n, labels in full}
    # What tells series apart stays: the GPU, the MIG instance, the pod, the process.
    names = {n for n, _ in dropped}
    assert {"DCGM_FI_DEV_FB_USED", "gpu_enricher_process_memory_used_bytes",
            "gpu_enricher_pod_memory_used_bytes", "DCGM_FI_DEV_XID_ERRORS"} <= names
    for name, labels in dropped:
        keys = dict(labels)
        assert "gpu" in keys, (name, keys)
        if name.startswith("gpu_enricher_process_"):
            assert {"pid", "pod", "namespace", "container"} <= keys.keys()


def test_nothing_dropped_is_the_same_exposition() -> None:
    assert Exposition.from_families(families(frozenset())).text == Exposition.from_families(
        families(frozenset({"not_set_anywhere"}))).text
