"""Reloading the configuration without a gap (issue 13): SIGHUP, or a change of a watched file
(the counters file, dcgm-exporter's config file, the web config and the certificate, key and CA
files it names), re-reads the counters, the config file and the web config together.

The config file's metrics and watch groups apply at once (dcgm-exporter reads the file only at
start). Its `collection.interval` does not: the interval sizes what was built at start (the
kubelet client's deadline, the pod labels' maximum age, the sources' deadlines, the stall
limit, assembly.py), so a changed one is logged once as needing a restart.

Nothing is torn down: /metrics keeps serving the running exposition until the collector has
rendered a whole pass with the new counters (Collector.use_counters), and new connections and
requests meet the new web config as soon as it is in force (web/live_security.py). A file that is
wrong keeps its part (the counters with the config file, or the web config) as it runs, is
logged once and counted, and
`gpu_enricher_config_reload_success` reads 0 until a reload succeeds, as Prometheus reports its
own reloads.

Files are watched by polling their stat (device, inode, size, modification and change times),
following symlinks: a Kubernetes Secret or ConfigMap volume swaps its `..data` link and
cert-manager renames a new file into place; both change the stat of the path we hold. The web
config file itself is also looked at before every request (`web_config_in_force`), so that a
rotated password applies to the next request, as exporter-toolkit's per-request read does.
"""

import asyncio
import dataclasses
import logging
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Final

from .collector.loop import Collector
from .collector.pacing import wait_event
from .exposition.ownmetrics import CONFIG
from .fields.collection import Collection, CountersSources, load_collection
from .fields.counters import CountersFileError
from .fields.exporter_config import ExporterConfigError
from .files import Stamp, fingerprints, stamp
from .kube.configmaps import metrics_text

if TYPE_CHECKING:  # only with -m: the watch and kubernetes_asyncio are not loaded otherwise
    from .kube.configmap_source import ConfigMapSource

    # Only with --web-config-file: TLS and the web config's YAML are not loaded otherwise
    # (issue 33); each use below is behind `self._live is not None`.
    from .web.live_security import LiveWebSecurity
    from .web.security import WebSecurity

log = logging.getLogger(__name__)

SETTLE_SECONDS: Final = 1.0
"""After a change is seen, files must hold still this long before they are read: a certificate
and its key written one after the other are read as a pair, not refused in between."""
MAX_SETTLE_ROUNDS: Final = 5
REQUEST_RELOADS: Final = 2
"""Reloads one request may wait for: a file rewritten while it is read is read once more, a
file rewritten without end does not hold a request forever."""


class ReloadRefused(Exception):
    """A reload that keeps the running configuration; `file` is the metric's label."""

    def __init__(self, file: str, message: str) -> None:
        super().__init__(message)
        self.file = file


@dataclass(frozen=True, slots=True)
class LoadedConfig:
    """Each part as read, or why it is refused. The counters (with the config file) and the web
    config are put in force each on its own: a broken counters file does not hold back a
    rotated password (issue 26)."""

    collection: Collection | ReloadRefused
    security: "WebSecurity | ReloadRefused | None"

    @property
    def refused(self) -> tuple[ReloadRefused, ...]:
        return tuple(p for p in (self.collection, self.security) if isinstance(p, ReloadRefused))

    @property
    def web_security(self) -> "WebSecurity | None":
        """The new web security read, if one was read and not refused."""
        return None if isinstance(self.security, ReloadRefused) else self.security


