"""The one shape every source has, so the collector stays a thin cycle.

A source owns its I/O (a fetch half) and hands out immutable snapshots (built by a pure parse
half). The collector starts every source, refreshes each once per cycle (bounded, never
raising), joins their snapshots and renders; `/metrics` never reaches a source.
"""

from typing import Protocol, TypeVar

from prometheus_client.metrics_core import Metric

from .model import NodeSnapshot, SourceHealth

SnapshotT_co = TypeVar("SnapshotT_co", covariant=True)


class Source(Protocol[SnapshotT_co]):
    name: str
    """Short and fixed: the `source` label of the exporter's own metrics."""
    after_gpus: bool
    """True: refreshed after the GPU pass, with its snapshot (the /proc reader needs the
    PIDs NVML reported); False: refreshed concurrently with the GPU pass."""

    async def start(self) -> None:
        """Begin background work (a watch); return at once."""

    async def refresh(self, gpus: NodeSnapshot | None) -> None:
        """One bounded attempt per collection cycle; failures are recorded, never raised."""

    def snapshot(self) -> SnapshotT_co:
        """The current immutable view; cheap, no I/O."""

    def health(self) -> SourceHealth: ...

    def families(self) -> list[Metric]:
        """The source's own self-metrics beyond the common `source_*` families."""

    async def close(self) -> None: ...
