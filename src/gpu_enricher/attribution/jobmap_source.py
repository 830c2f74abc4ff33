"""HPC job mapping (`--hpc-job-mapping-dir`), the fetch half and the source: the directory
listed and its changed files read once per pass, on a thread (a hung mount stalls only this
source, and only until its deadline).

dcgm-exporter lists the directory and reads every file at every collection. We do that work
only for what changed: the listing is reused while the directory's own stat is unchanged, a
file's jobs while its inode, size, mtime and ctime are. A listing or read made while the mtime
was within `SETTLE_NS` of the pass is not reused (a coarse filesystem clock can hide a second
write in the same tick). A bad file (a bad name, not a regular file, too big, not UTF-8) is
skipped and logged when it turns bad, not on every pass; the other GPUs keep their jobs
whatever one file holds. A missing directory maps no jobs, logged once.
"""

import asyncio
import logging
import os
import stat
import threading
import time
from collections import Counter
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Final

from prometheus_client.core import CounterMetricFamily, GaugeMetricFamily
from prometheus_client.metrics_core import Metric

from ..fields import names
from ..files import FileReadError, read_regular_file
from ..model import JobMapping, NodeSnapshot, SourceHealth
from .jobmap import (
    BAD_NAME,
    MAX_ENTRIES,
    MAX_FILE_BYTES,
    MAX_FILES,
    NOT_REGULAR,
    TOO_LARGE,
    TOO_MANY_FILES,
    UNREADABLE,
    FileJobs,
    Key,
    is_ignored,
    job_mapping,
    parse_jobs,
    parse_name,
)

log = logging.getLogger(__name__)

SETTLE_NS: Final = 2_000_000_000
NO_DIRECTORY: Final = "no_directory"
LOGGED_PER_PASS: Final = 8
"""Newly bad files named one by one in a pass; more are summed up in one line."""

Signature = tuple[int, int, int, int]


def _signature(st: os.stat_result) -> Signature:
    return st.st_ino, st.st_size, st.st_mtime_ns, st.st_ctime_ns


class DirectoryError(Exception):
    """The directory cannot be listed: the message says why."""


@dataclass(frozen=True, slots=True)
class Pass:
    """What one pass found."""

    files: dict[Key, FileJobs] = field(default_factory=dict)
    skipped: dict[str, str] = field(default_factory=dict)
    """File name → why it was left out."""
    read: dict[str, FileJobs] = field(default_factory=dict)
    """The files read this pass (new or changed), by name."""
    truncated: bool = False
    """More than MAX_ENTRIES entries: the rest were not looked at."""


