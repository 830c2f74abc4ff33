"""HPC job mapping (`--hpc-job-mapping-dir`), the fetch half: the directory listed and its
new or changed files read, blocking (the source runs it on a thread).

dcgm-exporter lists the directory and reads every file at every collection. We do that work
only for what changed: the listing is reused while the directory's own stat is unchanged, a
file's jobs while its inode, size, mtime and ctime are. A listing or read made while the mtime
was within `SETTLE_NS` of the pass is not reused (a filesystem clock can be coarser than two
writes in a row). Nothing here logs: the source reports what a pass found.
"""

import os
import stat
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Final

from ..files import FileReadError, read_regular_file
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
    parse_jobs,
    parse_name,
)

SETTLE_NS: Final = 2_000_000_000

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
        named = 0  # bad ones included: the cap bounds the reads, not only the jobs
        for name in listing:
            if is_ignored(name):
                continue
            key = parse_name(name)
            if key is None:
                result.skipped[name] = BAD_NAME
            elif named == MAX_FILES:
                result.skipped[name] = TOO_MANY_FILES
            else:
                named += 1
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
