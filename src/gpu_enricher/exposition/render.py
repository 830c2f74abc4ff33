"""Metric families → exposition bytes, in dcgm-exporter's exact text format.

prometheus_client cannot print these families as dcgm-exporter does (it appends `_total` to
counters and prints `19762.0`), so this small renderer is ours. Pure: no I/O, no clock.
"""

import gzip
import math
import re
from collections.abc import Iterable, Iterator, Sequence
from dataclasses import dataclass
from functools import lru_cache
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


# -- content negotiation (RFC 9110 §12.4, §12.5) --------------------------------------------
# Two formats and two codings to choose from, so no general negotiation library: the most
# specific element naming a variant gives its q (equally specific ones: the highest q), q=0
# means "not acceptable", the highest q wins, and a tie goes to the variant the header names
# explicitly (OpenMetrics, gzip), as before q-values were read. A malformed element (a q that
# is not RFC 9110's qvalue, a parameter without a value, a value that is not a token) is
# dropped as a whole rather than read as q=1 or as a refusal: it can then neither select a
# variant nor refuse one, and a header of nothing but such elements gets the defaults, the
# text format without gzip, which every client reads. Parameters other than q are ignored:
# there is one OpenMetrics and one text version to give.

_TOKEN: Final = re.compile(r"[-!#$%&'*+.^_`|~0-9A-Za-z]+")
_QUOTED: Final = re.compile(r'"(?:[^"\\]|\\.)*"')
_QVALUE: Final = re.compile(r"0(?:\.[0-9]{0,3})?|1(?:\.0{0,3})?")
_OWS: Final = " \t"
_OPENMETRICS_RANGE: Final = ("application", "openmetrics-text")
_TEXT_RANGE: Final = ("text", "plain")
_NEGOTIATION_CACHE: Final = 16
"""Distinct header values remembered: a scraper sends the same ones every time."""


def _split(text: str, separator: str) -> list[str]:
    """`text` split at `separator`, except inside quoted strings."""
    if '"' not in text:
        return text.split(separator)
    parts: list[str] = []
    start, quoted, escaped = 0, False, False
    for i, char in enumerate(text):
        if escaped:
            escaped = False
        elif quoted:
            escaped = char == "\\"
            quoted = char != '"'
        elif char == '"':
            quoted = True
        elif char == separator:
            parts.append(text[start:i])
            start = i + 1
    parts.append(text[start:])
    return parts


def _weighted(header: str) -> Iterator[tuple[str, float]]:
    """(lower-case value, q) of each well-formed element of a comma-separated list."""
    for element in _split(header, ","):
        value, *params = _split(element, ";")
        value = value.strip(_OWS).lower()
        if not value:
            continue  # an empty list element is allowed, and nothing
        q: float | None = None
        for param in params:
            name, equals, param_value = param.partition("=")
            name, param_value = name.strip(_OWS).lower(), param_value.strip(_OWS)
            if not equals or _TOKEN.fullmatch(name) is None:
                break
            if name == "q":
                if q is not None or _QVALUE.fullmatch(param_value) is None:
                    break
                q = float(param_value)
            elif (_TOKEN.fullmatch(param_value) is None
                  and _QUOTED.fullmatch(param_value) is None):
                break
        else:
            yield value, 1.0 if q is None else q


def _media_q(ranges: Sequence[tuple[str, str, float]],
             wanted: tuple[str, str]) -> tuple[float, bool]:
    """(q, whether named exactly) of a media type: from its most specific ranges, 0 if none."""
    best_q, best_rank = 0.0, -1
    for type_, subtype, q in ranges:
        if (type_, subtype) == wanted:
            rank = 2
        elif type_ == wanted[0] and subtype == "*":
            rank = 1
        elif type_ == subtype == "*":
            rank = 0
        else:
            continue
        if rank > best_rank:
            best_q, best_rank = q, rank
        elif rank == best_rank:
            best_q = max(best_q, q)
    return best_q, best_rank == 2


@lru_cache(maxsize=_NEGOTIATION_CACHE)
def wants_openmetrics(accept: str) -> bool:
    """Whether `Accept` selects OpenMetrics over the text format (the default)."""
    ranges: list[tuple[str, str, float]] = []
    for value, q in _weighted(accept):
        type_, slash, subtype = value.partition("/")
        if (slash and _TOKEN.fullmatch(type_) and _TOKEN.fullmatch(subtype)
                and (type_ != "*" or subtype == "*")):
            ranges.append((type_, subtype, q))
    om, named = _media_q(ranges, _OPENMETRICS_RANGE)
    text, _ = _media_q(ranges, _TEXT_RANGE)
    return om > 0 and (om > text or (om == text and named))


@lru_cache(maxsize=_NEGOTIATION_CACHE)
def wants_gzip(accept_encoding: str) -> bool:
    """Whether `Accept-Encoding` selects gzip over no coding (the default). Identity not named
    (itself or by `*`) is only the fallback, whatever the q of gzip."""
    weights: dict[str, float] = {}
    for coding, q in _weighted(accept_encoding):
        if _TOKEN.fullmatch(coding):
            coding = "gzip" if coding == "x-gzip" else coding  # RFC 9110 §8.4.1.3
            weights[coding] = max(weights.get(coding, 0.0), q)
    star = weights.get("*")
    gzip_q = weights.get("gzip", 0.0 if star is None else star)
    identity = weights.get("identity", star)
    return gzip_q > 0 and (identity is None or gzip_q > identity
                           or (gzip_q == identity and "gzip" in weights))
