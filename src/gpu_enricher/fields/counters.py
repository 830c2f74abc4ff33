"""dcgm-exporter's counters CSV (`-f/--collectors`): parsing and the plan built from it.

Syntax (dcgm-compat.md): `FIELD, type, help` per line, real CSV quoting, `#` comment lines,
blank lines. Lines end at "\n" (or "\r\n") only, as Go's encoding/csv reads them. Parsing is pure:
`parse_counters(text, path)`; only `load_counters` reads a file: a regular file of at most 1 MiB.

A line names its series, as in dcgm-exporter: `FIELD` is the family name exported, whichever
of a field's spellings it is (DCGM 4.6's name, its deprecated alias, or a DCGM 1.x legacy name
such as `dcgm_sm_clock`), and the value is that DCGM field's (`value_field`).
"""

import csv
from collections.abc import Collection, Iterable, Mapping
from dataclasses import dataclass
from pathlib import Path
from types import MappingProxyType
from typing import Final

from ..files import FileReadError, read_regular_file
from .catalog import DCGM_FIELD_IDS, is_known_field
from .legacy_names import LEGACY_FIELDS
from .namings import BY_CURRENT, Scale
from .spec import ValueFormat
from .table import IMPLEMENTED

PROM_TYPES: Final = ("gauge", "counter", "histogram", "summary", "label")
# dcgm-exporter's counters files are a few KiB; the limit keeps `-f /dev/zero`-like mistakes
# (or a huge file) from eating memory at startup.
MAX_COUNTERS_BYTES: Final = 1 << 20
# How much of a line or a value an error message quotes.
EXCERPT_CHARS: Final = 80


class CountersFileError(ValueError):
    """A counters file that must stop startup; the message names file and line."""


@dataclass(frozen=True, slots=True)
class CounterLine:
    field: str
    prom_type: str
    help: str
    path: str
    line_no: int

    @property
    def where(self) -> str:
        return f"{self.path}:{self.line_no}"


@dataclass(frozen=True, slots=True)
class MetricField:
    name: str  # the family name: the counters line's FIELD as written
    prom_type: str
    help: str
    field: str  # the implemented field whose value it carries (`value_field(name)`)


@dataclass(frozen=True, slots=True)
class CounterPlan:
    """What each pass samples and each render prints."""

    metrics: tuple[MetricField, ...]
    labels: tuple[tuple[str, str], ...]
    """(label name: a `label` line's FIELD as written, the implemented field whose value it
    carries), sorted by name: dcgm-exporter's label order. 4.9's `DCGM_FI_SYSTEM_DRIVER_VERSION`
    carries the value of `DCGM_FI_DRIVER_VERSION`, the same DCGM field."""

    @property
    def label_fields(self) -> tuple[str, ...]:
        return tuple(name for name, _ in self.labels)

    @property
    def sampled_fields(self) -> frozenset[str]:
        return (frozenset(m.field for m in self.metrics)
                | frozenset(field for _, field in self.labels))


def _implemented_by_id() -> Mapping[int, str]:
    by_id: dict[int, str] = {}
    for name in IMPLEMENTED:
        field_id = DCGM_FIELD_IDS.get(name)
        if field_id is not None:
            by_id.setdefault(field_id, name)
    return MappingProxyType(by_id)


_IMPLEMENTED_BY_ID: Final = _implemented_by_id()


def value_field(name: str) -> str | None:
    """The implemented field whose value a counters line naming `name` exports: the field
    itself; the field a DCGM 1.x legacy name stands for; or the implemented spelling of the same
    DCGM field id (DCGM 4.6 renamed many fields and keeps the old names as aliases, and
    dcgm-exporter resolves either to the id). None when no spelling of it is implemented."""
    field = LEGACY_FIELDS.get(name, name)
    if field in IMPLEMENTED:
        return field
    field_id = DCGM_FIELD_IDS.get(field)
    return None if field_id is None else _IMPLEMENTED_BY_ID.get(field_id)


def _named(name: str) -> str:
    """A line's FIELD for a message; a legacy name says which field it stands for."""
    legacy = LEGACY_FIELDS.get(name)
    return name if legacy is None else f"{name} (DCGM 1.x name of {legacy})"


