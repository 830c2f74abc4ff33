"""Property tests of the counters parser: whatever the input, a CountersFileError naming the file
or lines whose help texts cannot break the exposition."""

from pathlib import Path

import pytest
from hypothesis import given
from hypothesis import strategies as st

from gpu_enricher.exposition.render import Family, Sample, render_openmetrics, render_text
from gpu_enricher.fields.counters import CountersFileError, load_counters, parse_counters

# Characters that end or bend lines somewhere (str.splitlines, CSV, the exposition), CSV syntax,
# and the bytes that are not UTF-8 on their own.
TRICKY = "\n\r\x00\x0b\x0c\x1c\x1d\x1e\x85\u2028\u2029\ufeff,\"#\\ \t"
FIELDS = ["DCGM_FI_DEV_GPU_TEMP", "DCGM_FI_DEV_SM_CLOCK", "DCGM_FI_DRIVER_VERSION",
          "dcgm_sm_clock", "DCGM_FI_NOPE", ""]
TYPES = ["gauge", "counter", "label", "histogram", "GAUGE", "nope", ""]

cells = st.text(alphabet=st.sampled_from(TRICKY) | st.characters(), max_size=12)
valid_line = st.tuples(st.sampled_from(FIELDS[:4]), st.sampled_from(TYPES[:4]), cells).map(
    lambda t: f"{t[0]}, {t[1]}, {t[2]}")
any_line = st.tuples(
    st.sampled_from(FIELDS) | cells, st.sampled_from(TYPES) | cells, cells,
    st.sampled_from(["", "\"", "# ", " "]),
).map(lambda t: f"{t[3]}{t[0]}, {t[1]}, {t[2]}")
# Mostly lines that parse, so that whole files do and their line numbers are checked.
csv_like_line = st.one_of(valid_line, valid_line, valid_line, any_line)
csv_like_text = st.lists(csv_like_line, max_size=8).flatmap(
    lambda lines: st.lists(st.sampled_from(["\n", "\r\n", "\r", "\u2028", "\x85"]),
                           min_size=len(lines), max_size=len(lines))
    .map(lambda ends: "".join(line + end for line, end in zip(lines, ends, strict=True))))


def _check(text: str, path: str) -> None:
    """parse_counters raises only CountersFileError, its message starting with the path; what
    it returns names real lines, and renders one exposition line per HELP, TYPE and sample."""
    try:
        lines = parse_counters(text, path)
    except CountersFileError as exc:
        assert str(exc).startswith(f"{path}:")
        assert "\n" not in str(exc)[len(path):] and "\r" not in str(exc)[len(path):]
        return
    physical = text.split("\n")
    for line in lines:
        assert line.field in physical[line.line_no - 1]
        assert "\n" not in line.help and "\r" not in line.help
        family = Family(line.field, "gauge", line.help, (Sample("", "1"),))
        assert render_text([family]).count(b"\n") == 3
        assert render_openmetrics([family], eof=False).count(b"\n") == 3


@given(st.text())
def test_any_text_parses_or_fails_with_a_counters_file_error(text: str) -> None:
    _check(text, "any.csv")


@given(csv_like_text)
def test_csv_like_text_parses_or_fails_with_a_counters_file_error(text: str) -> None:
    _check(text, "/etc/dcgm-exporter/default-counters.csv")


@pytest.fixture(scope="module")
def fuzz_dir(tmp_path_factory: pytest.TempPathFactory) -> Path:
    # Module-scoped: hypothesis runs many examples per call of a function-scoped fixture.
    return tmp_path_factory.mktemp("counters-fuzz")


@given(data=st.binary(max_size=200) | csv_like_text.map(lambda t: t.encode("utf-8", "replace"))
       | st.tuples(csv_like_text, st.binary(min_size=1, max_size=3), csv_like_text)
       .map(lambda t: t[0].encode("utf-8", "replace") + t[1] + t[2].encode("utf-8", "replace")))
def test_any_bytes_load_or_fail_with_a_counters_file_error(fuzz_dir: Path, data: bytes) -> None:
    path = fuzz_dir / "counters.csv"
    path.write_bytes(data)
    try:
        load_counters(path)
    except CountersFileError as exc:
        assert str(exc).startswith(f"{path}:")
        assert "\n" not in str(exc) and "\r" not in str(exc)
