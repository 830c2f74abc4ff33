"""`--container-labels`, the source: once per pass, the runtime's running containers, and for
each one not seen before which GPUs it was given (a container's devices and environment never
change once it exists, so one inspect per container, not one per pass). Bounded: the pass's
deadline, 10 MiB an answer, `MAX_INSPECTS` new containers a pass (the rest the pass after).

A runtime that is absent, refuses, answers garbage or is slow costs its labels, never /metrics:
the last answer is kept for a while (as the kubelet's; dcgm-exporter keeps its last map for
ever), the failure is logged once when it starts and once when it ends, and counted under
`gpu_enricher_collection_errors_total`.
"""

import asyncio
import logging
import time
from collections import Counter
from pathlib import Path
from typing import Final

from prometheus_client.core import GaugeMetricFamily
from prometheus_client.metrics_core import Metric

from ..attribution.containers import GpuRequest, RuntimeContainer, RuntimeContainers
from ..model import NodeSnapshot, SourceHealth
from .engine import EngineAnswerError, inspected, label_value, listed, own_container
from .engine_client import EngineClient, EngineStatusError, EngineUnavailable

log = logging.getLogger(__name__)

MAX_INSPECTS: Final = 256
"""New containers inspected in one pass; a host starting more at once is named over passes."""
NOT_FOUND: Final = 404
INSPECTS_AT_ONCE: Final = 8
TIMEOUT_SECONDS: Final = 2.0
"""A whole refresh, the list and its inspects (dcgm-exporter's bound)."""

_Inspected = tuple[str, str, GpuRequest | None]
"""A container's name in the listing when inspected, its name as inspected, its GPUs."""


def _own_id() -> str | None:
    try:
        return own_container(Path("/proc/self/mountinfo").read_text(encoding="utf-8"))
    except (OSError, UnicodeDecodeError):
        return None


class ContainerSource:
    """Satisfies `Source[RuntimeContainers]`."""

    name = "containers"
    after_gpus = False

    def __init__(self, socket_path: str, max_age_seconds: float,
                 client: EngineClient | None = None) -> None:
        self.socket_path = socket_path
        self.max_age_seconds = max_age_seconds  # the last answer's labels, kept through failures
        self._client = client if client is not None else EngineClient(socket_path)
        self._inspected: dict[str, _Inspected] = {}
        self._snapshot = RuntimeContainers()
        self._up = False
        self._problem: str | None = None
        self.collections = 0
        self.errors: Counter[str] = Counter()
        self.last_duration: float | None = None
        self.last_success_wall: float | None = None
        self._answered_at: float | None = None  # monotonic
        self.own_id = _own_id()  # the exporter's own container, when it runs in one

    async def start(self) -> None:
        """Nothing runs in the background: all work happens in refresh."""

    async def refresh(self, gpus: NodeSnapshot | None) -> None:
        """List, inspect the new containers, rebuild the snapshot; never raises."""
        started = time.perf_counter()
        try:
            async with asyncio.timeout(TIMEOUT_SECONDS):
                running, known = await self._ask()
        except TimeoutError:
            self._failed("timeout", f"no whole answer within {TIMEOUT_SECONDS:g}s")
            return
        except EngineUnavailable as exc:
            self._failed(exc.reason, str(exc))
            return
        except EngineStatusError as exc:
            self._failed("status", str(exc))
            return
        except EngineAnswerError as exc:
            self._failed("answer", str(exc))
            return
        # dcgm-exporter's label: the inspected name, else the listed one, else the short ID.
        names = {cid: label_value((known[cid][1] if cid in known else "") or name, cid)
                 for cid, name in running}
        self._snapshot = RuntimeContainers(tuple(
            RuntimeContainer(cid, names[cid], request)
            for cid, _ in running if cid in known and (request := known[cid][2]) is not None),
            names)
        self._up = True
        self.collections += 1
        self.last_duration = time.perf_counter() - started
        self.last_success_wall = time.time()
        self._answered_at = time.monotonic()
        if self._problem is not None:
            log.warning("the container runtime at %s answers again", self.socket_path)
            self._problem = None

    async def _ask(self) -> tuple[list[tuple[str, str]], dict[str, _Inspected]]:
        """The running containers, and what each was given: inspected again only when new or
        renamed (`docker rename`)."""
        running = [(cid, name) for cid, name in listed(await self._client.get("/containers/json"))
                   if cid != self.own_id]
        live = {cid for cid, _ in running}
        self._inspected = {cid: found for cid, found in self._inspected.items() if cid in live}
        todo = [(cid, name) for cid, name in running
                if (found := self._inspected.get(cid)) is None or found[0] != name]
        gate = asyncio.Semaphore(INSPECTS_AT_ONCE)

        async def inspect(cid: str, name: str) -> None:
            async with gate:  # kept as each answers: a refresh its deadline cut short is not lost
                self._inspected[cid] = (name, *await self._inspect(cid))

        for result in await asyncio.gather(*(inspect(c, n) for c, n in todo[:MAX_INSPECTS]),
                                           return_exceptions=True):
            if isinstance(result, BaseException):
                raise result
        return running, dict(self._inspected)

    async def _inspect(self, container_id: str) -> tuple[str, GpuRequest | None]:
        try:
            return inspected(await self._client.get(f"/containers/{container_id}/json"))
        except EngineStatusError as exc:
            if exc.status == NOT_FOUND:  # gone between the list and the inspect
                return "", None
            raise

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
        return [family]

    async def close(self) -> None:
        await self._client.close()
