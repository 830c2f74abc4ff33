"""Asks a Docker-compatible Engine API over its unix socket: only reads (`GET /containers/json`,
`GET /containers/<id>/json`, the `GET /events` stream), each answer at most 10 MiB
(dcgm-exporter's bound). The fetch half; engine.py parses."""

import contextlib
from collections.abc import AsyncIterator, Callable, Iterator
from typing import Any, Final

import aiohttp

from .engine import EngineAnswerError, decode
from .reader import MAX_ANSWER_BYTES, RuntimeFailure

_STREAMING: Final = aiohttp.ClientTimeout(total=None, sock_connect=2.0)
"""An event stream stays open for as long as the runtime runs: no total, no read deadline."""


class EngineUnavailable(RuntimeFailure):
    """The socket is absent, refuses (permission) or closed mid-answer."""


class EngineStatusError(RuntimeFailure):
    def __init__(self, path: str, status: int) -> None:
        super().__init__("status", f"the runtime answered HTTP {status} to GET {path}")
        self.path, self.status = path, status


async def _read(response: aiohttp.ClientResponse, path: str) -> bytes:
    """The whole body, refused past MAX_ANSWER_BYTES (a read of n bytes may return fewer: only
    what has arrived)."""
    chunks: list[bytes] = []
    size = 0
    async for chunk in response.content.iter_chunked(1 << 16):
        size += len(chunk)
        if size > MAX_ANSWER_BYTES:
            raise EngineAnswerError(f"GET {path}: the answer is over {MAX_ANSWER_BYTES} bytes")
        chunks.append(chunk)
    return b"".join(chunks)


class EngineClient:
    def __init__(self, socket_path: str) -> None:
        self.socket_path = socket_path
        self._session: aiohttp.ClientSession | None = None

    def _client(self) -> aiohttp.ClientSession:
        if self._session is None or self._session.closed:
            # No proxy from the environment: the request never leaves the socket.
            self._session = aiohttp.ClientSession(
                connector=aiohttp.UnixConnector(path=self.socket_path), trust_env=False)
        return self._session

    @contextlib.contextmanager
    def _failures(self, path: str) -> Iterator[None]:
        """What asking can meet, as the RuntimeFailure the source counts."""
        try:
            yield
        except PermissionError as exc:
            raise EngineUnavailable("permission", f"{self.socket_path}: {exc.strerror}") from None
        except aiohttp.ClientConnectorError as exc:
            reason = "permission" if isinstance(exc.os_error, PermissionError) else "unavailable"
            raise EngineUnavailable(reason, f"{self.socket_path}: {exc.os_error.strerror or exc}"
                                    ) from None
        except aiohttp.ClientError as exc:
            raise EngineUnavailable("unavailable", f"{self.socket_path}: {exc}") from None
        except ValueError as exc:  # a streamed line over the stream reader's limit
            raise EngineAnswerError(f"GET {path}: {exc}") from None

    async def get(self, path: str) -> Any:
        """The decoded JSON of one GET. Raises EngineUnavailable, EngineStatusError,
        EngineAnswerError."""
        with self._failures(path):
            async with self._client().get(f"http://docker{path}") as response:
                if response.status // 100 != 2:
                    raise EngineStatusError(path, response.status)
                body = await _read(response, path)
        return decode(body, path)

    async def lines(self, path: str, opened: Callable[[], None]) -> AsyncIterator[bytes]:
        """The lines of a streamed answer (`GET /events`) as they come (each within the
        stream reader's limit, 64 KiB), for as long as the runtime keeps the answer open;
        `opened` once its status says it is. Raises as `get`."""
        with self._failures(path):
            async with self._client().get(f"http://docker{path}", timeout=_STREAMING) as response:
                if response.status // 100 != 2:
                    raise EngineStatusError(path, response.status)
                opened()
                while line := await response.content.readline():
                    yield line

    async def close(self) -> None:
        if self._session is not None:
            await self._session.close()
