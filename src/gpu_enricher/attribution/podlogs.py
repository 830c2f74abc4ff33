"""Pod and container names without the API server: the kubelet's log file names.

`/var/log/pods/<namespace>_<pod>_<uid>` names a pod UID; `/var/log/containers/
<pod>_<namespace>_<container>-<id>.log` names a container ID. Only directory listings are
read (names, never contents). Pod and namespace names cannot hold `_`, which makes both forms
unambiguous; container names may hold `-`, so the ID is what follows the last one.
"""

import asyncio
import logging
import os
import re
import threading
import time
from collections import Counter, defaultdict
from collections.abc import Iterable
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Final

from prometheus_client.core import GaugeMetricFamily
from prometheus_client.metrics_core import Metric

from ..fields import names
from ..model import NodeSnapshot, PodDirectory, PodMeta, SourceHealth

log = logging.getLogger(__name__)

_HEX: Final = "[0-9a-fA-F]"
_NAME: Final = r"[^_/\s]+"
_CONTAINER_LOG: Final = re.compile(
    rf"(?P<pod>{_NAME})_(?P<namespace>{_NAME})_(?P<container>{_NAME})-(?P<id>{_HEX}{{64}})\.log")
_POD_LOG_DIR: Final = re.compile(
    rf"(?P<namespace>{_NAME})_(?P<pod>{_NAME})_(?P<uid>{_HEX}{{8}}(?:-{_HEX}{{4}}){{3}}-"
    rf"{_HEX}{{12}}|{_HEX}{{32}})")  # a UUID, or a static pod's 32-hex config hash


@dataclass(frozen=True, slots=True)
class ContainerLogName:
    pod: str
    namespace: str
    container: str
    container_id: str  # bare 64-hex, lowercase


@dataclass(frozen=True, slots=True)
class PodLogDir:
    namespace: str
    pod: str
    uid: str  # lowercase


def parse_container_log_name(name: str) -> ContainerLogName | None:
    """`<pod>_<namespace>_<container>-<64hex>.log`, or None."""
    match = _CONTAINER_LOG.fullmatch(name)
    if match is None:
        return None
    return ContainerLogName(match["pod"], match["namespace"], match["container"],
                            match["id"].lower())


def parse_pod_log_dir(name: str) -> PodLogDir | None:
    """`<namespace>_<pod>_<uid>`, or None."""
    match = _POD_LOG_DIR.fullmatch(name)
    if match is None:
        return None
    return PodLogDir(match["namespace"], match["pod"], match["uid"].lower())


def pod_directory(container_logs: Iterable[str], pod_dirs: Iterable[str]) -> PodDirectory:
    """Both listings joined by (namespace, pod); unparseable names are skipped.

    A pod with only container logs gets uid "" (its containers still match by ID). A name
    with two UIDs (a StatefulSet pod recreated, the old directory not yet removed) cannot say
    which UID a container belongs to: its containers then go to a uid "" entry, so the join
    takes the UID from the process's cgroup instead of guessing.
    """
    containers: defaultdict[tuple[str, str], dict[str, str]] = defaultdict(dict)
    for log_name in map(parse_container_log_name, container_logs):
        if log_name is not None:
            key = (log_name.namespace, log_name.pod)
            containers[key][log_name.container_id] = log_name.container
    uids: defaultdict[tuple[str, str], set[str]] = defaultdict(set)
    for pod_dir in map(parse_pod_log_dir, pod_dirs):
        if pod_dir is not None:
            uids[pod_dir.namespace, pod_dir.pod].add(pod_dir.uid)
    pods: list[PodMeta] = []
    for key in sorted(containers.keys() | uids.keys()):
        namespace, pod = key
        found = containers.get(key, {})
        pod_uids = sorted(uids.get(key, ()))
        if len(pod_uids) == 1:
            pods.append(PodMeta(pod_uids[0], namespace, pod, containers=found))
            continue
        pods.extend(PodMeta(uid, namespace, pod) for uid in pod_uids)
        if found:
            pods.append(PodMeta("", namespace, pod, containers=found))
    return PodDirectory(tuple(pods), synced=True)


def list_names(directory: Path) -> list[str] | None:
    """The entry names in a directory; None when it does not exist."""
    try:
        with os.scandir(directory) as entries:
            return [entry.name for entry in entries]
    except (FileNotFoundError, NotADirectoryError):
        return None


class _ListingBusy(Exception):
    """A listing from an earlier pass still runs: this one did not start."""