class JobMapReader:
    """The fetch half: blocking, run on one thread at a time."""

    def __init__(self, directory: Path, clock: Callable[[], int] = time.time_ns) -> None:
        self.directory = directory
        self._root = os.fspath(directory)  # str paths: pathlib's joins cost half a pass
        self._clock = clock
        # Only what was listed or read after its mtime settled, so can be trusted unchanged.
        self._listing: tuple[Signature, tuple[str, ...], bool] | None = None
        self._cache: dict[str, tuple[Signature, FileJobs]] = {}
        self.reads = 0
        """Files read since start (new or changed ones only)."""

    def _settled(self, st: os.stat_result, now: int) -> bool:
        return now - st.st_mtime_ns > SETTLE_NS

    def _names(self, now: int) -> tuple[tuple[str, ...], bool]:
        try:
            st = os.stat(self._root)
        except OSError as exc:
            raise DirectoryError(exc.strerror or str(exc)) from None
        if not stat.S_ISDIR(st.st_mode):
            raise DirectoryError("not a directory")
        if self._listing is not None and self._listing[0] == _signature(st):
            return self._listing[1], self._listing[2]
        found: list[str] = []
        truncated = False
        try:
            with os.scandir(self._root) as entries:
                for entry in entries:
                    if len(found) == MAX_ENTRIES:
                        truncated = True
                        break
                    found.append(entry.name)
        except OSError as exc:
            raise DirectoryError(exc.strerror or str(exc)) from None
        listing = tuple(sorted(found))
        self._listing = (_signature(st), listing, truncated) if self._settled(st, now) else None
        return listing, truncated

    def read(self) -> Pass:
        """Raises DirectoryError when the directory cannot be listed."""
        now = self._clock()
        listing, truncated = self._names(now)
        result = Pass(truncated=truncated)
        cache: dict[str, tuple[Signature, FileJobs]] = {}
        for name in listing:
            if is_ignored(name):
                continue
            key = parse_name(name)
            if key is None:
                result.skipped[name] = BAD_NAME
            elif len(result.files) == MAX_FILES:
                result.skipped[name] = TOO_MANY_FILES
            else:
                self._file(name, key, now, result, cache)
        self._cache = cache
        return result

    def _file(self, name: str, key: Key, now: int, result: Pass,
              cache: dict[str, tuple[Signature, FileJobs]]) -> None:
        path = os.path.join(self._root, name)
        try:
            st = os.stat(path)
        except FileNotFoundError:  # removed since the listing (an epilog): no longer mapped
            return
        except OSError:
            result.skipped[name] = UNREADABLE
            return
        if not stat.S_ISREG(st.st_mode):
            result.skipped[name] = NOT_REGULAR
            return
        if st.st_size > MAX_FILE_BYTES:  # refused unread
            result.skipped[name] = TOO_LARGE
            return
        signature = _signature(st)
        known = self._cache.get(name)
        if known is not None and known[0] == signature:
            parsed = known[1]
        else:
            try:
                parsed = parse_jobs(read_regular_file(Path(path), MAX_FILE_BYTES,
                                                      "job mapping file"))
            except FileReadError:
                if os.path.lexists(path):
                    result.skipped[name] = UNREADABLE
                return  # else removed since the stat
            self.reads += 1
            result.read[name] = parsed
        if self._settled(st, now):
            cache[name] = (signature, parsed)
        if parsed.problem is not None:
            result.skipped[name] = parsed.problem
        else:
            result.files[key] = parsed


class _Busy(Exception):
    """A read from an earlier pass still runs: this one did not start."""


class JobMapSource:
    """Satisfies `Source[JobMapping]`."""

    name = "hpc"
    after_gpus = False

    def __init__(self, directory: Path, reader: JobMapReader | None = None) -> None:
        self.directory = directory
        self.reader = reader if reader is not None else JobMapReader(directory)
        self._mapping = JobMapping()
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
            self._files, self._mapping, self._skipped = {}, JobMapping(), {}
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
        skipped_files = GaugeMetricFamily(
            f"{prefix}skipped_files", "Files in the HPC job mapping directory left out in the "
            "last pass, by reason.", labels=["reason"])
        for reason, count in sorted(Counter(self._skipped.values()).items()):
            skipped_files.add_metric([reason], count)
        skipped_ids = GaugeMetricFamily(
            f"{prefix}skipped_job_ids", "Lines of the mapping files in use left out, by "
            "reason.", labels=["reason"])
        lines: Counter[str] = Counter()
        for parsed in self._files.values():
            lines.update(parsed.skipped)
        for reason, count in sorted(lines.items()):
            skipped_ids.add_metric([reason], count)
        return [
            GaugeMetricFamily(f"{prefix}files", "HPC job mapping files in use (GPUs and GPU "
                              "instances with a job).", value=len(self._mapping.jobs)),
            skipped_files, skipped_ids,
            CounterMetricFamily(f"{prefix}file_reads", "Mapping files read (new or changed "
                                "ones; an unchanged file is not read again).",
                                value=self.reader.reads),
        ]

    async def close(self) -> None:
        """Nothing to release."""


if TYPE_CHECKING:  # mypy proves the protocol is met without a runtime import cycle
    from ..sources import Source

    _conforms: Source[JobMapping] = JobMapSource(Path("/var/lib/dcgm-exporter/job-mapping"))
