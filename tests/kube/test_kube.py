"""The pod watch end to end: the real kubernetes_asyncio client against the fake API server
on 127.0.0.1, in the test's own event loop, with timeouts small enough to keep tests fast."""

import asyncio
import logging
import subprocess
import sys
import time
from collections.abc import AsyncIterator, Awaitable, Callable
from pathlib import Path
from typing import Any

import pytest

from gpu_enricher.kube.client import KubeError
from gpu_enricher.kube.config import ConfigPlan, plan_config
from gpu_enricher.kube.source import PodWatchOptions, PodWatchSource
from gpu_enricher.model import PodMeta
from gpu_enricher.sim.fake_api.objects import pod_object
from gpu_enricher.sim.fake_api.server import FakeKubeApi, RecordedRequest
from tests.kube_helpers import (
    eventually,
    family_values,
    fast_options,
    loopback_only,
    starter,
    synced,
)

NODE = "gpu-node-1"
OTHER = "cpu-node-7"
CID = "40c03570b6f4c30bc8d69923d37ee698f5cfcced92c7b7df1c47f6f7887378a9"

__all__ = ["loopback_only"]  # the autouse fixture (kube_helpers)


def pod(uid: str, name: str, node: str = NODE, **fields: Any) -> dict[str, Any]:
    return pod_object(PodMeta(uid=uid, namespace="ml", name=name, **fields), node)


def lists(api: FakeKubeApi) -> list[RecordedRequest]:
    return [r for r in api.requests if not r.watch]


def watches(api: FakeKubeApi) -> list[RecordedRequest]:
    return [r for r in api.requests if r.watch]


def names(source: PodWatchSource) -> set[str]:
    return {p.name for p in source.snapshot().pods}


def fast(api: FakeKubeApi, **changes: Any) -> PodWatchOptions:
    return fast_options(PodWatchOptions, NODE, api, **changes)


Start = Callable[..., Awaitable[PodWatchSource]]


@pytest.fixture
async def start(api: FakeKubeApi) -> AsyncIterator[Start]:
    """Starts a source on `api` (option changes as keywords); all are closed at the end."""

    def make(plan: Callable[[], ConfigPlan] | None = None, **changes: Any) -> PodWatchSource:
        return PodWatchSource(fast(api, **changes), plan=plan)

    async with starter(make) as start_source:
        yield start_source


async def test_lists_then_watches_only_this_nodes_pods(api: FakeKubeApi, start: Start) -> None:
    api.set_pods([pod("u-1", "trainer", labels={"v": "1"}, containers={CID: "main"}),
                  pod("u-2", "elsewhere", node=OTHER)])
    source = await synced(start, api)
    assert source.snapshot().pods == (PodMeta("u-1", "ml", "trainer", {"v": "1"}, "Running",
                                              {CID: "main"}),)
    # The exact calls kubernetes_asyncio makes, which the fake (and an API server) serves.
    assert [r.query_string for r in api.requests] == [
        "fieldSelector=spec.nodeName%3Dgpu-node-1",
        "allowWatchBookmarks=True&fieldSelector=spec.nodeName%3Dgpu-node-1"
        f"&resourceVersion={api.version}&timeoutSeconds=30&watch=True",
    ]
    assert {r.path for r in api.requests} == {"/api/v1/pods"}

    api.upsert_pod(pod("u-3", "evaluator"))
    api.upsert_pod(pod("u-4", "not-ours", node=OTHER))
    await eventually(lambda: names(source) == {"trainer", "evaluator"})
    api.upsert_pod(pod("u-1", "trainer", labels={"v": "2"}, containers={CID: "main"}))
    await eventually(lambda: any(p.labels == {"v": "2"} for p in source.snapshot().pods))
    api.delete_pod("u-3")
    await eventually(lambda: names(source) == {"trainer"})
    assert len(lists(api)) == 1 and source.health().up
    values = family_values(source)
    assert values[("gpu_enricher_kubernetes_pods", ())] == 1
    assert values[("gpu_enricher_kubernetes_synced", ())] == 1
    assert values[("gpu_enricher_kubernetes_lists_total", ())] == 1
    assert 0 <= values[("gpu_enricher_kubernetes_last_event_age_seconds", ())] < 5


