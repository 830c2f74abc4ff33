"""What the source asks of a container runtime, whichever it is (`RuntimeReader`), and how
asking can fail (`RuntimeFailure`). Pure: the readers are in `engine_reader.py` (Docker,
Podman) and `containerd_client.py`."""

from collections.abc import Callable
from typing import Final, Protocol

from ..attribution.containers import RuntimeContainers

MAX_ANSWER_BYTES: Final = 10 << 20
"""The largest answer read from a runtime (dcgm-exporter's bound for the Engine API)."""
MAX_NEW_CONTAINERS: Final = 256
"""New containers read in one pass; a host starting more at once is named over passes."""


class RuntimeFailure(Exception):
    """The runtime could not be asked, or its answer is of no use. `reason` labels the count
    (`gpu_enricher_collection_errors_total{source="containers",reason}`): unavailable,
    permission, status, answer (timeout is the source's own)."""

    def __init__(self, reason: str, message: str) -> None:
        super().__init__(message)
        self.reason = reason


class RuntimeReader(Protocol):
    kind: str
    """What answers on the socket: `engine` (Docker's Engine API, Podman's compatible one) or
    `containerd`."""

    async def read(self, leave_out: str | None, fresh: bool = False) -> RuntimeContainers:
        """The running containers (but `leave_out`, the exporter's own) and the GPUs each was
        given. Raises RuntimeFailure; bounded by the caller's deadline. `fresh`: begun now,
        never the outcome of a read an earlier caller gave up waiting for (an event's read)."""
        ...

    async def events(self, changed: Callable[[], None], opened: Callable[[], None]) -> bool:
        """Call `changed` whenever the runtime tells that the running containers changed (its
        event stream), until the stream ends, and `opened` once it is open (what changed
        before is not in it); False at once where the runtime has none. Raises
        RuntimeFailure."""
        ...

    async def close(self) -> None: ...
