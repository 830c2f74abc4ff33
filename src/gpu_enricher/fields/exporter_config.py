"""dcgm-exporter 4.8.3's `--config-file` (`DCGM_EXPORTER_CONFIG_FILE`; its chart's
`config.enabled` mounts `/etc/dcgm-exporter/config.yaml`), schema version 1:

    version: 1                       # required
    metrics:                         # exactly one of file and fields
      file: /etc/dcgm-exporter/default-counters.csv
      fields:                        # a counters CSV's lines as YAML
        - {name: DCGM_FI_DEV_GPU_UTIL, prometheusType: gauge, help: GPU utilization (in %).}
    collection:
      interval: 30s                  # a Go duration, whole milliseconds, > 0
      watchGroups:                   # fields read at their own interval
        - {name: ecc, interval: 5m, fields: ["DCGM_FI_DEV_ECC_*"]}

Strict as upstream's decoder: an unknown or duplicate key, a wrong type or a missing required
value is one line `FILE:LINE:COLUMN: key.path: problem`. The parse half is pure
(`parse_exporter_config` takes the text); `load_exporter_config` reads the file. Which field a
watch group takes is decided against the counters in force (`field_intervals`), since `-f`
may replace the file's metrics.
"""

import re
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Final

from ..files import FileReadError, YamlMap, YamlSeq, read_regular_file, utf8_text
from .counters import PROM_TYPES, CounterLine, CountersFileError, counter_line, value_field
from .go_syntax import glob_regex, parse_duration_ms

MAX_BYTES: Final = 1 << 20
SCHEMA_VERSION: Final = 1
MIN_INTERVAL_MS: Final = 100
"""The shortest collection interval, from the file as from -c: a pass every 100 ms is already
10 NVML passes a second."""
_TOP: Final = ("version", "metrics", "collection")
_METRICS: Final = ("file", "fields")
_FIELD: Final = ("name", "prometheusType", "help")
_COLLECTION: Final = ("interval", "watchGroups")
_GROUP: Final = ("name", "interval", "fields")


class ExporterConfigError(CountersFileError):
    """A config file that must stop the start (or a reload); one line naming file and key."""


@dataclass(frozen=True, slots=True)
class WatchGroup:
    name: str
    interval_ms: int
    patterns: tuple[tuple[str, "re.Pattern[str]", str], ...]  # (glob, its regex, where)
    where: str  # `FILE:LINE:COLUMN: collection.watchGroups[N]`


@dataclass(frozen=True, slots=True)
class ExporterConfig:
    path: str
    metrics_file: Path | None = None  # absolute, or relative to the config file's folder
    metrics: tuple[CounterLine, ...] | None = None  # inline `metrics.fields`
    interval_ms: int | None = None  # None: not set in the file
    watch_groups: tuple[WatchGroup, ...] = ()


class _At:
    """Where a value was written: `FILE:LINE:COLUMN: key.path`."""

    def __init__(self, path: str, key: str, mark: tuple[int, int]) -> None:
        self.path, self.key, self.mark = path, key, mark

    def __str__(self) -> str:
        head = f"{self.path}:{self.mark[0]}:{self.mark[1]}"
        return f"{head}: {self.key}" if self.key else head

    def error(self, problem: str) -> ExporterConfigError:
        return ExporterConfigError(f"{self}: {problem}")

    def child(self, name: str, mark: tuple[int, int]) -> "_At":
        if not (name.isprintable() and 0 < len(name) <= 64):  # a key of the file, for one line
            name = repr(name[:64])
        return _At(self.path, f"{self.key}.{name}" if self.key else name, mark)


def _kind(value: Any) -> str:
    names = {bool: "a boolean", int: "a number", float: "a number", str: "a string",
             YamlSeq: "a list", YamlMap: "a mapping", type(None): "nothing"}
    return names.get(type(value), type(value).__name__)


