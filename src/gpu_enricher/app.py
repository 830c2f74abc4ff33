"""Composition root: build the backend, collector and HTTP app from a Config and run them."""

import asyncio
import contextlib
import logging
from collections.abc import AsyncIterator
from pathlib import Path

from aiohttp import web

from .backend import GpuBackend
from .collector import Collector, CollectorOptions
from .config import BUILTIN_SCENARIO, Config
from .counters import CounterLine
from .server import COLLECTOR_KEY, build_app

log = logging.getLogger(__name__)


def make_backend(config: Config) -> GpuBackend:
    if config.simulate is None:
        from .nvml import NvmlBackend

        return NvmlBackend()
    from .scenario import builtin_scenario, load_scenario
    from .simulated import SimulatedBackend

    scenario = (
        builtin_scenario() if config.simulate == BUILTIN_SCENARIO
        else load_scenario(Path(config.simulate))
    )
    return SimulatedBackend(scenario)


async def _collector_task(app: web.Application) -> AsyncIterator[None]:
    """The collection loop lives exactly as long as the app."""
    task = asyncio.create_task(app[COLLECTOR_KEY].run(), name="collector")
    yield
    task.cancel()
    with contextlib.suppress(asyncio.CancelledError):
        await task


def make_collector(config: Config, counters: tuple[CounterLine, ...],
                   backend: GpuBackend | None = None) -> Collector:
    return Collector(
        backend if backend is not None else make_backend(config),
        CollectorOptions(
            interval_seconds=config.interval_seconds,
            hostname=config.hostname,
            counters=counters,
        ),
    )


def make_app(collector: Collector) -> web.Application:
    """The HTTP app, owning the collection loop's task for its whole life."""
    app = build_app(collector)
    app.cleanup_ctx.append(_collector_task)
    return app


def new_event_loop() -> asyncio.AbstractEventLoop:
    """uvloop where installed (a dependency on Linux): ~15 % more scrapes per core than the
    default loop in bench/scrape.py; the default loop otherwise."""
    try:
        import uvloop
    except ImportError:
        return asyncio.new_event_loop()
    return uvloop.new_event_loop()


def run(config: Config, counters: tuple[CounterLine, ...],
        backend: GpuBackend | None = None) -> None:
    app = make_app(make_collector(config, counters, backend))
    loop = new_event_loop()
    where = f"{config.host or '0.0.0.0'}:{config.port}"
    log.info("serving /metrics on %s (backend %s, every %d ms, %s event loop)", where,
             app[COLLECTOR_KEY].backend.name, config.collect_interval_ms,
             type(loop).__module__.split(".")[0])
    web.run_app(app, host=config.host, port=config.port, access_log=None, print=None,
                shutdown_timeout=5.0, loop=loop)
