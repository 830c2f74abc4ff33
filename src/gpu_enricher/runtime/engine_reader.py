"""Docker's Engine API (and Podman's compatible one), read once per pass: the running
containers (`GET /containers/json`), and for each one not seen before which GPUs it was given
(`GET /containers/<id>/json`: a container's devices and environment never change once it
exists, so one inspect per container, not one per pass). At most `MAX_NEW_CONTAINERS` new
containers a pass (the rest the pass after), `INSPECTS_AT_ONCE` at a time.

Between passes, the runtime's event stream (`GET /events`, containers only) says when a
container started, stopped, was removed or renamed: `events` calls back at once, so the source
reads again and the picture is repainted without waiting for the next pass."""

import asyncio
import json
from collections.abc import Callable
from typing import Final
from urllib.parse import quote

from ..attribution.containers import GpuRequest, RuntimeContainer, RuntimeContainers
from .engine import (
    container_changed,
    inspected,
    label_value,
    listed,
    listed_compose,
)
from .engine_client import EngineClient, EngineStatusError
from .reader import MAX_NEW_CONTAINERS

NOT_FOUND: Final = 404
INSPECTS_AT_ONCE: Final = 8
EVENTS_PATH: Final = "/events?filters=" + quote(json.dumps(
    {"type": ["container"]}, separators=(",", ":")))
"""Containers' events only; which of them matter is judged here (`container_changed`): Podman
4.3 answers an `event` filter naming one it does not know (`destroy`) with an empty stream."""

_Inspected = tuple[str, str, GpuRequest | None]
"""A container's name in the listing when inspected, its name as inspected, its GPUs."""


class EngineReader:
    """Satisfies `RuntimeReader`."""

    kind = "engine"

    def __init__(self, socket_path: str) -> None:
        self._client = EngineClient(socket_path)
        self._inspected: dict[str, _Inspected] = {}

    async def read(self, leave_out: str | None, fresh: bool = False) -> RuntimeContainers:
        """Each call asks anew (`fresh` always holds)."""
        listing = await self._client.get("/containers/json")
        running, known = await self._ask(listing, leave_out)
        # dcgm-exporter's label: the inspected name, else the listed one, else the short ID.
        names = {cid: label_value((known[cid][1] if cid in known else "") or name, cid)
                 for cid, name in running}
        return RuntimeContainers(tuple(
            RuntimeContainer(cid, names[cid], request)
            for cid, _ in running if cid in known and (request := known[cid][2]) is not None),
            names, compose={names[cid]: found for cid, found in listed_compose(listing).items()
                            if cid in names})

    async def _ask(self, listing: object, leave_out: str | None,
                   ) -> tuple[list[tuple[str, str]], dict[str, _Inspected]]:
        """The running containers, and what each was given: inspected again only when new or
        renamed (`docker rename`)."""
        running = [(cid, name) for cid, name in listed(listing) if cid != leave_out]
        live = {cid for cid, _ in running}
        self._inspected = {cid: found for cid, found in self._inspected.items() if cid in live}
        todo = [(cid, name) for cid, name in running
                if (found := self._inspected.get(cid)) is None or found[0] != name]
        gate = asyncio.Semaphore(INSPECTS_AT_ONCE)

        async def inspect(cid: str, name: str) -> None:
            async with gate:  # kept as each answers: a refresh its deadline cut short is not lost
                self._inspected[cid] = (name, *await self._inspect(cid))

        for result in await asyncio.gather(*(inspect(c, n) for c, n in todo[:MAX_NEW_CONTAINERS]),
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

    async def events(self, changed: Callable[[], None], opened: Callable[[], None]) -> bool:
        """Call `changed` after each event that changes the running containers, until the
        stream ends; False at once for a runtime that has no event stream (404)."""
        try:
            async for line in self._client.lines(EVENTS_PATH, opened):
                if container_changed(line):
                    changed()
        except EngineStatusError as exc:
            if exc.status == NOT_FOUND:
                return False
            raise
        return True

    async def close(self) -> None:
        await self._client.close()