class ConfigReloader:
    """`interval_ms`: the collection interval in force when the config file may set it (None:
    -c sets it, and the file's never applies)."""

    def __init__(self, collector: Collector, sources: CountersSources, collection: Collection,
                 live: "LiveWebSecurity | None", check_seconds: float,
                 interval_ms: int | None = None, config_map: "ConfigMapSource | None" = None,
                 wall_clock: Callable[[], float] = time.time) -> None:
        """`config_map`: -m's watch; a new version of the ConfigMap is a reload."""
        self._collector = collector
        self._sources = sources
        self._config_map = config_map
        self._config_map_version = ""  # the last version read (put in force or refused)
        self._collection = collection
        self._interval_ms = interval_ms
        self._interval_noted: int | None = None
        self._live = live
        # --web-config-file: the path stays; what it names may change (web_config_in_force).
        self._web_path = None if live is None else Path(live.current.config.path)
        self._check_seconds = check_seconds
        self._wall_clock = wall_clock
        self._requested = asyncio.Event()
        self._last_errors: frozenset[str] = frozenset()
        self._stamps = self._stamp_all()
        self._fingerprints = fingerprints(tuple(self._stamps))
        self._running: asyncio.Future[None] | None = None  # the reload under way
        CONFIG.reload_ok, CONFIG.last_success = True, wall_clock()

    def _paths(self) -> tuple[Path, ...]:
        if self._live is None:
            return self._collection.watched
        return (*self._collection.watched, *self._live.watched())

    def _stamp_all(self) -> dict[Path, Stamp]:
        return {path: stamp(path) for path in self._paths()}

    def request(self) -> None:
        """SIGHUP (called on the loop): reload now, whether or not a file changed."""
        self._requested.set()

    async def run(self) -> None:
        """Reload on request, and when a watched file changes (checked every check_seconds;
        0: on request only)."""
        while True:
            if await wait_event(self._requested, self._check_seconds or None):
                self._requested.clear()
                await self._reload_once("SIGHUP")
                continue
            if (changed_map := self._config_map_changed()) is not None:
                await self._reload_once(changed_map)
                continue
            if any(stamp(path) != old for path, old in self._stamps.items()):
                await self._settle()
                await self._reload_once(None)

    async def web_config_in_force(self) -> None:
        """Before each request (web/server.py, with --web-config-file): a changed web config
        file is read and put in force first, so that a rotated password is taken, and the old
        one refused, from the next request on, as exporter-toolkit reads the file per request
        (issue 26). One stat when nothing changed; the requests that meet a change wait for one
        shared reload. The certificate, key and CA files it names stay on the check above,
        which lets a certificate and its key settle into a pair."""
        path = self._web_path
        assert path is not None, "installed with --web-config-file only"
        for _ in range(REQUEST_RELOADS):
            if stamp(path) == self._stamps.get(path):
                return
            await self._reload_once(None, hasty=True)

    async def _reload_once(self, trigger: str | None, hasty: bool = False) -> None:
        """One reload at a time. `trigger` None (a file changed): one under way is waited for,
        and the caller looks at the files again; a SIGHUP or a ConfigMap change then runs its
        own."""
        while (running := self._running) is not None:
            await asyncio.shield(running)
            if trigger is None:
                return
        task = asyncio.ensure_future(self.reload(trigger, hasty))
        self._running = task
        task.add_done_callback(self._reload_done)
        # shield: a request that goes away does not cancel the reload the others wait for.
        await asyncio.shield(task)

    def _reload_done(self, task: "asyncio.Future[None]") -> None:
        if self._running is task:
            self._running = None

    async def _settle(self) -> None:
        """Wait until the watched files hold still (a writer may not be done)."""
        seen = self._stamp_all()
        for _ in range(MAX_SETTLE_ROUNDS):
            await asyncio.sleep(SETTLE_SECONDS)
            now = self._stamp_all()
            if now == seen:
                return
            seen = now

    async def reload(self, trigger: str | None, hasty: bool = False) -> None:
        """Re-read every file; put each part in force when it is right. `trigger` None: the
        watched files changed, and the log line names those whose bytes changed (else those
        replaced); none changed: already read by another reload, nothing to do. `hasty` (a
        request waits): read at once, unless that finds the web config wrong or turning basic
        auth off, which may be a file caught half-written (truncated, an editor's save): then
        as the file check, once the files hold still."""
        stamps = self._stamp_all()  # before reading: a change while reading is seen next time
        if trigger is None and all(now == self._stamps.get(p) for p, now in stamps.items()):
            return
        loaded = await asyncio.to_thread(self._read)  # files and PEM parsing: off the loop
        if hasty and not self._safe_at_once(loaded):
            await self._settle()
            stamps = self._stamp_all()
            loaded = await asyncio.to_thread(self._read)
        moved = [path for path, now in stamps.items() if now != self._stamps.get(path)]
        before, prints = self._fingerprints, await asyncio.to_thread(fingerprints, tuple(stamps))
        edited = [path for path in stamps if prints[path] != before.get(path)]
        if trigger is None:
            trigger = f"{', '.join(str(path) for path in edited or moved)} changed"
        self._fingerprints = prints
        changed = []
        if isinstance(new := loaded.collection, Collection):
            old, self._collection = self._collection, new
            if (new.counters, new.field_intervals_ms) != (old.counters, old.field_intervals_ms):
                self._collector.use_counters(new.counters, new.field_intervals_ms)
                changed.append(f"{len(new.counters)} counter line(s) from {new.origin}, "
                               f"{len(new.field_intervals_ms)} field(s) in watch groups")
            self._note_interval(new.interval_ms)
        if self._live is not None and (security := loaded.web_security) is not None:
            web_files = self._live.watched()
            if (security.config != self._live.current.config
                    or any(path in edited for path in web_files)):
                changed.append("web config")
            self._live.replace(security)
        # The stamps read before reading (a change meanwhile is the next reload; a file refused
        # is retried at its next change or SIGHUP, not at every check), and those of the files
        # the new web config names for the first time.
        self._stamps = {path: stamps[path] if path in stamps else stamp(path)
                        for path in self._paths()}
        if loaded.refused:
            self._refuse(trigger, loaded.refused, changed)
            return
        self._last_errors = frozenset()
        CONFIG.reload_ok, CONFIG.last_success = True, self._wall_clock()
        log.info("configuration reloaded (%s): %s", trigger, ", ".join(changed) or "unchanged")

    def _config_map_changed(self) -> str | None:
        """The reload trigger when the watch saw a new version of -m's ConfigMap (its text is
        then in `self._sources`); a ConfigMap deleted or without its key is refused once, and
        the last good counters stay."""
        if self._config_map is None:
            return None
        seen = self._config_map.snapshot()
        found = seen.config_map
        version = found.resource_version if found is not None else "gone"
        if not seen.listed or version == self._config_map_version:
            return None
        self._config_map_version = version
        ref = self._config_map.ref
        try:
            text = metrics_text(found, ref)
        except ValueError as exc:
            self._refuse(f"ConfigMap {ref} changed", (ReloadRefused("configmap", str(exc)),))
            return None
        if self._sources.config_map == (str(ref), text):
            return None  # the start's read, or an edit of another key
        self._sources = dataclasses.replace(self._sources, config_map=(str(ref), text))
        return f"ConfigMap {ref} changed"

    def _safe_at_once(self, loaded: LoadedConfig) -> bool:
        """Whether a hasty read may be put in force (or refused) without waiting: not while a
        file is wrong or the web config turns basic auth off (issue 26: a request never finds
        the server open, nor logs a refusal, because it met a file half-written)."""
        auth_off = (self._live is not None and self._live.current.auth is not None
                    and (security := loaded.web_security) is not None and security.auth is None)
        return not loaded.refused and not auth_off

    def _read(self) -> LoadedConfig:
        """In a worker thread: each part, or why it is refused."""
        collection: Collection | ReloadRefused
        try:
            collection = load_collection(self._sources)
        except CountersFileError as exc:
            file = ("config_file" if isinstance(exc, ExporterConfigError)
                    else "configmap" if self._sources.config_map is not None else "counters")
            collection = ReloadRefused(file, str(exc))
        if self._live is None:
            return LoadedConfig(collection, None)
        security = self._live.reread()
        return LoadedConfig(collection, ReloadRefused("web_config", security)
                            if isinstance(security, str) else security)

    def _note_interval(self, wanted: int | None) -> None:
        """Once per new value: a changed collection.interval needs a restart."""
        if (self._interval_ms is None or wanted is None or wanted == self._interval_ms
                or wanted == self._interval_noted):
            return
        self._interval_noted = wanted
        log.warning("collection.interval is now %d ms; the running %d ms stays until a restart "
                    "(the interval sizes the sources' deadlines at start)", wanted,
                    self._interval_ms)

    def _refuse(self, trigger: str, refusals: tuple[ReloadRefused, ...],
                applied: list[str] | None = None) -> None:
        CONFIG.reload_ok = False
        for refused in refusals:
            CONFIG.failures[refused.file] += 1
            # Once per distinct error: a file that stays wrong is not logged on every SIGHUP.
            (log.error if str(refused) not in self._last_errors else log.debug)(
                "reload (%s) refused, keeping the running configuration: %s", trigger, refused)
        self._last_errors = frozenset(str(refused) for refused in refusals)
        if applied:
            log.info("configuration reloaded in part (%s): %s", trigger, ", ".join(applied))
