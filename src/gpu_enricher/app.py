"""Composition root: build the backend, collector and HTTP app from a Config and run them."""

import asyncio
import contextlib
import logging
import os
import signal
import socket
import sys
from collections.abc import AsyncIterator, Callable
from pathlib import Path
from typing import TYPE_CHECKING

from aiohttp import web

from .backend import GpuBackend
from .collector import Collector, CollectorOptions
from .config import BUILTIN_SCENARIO, Config
from .counters import CounterLine
from .podlabels import PodLabelPolicy
from .server import COLLECTOR_KEY, bind_sockets, build_app, listen_address, listen_error

if TYPE_CHECKING:
    import ssl

    from .kubelet.source import KubeletSource
    from .model import PodDirectory, SliceDirectory
    from .podlogs import LogNameSource
    from .proc_source import ProcessSource
    from .sim_cluster import SimulatedCluster
    from .sources import Source
    from .websecurity import WebSecurity
    from .xid import XidSnapshot

log = logging.getLogger(__name__)


def make_backend(config: Config) -> GpuBackend:
    if config.simulate is None:
        from .nvml import NvmlBackend

        return NvmlBackend(slow_interval_seconds=config.slow_fields_interval_ms / 1000)
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
                   assignments: "KubeletSource | None" = None,
                   api_url: Callable[[], str] | None = None) -> Collector:
    """The collector with every source the configuration asks for."""
    logs, processes = make_process_sources(config)
    backend = backend if backend is not None else make_backend(config)
    return Collector(
        backend,
        CollectorOptions(
            interval_seconds=config.interval_seconds,
            hostname=config.hostname,
            counters=counters,
            virtual_gpus=config.virtual_gpus,
            extra_resources=config.extra_resources,
            process_metrics=config.process_metrics,
            pod_policy=PodLabelPolicy(config.pod_labels, config.pod_uid,
                                      config.pod_label_allowlist),
            dra_drivers=config.dra_drivers if config.reads_slices else frozenset(),
            xid_window_ms=config.xid_window_ms,
            clock_events_window_ms=config.clock_events_window_ms,
        ),
        assignments=assignments,
        pods=make_pod_source(config, api_url),
        logs=logs,
        processes=processes,
        slices=make_slice_source(config, api_url),
        xids=make_xid_source(config, backend),
    )


def _simulated_cluster_context(
    cluster: "SimulatedCluster",
) -> Callable[[web.Application], contextlib.AbstractAsyncContextManager[None]]:
    @contextlib.asynccontextmanager
    async def context(app: web.Application) -> AsyncIterator[None]:
        try:
            await cluster.start()
            yield
        finally:
            await cluster.stop()

    return context


def make_app(collector: Collector, cluster: "SimulatedCluster | None" = None) -> web.Application:
    """The HTTP app, owning the collection loop's task (and the simulated node's fakes,
    started first) for its whole life."""
    app = build_app(collector)
    if cluster is not None:
        app.cleanup_ctx.append(_simulated_cluster_context(cluster))
    app.cleanup_ctx.append(_collector_task)
    return app


def simulated_cluster(backend: GpuBackend, config: Config) -> "SimulatedCluster | None":
    """The simulated node's kubelet, Kubernetes API and /proc, in a private temporary
    directory."""
    from .simulated import SimulatedBackend

    if not isinstance(backend, SimulatedBackend):
        return None
    from .sim_cluster import SimulatedCluster

    return SimulatedCluster(backend.scenario, config.node_name)


def make_pod_source(config: Config,
                    api_url: Callable[[], str] | None = None) -> "Source[PodDirectory] | None":
    """The Kubernetes API's pods of this node, when a feature needs them."""
    if not config.reads_pods:
        return None
    from .kube.config import plan_from_environment
    from .kube.source import PodWatchOptions, PodWatchSource

    options = PodWatchOptions(node_name=config.node_name,
                              kubeconfig=str(config.kubeconfig) if config.kubeconfig else None)
    if api_url is None:
        return PodWatchSource(options)
    return PodWatchSource(options, plan=lambda: plan_from_environment(api_url(), None))


def make_slice_source(config: Config,
                      api_url: Callable[[], str] | None = None) -> "Source[SliceDirectory] | None":
    """DRA: this node's ResourceSlices, when claims are to be resolved."""
    if not config.reads_slices:
        return None
    from .kube.config import plan_from_environment
    from .kube.slice_source import ResourceSliceOptions, ResourceSliceSource

    options = ResourceSliceOptions(node_name=config.node_name, drivers=config.dra_drivers,
                                   kubeconfig=str(config.kubeconfig) if config.kubeconfig
                                   else None)
    if api_url is None:
        return ResourceSliceSource(options)
    return ResourceSliceSource(options, plan=lambda: plan_from_environment(api_url(), None))


def make_xid_source(config: Config, backend: GpuBackend) -> "Source[XidSnapshot]":
    """XID events: NVML's event thread, or the simulated node's scripted XIDs."""
    from .simulated import SimulatedBackend

    if isinstance(backend, SimulatedBackend):
        from .sim_xids import SimulatedXids

        return SimulatedXids(backend.scenario)
    from .nvml_events import XidSource

    return XidSource(window_seconds=config.xid_window_ms / 1000)


