"""Composition root: build the backend, collector and HTTP app from a Config and run them."""

import asyncio
import contextlib
import logging
import shutil
import signal
import socket
import tempfile
from collections.abc import AsyncIterator, Callable
from pathlib import Path
from typing import TYPE_CHECKING

from aiohttp import web

from .backend import GpuBackend
from .collector import Collector, CollectorOptions
from .config import BUILTIN_SCENARIO, Config
from .counters import CounterLine
from .server import COLLECTOR_KEY, bind_sockets, build_app, listen_address, listen_error

if TYPE_CHECKING:
    from .kubelet.fake_server import FakeKubelet
    from .kubelet.source import KubeletSource

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


def make_assignments(config: Config, socket: Path | None = None) -> "KubeletSource | None":
    """The kubelet source with `-k` (grpc is imported only then)."""
    if not config.kubernetes:
        return None
    from .kubelet.client import PodResourcesClient
    from .kubelet.source import KubeletOptions, KubeletSource

    interval = config.interval_seconds
    timeout = max(0.5, min(5.0, interval / 2))  # a slow kubelet never delays a pass for long
    return KubeletSource(
        PodResourcesClient(socket or config.kubelet_socket, timeout),
        KubeletOptions(max_age_seconds=max(3 * interval, 2 * timeout),
                       extra_resources=config.extra_resources),
    )


def make_collector(config: Config, counters: tuple[CounterLine, ...],
                   backend: GpuBackend | None = None,
                   assignments: "KubeletSource | None" = None) -> Collector:
    return Collector(
        backend if backend is not None else make_backend(config),
        CollectorOptions(
            interval_seconds=config.interval_seconds,
            hostname=config.hostname,
            counters=counters,
            virtual_gpus=config.virtual_gpus,
            extra_resources=config.extra_resources,
        ),
        assignments=assignments,
    )


def _fake_kubelet_context(
    fake: "FakeKubelet",
) -> Callable[[web.Application], contextlib.AbstractAsyncContextManager[None]]:
    @contextlib.asynccontextmanager
    async def context(app: web.Application) -> AsyncIterator[None]:
        await fake.start()
        try:
            yield
        finally:
            await fake.stop()
            shutil.rmtree(fake.socket_path.parent, ignore_errors=True)

    return context


def make_app(collector: Collector, fake_kubelet: "FakeKubelet | None" = None) -> web.Application:
    """The HTTP app, owning the collection loop's task (and the simulated node's fake
    kubelet, started first) for its whole life."""
    app = build_app(collector)
    if fake_kubelet is not None:
        app.cleanup_ctx.append(_fake_kubelet_context(fake_kubelet))
    app.cleanup_ctx.append(_collector_task)
    return app


def simulated_kubelet(backend: GpuBackend) -> "FakeKubelet | None":
    """The simulated node's pods, served by a fake kubelet on a private temporary socket."""
    from .simulated import SimulatedBackend

    if not isinstance(backend, SimulatedBackend):
        return None
    from .kubelet.fake_server import FakeKubelet

    socket = Path(tempfile.mkdtemp(prefix="gpu-enricher-kubelet-")) / "kubelet.sock"
    fake = FakeKubelet(socket)
    fake.set_assignments(backend.scenario.pods)
    fake.set_allocatable(backend.scenario.allocatable())
    return fake


def new_event_loop() -> asyncio.AbstractEventLoop:
    """uvloop where installed (a dependency on Linux): ~15 % more scrapes per core than the
    default loop in bench/scrape.py; the default loop otherwise."""
    try:
        import uvloop
    except ImportError:
        return asyncio.new_event_loop()
    return uvloop.new_event_loop()


async def serve(app: web.Application, config: Config, sockets: list[socket.socket]) -> int:
    """Start the app (collection loop included) on already bound sockets, log "serving" and
    run until SIGTERM/SIGINT; returns the exit status."""
    loop = asyncio.get_running_loop()
    stop = asyncio.Event()
    for signum in (signal.SIGTERM, signal.SIGINT):  # first: a signal during start-up is clean
        loop.add_signal_handler(signum, stop.set)
    runner = web.AppRunner(app, access_log=None, shutdown_timeout=5.0)
    try:
        await runner.setup()
        for sock in sockets:
            await web.SockSite(runner, sock).start()
        log.info("serving /metrics on %s (backend %s, every %d ms, %s event loop)",
                 listen_address(config.host, config.port), app[COLLECTOR_KEY].backend.name,
                 config.collect_interval_ms, type(loop).__module__.split(".")[0])
        await stop.wait()
        log.info("shutting down")
        return 0
    finally:
        await runner.cleanup()


def run(config: Config, counters: tuple[CounterLine, ...],
        backend: GpuBackend | None = None) -> int:
    """Bind first, then build and start everything else: an address that cannot be bound is
    one log line and exit status 1 with nothing started (no NVML, no fake kubelet)."""
    try:
        sockets = bind_sockets(config.host, config.port)
    except OSError as exc:
        log.error("%s", listen_error(exc, listen_address(config.host, config.port)))
        return 1
    try:
        backend = backend if backend is not None else make_backend(config)
        fake = simulated_kubelet(backend)
        assignments = make_assignments(config, fake.socket_path if fake is not None else None)
        app = make_app(make_collector(config, counters, backend, assignments), fake)
        with asyncio.Runner(loop_factory=new_event_loop) as runner:
            return runner.run(serve(app, config, sockets))
    finally:
        for sock in sockets:
            sock.close()
