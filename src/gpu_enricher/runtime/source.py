"""`--container-labels`, the source: once per pass, the runtime's running containers and which
GPUs each was given, through the reader of whatever answers on the socket (`probe`): Docker's
or Podman's Engine API (`engine_reader`), or containerd's gRPC API (`containerd_client`).
Bounded: the pass's deadline and `TIMEOUT_SECONDS`, 10 MiB an answer, 256 new containers a pass.

A runtime that is absent, refuses, answers garbage or is slow costs its labels, never /metrics:
the last answer is kept for a while (as the kubelet's; dcgm-exporter keeps its last map for
ever), the failure is logged once when it starts and once when it ends, and counted under
`gpu_enricher_collection_errors_total`. After a failure the socket is asked again what it is
(a runtime restarted, or put where the socket was).

Between passes, the runtime's events say when a container starts, stops, is removed or renamed
(`events`: the Engine API's `GET /events`, containerd's `Events.Subscribe`): the source reads
again at once and announces the change, so the picture is repainted within a moment rather than
at the next pass. A stream that ends is opened again after 1 s, doubling to 30 s.
"""

import asyncio
import contextlib
import logging
import time
from collections import Counter
from collections.abc import Callable
from pathlib import Path
from typing import Final

from prometheus_client.core import CounterMetricFamily, GaugeMetricFamily
from prometheus_client.metrics_core import Metric

from ..attribution.containers import RuntimeContainers
from ..model import NodeSnapshot, SourceHealth
from .containerd_client import ContainerdReader
from .engine import own_container
from .engine_reader import EngineReader
from .probe import CONTAINERD, socket_kind
from .reader import RuntimeFailure, RuntimeReader

log = logging.getLogger(__name__)

TIMEOUT_SECONDS: Final = 2.0
"""A whole refresh, the list and its inspects (dcgm-exporter's bound)."""
RETRY_SECONDS: Final = (1.0, 30.0)  # the first wait after an event stream ended, the longest


def _own_id() -> str | None:
    try:
        return own_container(Path("/proc/self/mountinfo").read_text(encoding="utf-8"))
    except (OSError, UnicodeDecodeError):
        return None


