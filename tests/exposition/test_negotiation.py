"""Content negotiation of /metrics (RFC 9110 §12.4-12.5): which of the two formats and
whether gzip, from `Accept` and `Accept-Encoding`, q-values included."""

import pytest
from hypothesis import given
from hypothesis import strategies as st

from gpu_enricher.exposition.negotiation import wants_gzip, wants_openmetrics

OM = "application/openmetrics-text"
PROMETHEUS_2 = (f"{OM};version=1.0.0,{OM};version=0.0.1;q=0.75,"
                "text/plain;version=0.0.4;q=0.5,*/*;q=0.1")
PROMETHEUS_3 = (f"{OM};version=1.0.0;escaping=allow-utf-8;q=0.5,{OM};version=0.0.1;q=0.4,"
                "text/plain;version=1.0.0;escaping=allow-utf-8;q=0.3,"
                "text/plain;version=0.0.4;q=0.2,*/*;q=0.1")


@pytest.mark.parametrize(
    ("accept", "openmetrics"),
    [
        ("", False),
        ("*/*", False),  # anything goes: the text format, as always
        ("text/plain;version=0.0.4", False),
        (OM, True),
        (PROMETHEUS_2, True),
        (PROMETHEUS_3, True),
        (f"{OM};version=0.0.1", True),  # media type parameters other than q are ignored
        # Equal q: OpenMetrics when named, the preference before q-values were read.
        (f"text/plain, {OM}", True),
        (f"{OM}, text/plain", True),
        ("text/*, application/*", False),
        # q=0 is "not acceptable", never a choice.
        (f"{OM};q=0", False),
        (f"{OM};q=0.000", False),
        ("APPLICATION/OpenMetrics-Text;Q=0", False),
        (f"{OM} ; q=0", False),
        (f"{OM};q=0, */*", False),  # the most specific range wins over */*
        (f"*/*, {OM};q=0", False),
        # The highest q wins.
        (f"{OM};q=0.5, text/plain", False),
        (f"{OM};q=0.501, text/plain;q=0.5", True),
        (f"text/plain;q=0.9, {OM};q=0.5", False),
        ("text/*;q=0.5, application/*;q=0.4", False),
        ("application/*", True),
        ("text/plain;q=0, */*", True),  # text refused, anything else welcome
        (f"{OM};q=1.0", True),
        (f"{OM};q=1.000", True),
        (f"{OM};q=0., text/plain;q=0.", False),
        # Neither acceptable: the text format rather than a 406 (a failed scrape helps no one).
        (f"text/plain;q=0, {OM};q=0", False),
        ("application/json", False),
        # A malformed element is dropped as a whole: neither q=1 nor a refusal.
        (f"text/plain;q=0.5, {OM};q=2", False),
        (f"text/plain;q=0.5, {OM};q=1.0000", False),
        (f"text/plain;q=0.5, {OM};q=0.5000", False),
        (f"text/plain;q=0.5, {OM};q=-1", False),
        (f"text/plain;q=0.5, {OM};q=.9", False),
        (f"text/plain;q=0.5, {OM};q=abc", False),
        (f"text/plain;q=0.5, {OM};q=", False),
        (f'text/plain;q=0.5, {OM};q="1"', False),
        (f"text/plain;q=0.5, {OM};q=1;q=1", False),
        (f"text/plain;q=0.5, {OM};version", False),
        ("text/plain;q=0, */plain, openmetrics", False),
        # Commas and semicolons inside a quoted parameter value split nothing.
        (f'text/plain;foo="x,{OM},y"', False),
        (f'text/plain;foo="a\\",{OM}"', False),
        (f'text/plain;foo="unterminated,{OM}', False),
    ],
)
def test_accept(accept: str, openmetrics: bool) -> None:
    assert wants_openmetrics(accept) is openmetrics


