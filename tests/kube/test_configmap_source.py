"""`-m`'s ConfigMap through the real client against the fake API server, where RBAC allows the
list but forbids the watch, as the GPU Operator's Role does (configmaps: get, list): the
ConfigMap is listed again every `backoff_max_seconds`, so an edit is still seen; a watch is
tried again every tenth list and, once allowed, taken up."""

import logging
from collections.abc import AsyncIterator
from typing import Any

import pytest

from gpu_enricher.kube.configmap_source import ConfigMapOptions, ConfigMapSource
from gpu_enricher.kube.configmaps import ConfigMapRef
from gpu_enricher.kube.listwatch import WATCH_AGAIN_POLLS
from gpu_enricher.sim.fake_api.objects import config_map_object
from gpu_enricher.sim.fake_api.server import FakeKubeApi
from tests.kube_helpers import eventually, fast_options, starter

NODE = "gpu-node-1"
POLL = 0.1  # backoff_max_seconds in fast_options: the poll interval here


def metrics(csv: str) -> dict[str, Any]:
    return config_map_object("gpu-operator", "dcgm-metrics", {"metrics": csv})


def shown(source: ConfigMapSource) -> str | None:
    found = source.snapshot().config_map
    return None if found is None else found.data.get("metrics")


@pytest.fixture
async def source(api: FakeKubeApi) -> AsyncIterator[ConfigMapSource]:
    options = fast_options(ConfigMapOptions, NODE, api,
                           ref=ConfigMapRef("gpu-operator", "dcgm-metrics"))
    async with starter(lambda: ConfigMapSource(options)) as start:
        yield await start()


async def test_a_forbidden_watch_falls_back_to_listing_again(
        api: FakeKubeApi, caplog: pytest.LogCaptureFixture) -> None:
    api.unwatchable.add("configmaps")
    api.upsert_config_map(metrics("DCGM_FI_DEV_GPU_TEMP, gauge, t\n"))
    options = fast_options(ConfigMapOptions, NODE, api,
                           ref=ConfigMapRef("gpu-operator", "dcgm-metrics"))
    with caplog.at_level(logging.WARNING, logger="gpu_enricher.kube"):
        async with starter(lambda: ConfigMapSource(options)) as start:
            source = await start()
            await eventually(lambda: shown(source) == "DCGM_FI_DEV_GPU_TEMP, gauge, t\n")
            api.upsert_config_map(metrics("DCGM_FI_DEV_SM_CLOCK, gauge, c\n"))
            await eventually(lambda: shown(source) == "DCGM_FI_DEV_SM_CLOCK, gauge, c\n")
            assert source.health().up and source.synced, "polling is a working view"
            lists = [r for r in api.requests if not r.watch]
            refused = [r for r in api.requests if r.watch]
            assert len(lists) >= 2 and api.open_watches == 0
            # Not a watch after every list: one, then one per WATCH_AGAIN_POLLS lists.
            await eventually(lambda: len([r for r in api.requests if not r.watch])
                             > WATCH_AGAIN_POLLS + 1, within=5.0)
            refused = [r for r in api.requests if r.watch]
            assert 2 <= len(refused) <= 3, [r.query for r in api.requests]
            assert source.health().errors.get("forbidden") == len(refused)
            # RBAC fixed: the next watch try takes, and the view follows events again.
            api.unwatchable.clear()
            await eventually(lambda: api.open_watches == 1, within=5.0)
            api.upsert_config_map(metrics("DCGM_FI_DEV_MEM_CLOCK, gauge, m\n"))
            await eventually(lambda: shown(source) == "DCGM_FI_DEV_MEM_CLOCK, gauge, m\n")
    said = [r.getMessage() for r in caplog.records]
    forbidden = [m for m in said if "forbids watching" in m]
    assert len(forbidden) == 1, said
    assert f"listing them again every {POLL:g}s instead" in forbidden[0]
    assert "get, list and watch" in forbidden[0]  # the RBAC hint
    assert sum("watch configmaps" in m and "again" in m for m in said) == 1, said


async def test_an_allowed_watch_is_not_polled(api: FakeKubeApi,
                                              source: ConfigMapSource) -> None:
    api.upsert_config_map(metrics("DCGM_FI_DEV_GPU_TEMP, gauge, t\n"))
    await eventually(lambda: api.open_watches == 1 and shown(source) is not None)
    api.upsert_config_map(metrics("DCGM_FI_DEV_SM_CLOCK, gauge, c\n"))
    await eventually(lambda: shown(source) == "DCGM_FI_DEV_SM_CLOCK, gauge, c\n")
    assert len([r for r in api.requests if not r.watch]) == 1, "listed once, then watched"
