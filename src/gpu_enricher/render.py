"""Metric families → exposition bytes, in dcgm-exporter's exact text format.

prometheus_client cannot print these families as dcgm-exporter does (it appends `_total` to
counters and prints `19762.0`), so this small renderer is ours. Pure: no I/O, no clock.
"""

import gzip
import math
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from typing import Final

from .model import FieldValue

TEXT_CONTENT_TYPE: Final = "text/plain; version=0.0.4; charset=utf-8"
OPENMETRICS_CONTENT_TYPE: Final = "application/openmetrics-text; version=1.0.0; charset=utf-8"
GZIP_LEVEL: Final = 6


@dataclass(frozen=True, slots=True)
class Sample:
    labels: str
    """Pre-rendered label pairs without braces, `gpu="0",UUID="GPU-…"`; may be empty."""
    value: str
    suffix: str = ""
    """Appended to the family name for this sample (`_total` of a self-metric counter)."""


@dataclass(frozen=True, slots=True)
class Family:
    name: str
    prom_type: str  # gauge, counter, histogram, summary, untyped
    help: str
    samples: tuple[Sample, ...]


def escape_label_value(value: str) -> str:
    if "\\" in value or '"' in value or "\n" in value:
        value = value.replace("\\", "\\\\").replace('"', '\\"').replace("\n", "\\n")
    return value


def label_pairs(pairs: Iterable[tuple[str, str]]) -> str:
    return ",".join(f'{name}="{escape_label_value(value)}"' for name, value in pairs)


def format_value(value: FieldValue) -> str:
    """Integers plain, floats with six decimals (dcgm-exporter's `%f`)."""
    if isinstance(value, bool):
        return "1" if value else "0"
    if isinstance(value, int):
        return str(value)
    if isinstance(value, float):
        if math.isnan(value):
            return "NaN"
        if math.isinf(value):
            return "+Inf" if value > 0 else "-Inf"
        return f"{value:.6f}"
    raise TypeError(f"not a numeric sample value: {value!r}")


def _escape_help(text: str, openmetrics: bool) -> str:
    text = text.replace("\\", "\\\\").replace("\n", "\\n")
    return text.replace('"', '\\"') if openmetrics else text


def _text_type(prom_type: str) -> str:
    # A histogram or summary from a counters file is a single value, not buckets or
    # quantiles; typing it so would make the exposition invalid, so it is untyped.
    return prom_type if prom_type in ("gauge", "counter") else "untyped"


def _openmetrics_type(family: Family) -> str:
    if family.prom_type == "gauge":
        return "gauge"
    # OpenMetrics counters must be named `<family>_total`; exact DCGM names win, so a DCGM
    # counter (no `_total`) is `unknown`. Our own counters carry the suffix per sample.
    if family.prom_type == "counter" and all(s.suffix == "_total" for s in family.samples):
        return "counter"
    return "unknown"


def _append_samples(out: list[str], family: Family) -> None:
    name = family.name
    for s in family.samples:
        labels = f"{{{s.labels}}}" if s.labels else ""
        out.append(f"{name}{s.suffix}{labels} {s.value}\n")


def render_text(families: Sequence[Family]) -> bytes:
    out: list[str] = []
    for family in families:
        if not family.samples:
            continue
        # Text format names the family after its samples (`x_total`), OpenMetrics does not.
        header = family.name
        if family.prom_type == "counter":
            header += family.samples[0].suffix
        out.append(f"# HELP {header} {_escape_help(family.help, False)}\n")
        out.append(f"# TYPE {header} {_text_type(family.prom_type)}\n")
        _append_samples(out, family)
    return "".join(out).encode()


def render_openmetrics(families: Sequence[Family], *, eof: bool = True) -> bytes:
    out: list[str] = []
    for family in families:
        if not family.samples:
            continue
        out.append(f"# TYPE {family.name} {_openmetrics_type(family)}\n")
        out.append(f"# HELP {family.name} {_escape_help(family.help, True)}\n")
        _append_samples(out, family)
    if eof:
        out.append("# EOF\n")
    return "".join(out).encode()


class Exposition:
    """One cycle's rendered output; gzip variants are compressed once, on first request."""

    __slots__ = ("_gzipped", "openmetrics", "text")

    def __init__(self, text: bytes, openmetrics: bytes) -> None:
        self.text = text
        self.openmetrics = openmetrics
        self._gzipped: dict[bool, bytes] = {}

    @classmethod
    def from_families(cls, families: Sequence[Family],
                      own: tuple[bytes, bytes] = (b"", b"# EOF\n")) -> "Exposition":
        """The DCGM families in our format, followed by `own` (text, OpenMetrics ending in
        `# EOF`), the exporter's own metrics as prometheus_client renders them."""
        own_text, own_openmetrics = own
        return cls(render_text(families) + own_text,
                   render_openmetrics(families, eof=False) + own_openmetrics)

    def body(self, *, openmetrics: bool, gzipped: bool) -> bytes:
        plain = self.openmetrics if openmetrics else self.text
        if not gzipped:
            return plain
        cached = self._gzipped.get(openmetrics)
        if cached is None:
            # mtime=0: identical bodies compress to identical bytes (cache- and test-friendly).
            cached = gzip.compress(plain, compresslevel=GZIP_LEVEL, mtime=0)
            self._gzipped[openmetrics] = cached
        return cached