@pytest.mark.parametrize(
    ("accept_encoding", "gzipped"),
    [
        ("", False),
        ("identity", False),
        ("gzip", True),
        ("gzip, deflate, br", True),
        ("x-gzip", True),  # RFC 9110 §8.4.1.3: the same coding
        ("GZip", True),
        ("gzip;level=9", True),  # parameters other than q are ignored
        ("gzip;q=0", False),
        ("gzip;Q=0.000", False),
        ("gzip ; q=0", False),
        ("gzip;q=0, *", False),
        ("*", False),  # anything goes: no coding, as always
        ("*;q=0", False),
        ("*, identity;q=0", True),
        ("gzip;q=0.5", True),  # identity not named: only the fallback
        ("gzip;q=0.5, identity", False),
        ("gzip, identity;q=0.5", True),
        ("gzip;q=0.5, identity;q=0.5", True),  # equal q: gzip when named
        ("*;q=0.5, identity", False),
        ("br, *;q=0.1", False),
        ("gzip;q=0, identity;q=0", False),
        # A malformed element is dropped as a whole: neither q=1 nor a refusal.
        ("gzip;q=2", False),
        ("gzip;q=0.0001", False),
        ("*, identity;q=bogus", False),
        ("identity;q=0.5, gzip;q=1.5", False),
    ],
)
def test_accept_encoding(accept_encoding: str, gzipped: bool) -> None:
    assert wants_gzip(accept_encoding) is gzipped


@given(st.text())
def test_any_text_negotiates_without_raising(header: str) -> None:
    assert wants_openmetrics(header) in (False, True)
    assert wants_gzip(header) in (False, True)


HEADER_ALPHABET = ' \t,;="\\/*.-qQ0123456789abcdefghiopstxzAGIOT'


@given(st.text(alphabet=HEADER_ALPHABET, max_size=80))
def test_header_like_text_negotiates_without_raising(header: str) -> None:
    assert wants_openmetrics(header) in (False, True)
    assert wants_gzip(header) in (False, True)


# RFC 9110 §12.4.2's qvalue, or none.
Q_VALUES = st.none() | st.from_regex(r"0(\.[0-9]{0,3})?|1(\.0{0,3})?", fullmatch=True)


def element(value: str, params: list[tuple[str, str]], q: str | None) -> str:
    parts = [value, *(f"{name}={v}" for name, v in params)]
    if q is not None:
        parts.append(f"q={q}")
    return ";".join(parts)


PARAMS = st.lists(st.tuples(st.sampled_from(["version", "charset", "escaping"]),
                            st.sampled_from(["1.0.0", "0.0.4", "utf-8", '"a,b;q=0"'])),
                  max_size=2)
MEDIA_RANGES = st.builds(
    element,
    st.sampled_from(["*/*", "text/*", "application/*", "text/plain", "text/html", OM,
                     "application/json"]),
    PARAMS, Q_VALUES)
CODINGS = st.builds(element, st.sampled_from(["*", "identity", "gzip", "x-gzip", "br",
                                              "deflate"]),
                    st.just([]), Q_VALUES)


@given(st.lists(MEDIA_RANGES, max_size=6))
def test_accept_ignores_order_case_and_whitespace(ranges: list[str]) -> None:
    chosen = wants_openmetrics(",".join(ranges))
    assert wants_openmetrics(" , ".join(reversed(ranges))) is chosen
    assert wants_openmetrics(",".join(ranges).upper()) is chosen


@given(st.lists(CODINGS, max_size=6))
def test_accept_encoding_ignores_order_case_and_whitespace(codings: list[str]) -> None:
    chosen = wants_gzip(",".join(codings))
    assert wants_gzip(" , ".join(reversed(codings))) is chosen
    assert wants_gzip(",".join(codings).upper()) is chosen


@given(st.lists(MEDIA_RANGES.filter(lambda r: not r.startswith(OM)), max_size=6))
def test_openmetrics_refused_by_name_is_never_chosen(ranges: list[str]) -> None:
    assert wants_openmetrics(",".join([*ranges, f"{OM};q=0"])) is False


@given(st.lists(CODINGS.filter(lambda c: not c.startswith(("gzip", "x-gzip"))), max_size=6))
def test_gzip_refused_by_name_is_never_chosen(codings: list[str]) -> None:
    assert wants_gzip(",".join([*codings, "gzip;q=0"])) is False