async def test_bookmark_moves_the_resume_point(api: FakeKubeApi, start: Start) -> None:
    api.set_pods([pod("u-1", "trainer")])
    source = await synced(start, api)
    # Changes on other nodes move the version without an event this watch can see...
    api.upsert_pod(pod("u-9", "busy", node=OTHER))
    api.upsert_pod(pod("u-9", "busy", node=OTHER, labels={"x": "y"}))
    assert source.resource_version != str(api.version)
    api.bookmark()  # ...a bookmark tells the client
    await eventually(lambda: source.resource_version == str(api.version))
    api.end_watches()
    await eventually(lambda: len(watches(api)) == 2 and api.open_watches == 1)
    assert watches(api)[-1].query["resourceVersion"] == str(api.version)
    assert len(lists(api)) == 1


async def test_watch_end_resumes_from_the_last_event(api: FakeKubeApi, start: Start) -> None:
    source = await synced(start, api)
    version = api.upsert_pod(pod("u-1", "trainer"))
    await eventually(lambda: source.resource_version == version)
    api.end_watches()
    await eventually(lambda: len(watches(api)) == 2 and api.open_watches == 1)
    assert watches(api)[-1].query["resourceVersion"] == version
    assert len(lists(api)) == 1 and source.health().up and source.snapshot().synced
    restarts = family_values(source)
    assert restarts[("gpu_enricher_kubernetes_watch_restarts_total", (("reason", "closed"),))] == 1


@pytest.mark.parametrize("how", ["event", "http", "compacted"])
async def test_gone_lists_again(api: FakeKubeApi, start: Start, how: str) -> None:
    api.set_pods([pod("u-1", "trainer"), pod("u-2", "evaluator")])
    source = await synced(start, api)
    await api.stop()  # changes the client misses while it is away
    api.delete_pod("u-2")
    api.upsert_pod(pod("u-3", "server"))
    if how == "compacted":
        api.compact()
    else:
        api.expire_next_watch(in_stream=how == "event")
    await api.start()
    await eventually(lambda: len(lists(api)) == 2 and names(source) == {"trainer", "server"})
    await eventually(lambda: source.snapshot().synced and source.health().up)
    values = family_values(source)
    assert values[("gpu_enricher_kubernetes_watch_restarts_total", (("reason", "gone"),))] == 1
    assert values[("gpu_enricher_kubernetes_lists_total", ())] == 2


async def test_server_errors_retry_the_watch_not_the_list(api: FakeKubeApi,
                                                         start: Start) -> None:
    api.set_pods([pod("u-1", "trainer")])
    source = await synced(start, api)
    api.fail_next(500, count=2, watch=True)
    api.fail_next(503, watch=True)
    api.bookmark()  # an event: the watch is not "very short" however soon it ends
    api.end_watches()
    # up once the fifth watch's answer reaches the client, a moment after the fake opened it
    await eventually(lambda: len(watches(api)) == 5 and api.open_watches == 1
                     and source.health().up)
    assert len(lists(api)) == 1 and source.health().up
    assert source.health().errors == {"unavailable": 3}
    assert {r.query["resourceVersion"] for r in watches(api)} == {source.resource_version}


async def test_watches_ended_at_once_back_off(api: FakeKubeApi, start: Start,
                                             caplog: pytest.LogCaptureFixture) -> None:
    api.set_pods([pod("u-1", "trainer")])
    source = await synced(start, api, stale_after_seconds=0.5, backoff_initial_seconds=0.05,
                          backoff_max_seconds=0.5)
    with caplog.at_level(logging.WARNING, logger="gpu_enricher.kube"):
        api.end_watches_immediately = True  # 200, then an empty body: no events ever
        api.end_watches()
        before = len(watches(api))
        await asyncio.sleep(1.0)
        count = len(watches(api)) - before
        # Without backoff this loop made thousands of requests a second.
        assert 2 <= count < 20
        health = source.health()
        assert not health.up and health.errors["short_watch"] >= count - 1
        values = family_values(source)
        short = ("gpu_enricher_kubernetes_watch_restarts_total", (("reason", "short_watch"),))
        assert values[short] == health.errors["short_watch"]
        # Watches that deliver nothing confirm nothing: the view goes stale, pods are kept.
        await eventually(lambda: not source.snapshot().synced, within=2.0)
        assert names(source) == {"trainer"}
        messages = [r.getMessage() for r in caplog.records]
        assert len(messages) == 1 and "at once" in messages[0]

        caplog.clear()
        api.end_watches_immediately = False
        await eventually(lambda: api.open_watches == 1)
        # The watch is on probation: a silent one proves itself by lasting a second.
        await eventually(lambda: source.health().up and source.snapshot().synced, within=3.0)
        assert ["answers again" in r.getMessage() for r in caplog.records] == [True]
    api.upsert_pod(pod("u-2", "evaluator"))
    await eventually(lambda: names(source) == {"trainer", "evaluator"})


