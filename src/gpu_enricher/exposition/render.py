"""Metric families → exposition bytes, in dcgm-exporter's exact text format.

prometheus_client cannot print these families as dcgm-exporter does (it appends `_total` to
counters and prints `19762.0`), so this small renderer is ours. Pure: no I/O, no clock.
"""

import gzip
import math
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from typing import Final, NamedTuple

from ..model import FieldValue

TEXT_CONTENT_TYPE: Final = "text/plain; version=0.0.4; charset=utf-8"
OPENMETRICS_CONTENT_TYPE: Final = "application/openmetrics-text; version=1.0.0; charset=utf-8"
GZIP_LEVEL: Final = 6


class Sample(NamedTuple):
    """One series. A named tuple, immutable as the snapshot it is rendered from: a pass makes
    one per series (a full node some thousands), and a frozen dataclass's __init__ costs about
    three times as much (1.7 against 0.6 µs here)."""

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
    # Joined first, escaped only if the result shows a value needs it (label names never
    # do): a value with a backslash or newline, or more quotes than the pairs put there.
    # The usual case is then one join, not a check per value (issue 33).
    listed = pairs if isinstance(pairs, list | tuple) else list(pairs)
    text = ",".join([f'{name}="{value}"' for name, value in listed])
    if "\\" in text or "\n" in text or text.count('"') != 2 * len(listed):
        return ",".join(f'{name}="{escape_label_value(value)}"' for name, value in listed)
    return text


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


def sample_lines(family: Family) -> str:
    """A family's samples as exposition lines: the same in both formats."""
    name = family.name
    return "".join(f"{name}{s.suffix}{{{s.labels}}} {s.value}\n" if s.labels
                   else f"{name}{s.suffix} {s.value}\n" for s in family.samples)


def _text_header(family: Family) -> str:
    # Text format names the family after its samples (`x_total`), OpenMetrics does not.
    header = family.name
    if family.prom_type == "counter":
        header += family.samples[0].suffix
    return (f"# HELP {header} {_escape_help(family.help, False)}\n"
            f"# TYPE {header} {_text_type(family.prom_type)}\n")


def _openmetrics_header(family: Family) -> str:
    return (f"# TYPE {family.name} {_openmetrics_type(family)}\n"
            f"# HELP {family.name} {_escape_help(family.help, True)}\n")


class SampleLines:
    """Each family's sample lines, kept from one picture to the next: a family equal to the
    one of its name in the picture before is not rendered again (issue 33; an equality test of
    its samples costs a fraction of formatting them)."""

    __slots__ = ("_last",)

    def __init__(self) -> None:
        self._last: dict[str, tuple[Family, str]] = {}

    def of(self, families: Sequence[Family]) -> list[str]:
        last, kept = self._last, {}
        lines = []
        for family in families:
            hit = last.get(family.name)
            made = hit[1] if hit is not None and hit[0] == family else sample_lines(family)
            kept[family.name] = (family, made)
            lines.append(made)
        self._last = kept
        return lines


def render_text(families: Sequence[Family]) -> bytes:
    return "".join(_text_header(f) + sample_lines(f) for f in families if f.samples).encode()


def render_openmetrics(families: Sequence[Family], *, eof: bool = True) -> bytes:
    body = "".join(_openmetrics_header(f) + sample_lines(f) for f in families if f.samples)
    return (body + "# EOF\n" if eof else body).encode()


Variant = tuple[bool, bool]
"""(OpenMetrics, gzipped): one of the four bodies a scrape may be given."""


class Exposition:
    """One cycle's rendered output. Gzip variants are compressed off the event loop when the
    picture is painted, for the variants scrapers asked of the picture before (`asked`), or
    else once, on the first request."""

    __slots__ = ("_gzipped", "asked", "openmetrics", "text")

    def __init__(self, text: bytes, openmetrics: bytes) -> None:
        self.text = text
        self.openmetrics = openmetrics
        self._gzipped: dict[bool, bytes] = {}
        self.asked: set[Variant] = set()
        """The variants served from this picture: the next one prepares the same."""

    @classmethod
    def from_families(cls, families: Sequence[Family],
                      own: tuple[bytes, bytes] = (b"", b"# EOF\n"),
                      lines: SampleLines | None = None) -> "Exposition":
        """The DCGM families in our format, followed by `own` (text, OpenMetrics ending in
        `# EOF`), the exporter's own metrics in prometheus_client's format. `lines`: the
        sample lines kept from the picture before."""
        shown = [f for f in families if f.samples]
        samples = lines.of(shown) if lines is not None else [sample_lines(f) for f in shown]
        own_text, own_openmetrics = own
        text = "".join([x for f, made in zip(shown, samples, strict=True)
                        for x in (_text_header(f), made)]).encode()
        openmetrics = "".join([x for f, made in zip(shown, samples, strict=True)
                               for x in (_openmetrics_header(f), made)]).encode()
        return cls(text + own_text, openmetrics + own_openmetrics)

    def compress(self, variants: Iterable[Variant]) -> None:
        """Compress the gzip variants among `variants` now (the painter's thread: zlib lets
        the loop run meanwhile)."""
        for openmetrics, gzipped in variants:
            if gzipped:
                self._gzip(openmetrics)

    def _gzip(self, openmetrics: bool) -> bytes:
        cached = self._gzipped.get(openmetrics)
        if cached is None:
            plain = self.openmetrics if openmetrics else self.text
            # mtime=0: identical bodies compress to identical bytes (cache- and test-friendly).
            cached = gzip.compress(plain, compresslevel=GZIP_LEVEL, mtime=0)
            self._gzipped[openmetrics] = cached
        return cached

    def body(self, *, openmetrics: bool, gzipped: bool) -> bytes:
        self.asked.add((openmetrics, gzipped))
        if not gzipped:
            return self.openmetrics if openmetrics else self.text
        return self._gzip(openmetrics)