class ContainerSource:
    """Satisfies `Source[RuntimeContainers]`."""

    name = "containers"
    after_gpus = False

    def __init__(self, socket_path: str, max_age_seconds: float) -> None:
        self.socket_path = socket_path
        self.max_age_seconds = max_age_seconds  # the last answer's labels, kept through failures
        self._reader: RuntimeReader | None = None
        self._snapshot = RuntimeContainers()
        self._up = False
        self._problem: str | None = None
        self.collections = 0
        self.errors: Counter[str] = Counter()
        self.last_duration: float | None = None
        self.last_success_wall: float | None = None
        self._answered_at: float | None = None  # monotonic
        self.own_id = _own_id()  # the exporter's own container, when it runs in one
        self._listeners: list[Callable[[], None]] = []
        self._lock = asyncio.Lock()  # one read at a time: a pass's, or one an event asked for
        self._changed = asyncio.Event()
        self._following: asyncio.Task[None] | None = None  # the reader's event stream
        self._rereading: asyncio.Task[None] | None = None
        self.events = 0  # changes the runtime told of between passes

    @property
    def kind(self) -> str | None:
        """What answers on the socket (`engine`, `containerd`); None until known."""
        return self._reader.kind if self._reader is not None else None

    def subscribe(self, callback: Callable[[], None]) -> None:
        """`callback` after a read an event asked for changed the containers (`Announcing`)."""
        self._listeners.append(callback)

    async def start(self) -> None:
        """Nothing runs until the first refresh: the runtime's kind is not known before."""

    async def refresh(self, gpus: NodeSnapshot | None) -> None:
        """Ask the runtime, rebuild the snapshot; never raises. Then follow its events."""
        async with self._lock:
            await self._read()
        if self._reader is not None and self._following is None and self._listeners:
            self._following = asyncio.create_task(self._follow(self._reader),
                                                  name="runtime-events")
            if self._rereading is None:
                self._rereading = asyncio.create_task(self._reread(), name="runtime-reread")

    def _told(self) -> None:
        self.events += 1
        self._changed.set()

    async def _follow(self, reader: RuntimeReader) -> None:
        """The reader's events, for as long as it is the source's. Each stream, once open, asks
        for a read (what changed before it could tell); one that ends or cannot be opened while
        the runtime answered asks for a read too (it may have stopped: its labels go, and the
        failure shows, at once). A stream that ends is opened again after RETRY_SECONDS
        (doubling)."""
        wait = RETRY_SECONDS[0]
        while True:
            opened = False

            def on_open() -> None:
                nonlocal opened
                opened = True
                self._changed.set()

            try:
                if not await reader.events(self._told, on_open):
                    log.info("the container runtime at %s has no event stream; containers that "
                             "start or stop are seen at the next pass", self.socket_path)
                    return
            except RuntimeFailure:
                pass  # the reads' failures are what is counted and logged
            except Exception:  # a defect: logged; the stream is opened again all the same
                log.exception("following the container runtime's events failed")
            if opened or self._up:
                self._changed.set()
            if opened:
                wait = RETRY_SECONDS[0]
            await asyncio.sleep(wait)
            wait = min(wait * 2, RETRY_SECONDS[1])

    async def _reread(self) -> None:
        """A read for each burst of events, announced when the containers changed or the
        runtime stopped (or started again) answering."""
        while True:
            await self._changed.wait()
            self._changed.clear()
            before = (self._snapshot, self._up)
            try:
                async with self._lock:
                    await self._read(fresh=True)
            except Exception:  # a defect: logged; the next event, or pass, reads again
                log.exception("reading the container runtime after its event failed")
                continue
            if (self._snapshot, self._up) != before:  # the containers, or the runtime's health
                for callback in self._listeners:
                    callback()

    async def _read(self, fresh: bool = False) -> None:
        started = time.perf_counter()
        try:
            async with asyncio.timeout(TIMEOUT_SECONDS):
                if self._reader is None:
                    kind = await socket_kind(self.socket_path, TIMEOUT_SECONDS)
                    self._reader = ContainerdReader(self.socket_path) if kind == CONTAINERD \
                        else EngineReader(self.socket_path)
                self._snapshot = await self._reader.read(self.own_id, fresh)
        except TimeoutError:
            self._failed("timeout", f"no whole answer within {TIMEOUT_SECONDS:g}s")
            return
        except RuntimeFailure as exc:
            if exc.reason in ("unavailable", "permission") and self._reader is not None:
                # Asked again what it is next pass; the old reader's thread, session and event
                # stream end.
                if self._following is not None:
                    self._following.cancel()
                    self._following = None
                await self._reader.close()
                self._reader = None
            self._failed(exc.reason, str(exc))
            return
        self._up = True
        self.collections += 1
        self.last_duration = time.perf_counter() - started
        self.last_success_wall = time.time()
        self._answered_at = time.monotonic()
        if self._problem is not None:
            log.warning("the container runtime at %s answers again", self.socket_path)
            self._problem = None

    def _failed(self, reason: str, message: str) -> None:
        self.errors[reason] += 1
        self._up = False
        if self._problem is None:
            kept = (f"keeping the last containers' labels for up to {self.max_age_seconds:.0f}s"
                    if self.collections else "no container labels until it answers")
            log.warning("the container runtime at %s cannot be asked (%s); %s", self.socket_path,
                        message, kept)
        self._problem = reason

    def snapshot(self) -> RuntimeContainers:
        # Kept through failures as the kubelet's holders are, not for ever as dcgm-exporter
        # keeps its map: better no container label than one of a container long gone.
        if self._answered_at is None or \
                time.monotonic() - self._answered_at > self.max_age_seconds:
            return RuntimeContainers()
        return self._snapshot

    def health(self) -> SourceHealth:
        return SourceHealth(self._up, self.collections, dict(self.errors), self.last_duration,
                            self.last_success_wall)

    def families(self) -> list[Metric]:
        family = GaugeMetricFamily(
            "gpu_enricher_runtime_containers",
            "Running containers the container runtime listed at its last answer (state="
            "running) and those of them given GPUs (state=with_gpus).", labels=["state"])
        family.add_metric(["running"], len(self._snapshot.names))  # every one is named
        family.add_metric(["with_gpus"], len(self._snapshot.containers))
        kind = GaugeMetricFamily(
            "gpu_enricher_container_runtime_info",
            "What answers on --container-runtime-socket (kind=engine: Docker's or Podman's "
            "Engine API; kind=containerd), 1 once known.", labels=["kind"])
        if self.kind is not None:
            kind.add_metric([self.kind], 1)
        events = CounterMetricFamily(
            "gpu_enricher_runtime_events",
            "Container changes the runtime's event stream told of between passes, each "
            "answered by a read (and a repaint when the containers changed).",
            value=self.events)
        info = GaugeMetricFamily(
            "gpu_enricher_container_info",
            "A running container the runtime listed, by the container label its GPUs' series "
            "are copied with, and the Compose project and service that started it (empty "
            "when none): join on container for them.",
            labels=["container", "compose_project", "compose_service"])
        for name in sorted(set(self._snapshot.names.values())):
            project, service = self._snapshot.compose.get(name, ("", ""))
            info.add_metric([name, project, service], 1)
        return [family, kind, events, info]

    async def close(self) -> None:
        for task in (self._following, self._rereading):
            if task is not None:
                task.cancel()
                with contextlib.suppress(asyncio.CancelledError, Exception):
                    await task
        if self._reader is not None:
            await self._reader.close()
