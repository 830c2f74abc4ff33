"""Which runtime answers on a socket: one flag, `--container-runtime-socket`, names Docker's,
Podman's or containerd's. An HTTP/1.1 request is sent; the Engine API answers in HTTP/1.1,
containerd's gRPC server in HTTP/2 (its first frame, SETTINGS, comes whatever was asked)."""

import asyncio
from typing import Final

from .reader import RuntimeFailure

_PING: Final = b"GET /_ping HTTP/1.0\r\nHost: docker\r\n\r\n"  # only a read
_SETTINGS: Final = 0x4
ENGINE: Final = "engine"
CONTAINERD: Final = "containerd"


def kind_of(first_bytes: bytes) -> str | None:
    """`engine`, `containerd`, or None for neither, from the first bytes an answer holds."""
    if first_bytes.startswith(b"HTTP/1."):
        return ENGINE
    if len(first_bytes) >= 9 and first_bytes[3] == _SETTINGS:  # an HTTP/2 frame header
        return CONTAINERD
    return None


async def socket_kind(socket_path: str, timeout_seconds: float) -> str:
    """Raises RuntimeFailure when nothing, or neither, answers within `timeout_seconds`."""
    try:
        async with asyncio.timeout(timeout_seconds):
            reader, writer = await asyncio.open_unix_connection(socket_path)
            try:
                writer.write(_PING)
                first = await reader.read(64)
                while len(first) < 9 and not reader.at_eof():
                    first += await reader.read(64)
            finally:
                writer.close()
    except TimeoutError:
        raise RuntimeFailure("timeout", f"{socket_path}: no answer within "
                             f"{timeout_seconds:g}s") from None
    except PermissionError as exc:
        raise RuntimeFailure("permission", f"{socket_path}: {exc.strerror}") from None
    except OSError as exc:
        raise RuntimeFailure("unavailable", f"{socket_path}: {exc.strerror or exc}") from None
    kind = kind_of(first)
    if kind is None:
        raise RuntimeFailure("answer", f"{socket_path} speaks neither the Engine API nor "
                             f"containerd's gRPC ({first[:16]!r})")
    return kind