def _excerpt(text: str) -> str:
    """`text` quoted for a one-line message: repr escapes control characters and line
    separators; a long one is cut, so that a runaway line cannot flood the log."""
    if len(text) <= EXCERPT_CHARS:
        return repr(text)
    return f"{text[:EXCERPT_CHARS]!r}…"


def _unclosed_quote(line: str) -> int | None:
    """The 1-based column of the quote that opens a field and is never closed on `line` (CSV
    as csv.reader(skipinitialspace=True) reads it: a field that starts with `"`, `""` inside it
    a quote); None when every quoted field closes."""
    opened: int | None = None
    at_field_start = True
    i = 0
    while i < len(line):
        char = line[i]
        if opened is not None:
            if char == '"' and line[i + 1:i + 2] == '"':
                i += 1
            elif char == '"':
                opened = None
        elif char == ",":
            at_field_start = True
        elif at_field_start and char == '"':
            opened, at_field_start = i + 1, False
        elif char != " ":
            at_field_start = False
        i += 1
    return opened


def counter_line(field: str, prom_type: str, help_text: str, path: str, line_no: int,
                 where: str) -> CounterLine:
    """One counters line checked (a CSV line, or an inline field of dcgm-exporter's config
    file); errors start with `where`."""
    if not field:
        raise CountersFileError(f"{where}: empty field name")
    if prom_type.lower() not in PROM_TYPES:
        raise CountersFileError(
            f"{where}: unknown metric type {_excerpt(prom_type)} for {_excerpt(field)} "
            f"(expected one of: {', '.join(PROM_TYPES)})"
        )
    if not is_known_field(field) and field not in LEGACY_FIELDS:
        raise CountersFileError(
            f"{where}: unknown field {_excerpt(field)}: not a DCGM_FI_* or DCGM_EXP_* field "
            "nor a DCGM 1.x name (dcgm_sm_clock, …) that dcgm-exporter knows"
        )
    rename = BY_CURRENT.get(field)
    if rename is not None and prom_type.lower() not in (rename.prom_type, "label"):
        # A DCGM 4.7 name says what it is (…_TOTAL a counter, a ratio or a unit a gauge, the
        # driver version a text): a line that contradicts it would mistype the series.
        unit = "" if rename.scale is Scale.SAME else f", {rename.scale.value}"
        raise CountersFileError(
            f"{where}: {field} is a {rename.prom_type} ({rename.since}'s name of "
            f"{rename.classic}{unit}), not a {_excerpt(prom_type)}: write "
            f"'{field}, {rename.prom_type}, <help>'"
        )
    return CounterLine(field, prom_type.lower(), help_text, path, line_no)


def parse_counters(text: str, path: str) -> tuple[CounterLine, ...]:
    """Parse a counters file; raise CountersFileError naming `path:line` on the first error."""
    lines: list[CounterLine] = []
    # Only "\n" ends a line: str.splitlines also breaks at U+2028, \x0b, \x1c, … which would
    # smuggle a second line out of a help text and shift every later line number.
    for line_no, raw in enumerate(text.split("\n"), start=1):
        stripped = raw.strip()  # also drops the "\r" of "\r\n"
        if not stripped or stripped.startswith("#"):
            continue
        where = f"{path}:{line_no}"
        if not stripped.isascii():
            try:
                stripped.encode("utf-8")
            except UnicodeEncodeError as exc:
                # A lone surrogate (text not from load_counters) would fail every scrape's encode.
                raise CountersFileError(
                    f"{where}: not UTF-8 text: {exc.reason}: {_excerpt(stripped)}"
                ) from None
        if "\r" in stripped:
            # A carriage return would end the HELP line in the exposition; Python's csv would
            # also take it for a line end.
            raise CountersFileError(
                f"{where}: a carriage return (\\r) inside a line: {_excerpt(stripped)} "
                "(lines end with \\n or \\r\\n)"
            )
        try:
            records = list(csv.reader([stripped], skipinitialspace=True, strict=True))
        except csv.Error as exc:
            column = _unclosed_quote(stripped)
            if column is not None:  # issue 26: name where the field began, not the line's end
                indent = len(raw) - len(raw.lstrip())
                raise CountersFileError(
                    f"{where}: malformed CSV: the quote at column {indent + column} is not "
                    "closed on its line (a field cannot span lines; a quote inside a quoted "
                    f'help text is doubled, ""): {_excerpt(stripped)}'
                ) from None
            raise CountersFileError(
                f"{where}: malformed CSV ({exc}): {_excerpt(stripped)}"
            ) from None
        cells = [cell.strip() for cell in records[0]] if records else []
        if len(cells) != 3:
            raise CountersFileError(
                f"{where}: expected 3 comma-separated values 'FIELD, type, help', "
                f"got {len(cells)}: {_excerpt(stripped)} "
                "(quote a help text that contains a comma)"
            )
        field, prom_type, help_text = cells
        lines.append(counter_line(field, prom_type, help_text, path, line_no, where))
    if not lines:
        # Exporting nothing is never what was meant: a wrong mount or an empty ConfigMap.
        raise CountersFileError(
            f"{path}: no fields: every line is blank or a comment (expected 'FIELD, type, help' "
            "lines, e.g. 'DCGM_FI_DEV_GPU_UTIL, gauge, GPU utilization (in %).')"
        )
    return tuple(lines)


