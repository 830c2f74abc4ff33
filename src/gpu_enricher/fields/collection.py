"""Where the counters, the collection interval and the watch groups come from, in
dcgm-exporter's precedence (issue 24): defaults, then `--config-file`, then every flag or
environment variable that is set.

The counters, first that applies:

1. `-f/--collectors` or its environment variable, as given;
2. the config file's `metrics` (`file:` or inline `fields:`);
3. `/etc/dcgm-exporter/default-counters.csv` when it exists: dcgm-exporter's own default `-f`,
   where its chart 4.8.3 (which passes no `-f`) mounts the user's `customMetrics`;
4. the bundled list of `--naming` (classic, or dcgm-exporter 4.9's names).

`load_collection` reads them (at start, and again at every reload: a file that appears,
changes or goes away is seen) and says which it took and why, for the INFO line at start.
Another source of counters (a ConfigMap through the API) is one more step in `_counters`.

`DCGM_IMAGE_DIR` paths: dcgm-exporter's image ships its counters in /etc/dcgm-exporter and
manifests name them there; `CountersSources.image_dir` is where that folder is here (the tests
map it into a temporary folder through `GPU_ENRICHER_DCGM_EXPORTER_DIR`). A named file of that
folder that is absent uses the bundled list with a warning, rather than crash-looping.
"""

import logging
from collections.abc import Mapping
from dataclasses import dataclass, field
from importlib import resources
from pathlib import Path, PurePosixPath
from typing import Final

from .counters import CounterLine, CountersFileError, load_counters, parse_counters
from .exporter_config import ExporterConfig, field_intervals, load_exporter_config

log = logging.getLogger(__name__)

DCGM_IMAGE_DIR: Final = Path("/etc/dcgm-exporter")
DEFAULT_COUNTERS_NAME: Final = "default-counters.csv"
NAMINGS: Final = ("classic", "4.9")
"""`--naming`: which bundled list is the default. classic: dcgm-exporter's names up to 4.8;
4.9: the same fields under dcgm-exporter 4.9's names (DCGM 4.7's, in base units)."""
_BUNDLED: Final = {"classic": "default-counters.csv", "4.9": "default-counters-4.9.csv"}


def default_counters_path(naming: str = "classic") -> Path:
    """The bundled list of `naming` (one of NAMINGS)."""
    return Path(str(resources.files(__package__).joinpath(_BUNDLED[naming])))


class ConfigMapError(CountersFileError):
    """-m's ConfigMap cannot be read at start: dcgm-exporter exits then, and so do we."""


@dataclass(frozen=True, slots=True)
class CountersSources:
    """What the command line and environment say about the counters."""

    collectors: Path | None = None  # -f or its variable; None: not set
    collectors_origin: str = ""  # which of them set it: `-f/--collectors`, `DCGM_EXPORTER_…`
    config_file: Path | None = None  # --config-file or its variable
    image_dir: Path = DCGM_IMAGE_DIR  # where dcgm-exporter's /etc/dcgm-exporter is
    config_map: tuple[str, str] | None = None
    """-m: (`NAMESPACE/NAME`, the text of its `metrics` key), read through the API by the
    caller (at start, then on each change the watch sees)."""
    naming: str = "classic"  # --naming: which bundled list stands in for a missing file

    @property
    def bundled(self) -> Path:
        return default_counters_path(self.naming)

    def local(self, path: Path) -> Path:
        """`path` with /etc/dcgm-exporter read from `image_dir`."""
        try:
            rest = PurePosixPath(path).relative_to(DCGM_IMAGE_DIR)
        except ValueError:
            return path
        return self.image_dir / rest


@dataclass(frozen=True, slots=True)
class Collection:
    """The counters in force, where they came from, and the config file's collection part."""

    counters: tuple[CounterLine, ...]
    origin: str  # "counters file X (why)", for the log
    watched: tuple[Path, ...]  # files whose change is a reload
    interval_ms: int | None = None  # the config file's collection.interval
    field_intervals_ms: Mapping[str, int] = field(default_factory=dict)
    config_map: tuple[str, str] | None = None  # -m: what it was read from (CountersSources)


def _image_file(sources: CountersSources, path: Path,
                named_by: str) -> tuple[Path, str, Path]:
    """A counters file named by a flag or the config file: the file to read, the words for
    the log, and the file to watch (the named one, also while it is absent)."""
    local = sources.local(path)
    if PurePosixPath(path).is_relative_to(DCGM_IMAGE_DIR) and not local.exists():
        log.warning("%s is a counters file of dcgm-exporter's image and is not here; using "
                    "gpu-enricher's bundled counters (mount your own file to keep yours)", path)
        return sources.bundled, f"{named_by} names {path}, which is absent", local
    return local, f"named by {named_by}", local


def _counters(sources: CountersSources, config: ExporterConfig | None
              ) -> tuple[tuple[CounterLine, ...], str, tuple[Path, ...]]:
    """The counters lines, the words for the log, and the counters files to watch. A source
    of counters is one more branch here, in its place in the precedence."""
    default = sources.image_dir / DEFAULT_COUNTERS_NAME
    if sources.config_map is not None:  # -m replaces -f, as in dcgm-exporter
        name, text = sources.config_map
        return (parse_counters(text, f"ConfigMap {name} key metrics"),
                f"the metrics key of ConfigMap {name} (-m)", ())
    if sources.collectors is not None:
        path, why, watch = _image_file(sources, sources.collectors, sources.collectors_origin)
    elif config is not None and config.metrics is not None:
        return config.metrics, f"the metrics.fields of {config.path}", ()
    elif config is not None and config.metrics_file is not None:
        path, why, watch = _image_file(sources, config.metrics_file,
                                       f"metrics.file of {config.path}")
    elif default.exists():
        path, why, watch = default, ("no -f given, and dcgm-exporter's default "
                                     f"{DCGM_IMAGE_DIR / DEFAULT_COUNTERS_NAME} exists"), default
    else:
        # Watched while absent: a customMetrics ConfigMap mounted after the start is a reload.
        path, why, watch = sources.bundled, (
            f"no -f given and no {DCGM_IMAGE_DIR / DEFAULT_COUNTERS_NAME}: the bundled "
            f"{sources.naming} list"), default
    return load_counters(path), f"counters file {path} ({why})", (watch,)


def load_collection(sources: CountersSources) -> Collection:
    """Read the config file and the counters. Raises CountersFileError (ExporterConfigError
    for the config file) with a one-line message."""
    config_path = None if sources.config_file is None else sources.local(sources.config_file)
    config = None if config_path is None else load_exporter_config(config_path)
    counters, origin, files = _counters(sources, config)
    watched = files if config_path is None else (config_path, *files)
    if config is None:
        return Collection(counters, origin, watched, config_map=sources.config_map)
    return Collection(counters, origin, watched, config.interval_ms,
                      field_intervals(config.watch_groups, counters), sources.config_map)
