"""From a host PID to its pod and container: the /proc room.

The parse half is pure and total (arbitrary text in, a value or None out, never an exception).
The fetch half, `ProcReader`, is blocking and runs in a worker thread; the source that drives it
per collection cycle lives in attribution/proc_source.py.
"""

import os
import re
import threading
from collections import Counter
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Final

from ..model import ContainerRef, HostProcess, ProcessTable
from .users import UserNames, parse_uid

_HEX: Final = "[0-9a-fA-F]"
_UID: Final = (f"(?:{_HEX}{{8}}[-_]{_HEX}{{4}}[-_]{_HEX}{{4}}[-_]{_HEX}{{4}}[-_]{_HEX}{{12}}"
               f"|{_HEX}{{32}})")  # a UUID (systemd writes `-` as `_`) or a static pod's hash
_POD_SEGMENT: Final = re.compile(
    # cgroupfs `pod<uid>`; systemd `<parent slice>-pod<uid>.slice` (kubepods-burstable-…,
    # kubepods-… for Guaranteed, kubelet-kubepods-… under KinD).
    rf"(?:[^/]*-)?pod(?P<uid>{_UID})(?:\.slice)?")
_CONTAINER_SEGMENT: Final = re.compile(
    # containerd/CRI-O/Docker scopes (systemd) or the bare ID (cgroupfs). CRI-O's monitor,
    # `crio-conmon-<id>.scope`, does not match: it is not the workload.
    rf"(?:(?:cri-containerd|crio|docker|containerd)-)?(?P<id>{_HEX}{{64}})(?:\.scope)?")
_RUNTIME_SEGMENT: Final = re.compile(
    # Outside a pod: Docker's and nerdctl's systemd scopes, Podman's (`libpod-conmon-` is its
    # monitor), or the bare ID of the cgroupfs driver (`/docker/<id>`, containerd's
    # `/<namespace>/<id>`).
    rf"(?:(?:docker|libpod|nerdctl|cri-containerd|containerd)-)?(?P<id>{_HEX}{{64}})"
    rf"(?:\.scope)?")
_STAT_START_TIME: Final = 19  # field 22, counted from field 3 (the first after `comm`)
_MAX_DIGITS: Final = 20  # a u64; also keeps int() clear of its 4300-digit limit
_MAX_FILE_BYTES: Final = 65536  # a cgroup file with every v1 controller is a few KiB


def parse_cgroup_path(path: str) -> ContainerRef | None:
    """The pod and container one cgroup path names, found by pattern wherever they sit.

    The innermost pod segment counts (a KinD node container or a nested cluster sits above
    it), and its container is the segment right after it; deeper sub-cgroups are ignored. A
    process in the pod's own cgroup, with no container segment, belongs to no container: None.
    """
    segments = path.split("/")
    for index in range(len(segments) - 1, -1, -1):
        pod = _POD_SEGMENT.fullmatch(segments[index])
        if pod is None:
            continue
        if index + 1 >= len(segments):
            return None
        container = _CONTAINER_SEGMENT.fullmatch(segments[index + 1])
        if container is None:
            return None
        uid = pod["uid"].lower().replace("_", "-")
        return ContainerRef(pod_uid=uid, container_id=container["id"].lower())
    return None


def parse_cgroup(text: str) -> ContainerRef | None:
    """(pod UID, container ID) from a whole `/proc/<pid>/cgroup` file (v1, v2 or hybrid).

    Lines of one process differ only in that some hierarchies may lack the pod (a hybrid
    host's `0::/`), so the first line that names a container wins.
    """
    for line in text.splitlines():
        parts = line.strip().split(":", 2)  # `N:controllers:path`; the path may hold `:`
        if len(parts) == 3:
            ref = parse_cgroup_path(parts[2])
            if ref is not None:
                return ref
    return None


def parse_runtime_container(text: str) -> str | None:
    """The container outside any pod a whole `/proc/<pid>/cgroup` file names: the innermost
    container segment of its first line that has one (a process may sit in a sub-cgroup of its
    container, as Podman's `libpod-<id>.scope/container`; a KinD node container sits above
    the containers it runs). None for a host process."""
    for line in text.splitlines():
        parts = line.strip().split(":", 2)
        if len(parts) != 3:
            continue
        for segment in reversed(parts[2].split("/")):
            found = _RUNTIME_SEGMENT.fullmatch(segment)
            if found is not None:
                return found["id"].lower()
    return None


def parse_cgroup_leaf(text: str) -> str | None:
    """The cgroup a whole `/proc/<pid>/cgroup` file puts its process in: the unified (v2)
    hierarchy's path, else the first v1 hierarchy's; None when every line says the root."""
    first: str | None = None
    for line in text.splitlines():
        parts = line.strip().split(":", 2)
        if len(parts) != 3 or parts[2] in ("", "/"):
            continue
        if parts[0] == "0" and parts[1] == "":
            return parts[2]
        if first is None:
            first = parts[2]
    return first


def parse_start_time(stat_text: str) -> int | None:
    """Field 22 of `/proc/<pid>/stat` (clock ticks after boot), or None if malformed.

    `comm` (field 2) is parenthesised and may itself hold spaces and `)`, so the fields are
    split after the last `)`.
    """
    head, paren, rest = stat_text.rpartition(")")
    if not paren or "(" not in head:
        return None
    fields = rest.split()
    if len(fields) <= _STAT_START_TIME:
        return None
    value = fields[_STAT_START_TIME]
    # isdigit alone would admit non-ASCII digits that int() accepts.
    if not (value.isascii() and value.isdigit()) or len(value) > _MAX_DIGITS:
        return None
    return int(value)