def read_counters_bytes(path: Path) -> bytes:
    """The file's bytes: a regular file of at most MAX_COUNTERS_BYTES, read without blocking."""
    try:
        return read_regular_file(path, MAX_COUNTERS_BYTES, "counters file")
    except FileReadError as exc:
        raise CountersFileError(str(exc)) from None


def decode_counters(data: bytes, path: str) -> str:
    """UTF-8 text, or an error naming the line and column of the first byte that is not."""
    try:
        return data.decode("utf-8")
    except UnicodeDecodeError as exc:
        line_start = data.rfind(b"\n", 0, exc.start) + 1
        line_no = data.count(b"\n", 0, exc.start) + 1
        column = exc.start - line_start + 1
        raise CountersFileError(
            f"{path}:{line_no}: not UTF-8 text: byte 0x{data[exc.start]:02x} at column "
            f"{column} ({exc.reason}); save the file as UTF-8"
        ) from None


def load_counters(path: Path) -> tuple[CounterLine, ...]:
    return parse_counters(decode_counters(read_counters_bytes(path), str(path)), str(path))


def plan_counters(
    lines: Iterable[CounterLine], deliverable: Collection[str], backend_name: str
) -> tuple[CounterPlan, tuple[str, ...]]:
    """Keep the lines this backend can deliver; return the plan and one warning per skip."""
    warnings: list[str] = []
    metrics: list[MetricField] = []
    labels: dict[str, str] = {}
    seen: dict[str, str] = {}
    for line in lines:
        field = value_field(line.field)
        named = _named(line.field)
        if line.field in seen:
            warnings.append(
                f"{line.where}: {line.field} already listed at {seen[line.field]}; skipped"
            )
            continue
        if field is None:
            warnings.append(
                f"{line.where}: {named} is a dcgm-exporter field that gpu-enricher does "
                "not implement yet; skipped"
            )
        elif field not in deliverable:
            warnings.append(
                f"{line.where}: {named} cannot be delivered by the {backend_name} backend "
                "on this host; skipped"
            )
        elif line.prom_type == "label":
            # Named as the line writes it (4.9's DCGM_FI_SYSTEM_DRIVER_VERSION), the value of
            # the field it resolves to, as dcgm-exporter names a label after its counters line.
            labels[line.field] = field
            seen[line.field] = line.where
        elif IMPLEMENTED[field].fmt is ValueFormat.TEXT:
            warnings.append(
                f"{line.where}: {named} is text and can only be a 'label' field, "
                f"not {line.prom_type!r}; skipped"
            )
        else:
            metrics.append(MetricField(line.field, line.prom_type, line.help, field))
            seen[line.field] = line.where
    return CounterPlan(tuple(metrics), tuple(sorted(labels.items()))), tuple(warnings)
