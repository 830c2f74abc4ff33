"""runtime/engine_client.py over a real unix socket (the simulated Docker host's Engine API,
sim/fake_engine.py): answers of many chunks read whole, the 10 MiB bound, a missing socket, a
refused one, an error status."""

import asyncio
import os
import socket
from pathlib import Path

import pytest

from gpu_enricher.runtime.engine import EngineAnswerError
from gpu_enricher.runtime.engine_client import (
    MAX_ANSWER_BYTES,
    EngineClient,
    EngineStatusError,
    EngineUnavailable,
)
from gpu_enricher.sim.fake_engine import FakeEngine
from gpu_enricher.sim.node import SimContainer, docker_id


def container(n: int, env: tuple[str, ...] = ()) -> SimContainer:
    return SimContainer(docker_id(f"c{n}"), f"c{n}", env)


async def test_a_long_listing_is_read_whole(tmp_path: Path) -> None:
    engine = FakeEngine(tmp_path / "docker.sock", [container(n) for n in range(3000)])
    await engine.start()
    client = EngineClient(str(engine.socket_path))
    try:
        listing = await client.get("/containers/json")
        assert len(listing) == 3000 and listing[-1]["Names"] == ["/c2999"]
        with pytest.raises(EngineStatusError) as caught:
            await client.get("/containers/nope/json")
        assert caught.value.status == 404
    finally:
        await client.close()
        await engine.stop()


async def test_an_answer_over_10_mib_is_refused(tmp_path: Path) -> None:
    huge = container(0, (f"BLOB={'x' * (MAX_ANSWER_BYTES + 10)}",))
    engine = FakeEngine(tmp_path / "docker.sock", [huge])
    await engine.start()
    client = EngineClient(str(engine.socket_path))
    try:
        with pytest.raises(EngineAnswerError, match="over 10485760 bytes"):
            await client.get(f"/containers/{huge.container_id}/json")
    finally:
        await client.close()
        await engine.stop()


async def test_a_missing_socket_is_unavailable(tmp_path: Path) -> None:
    client = EngineClient(str(tmp_path / "absent.sock"))
    with pytest.raises(EngineUnavailable) as caught:
        await client.get("/containers/json")
    assert caught.value.reason == "unavailable"
    await client.close()


def _ask_as_nobody(socket_path: str) -> str:
    """In a forked child that became `nobody`: the reason the client gives."""
    read_end, write_end = os.pipe()
    pid = os.fork()
    if pid == 0:  # the child: never returns into pytest
        reason = "no error"
        try:
            os.setuid(65534)
            client = EngineClient(socket_path)
            try:
                asyncio.run(client.get("/containers/json"))
            except EngineUnavailable as exc:
                reason = exc.reason
            finally:
                asyncio.run(client.close())
        finally:
            os.write(write_end, reason.encode())
            os._exit(0)
    os.close(write_end)
    os.waitpid(pid, 0)
    with os.fdopen(read_end) as answer:
        return answer.read()


def test_a_socket_the_exporter_may_not_open_is_permission(tmp_path: Path) -> None:
    """Another user than the socket's owner, as a non-root exporter meets dockerd's socket (a
    listening socket is enough: the kernel refuses the connect)."""
    if os.geteuid() != 0:  # CI runs as root (dockerd needs it too): there, a failure
        (pytest.fail if os.environ.get("CI", "").lower() == "true" else pytest.skip)(
            "needs root to become another user")
    path = tmp_path / "docker.sock"
    with socket.socket(socket.AF_UNIX, socket.SOCK_STREAM) as listening:
        listening.bind(str(path))
        listening.listen()
        os.chmod(path, 0o600)
        tmp_path.chmod(0o755)
        assert _ask_as_nobody(str(path)) == "permission"