@dataclass(frozen=True, slots=True)
class ReadStats:
    """What one `ProcReader.read` pass met, for the source's self-metrics."""

    vanished: int = 0  # asked for, but the process exited before (or while) it was read
    errors: Mapping[str, int] = field(default_factory=dict)  # reason → count in this pass


class ProcRootError(OSError):
    """The proc root itself is missing or unreadable: nothing below it can be read."""


class ReaderBusy(Exception):
    """A read from an earlier pass still runs (stuck in the kernel): this one did not start."""


class _Vanished(Exception):
    """The process exited between NVML's report and the read."""


class _Unreadable(Exception):
    """The process is there but its start time cannot be read: left out, error counted."""


def _read_text(name: str, dir_fd: int) -> str:
    """One small /proc file, read through the process directory's descriptor."""
    fd = os.open(name, os.O_RDONLY, dir_fd=dir_fd)
    try:
        chunks: list[bytes] = []
        size = 0
        while size < _MAX_FILE_BYTES:  # /proc files may come in several reads
            chunk = os.read(fd, 4096)
            if not chunk:
                break
            chunks.append(chunk)
            size += len(chunk)
        # comm is arbitrary bytes; replacing keeps label values valid UTF-8.
        return b"".join(chunks).decode("utf-8", "replace")
    finally:
        os.close(fd)


class ProcReader:
    """Reads the GPU processes' `/proc` entries; blocking, meant for a worker thread.

    Each pass reads every PID's `stat` (its start time). Name and container are cached by
    (PID, start time): a known process costs that one read, a reused PID is read afresh. The
    cache keeps only the PIDs of the latest pass, so it is bounded by what NVML reports.
    """

    def __init__(self, root: Path) -> None:
        self.root = root
        self.last = ReadStats()
        self._cache: dict[int, HostProcess] = {}
        self.users = UserNames(root)
        # A cancelled refresh leaves its thread running: never let two passes share the cache.
        self._lock = threading.Lock()

    @property
    def cache_entries(self) -> int:
        return len(self._cache)

    @property
    def busy(self) -> bool:
        """A read is running (in a thread a timed-out refresh left behind, perhaps)."""
        return self._lock.locked()

    def read(self, pids: Iterable[int]) -> ProcessTable:
        """The table of those PIDs still alive; raises ProcRootError if the root is unusable
        and ReaderBusy, at once, while another read runs.

        Never waits for the other read: it may be stuck in the kernel (reads of
        /proc/<pid>/cgroup take the cgroup lock), and each pass would strand one more thread.
        """
        if not self._lock.acquire(blocking=False):
            raise ReaderBusy
        try:
            if not self.root.is_dir() or not os.access(self.root, os.R_OK | os.X_OK):
                raise ProcRootError(f"{self.root} is not a readable directory")
            self.users.refresh()
            found: dict[int, HostProcess] = {}
            cache: dict[int, HostProcess] = {}
            errors: Counter[str] = Counter()
            vanished = 0
            for pid in sorted(set(pids)):
                try:
                    process, complete = self._read_one(pid, errors)
                except _Vanished:
                    vanished += 1
                    continue
                except _Unreadable:
                    continue
                found[pid] = process
                if complete:  # a failed read is retried (and counted again) next pass
                    cache[pid] = process
            self._cache = cache  # PIDs not asked for, gone or reused fall out here
            self.last = ReadStats(vanished, dict(errors))
            return ProcessTable(found)
        finally:
            self._lock.release()

    def _read_one(self, pid: int, errors: Counter[str]) -> tuple[HostProcess, bool]:
        """One process and whether it was read completely (worth caching)."""
        try:
            # Every read goes through this descriptor: if the PID is reused meanwhile, the
            # kernel answers ESRCH instead of another process's files.
            dir_fd = os.open(self.root / str(pid), os.O_RDONLY | os.O_DIRECTORY)
        except OSError as exc:
            self._classify(exc, errors)
            raise _Unreadable from exc
        try:
            try:
                start_time = parse_start_time(_read_text("stat", dir_fd))
            except OSError as exc:
                self._classify(exc, errors)
                raise _Unreadable from exc
            if start_time is None:
                errors["malformed"] += 1
                raise _Unreadable
            cached = self._cache.get(pid)
            if cached is not None and cached.start_time == start_time:
                return cached, True
            complete = True
            try:
                name = _read_text("comm", dir_fd).strip()
            except OSError as exc:
                self._classify(exc, errors)
                name, complete = "", False
            runtime = leaf = None
            try:
                cgroup = _read_text("cgroup", dir_fd)
                container = parse_cgroup(cgroup)
                if container is None:
                    runtime = parse_runtime_container(cgroup)
                    leaf = parse_cgroup_leaf(cgroup)
            except OSError as exc:
                self._classify(exc, errors)
                container, complete = None, False
            try:  # who runs it: only a label, so a status that cannot be read is no error
                uid = parse_uid(_read_text("status", dir_fd))
            except OSError:
                uid = None
            user = self.users.name(uid) if uid is not None else None
            return HostProcess(pid, start_time, name, container, runtime, user, leaf), complete
        finally:
            os.close(dir_fd)

    @staticmethod
    def _classify(exc: OSError, errors: Counter[str]) -> None:
        """Raise _Vanished for a process that exited; otherwise count the error's reason."""
        if isinstance(exc, FileNotFoundError | ProcessLookupError):  # the latter is ESRCH
            raise _Vanished from exc
        errors["permission" if isinstance(exc, PermissionError) else "unreadable"] += 1
