"""Content negotiation (RFC 9110 §12.4, §12.5): which of the two formats and the two codings
a scrape's `Accept` and `Accept-Encoding` select. Pure; each distinct header value is worked out
once (a scraper sends the same ones every time)."""

import re
from collections.abc import Iterator, Sequence
from functools import lru_cache
from typing import Final

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