class LogNameSource:
    """Satisfies `Source[PodDirectory]`: the log root's listings, once per cycle."""

    name = "logs"
    after_gpus = False

    def __init__(self, root: Path) -> None:
        self.root = root
        self._directory = PodDirectory()
        self._up = False
        self._problem: str | None = None  # what was last logged, so each change logs once
        self.collections = 0
        self.errors: Counter[str] = Counter()
        self.last_duration: float | None = None
        self.last_success_wall: float | None = None
        # Held by the thread listing the root. A timed-out refresh leaves that thread running
        # (a hung NFS /var/log): later passes must not strand one more thread each behind it.
        self._listing = threading.Lock()
        # The last listings and their names: the same listings are not parsed again.
        self._listed: tuple[list[str] | None, list[str] | None] | None = None
        self._parsed = PodDirectory()

    async def start(self) -> None:
        """Nothing runs in the background: all work happens in refresh."""

    async def refresh(self, gpus: NodeSnapshot | None) -> None:
        """List `containers/` and `pods/` under the root; never raises."""
        started = time.perf_counter()
        try:
            if self._listing.locked():
                raise _ListingBusy
            container_logs, pod_dirs, failures, directory = await asyncio.to_thread(self._list)
        except _ListingBusy:
            self._failed("busy", "a listing of the kubelet's log names under %s from a "
                         "previous pass is still running (a hung mount?); keeping the last "
                         "names, marked not current, until it ends")
            return
        except Exception:
            self._failed("internal", "listing the kubelet's log names under %s failed",
                         exc_info=True)
            return
        self.errors.update(failures)
        if container_logs is None and pod_dirs is None:
            if failures:
                self._failed(failures[0], "cannot list the kubelet's log names under %s (%s)",
                             failures[0], count=False)  # counted just above
            else:
                self._failed("no_log_dirs", "neither containers/ nor pods/ exists under %s: "
                             "no pod names from log files; set --kubelet-log-root to the "
                             "host's /var/log")
            return
        self._directory = directory
        self._up = True
        self.collections += 1
        self.last_duration = time.perf_counter() - started
        self.last_success_wall = time.time()
        if self._problem is not None:
            log.warning("pod names come from the log files under %s again", self.root)
            self._problem = None

    def _list(self) -> tuple[list[str] | None, list[str] | None, list[str], PodDirectory]:
        """Both listings (None: missing or unreadable), the reasons of those unreadable, and
        the names they give, parsed here, off the event loop (issue 33: 110 pods' names held
        the loop for milliseconds), and only when a listing changed."""
        if not self._listing.acquire(blocking=False):  # never wait behind a stuck one
            raise _ListingBusy
        try:
            listings: list[list[str] | None] = []
            failures: list[str] = []
            for sub in ("containers", "pods"):
                try:
                    listings.append(list_names(self.root / sub))
                except OSError as exc:
                    failures.append("permission" if isinstance(exc, PermissionError)
                                    else "unreadable")
                    listings.append(None)
            containers, pods = listings
            if (containers, pods) != self._listed:
                self._listed = (containers, pods)
                self._parsed = pod_directory(containers or (), pods or ())
            return containers, pods, failures, self._parsed
        finally:
            self._listing.release()

    def _failed(self, reason: str, message: str, *args: object, exc_info: bool = False,
                count: bool = True) -> None:
        if count:
            self.errors[reason] += 1
        self._up = False
        # Keep the last names, but say they are not current.
        self._directory = PodDirectory(self._directory.pods, synced=False)
        if self._problem != reason:
            log.warning(message, self.root, *args, exc_info=exc_info)
            self._problem = reason

    def snapshot(self) -> PodDirectory:
        return self._directory

    def health(self) -> SourceHealth:
        return SourceHealth(self._up, self.collections, dict(self.errors), self.last_duration,
                            self.last_success_wall)

    def families(self) -> list[Metric]:
        pods = self._directory.pods
        return [
            GaugeMetricFamily(f"{names.SELF_PREFIX}logs_pods",
                              "Pods named by the kubelet's log directories.", value=len(pods)),
            GaugeMetricFamily(f"{names.SELF_PREFIX}logs_containers",
                              "Container IDs named by the kubelet's log files.",
                              value=sum(len(pod.containers) for pod in pods)),
        ]

    async def close(self) -> None:
        """Nothing to release."""


if TYPE_CHECKING:  # mypy proves the protocol is met without a runtime import cycle
    from ..sources import Source

    _conforms: Source[PodDirectory] = LogNameSource(Path("/var/log"))