async def test_server_timeouts_resume_without_backoff(api: FakeKubeApi, start: Start) -> None:
    # Each watch ends at the server's 1 s timeout without an event: normal, no "short watch";
    # a backoff (5 s here) would leave one watch in the time allowed.
    source = await synced(start, api, watch_timeout_seconds=1, backoff_initial_seconds=5.0,
                          backoff_max_seconds=5.0)
    await eventually(lambda: len(watches(api)) >= 3 and api.open_watches == 1, within=4.0)
    closed = ("gpu_enricher_kubernetes_watch_restarts_total", (("reason", "closed"),))
    assert family_values(source)[closed] >= 2
    assert source.health().errors == {} and source.health().up
    assert len(lists(api)) == 1


async def test_api_down_keeps_pods_then_unsynced_then_resyncs(
        api: FakeKubeApi, start: Start, caplog: pytest.LogCaptureFixture) -> None:
    api.set_pods([pod("u-1", "trainer")])
    source = await synced(start, api, stale_after_seconds=0.4)
    await api.stop()
    await eventually(lambda: not source.health().up)
    down = source.snapshot()
    assert [p.name for p in down.pods] == ["trainer"] and down.synced  # within the bound
    assert source.health().errors.get("unavailable", 0) >= 1
    await eventually(lambda: not source.snapshot().synced, within=2.0)
    assert names(source) == {"trainer"}  # still kept, for the consumer to use or not
    assert family_values(source)[("gpu_enricher_kubernetes_synced", ())] == 0
    caplog.clear()
    with caplog.at_level(logging.WARNING, logger="gpu_enricher.kube"):
        await source.refresh(None)
        await source.refresh(None)
    assert ["not synced" in r.getMessage() for r in caplog.records] == [True]

    await api.start()
    await eventually(lambda: source.snapshot().synced and source.health().up)
    api.upsert_pod(pod("u-2", "evaluator"))
    await eventually(lambda: names(source) == {"trainer", "evaluator"})
    caplog.clear()
    with caplog.at_level(logging.WARNING, logger="gpu_enricher.kube"):
        await source.refresh(None)
    assert ["current again" in r.getMessage() for r in caplog.records] == [True]


async def test_forbidden_logs_the_rbac_once(api: FakeKubeApi, start: Start,
                                           caplog: pytest.LogCaptureFixture) -> None:
    api.fail_next(403, count=1000, watch=False)
    with caplog.at_level(logging.WARNING, logger="gpu_enricher.kube"):
        source = await start()
        await eventually(lambda: source.health().errors.get("forbidden", 0) >= 3)
        assert not source.health().up and not source.snapshot().synced
        forbidden = [r.getMessage() for r in caplog.records if "forbid" in r.getMessage()]
        assert len(forbidden) == 1
        assert all(word in forbidden[0] for word in ("get, list and watch", '["pods"]'))
        api.clear_failures()
        await eventually(lambda: source.snapshot().synced and source.health().up)


async def test_unauthorized_reloads_the_configuration(api: FakeKubeApi, start: Start) -> None:
    plans: list[ConfigPlan] = []

    def plan() -> ConfigPlan:
        plans.append(ConfigPlan("host", api.url))
        return plans[-1]

    api.fail_next(401, count=2)
    source = await start(plan=plan)
    await eventually(lambda: source.snapshot().synced)
    assert len(plans) == 3 and source.health().errors == {"unauthorized": 2}


async def test_stalled_watch_is_restarted(api: FakeKubeApi, start: Start) -> None:
    api.set_pods([pod("u-1", "trainer")])
    api.stall_watches = True  # headers, then silence, past the asked timeoutSeconds
    source = await start(watch_timeout_seconds=1, stall_margin_seconds=0.2)
    await eventually(lambda: len(watches(api)) == 1 and names(source) == {"trainer"})
    api.stall_watches = False
    stalled = ("gpu_enricher_kubernetes_watch_restarts_total", (("reason", "stalled"),))
    await eventually(lambda: family_values(source).get(stalled) == 1, within=3.0)
    await eventually(lambda: len(watches(api)) == 2 and api.open_watches == 1)  # silent one cut
    assert len(lists(api)) == 1
    api.upsert_pod(pod("u-2", "evaluator"))
    await eventually(lambda: names(source) == {"trainer", "evaluator"})