def make_process_sources(config: Config) -> "tuple[LogNameSource | None, ProcessSource | None]":
    if not config.reads_proc:
        return None, None
    from .podlogs import LogNameSource
    from .proc_source import ProcessSource

    return LogNameSource(config.kubelet_log_root), ProcessSource(config.proc_root)


def new_event_loop() -> asyncio.AbstractEventLoop:
    """uvloop where installed (a dependency on Linux): ~15 % more scrapes per core than the
    default loop in bench/scrape.py; the default loop otherwise."""
    try:
        import uvloop
    except ImportError:
        return asyncio.new_event_loop()
    return uvloop.new_event_loop()


CLEANUP_SECONDS = 1.5
"""The longest shutdown waits for the app's clean-up (collection loop, sources, fakes)."""


def end_process(status: int) -> None:
    """Exit once everything of ours is closed, without the interpreter's finalization: it
    would wait on nothing we need, could hang on a driver call still stuck on a daemon thread,
    and resets the signal handlers, so a late SIGTERM would turn exit 0 into 143."""
    logging.shutdown()
    for stream in (sys.stdout, sys.stderr):
        with contextlib.suppress(Exception):
            stream.flush()
    os._exit(status)


def exit_now(signum: int, _frame: object) -> None:
    """A second SIGTERM/SIGINT: exit 0 at once, whatever is still closing."""
    log.warning("second signal (%s) while shutting down: exiting now",
                signal.Signals(signum).name)
    logging.shutdown()
    os._exit(0)


async def serve(app: web.Application, config: Config, sockets: list[socket.socket],
                ssl_context: "ssl.SSLContext | None" = None) -> int:
    """Start the app (collection loop included) on already bound sockets (TLS with
    `ssl_context`), log "serving" and run until SIGTERM/SIGINT; returns the exit status."""
    loop = asyncio.get_running_loop()
    stop = asyncio.Event()

    def on_signal() -> None:
        # From now on a second signal means now (issue 13): handled in Python, not by the
        # loop, so it still works while the loop closes.
        for signum in (signal.SIGTERM, signal.SIGINT):
            signal.signal(signum, exit_now)
        stop.set()

    for signum in (signal.SIGTERM, signal.SIGINT):  # first: a signal during start-up is clean
        loop.add_signal_handler(signum, on_signal)
    # In-flight scrapes get 1 s: with the sources' and the backend's bounded close, SIGTERM
    # exits within 2 s whatever NVML, the kubelet or a client is doing (issue 13, defect 1).
    runner = web.AppRunner(app, access_log=None, shutdown_timeout=1.0)
    try:
        await runner.setup()
        for sock in sockets:
            await web.SockSite(runner, sock, ssl_context=ssl_context).start()
        log.info("serving /metrics on %s (backend %s, every %d ms, %s event loop)",
                 listen_address(config.host, config.port), app[COLLECTOR_KEY].backend.name,
                 config.collect_interval_ms, type(loop).__module__.split(".")[0])
        await stop.wait()
        log.info("shutting down")
        return 0
    finally:
        # Everything below is bounded on its own; this bounds the sum, whatever a source, a
        # client or the simulated node's fakes still do (SIGTERM exits within 2 s).
        try:
            await asyncio.wait_for(runner.cleanup(), CLEANUP_SECONDS)
        except TimeoutError:
            log.warning("shutdown did not finish within %g s; exiting anyway", CLEANUP_SECONDS)


def run(config: Config, counters: tuple[CounterLine, ...],
        backend: GpuBackend | None = None, security: "WebSecurity | None" = None,
        exit_process: bool = False) -> int:
    """Bind first, then build and start everything else: an address that cannot be bound is
    one log line and exit status 1 with nothing started (no NVML, no fake kubelet).
    `exit_process`: the process itself runs it, and ends once serving has (`end_process`)."""
    try:
        sockets = bind_sockets(config.host, config.port)
    except OSError as exc:
        log.error("%s", listen_error(exc, listen_address(config.host, config.port)))
        return 1
    try:
        backend = backend if backend is not None else make_backend(config)
        cluster = simulated_cluster(backend, config)
        if cluster is not None:
            config = cluster.configure(config)
        assignments = make_assignments(config,
                                       cluster.kubelet.socket_path if cluster else None)
        collector = make_collector(config, counters, backend, assignments,
                                   (lambda: cluster.api.url) if cluster else None)
        app = make_app(collector, cluster)
        if security is not None:  # --web-config-file: basic auth and headers; TLS below
            from .server import install_web_security

            install_web_security(app, security)
        with asyncio.Runner(loop_factory=new_event_loop) as runner:
            status = runner.run(serve(app, config, sockets,
                                      security.ssl_context if security else None))
            if exit_process:  # before the loop's close, which waits for every task to end
                for sock in sockets:
                    sock.close()
                end_process(status)
        # Closing the loop may have reset the handlers: a signal during the rest of the exit
        # ends it now, rather than killing the process with 143.
        for signum in (signal.SIGTERM, signal.SIGINT):
            signal.signal(signum, exit_now)
        return status
    finally:
        for sock in sockets:
            sock.close()
