"""dcgm-exporter's troubleshooting dumps (--dump-enabled, its chart's `debugDump`): what was
gathered, before pods are joined in, written to JSON files, and old files removed.

dcgm-exporter writes, on every scrape and per entity group, `metrics-GPU-<YYYYmmdd-HHMMSS>-<8
hex>.json` (the values DCGM gave, before its transformations add pod labels) and
`deviceinfo-GPU-…` (DCGM's device list), indented JSON, `.json.gz` with --dump-compression, and
every hour removes the files of its directory older than --dump-retention hours (0: never).
Here a scrape only hands out bytes, so the files are written once per pass, when the readings
are gathered: `metrics-GPU-…` holds the pass's NodeSnapshot (every GPU's identity, values, MIG
instances, processes and the pass's errors), `deviceinfo-GPU-…` each GPU's identity and MIG
instances. The writing runs on a thread; a failure is logged (WARNING once, then DEBUG) and never
stops a pass.

The pure half is `metrics_document` and `device_document`; `PassDump` writes.
"""

import asyncio
import dataclasses
import gzip
import json
import logging
import os
import secrets
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Final

from ..model import NodeSnapshot

log = logging.getLogger(__name__)

CLEANUP_EVERY_SECONDS: Final = 3600.0  # dcgm-exporter's hourly ticker
GROUP: Final = "GPU"  # dcgm-exporter's entity group name; gpu-enricher has GPUs only


@dataclass(frozen=True, slots=True)
class DumpSettings:
    directory: Path
    retention_hours: int  # 0: files are never removed
    compression: bool


def metrics_document(snapshot: NodeSnapshot) -> dict[str, Any]:
    """The pass as gathered (its sets are written as sorted lists)."""
    return dataclasses.asdict(snapshot)


def device_document(snapshot: NodeSnapshot) -> list[dict[str, Any]]:
    """Each GPU's identity and MIG instances, as dcgm-exporter's device info lists them."""
    return [{**dataclasses.asdict(g.identity), "mig_enabled": g.mig_enabled,
             "instances": [{"gpu_instance_id": i.gpu_instance_id,
                            "compute_instance_id": i.compute_instance_id,
                            "profile": i.profile, "uuid": i.uuid} for i in g.instances]}
            for g in snapshot.gpus]


class PassDump:
    """Writes each pass's two files; removes old ones every `cleanup_every_seconds`."""

    def __init__(self, settings: DumpSettings,
                 cleanup_every_seconds: float = CLEANUP_EVERY_SECONDS) -> None:
        self.settings = settings
        self._cleanup_every = cleanup_every_seconds
        self._cleaned_at = time.monotonic()  # as dcgm-exporter, the first clean-up after one
        self._failing = False
        self._writing: asyncio.Future[None] | None = None

    def offer(self, snapshot: NodeSnapshot | None) -> None:
        """Writes the pass's files on a thread, unless the last pass's are still being
        written (a slow disk): a pass never waits on the dump, and writes never pile up."""
        if snapshot is not None and (self._writing is None or self._writing.done()):
            self._writing = asyncio.ensure_future(self._write_logged(snapshot))

    async def close(self) -> None:
        if self._writing is not None:
            await asyncio.wait({self._writing}, timeout=1.0)

    async def _write_logged(self, snapshot: NodeSnapshot) -> None:
        try:
            await asyncio.to_thread(self._write, snapshot)
        except OSError as exc:
            (log.debug if self._failing else log.warning)(
                "cannot write the dump files in %s: %s", self.settings.directory, exc)
            self._failing = True
        else:
            self._failing = False

    def _write(self, snapshot: NodeSnapshot) -> None:
        directory = self.settings.directory
        directory.mkdir(parents=True, exist_ok=True)
        stamp = time.strftime("%Y%m%d-%H%M%S")
        suffix = ".json.gz" if self.settings.compression else ".json"
        for prefix, document in (("metrics", metrics_document(snapshot)),
                                 ("deviceinfo", device_document(snapshot))):
            text = (json.dumps(document, indent=2, default=sorted) + "\n").encode()
            path = directory / f"{prefix}-{GROUP}-{stamp}-{secrets.token_hex(4)}{suffix}"
            path.write_bytes(gzip.compress(text) if self.settings.compression else text)
        if time.monotonic() - self._cleaned_at >= self._cleanup_every:
            self._cleaned_at = time.monotonic()
            self._remove_old(directory)

    def _remove_old(self, directory: Path) -> None:
        if self.settings.retention_hours <= 0:
            return
        cutoff = time.time() - self.settings.retention_hours * 3600
        removed = 0
        for entry in os.scandir(directory):
            if entry.is_file(follow_symlinks=False) and entry.stat().st_mtime < cutoff:
                os.unlink(entry.path)
                removed += 1
        if removed:
            log.debug("removed %d dump files older than %d h from %s", removed,
                      self.settings.retention_hours, directory)
