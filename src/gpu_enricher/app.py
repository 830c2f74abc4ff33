"""Composition root: build the backend, collector and HTTP app from a Config and run them."""

import asyncio
import contextlib
import logging
import os
import signal
import socket
import sys
from collections.abc import AsyncIterator, Callable, Coroutine
from typing import TYPE_CHECKING, Any, Final

from aiohttp import web

from .assembly import (
    counters_sources,
    make_assignments,
    make_backend,
    make_binding_watch,
    make_collector,
    make_config_map_source,
    simulated_cluster,
)
from .backend import GpuBackend
from .collector.loop import Collector
from .config import Config
from .fields.collection import Collection
from .reload import ConfigReloader
from .web.activation import ActivationError, activated_sockets, socket_names
from .web.connguard import ConnectionGuard, ConnectionLimits, GuardedSite, make_room_for
from .web.server import (
    COLLECTOR_KEY,
    REQUIRE_GPUS_KEY,
    SCRAPE_LIMIT_KEY,
    ScrapeLimit,
    bind_sockets,
    build_app,
    count_requests,
    listen_address,
    listen_error,
)

if TYPE_CHECKING:
    import ssl

    from .sim.cluster import SimulatedCluster
    from .web.security import WebSecurity

log = logging.getLogger(__name__)


RELOADER_KEY: Final = web.AppKey("reloader", ConfigReloader)

AppContext = Callable[[web.Application], contextlib.AbstractAsyncContextManager[None]]


def _for_the_app_life(name: str, run: Callable[[], Coroutine[Any, Any, None]]) -> AppContext:
    """A loop (the collection's, the reloader's) that lives exactly as long as the app."""

    @contextlib.asynccontextmanager
    async def context(app: web.Application) -> AsyncIterator[None]:
        task = asyncio.create_task(run(), name=name)
        yield
        task.cancel()
        with contextlib.suppress(asyncio.CancelledError):
            await task

    return context


def _simulated_cluster_context(cluster: "SimulatedCluster") -> AppContext:
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
    app.cleanup_ctx.append(_for_the_app_life("collector", collector.run))
    return app


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
    if "gpu_enricher.kube.config" in sys.modules:  # the Kubernetes API was used
        from .kube.config import remove_credential_copies

        remove_credential_copies()
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
    reloader = app.get(RELOADER_KEY)
    if reloader is not None:  # SIGHUP reloads (it used to kill the process: issue 13, defect 5)
        loop.add_signal_handler(signal.SIGHUP, reloader.request)
    # In-flight scrapes get 1 s: with the sources' and the backend's bounded close, SIGTERM
    # exits within 2 s whatever NVML, the kubelet or a client is doing (issue 13, defect 1).
    # keepalive_timeout: aiohttp's own bound on a connection idle between requests.
    runner = web.AppRunner(app, access_log=None, shutdown_timeout=1.0,
                           keepalive_timeout=config.web_idle_timeout_ms / 1000)
    # Slow or silent clients and the connection count (issue 13, defect 10: slowloris).
    guard = ConnectionGuard(ConnectionLimits(config.web_read_header_timeout_ms / 1000,
                                             config.web_max_connections,
                                             config.web_read_timeout_seconds,
                                             config.web_write_timeout_seconds))
    make_room_for(config.web_max_connections)
    try:
        await runner.setup()
        for sock in sockets:
            await GuardedSite(runner, sock, guard, ssl_context=ssl_context).start()
        where = (f"systemd's sockets {socket_names(sockets)}" if config.web_systemd_socket
                 else listen_address(config.host, config.port))
        log.info("serving /metrics on %s (backend %s, every %d ms, %s event loop)",
                 where, app[COLLECTOR_KEY].backend.name,
                 config.collect_interval_ms, type(loop).__module__.split(".")[0])
        await stop.wait()
        log.info("shutting down")
        return 0
    finally:
        # Everything below is bounded on its own; this bounds the sum, whatever a source, a
        # client or the simulated node's fakes still do (SIGTERM exits within 2 s). Not
        # wait_for: on its timeout it waits for the cancelled clean-up to end, forever if
        # something in it does not end when cancelled.
        cleanup = asyncio.ensure_future(runner.cleanup())
        done, _ = await asyncio.wait({cleanup}, timeout=CLEANUP_SECONDS)
        if not done:
            cleanup.cancel()  # and left: the process ends right after (end_process)
            log.warning("shutdown did not finish within %g s; exiting anyway", CLEANUP_SECONDS)
        elif not cleanup.cancelled() and cleanup.exception() is not None:
            log.error("shutdown failed", exc_info=cleanup.exception())


def run(config: Config, collection: Collection,
        backend: GpuBackend | None = None, security: "WebSecurity | None" = None,
        exit_process: bool = False) -> int:
    """Bind first, then build and start everything else: an address that cannot be bound is
    one log line and exit status 1 with nothing started (no NVML, no fake kubelet).
    `exit_process`: the process itself runs it, and ends once serving has (`end_process`)."""
    if exit_process:  # until serving, where SIGHUP reloads: not killed by one meanwhile
        signal.signal(signal.SIGHUP, signal.SIG_IGN)
    try:
        sockets = (activated_sockets(os.environ) if config.web_systemd_socket
                   else bind_sockets(config.host, config.port))
    except ActivationError as exc:
        log.error("%s", exc)
        return 1
    except OSError as exc:
        log.error("%s", listen_error(exc, listen_address(config.host, config.port)))
        return 1
    log.info("counters: %s", collection.origin)  # which file, and why (issue 24)
    try:
        backend = backend if backend is not None else make_backend(config)
        try:
            cluster = simulated_cluster(backend, config)
        except OSError as exc:  # a read-only root and no writable temp directory (issue 34)
            log.error("--simulate needs a writable temporary directory for the simulated "
                      "node's sockets and /proc (%s): set TMPDIR to one, or mount a tmpfs at "
                      "/tmp", exc.strerror or exc)
            return 1
        if cluster is not None:
            config = cluster.configure(config)
        assignments = make_assignments(config,
                                       cluster.kubelet.socket_path if cluster else None)
        api_url = (lambda: cluster.api.url) if cluster else None
        config_map = make_config_map_source(config, api_url)
        collector = make_collector(config, collection.counters, backend, assignments, api_url,
                                   collection.field_intervals_ms,
                                   (config_map,) if config_map is not None else ())
        app = make_app(collector, cluster)
        app[REQUIRE_GPUS_KEY] = config.health_require_gpus
        app[SCRAPE_LIMIT_KEY] = ScrapeLimit(config.max_concurrent_scrapes)
        if config.exporter_metrics:
            count_requests(app)
        if (binding_watch := make_binding_watch(config, collector)) is not None:
            app.cleanup_ctx.append(_for_the_app_life("gpu-binding-watch", binding_watch))
        live = None
        if security is not None:  # --web-config-file: basic auth and headers; TLS below
            from .web.live_security import LiveWebSecurity
            from .web.server import install_web_security

            live = LiveWebSecurity(security)
            install_web_security(app, live)
        reloader = ConfigReloader(collector, counters_sources(config, collection.config_map),
                                  collection, live, config.config_check_interval_ms / 1000,
                                  None if config.collect_interval_given
                                  else config.collect_interval_ms, config_map)
        if live is not None and config.config_check_interval_ms > 0:
            live.before_request = reloader.web_config_in_force  # issue 26: rotations at once
        app[RELOADER_KEY] = reloader
        app.cleanup_ctx.append(_for_the_app_life("config-reloader", reloader.run))
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
