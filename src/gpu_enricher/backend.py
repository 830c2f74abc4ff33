"""The seam between the collector and its GPUs (NVML or the simulated node); every other
source follows `sources.Source`."""

from typing import Protocol

from .model import NodeSnapshot


class BackendUnavailable(Exception):
    """The backend cannot start (no driver, no libnvidia-ml): retried with backoff."""

    def __init__(self, reason: str, message: str) -> None:
        super().__init__(message)
        self.reason = reason  # short, bounded: becomes a self-metric label value
        self.message = message


class GpuBackend(Protocol):
    """Blocking calls; the collector runs them all on one worker thread, one hop per pass."""

    name: str

    def open(self) -> None:
        """Initialise; raise BackendUnavailable when the source cannot be used now."""

    def deliverable_fields(self) -> frozenset[str]:
        """Implemented fields this host can deliver (known after `open`)."""

    def sample(self, fields: frozenset[str]) -> NodeSnapshot:
        """One pass over every GPU. Per-GPU and per-field failures are data, not raised."""

    def close(self) -> None: ...
