"""Shared by the watch tests (pods, ResourceSlices) that run the real kubernetes_asyncio client
against the fake API server on 127.0.0.1. `loopback_only` is an autouse fixture: a test module
imports it to use it."""

import asyncio
import contextlib
import time
from collections.abc import AsyncIterator, Awaitable, Callable
from dataclasses import replace
from typing import Any, Protocol, TypeVar

import pytest
from prometheus_client.metrics_core import Metric

from gpu_enricher.kube.watch_source import ApiWatchSource, WatchOptions
from gpu_enricher.sim.fake_api.server import FakeKubeApi

PROXY_VARIABLES = ("HTTP_PROXY", "HTTPS_PROXY", "ALL_PROXY", "WS_PROXY", "WSS_PROXY")

S = TypeVar("S", bound=ApiWatchSource[Any])
W = TypeVar("W", bound=WatchOptions)


class HasFamilies(Protocol):
    def families(self) -> list[Metric]: ...


@pytest.fixture(autouse=True)
def loopback_only(monkeypatch: pytest.MonkeyPatch) -> None:
    """The client's session trusts the environment: no proxy may take loopback traffic."""
    for variable in PROXY_VARIABLES:
        monkeypatch.delenv(variable, raising=False)
        monkeypatch.delenv(variable.lower(), raising=False)


async def eventually(predicate: Callable[[], bool], within: float = 3.0) -> None:
    deadline = time.monotonic() + within
    while not predicate():
        if time.monotonic() > deadline:
            pytest.fail(f"condition not met within {within}s")
        await asyncio.sleep(0.01)


def fast_options(kind: type[W], node: str, api: FakeKubeApi, **changes: Any) -> W:
    """Options of `kind` for `node` on `api`, with timeouts small enough for tests, then
    `changes`."""
    options = kind(node, host=api.url, watch_timeout_seconds=30, stall_margin_seconds=1.0,
                   stale_after_seconds=30.0, request_timeout_seconds=2.0,
                   backoff_initial_seconds=0.02, backoff_max_seconds=0.1)
    return replace(options, **changes)


@contextlib.asynccontextmanager
async def starter(make: Callable[..., S]) -> AsyncIterator[Callable[..., Awaitable[S]]]:
    """Gives `start(...)`, which makes a source with `make(...)` and starts it; every source
    it started is closed on leaving."""
    made: list[S] = []

    async def start(*args: Any, **kwargs: Any) -> S:
        source = make(*args, **kwargs)
        made.append(source)
        await source.start()
        return source

    yield start
    for source in made:
        await source.close()


async def synced(start: Callable[..., Awaitable[S]], api: FakeKubeApi, **changes: Any) -> S:
    """A started source once it has listed and its one watch is open."""
    source = await start(**changes)
    await eventually(lambda: source.synced and api.open_watches == 1)
    return source


def family_values(source: HasFamilies) -> dict[tuple[str, tuple[tuple[str, str], ...]], float]:
    return {(s.name, tuple(sorted(s.labels.items()))): s.value
            for family in source.families() for s in family.samples}