async def test_close_leaves_no_tasks(api: FakeKubeApi) -> None:
    before = asyncio.all_tasks()
    source = PodWatchSource(fast(api))
    await source.start()
    await eventually(lambda: source.snapshot().synced)
    await source.close()
    await eventually(lambda: api.open_watches == 0)  # the connection was closed
    await api.stop()  # the fake's own handlers end too
    assert asyncio.all_tasks() == before
    await source.close()  # twice is harmless


async def test_close_while_backing_off(api: FakeKubeApi) -> None:
    await api.stop()
    source = PodWatchSource(fast(api, backoff_initial_seconds=10.0))
    await source.start()
    await eventually(lambda: source.health().errors.get("unavailable", 0) == 1)
    started = time.monotonic()
    await source.close()
    assert time.monotonic() - started < 1.0
    await api.start()


async def test_loads_a_kubeconfig(api: FakeKubeApi, tmp_path: Path) -> None:
    kubeconfig = tmp_path / "config"
    kubeconfig.write_text(f"""apiVersion: v1
kind: Config
clusters:
- name: fake
  cluster: {{server: "{api.url}"}}
users:
- name: exporter
  user: {{token: not-a-secret}}
contexts:
- name: fake
  context: {{cluster: fake, user: exporter}}
current-context: fake
""")
    api.set_pods([pod("u-1", "trainer")])
    source = PodWatchSource(fast(api, host=None, kubeconfig=str(kubeconfig)))
    await source.start()
    try:
        await eventually(lambda: source.snapshot().synced)
        assert names(source) == {"trainer"}
        assert {r.authorization for r in api.requests} == {"Bearer not-a-secret"}
    finally:
        await source.close()


async def test_no_configuration_is_reported_once(tmp_path: Path, start: Start,
                                                 caplog: pytest.LogCaptureFixture) -> None:
    def plan() -> ConfigPlan:
        return plan_config(None, None, {}, tmp_path)

    with caplog.at_level(logging.WARNING, logger="gpu_enricher.kube"):
        source = await start(plan=plan)
        await eventually(lambda: source.health().errors.get("no_config", 0) >= 2)
    assert not source.health().up and source.snapshot().pods == ()
    messages = [r.getMessage() for r in caplog.records]
    assert len(messages) == 1 and "--kubeconfig" in messages[0]


def test_plan_prefers_host_then_kubeconfig_then_the_service_account(tmp_path: Path) -> None:
    account = tmp_path / "sa"
    account.mkdir()
    (account / "token").write_text("t")
    in_cluster = {"KUBERNETES_SERVICE_HOST": "10.0.0.1", "KUBERNETES_SERVICE_PORT": "443",
                  "KUBECONFIG": "/env/kubeconfig"}
    home = tmp_path / "home"

    def plan(host: str | None, kubeconfig: str | None, environ: dict[str, str]) -> ConfigPlan:
        return plan_config(host, kubeconfig, environ, home, account)

    assert plan("http://127.0.0.1:1", "/k", in_cluster) == ConfigPlan("host", "http://127.0.0.1:1")
    assert plan(None, "/k", in_cluster) == ConfigPlan("kubeconfig", "/k")
    assert plan(None, None, in_cluster) == ConfigPlan("in-cluster", str(account))
    assert plan(None, None, {"KUBECONFIG": "/a:/b"}) == ConfigPlan("kubeconfig", "/a:/b")
    (home / ".kube").mkdir(parents=True)
    (home / ".kube" / "config").write_text("")
    assert plan(None, None, {}) == ConfigPlan("kubeconfig", str(home / ".kube" / "config"))


def test_plan_without_anything_says_what_it_looked_for(tmp_path: Path) -> None:
    with pytest.raises(KubeError) as caught:
        plan_config(None, None, {"KUBERNETES_SERVICE_HOST": "10.0.0.1",
                                 "KUBERNETES_SERVICE_PORT": "443"}, tmp_path, tmp_path / "sa")
    assert caught.value.reason == "no_config"
    assert "token is missing" in str(caught.value) and "--kubeconfig" in str(caught.value)


def test_the_source_factory_does_not_import_the_client_library() -> None:
    code = ("import sys\n"
            "from gpu_enricher.kube.source import PodWatchOptions, make_pod_source\n"
            "source = make_pod_source(PodWatchOptions('n', host='http://127.0.0.1:1'))\n"
            "source.snapshot(); source.health(); source.families()\n"
            "assert not [m for m in sys.modules if m.startswith('kubernetes_asyncio')]\n")
    subprocess.run([sys.executable, "-c", code], check=True, timeout=60)
