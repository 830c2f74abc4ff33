"""HPC job mapping (`--hpc-job-mapping-dir`), the source: once per pass, the reader
(`jobmap_reader.py`) on a worker thread (a hung mount stalls only this source, up to its
deadline, keeping the last jobs), then what changed reported and the snapshot rebuilt.

A bad file (a bad name, not a regular file, too big, not UTF-8) is skipped and logged when it
turns bad, not on every pass; the other GPUs keep their jobs whatever one file holds. A missing
directory maps no jobs (upstream's labels go too), logged once.
"""

import asyncio
import logging
import threading
import time
from collections import Counter
from pathlib import Path
from typing import TYPE_CHECKING, Final

from prometheus_client.core import CounterMetricFamily, GaugeMetricFamily
from prometheus_client.metrics_core import Metric

from ..fields import names
from ..model import NO_JOBS, JobMapping, NodeSnapshot, SourceHealth
from .jobmap import MAX_ENTRIES, FileJobs, Key, job_mapping, parse_name
from .jobmap_reader import DirectoryError, JobMapReader, Pass

log = logging.getLogger(__name__)

NO_DIRECTORY: Final = "no_directory"
LOGGED_PER_PASS: Final = 8
"""Newly bad files named one by one in a pass; more are summed up in one line."""


def _by_reason(name: str, help_text: str, counts: Counter[str]) -> Metric:
    family = GaugeMetricFamily(name, help_text, labels=["reason"])
    for reason, count in sorted(counts.items()):
        family.add_metric([reason], count)
    return family


class _Busy(Exception):
    """A read from an earlier pass still runs: this one did not start."""


class JobMapSource:
    """Satisfies `Source[JobMapping]`."""

    name = "hpc"
    after_gpus = False

    def __init__(self, directory: Path, reader: JobMapReader | None = None) -> None:
        self.directory = directory
        self.reader = reader if reader is not None else JobMapReader(directory)
        self._mapping = NO_JOBS
        self._files: dict[Key, FileJobs] = {}
        self._skipped: dict[str, str] = {}  # also what was logged: each name once per reason
        self._up = False
        self._problem: str | None = None
        self._truncated = False
        self.collections = 0
        self.errors: Counter[str] = Counter()
        self.last_duration: float | None = None
        self.last_success_wall: float | None = None
        self._reading = threading.Lock()

    async def start(self) -> None:
        """Nothing runs in the background: all work happens in refresh."""

    def _read(self) -> Pass:
        if not self._reading.acquire(blocking=False):  # never queue behind a stuck read
            raise _Busy
        try:
            return self.reader.read()
        finally:
            self._reading.release()

    async def refresh(self, gpus: NodeSnapshot | None) -> None:
        """List the directory and read what changed; never raises."""
        started = time.perf_counter()
        try:
            found = await asyncio.to_thread(self._read)
        except _Busy:
            self._failed("busy", "a read of %s from a previous pass is still running (a hung "
                         "mount?); keeping the last jobs until it ends", keep=True)
            return
        except DirectoryError as exc:
            self._failed(NO_DIRECTORY, "cannot list the HPC job mapping directory %s (%s): no "
                         "hpc_job labels until it can be", str(exc))
            return
        except Exception:
            self._failed("internal", "reading the HPC job mapping directory %s failed",
                         exc_info=True)
            return
        self._report(found)
        if found.files != self._files:  # unchanged: the same snapshot object
            self._files = found.files
            self._mapping = job_mapping(found.files)
        self._skipped = found.skipped
        self._truncated = found.truncated
        self._up = True
        self.collections += 1
        self.last_duration = time.perf_counter() - started
        self.last_success_wall = time.time()
        if self._problem is not None:
            log.warning("the HPC job mapping directory %s is readable again", self.directory)
            self._problem = None

    def _report(self, found: Pass) -> None:
        """Log what turned bad this pass, once: a file while it stays bad is not logged again."""
        fresh = [(n, r) for n, r in found.skipped.items() if self._skipped.get(n) != r]
        for name, reason in fresh[:LOGGED_PER_PASS]:
            log.warning("HPC job mapping: skipping %s (%s)", self.directory / name, reason)
        if len(fresh) > LOGGED_PER_PASS:
            log.warning("HPC job mapping: skipping %d more files in %s",
                        len(fresh) - LOGGED_PER_PASS, self.directory)
        for name, parsed in found.read.items():  # read when changed: once per version
            key = parse_name(name)
            if parsed.skipped and key is not None and self._files.get(key) != parsed:
                log.warning("HPC job mapping: %s: lines skipped: %s", self.directory / name,
                            ", ".join(f"{n} {r}" for r, n in sorted(parsed.skipped.items())))
        if found.truncated and not self._truncated:
            log.warning("HPC job mapping: %s holds more than %d entries; the rest are not read",
                        self.directory, MAX_ENTRIES)

    def _failed(self, reason: str, message: str, *args: object, exc_info: bool = False,
                keep: bool = False) -> None:
        self.errors[reason] += 1
        self._up = False
        if not keep:  # upstream: no directory, no labels
            self._files, self._mapping, self._skipped = {}, NO_JOBS, {}
        if self._problem != reason:
            log.warning(message, self.directory, *args, exc_info=exc_info)
            self._problem = reason

    def snapshot(self) -> JobMapping:
        return self._mapping

    def health(self) -> SourceHealth:
        return SourceHealth(self._up, self.collections, dict(self.errors), self.last_duration,
                            self.last_success_wall)

    def families(self) -> list[Metric]:
        prefix = f"{names.SELF_PREFIX}hpc_job_mapping_"
        lines: Counter[str] = Counter()
        for parsed in self._files.values():
            lines.update(parsed.skipped)
        return [
            GaugeMetricFamily(f"{prefix}files", "HPC job mapping files in use (GPUs and GPU "
                              "instances with a job).", value=len(self._mapping.jobs)),
            _by_reason(f"{prefix}skipped_files", "Files in the HPC job mapping directory left "
                       "out in the last pass, by reason.", Counter(self._skipped.values())),
            _by_reason(f"{prefix}skipped_job_ids", "Lines of the mapping files in use left "
                       "out, by reason.", lines),
            CounterMetricFamily(f"{prefix}file_reads", "Mapping files read (new or changed "
                                "ones; an unchanged file is not read again).",
                                value=self.reader.reads),
        ]

    async def close(self) -> None:
        """Nothing to release."""


if TYPE_CHECKING:  # mypy proves the protocol is met without a runtime import cycle
    from ..sources import Source

    _conforms: Source[JobMapping] = JobMapSource(Path("/var/lib/dcgm-exporter/job-mapping"))