def _mapping(value: Any, at: _At, known: tuple[str, ...]) -> YamlMap:
    if not isinstance(value, YamlMap):
        raise at.error(f"expected a mapping, got {_kind(value)}")
    for name in value:
        if name not in known:
            raise at.child(name, value.marks[name][0]).error(
                f"unknown key (expected one of {', '.join(known)})")
    return value


def _get(spec: YamlMap, name: str, at: _At, kind: type, required: bool = False) -> Any:
    """spec[name] of `kind` (None when absent and not required), with `at` moved to it."""
    if name not in spec:
        if required:
            raise at.error(f"missing required key {name!r}")
        return None
    value = spec[name]
    where = at.child(name, spec.marks[name][1])
    if not isinstance(value, kind) or (kind is int and isinstance(value, bool)):
        expected = {str: "a string", int: "a whole number", YamlSeq: "a list",
                    YamlMap: "a mapping"}[kind]
        raise where.error(f"expected {expected}, got {_kind(value)}")
    return value


def _value_at(spec: YamlMap, name: str, at: _At) -> _At:
    return at.child(name, spec.marks[name][1])


def _duration(spec: YamlMap, name: str, at: _At, required: bool, minimum: int = 1) -> int | None:
    text = _get(spec, name, at, str, required)
    if text is None:
        return None
    ms = parse_duration_ms(text)
    if ms is None:
        raise _value_at(spec, name, at).error(
            f"{text[:40]!r} is not a positive Go duration of whole milliseconds (e.g. 30s, "
            "1m30s, 500ms)")
    if ms < minimum:
        raise _value_at(spec, name, at).error(f"{text} is below the minimum {minimum} ms")
    return ms


def _metrics(raw: Any, at: _At, path: str) -> tuple[Path | None, tuple[CounterLine, ...] | None]:
    spec = _mapping(raw, at, _METRICS)
    if ("file" in spec) == ("fields" in spec):
        raise at.error("set exactly one of file and fields")
    if "file" in spec:
        name = _get(spec, "file", at, str)
        if not name.strip():
            raise _value_at(spec, "file", at).error("an empty path")
        return Path(path).parent / name, None  # an absolute name replaces the folder
    items = _get(spec, "fields", at, YamlSeq)
    fields_at = _value_at(spec, "fields", at)
    if not items:
        raise fields_at.error("no fields: list at least one")
    lines: list[CounterLine] = []
    first: dict[str, str] = {}
    for n, item in enumerate(items):
        item_at = _At(path, f"{fields_at.key}[{n}]", items.marks[n])
        entry = _mapping(item, item_at, _FIELD)
        name, prom_type, help_text = (_get(entry, k, item_at, str, True) for k in _FIELD)
        name_at = _value_at(entry, "name", item_at)
        if name in first:
            raise name_at.error(f"{name} is already listed as {first[name]}")
        first[name] = f"{item_at.key} (line {items.marks[n][0]})"
        if prom_type.lower() not in PROM_TYPES:
            raise _value_at(entry, "prometheusType", item_at).error(
                f"unknown metric type {prom_type[:40]!r} (expected one of: "
                f"{', '.join(PROM_TYPES)})")
        if any(c in help_text for c in "\r\n"):  # would end the HELP line of the exposition
            raise _value_at(entry, "help", item_at).error("a line break in the help text")
        try:
            lines.append(counter_line(name, prom_type, help_text, path, items.marks[n][0],
                                      str(name_at)))
        except CountersFileError as exc:  # the field's name: the same words as in a CSV
            raise ExporterConfigError(str(exc)) from None
    return None, tuple(lines)


