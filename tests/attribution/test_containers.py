"""attribution/containers.py: the containers (and people) each series is copied for, from what
the runtime gave them and from the processes NVML sees (a container started with a count, or
using a GPU it was never given; a person's process: issue 34); and the cgroup lines that name a
container outside any pod."""

import pytest

from gpu_enricher.attribution.containers import (
    GpuRequest,
    RuntimeContainer,
    RuntimeContainers,
    occupants,
    outside_pods,
)
from gpu_enricher.attribution.procfs import (
    parse_cgroup,
    parse_cgroup_leaf,
    parse_runtime_container,
)
from gpu_enricher.model import (
    DeviceIdentity,
    GpuInstance,
    GpuSnapshot,
    HostProcess,
    NodeSnapshot,
    ProcessSample,
    ProcessTable,
)

ID_A, ID_B = "a" * 64, "b0" * 32


@pytest.mark.parametrize(("text", "expected"), [
    (f"12:pids:/docker/{ID_A}\n0::/docker/{ID_A}\n", ID_A),           # Docker, cgroupfs
    (f"0::/system.slice/docker-{ID_A}.scope\n", ID_A),                 # Docker, systemd
    (f"0::/machine.slice/libpod-{ID_A}.scope/container\n", ID_A),      # Podman v2, its sub-cgroup
    (f"0::/machine.slice/libpod-conmon-{ID_A}.scope\n", None),         # Podman's monitor
    (f"0::/default/{ID_A.upper()}\n", ID_A),                           # containerd, a namespace
    (f"0::/system.slice/nerdctl-{ID_A}.scope\n", ID_A),                # nerdctl, systemd
    (f"0::/docker/{ID_B}/system.slice/docker-{ID_A}.scope\n", ID_A),   # nested: the innermost
    ("0::/user.slice/user-1000.slice/session-3.scope\n", None),        # a person's process
    ("0::/\n", None),
    ("garbage", None),
])
def test_a_container_outside_any_pod_is_named_by_its_cgroup(text: str,
                                                            expected: str | None) -> None:
    assert parse_runtime_container(text) == expected
    assert parse_cgroup(text) is None, "no pod: the pod parser keeps out of it"


@pytest.mark.parametrize(("text", "expected"), [
    ("9:pids:/lab/trainer\n1:cpu:/lab/trainer\n0::/lab/trainer\n", "/lab/trainer"),  # hybrid
    ("12:pids:/lab/trainer\n0::/\n", "/lab/trainer"),     # the unified hierarchy says nothing
    ("1:name=systemd:/user.slice\n0::/lab/t/sub\n", "/lab/t/sub"),  # the unified one first
    ("0::/\n", None),
    ("garbage\n", None),
])
def test_a_process_keeps_the_cgroup_it_runs_in(text: str, expected: str | None) -> None:
    assert parse_cgroup_leaf(text) == expected


def test_a_container_is_found_by_its_cgroup_when_its_id_is_not_hex() -> None:
    """containerd's own IDs (`ctr run … trainer`): the runtime says the cgroup, the process
    sits in it or below it."""
    found = RuntimeContainers((), {"trainer": "trainer", ID_A: "web"},
                              {"/lab/trainer": "trainer", "/default/x": "x"})

    def host(cgroup: str | None, runtime: str | None = None) -> HostProcess:
        return HostProcess(1, 1, "python", None, runtime, "bob", cgroup)

    assert found.name_of(host("/lab/trainer")) == "trainer"
    assert found.name_of(host("/lab/trainer/worker")) == "trainer", "a sub-cgroup of it"
    assert found.name_of(host("/lab/trainer2")) is None, "a segment, not a prefix"
    assert found.name_of(host("/lab")) is None
    assert found.name_of(host(None)) is None
    assert found.name_of(host("/system.slice/docker-x.scope", ID_A)) == "web", "ID first"
    # The exporter in a cgroup namespace of its own sees the others relative to its own.
    assert found.name_of(host("/../../lab/trainer")) == "trainer"
    assert found.name_of(host("/../trainer/worker")) == "trainer", "matched by its end"
    assert found.name_of(host("/../x")) == "x"
    assert found.name_of(host("/../elsewhere")) is None
    assert outside_pods(found, ProcessTable({7: host("/default/x")})) == \
        {7: ("container", "x")}, "named as a container, not as its user"


def gpu(index: int, *pids: int, instances: tuple[GpuInstance, ...] = ()) -> GpuSnapshot:
    return GpuSnapshot(DeviceIdentity(index, f"GPU-{index}", f"0000:{index}:00.0", "H100"),
                       mig_enabled=bool(instances), instances=instances,
                       processes=tuple(ProcessSample(p, 1 << 20, 3 if instances else None)
                                       for p in pids))


def table(*entries: tuple[int, str | None]) -> ProcessTable:
    """Processes in those containers; one in none is run by bob."""
    return ProcessTable({pid: HostProcess(pid, 1, "python", None, runtime,
                                          None if runtime else "bob")
                         for pid, runtime in entries})


def test_containers_are_found_through_their_processes_after_those_given_the_gpu() -> None:
    node = NodeSnapshot((gpu(0, 100, 101), gpu(1, 200),
                         gpu(2, 300, instances=(GpuInstance(3, 0, "1g.10gb", "MIG-x"),))))
    found = RuntimeContainers(
        (RuntimeContainer(ID_A, "trainer", GpuRequest(("0",))),),
        {ID_A: "trainer", ID_B: "counted"})
    processes = table((100, ID_B), (101, ID_A), (200, None), (300, ID_B))
    trainer, counted = ("container", "trainer"), ("container", "counted")
    assert occupants(node, found, outside_pods(found, processes)) == {
        (0, None): (trainer, counted),  # given first, then found; each once
        (1, None): (("user", "bob"),),  # a person's process in no container
        (2, 3): (counted,),             # its process on the instance
    }
    assert occupants(node, found) == {(0, None): (trainer,)}, "no /proc: given only"
    gone = RuntimeContainers(found.containers, {ID_A: "trainer"})
    assert occupants(node, gone, outside_pods(gone, processes)) == {(0, None): (trainer,),
                                                (1, None): (("user", "bob"),)}, \
        "a container the runtime no longer lists names nothing"
