"""A fake Docker Engine API: the simulated Docker host's running containers, served on a unix
socket as dockerd serves them (`GET /containers/json`, `GET /containers/<id>/json`, `/_ping`,
and `/events`, open and quiet), so `--simulate` on a Docker host scenario runs
`--container-labels` through the same client a real host does. Only what the exporter reads is
in the answers."""

import asyncio
from collections.abc import Sequence
from pathlib import Path

from aiohttp import web

from .node import SimContainer


def _listed(container: SimContainer) -> dict[str, object]:
    return {"Id": container.container_id, "Names": [f"/{container.name}"],
            "Image": "simulated:latest", "State": "running", "Labels": dict(container.labels)}


def _inspect(container: SimContainer) -> dict[str, object]:
    return {"Id": container.container_id, "Name": f"/{container.name}",
            "State": {"Status": "running", "Running": True},
            "Config": {"Env": list(container.env), "Image": "simulated:latest"},
            "HostConfig": {"DeviceRequests": [dict(r) for r in container.device_requests]}}


class FakeEngine:
    def __init__(self, socket_path: Path, containers: Sequence[SimContainer]) -> None:
        self.socket_path = socket_path
        self.containers = {c.container_id: c for c in containers}
        self.requests = 0
        self._runner: web.AppRunner | None = None
        self._stopping = asyncio.Event()

    async def _list(self, request: web.Request) -> web.Response:
        self.requests += 1
        return web.json_response([_listed(c) for c in self.containers.values()])

    async def _one(self, request: web.Request) -> web.Response:
        self.requests += 1
        found = self.containers.get(request.match_info["id"])
        if found is None:
            return web.json_response({"message": "No such container"}, status=404)
        return web.json_response(_inspect(found))

    async def _ping(self, request: web.Request) -> web.Response:
        return web.Response(text="OK")

    async def _events(self, request: web.Request) -> web.StreamResponse:
        """The event stream, open and quiet: the simulated containers never change."""
        response = web.StreamResponse(headers={"Content-Type": "application/json"})
        await response.prepare(request)
        await self._stopping.wait()
        return response

    async def start(self) -> None:
        app = web.Application()
        app.router.add_get("/containers/json", self._list)
        app.router.add_get("/containers/{id}/json", self._one)
        app.router.add_get("/_ping", self._ping)
        app.router.add_get("/events", self._events)
        self._runner = web.AppRunner(app, access_log=None)
        await self._runner.setup()
        await web.UnixSite(self._runner, str(self.socket_path)).start()

    async def stop(self) -> None:
        self._stopping.set()
        if self._runner is not None:
            await self._runner.cleanup()
            self._runner = None
