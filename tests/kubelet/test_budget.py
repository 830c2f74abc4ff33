"""--kubelet-list-cpu-budget (issue 13, defect 2): a List that costs C seconds of CPU makes the
next wait C / budget, the last answer standing meanwhile, so a node with tens of thousands of
pods never costs the exporter a whole core. A real grpc.aio fake kubelet on a real unix socket,
the real client; only the source's clock is ours."""

import logging

import grpc
import pytest

from gpu_enricher.kubelet.client import PodResourcesClient
from gpu_enricher.kubelet.source import KubeletOptions, KubeletSource
from gpu_enricher.model import PodAssignment
from gpu_enricher.sim.fake_kubelet.server import FakeKubelet
from tests.kubelet.test_kubelet import Clock, node_of
from tests.kubelet.test_kubelet import kubelet as kubelet  # the fixture
from tests.kubelet.test_kubelet import socket_dir as socket_dir  # the fixture
from tests.kubelet.test_large import crowd

GPU = "GPU-fa4e0000-7953-256e-8f33-1343419b1a1c"
NODE_A = node_of(GPU)
HOLDER = PodAssignment("ml", "train", "main", "nvidia.com/gpu", (GPU,))
NEWCOMER = PodAssignment("ml", "eval", "main", "nvidia.com/gpu", (GPU,))


def budgeted(kubelet: FakeKubelet, clock: Clock, budget: float, max_wait: float = 60.0,
             max_age: float = 1.0) -> KubeletSource:
    return KubeletSource(PodResourcesClient(kubelet.socket_path, 20.0),
                         KubeletOptions(max_age_seconds=max_age, list_cpu_budget=budget,
                                        list_max_wait_seconds=max_wait), clock=clock)


def sample(source: KubeletSource, name: str) -> float | None:
    for family in source.families():
        for s in family.samples:
            if s.name == name:
                return float(s.value)
    return None


async def test_a_costly_list_waits_its_cost_over_the_budget_keeping_the_last_answer(
        kubelet: FakeKubelet, caplog: pytest.LogCaptureFixture) -> None:
    kubelet.set_assignments([HOLDER, *crowd(3_000)])  # ~6 MB: milliseconds of CPU to parse
    clock = Clock()
    # 0.01 % of a core: even a millisecond of CPU makes the next List wait 10 s; capped at 30 s.
    source = budgeted(kubelet, clock, budget=0.0001, max_wait=30.0)
    try:
        with caplog.at_level(logging.INFO, logger="gpu_enricher.kubelet.source"):
            await source.refresh(NODE_A)
        cpu = source.last_list_cpu_seconds
        assert cpu is not None and cpu > 0
        wait = min(cpu / 0.0001, 30.0)
        assert wait >= 10.0
        assert kubelet.calls["v1.List"] == 1
        assert sample(source, "gpu_enricher_kubelet_list_cpu_seconds") == cpu
        spacing = [r for r in caplog.records if "--kubelet-list-cpu-budget" in r.getMessage()]
        assert len(spacing) == 1 and spacing[0].levelno == logging.INFO
        assert f"one List per {wait:.1f} s" in spacing[0].getMessage()

        kubelet.set_assignments([HOLDER, NEWCOMER])  # not seen until the next List
        for _ in range(3):
            clock.now += wait / 4  # past max_age (1 s): deferred is not failed, labels stay
            await source.refresh(NODE_A)
        assert kubelet.calls["v1.List"] == 1
        assert source.deferred == 3
        assert sample(source, "gpu_enricher_kubelet_lists_deferred_total") == 3
        snapshot = source.snapshot()
        assert snapshot.up and snapshot.assignments == (HOLDER,)

        clock.now += wait / 4  # the List is due
        await source.refresh(NODE_A)
        assert kubelet.calls["v1.List"] == 2
        assert source.snapshot().assignments == (HOLDER, NEWCOMER)
        assert source.deferred == 3
        # The small answer costs far less than 1 s of waiting at 0.01 %: once more every pass,
        # said once.
        if (source.last_list_cpu_seconds or 0) / 0.0001 < 1.0:
            assert any("a List every pass again" in r.getMessage() for r in caplog.records)
    finally:
        await source.close()


async def test_labels_expire_at_max_age_after_the_deferred_list_was_due(
        kubelet: FakeKubelet) -> None:
    """A deferral is not a failure, but a kubelet gone when the List is due still ends the
    labels max_age later: better none than possibly wrong ones."""
    kubelet.set_assignments([HOLDER])
    clock = Clock()
    source = budgeted(kubelet, clock, budget=0.0001, max_wait=20.0, max_age=3.0)
    try:
        await source.refresh(NODE_A)
        cpu = source.last_list_cpu_seconds
        assert cpu is not None
        wait = min(cpu / 0.0001, 20.0)
        clock.now += wait + 2.9
        assert source.snapshot().assignments == (HOLDER,)
        clock.now += 0.2
        snapshot = source.snapshot()
        assert snapshot.assignments == () and snapshot.age_seconds is None
    finally:
        await source.close()


@pytest.mark.parametrize("budget", [0.0, 0.02], ids=["off", "default"])
async def test_a_small_answer_is_listed_every_pass(kubelet: FakeKubelet, budget: float) -> None:
    """The 110 pods of a full node answer ~11 kB: well under a millisecond of CPU, so the default
    budget of 2 % never holds a List back at any interval (-c is at least 100 ms)."""
    kubelet.set_assignments([HOLDER, *crowd(110, 1)])
    clock = Clock()
    source = budgeted(kubelet, clock, budget=budget)
    try:
        for n in range(1, 6):
            await source.refresh(NODE_A)
            assert kubelet.calls["v1.List"] == n
            clock.now += 1.0
        assert source.deferred == 0
        assert sample(source, "gpu_enricher_kubelet_lists_deferred_total") == 0
    finally:
        await source.close()


async def test_a_failed_list_is_retried_on_its_backoff_not_the_budget(
        kubelet: FakeKubelet) -> None:
    kubelet.set_assignments([HOLDER])
    clock = Clock()
    source = budgeted(kubelet, clock, budget=0.0001, max_wait=20.0, max_age=60.0)
    try:
        await source.refresh(NODE_A)
        assert source.snapshot().up
        cpu = source.last_list_cpu_seconds
        assert cpu is not None
        clock.now += min(cpu / 0.0001, 20.0)
        kubelet.fail_next("v1.List", grpc.StatusCode.RESOURCE_EXHAUSTED)
        await source.refresh(NODE_A)  # due: asks, and fails
        assert kubelet.calls["v1.List"] == 2 and not source.snapshot().up
        clock.now += 2.0  # past one failure's jittered backoff (at most 0.6 s)
        await source.refresh(NODE_A)
        assert kubelet.calls["v1.List"] == 3 and source.snapshot().up
    finally:
        await source.close()