def _groups(raw: YamlSeq, at: _At) -> tuple[WatchGroup, ...]:
    groups: list[WatchGroup] = []
    names: dict[str, str] = {}
    for n, item in enumerate(raw):
        group_at = _At(at.path, f"{at.key}[{n}]", raw.marks[n])
        spec = _mapping(item, group_at, _GROUP)
        name = _get(spec, "name", group_at, str, True)
        if name in names:
            raise _value_at(spec, "name", group_at).error(
                f"watch group {name!r} is already defined at {names[name]}")
        names[name] = str(group_at)
        interval = _duration(spec, "interval", group_at, required=True)
        globs = _get(spec, "fields", group_at, YamlSeq, True)
        globs_at = _value_at(spec, "fields", group_at)
        if not globs:
            raise globs_at.error("no fields: list at least one field name or glob")
        patterns = []
        for k, glob in enumerate(globs):
            glob_at = _At(at.path, f"{globs_at.key}[{k}]", globs.marks[k])
            if not isinstance(glob, str):
                raise glob_at.error(f"expected a string, got {_kind(glob)}")
            regex = glob_regex(glob)
            if regex is None or not glob:
                raise glob_at.error(f"{glob[:40]!r} is not a valid glob (Go's path.Match)")
            patterns.append((glob, regex, str(glob_at)))
        assert interval is not None
        groups.append(WatchGroup(name, interval, tuple(patterns), str(group_at)))
    return tuple(groups)


def parse_exporter_config(text: str, path: str) -> ExporterConfig:
    """The file's text → ExporterConfig. Raises ExporterConfigError only."""
    from ..strict_yaml import PositionedLoader, decode_positioned  # a file given: YAML loaded

    class Loader(PositionedLoader):
        max_depth = 8  # the format nests 5 deep
        document = "dcgm-exporter's config file"

    raw = decode_positioned(text, path, Loader, ExporterConfigError)
    top_at = _At(path, "", (getattr(raw, "line", 1), getattr(raw, "column", 1)))
    if raw is None:
        raise top_at.error("empty: expected at least `version: 1`")
    top = _mapping(raw, top_at, _TOP)
    version = _get(top, "version", top_at, int, True)
    if version != SCHEMA_VERSION:
        raise _value_at(top, "version", top_at).error(
            f"schema version {version} is not supported (dcgm-exporter 4.8.3's is "
            f"{SCHEMA_VERSION})")
    metrics_file, metrics = (_metrics(top["metrics"], _value_at(top, "metrics", top_at), path)
                             if "metrics" in top else (None, None))
    interval: int | None = None
    groups: tuple[WatchGroup, ...] = ()
    if "collection" in top:
        collection_at = _value_at(top, "collection", top_at)
        collection = _mapping(top["collection"], collection_at, _COLLECTION)
        interval = _duration(collection, "interval", collection_at, required=False,
                             minimum=MIN_INTERVAL_MS)
        raw_groups = _get(collection, "watchGroups", collection_at, YamlSeq)
        if raw_groups is not None:
            groups = _groups(raw_groups, _value_at(collection, "watchGroups", collection_at))
    return ExporterConfig(path, metrics_file, metrics, interval, groups)


def load_exporter_config(path: Path) -> ExporterConfig:
    try:
        data = read_regular_file(path, MAX_BYTES, "config file")
    except FileReadError as exc:
        raise ExporterConfigError(str(exc)) from None
    return parse_exporter_config(utf8_text(data, str(path), ExporterConfigError), str(path))


def field_intervals(groups: Iterable[WatchGroup],
                    counters: Iterable[CounterLine]) -> Mapping[str, int]:
    """Each watched field's interval in ms, keyed by the field whose value it exports
    (counters.value_field). Upstream's rules: a field in two groups, or a group that matches
    no field of the counters in force, is an error."""
    names = [line.field for line in counters]
    owner: dict[str, str] = {}
    intervals: dict[str, int] = {}
    for group in groups:
        matched = False
        for glob, regex, where in group.patterns:
            for name in names:
                if not regex.fullmatch(name):
                    continue
                matched = True
                if owner.setdefault(name, group.name) != group.name:
                    raise ExporterConfigError(
                        f"{where}: {name} ({glob!r}) is already in watch group "
                        f"{owner[name]!r}: a field belongs to one group")
                field = value_field(name)
                if field is not None:
                    intervals[field] = min(intervals.get(field, group.interval_ms),
                                           group.interval_ms)
        if not matched:
            raise ExporterConfigError(
                f"{group.where}: watch group {group.name!r} matches none of the "
                f"{len(names)} counters in force")
    return intervals
