"""dcgm-exporter 4.8.3's `--config-file`, the parse half: what schema v1 says, and every way a
file can be wrong as one line `FILE:LINE:COLUMN: key.path: problem`."""

import re
from pathlib import Path

import pytest
from hypothesis import given
from hypothesis import strategies as st

from gpu_enricher.fields.counters import CounterLine
from gpu_enricher.fields.exporter_config import (
    ExporterConfigError,
    field_intervals,
    load_exporter_config,
    parse_exporter_config,
)
from gpu_enricher.fields.go_syntax import glob_regex, parse_duration_ms

PATH = "/etc/dcgm-exporter/config.yaml"

FULL = """\
version: 1
metrics:
  fields:
    - name: DCGM_FI_DEV_GPU_UTIL
      prometheusType: gauge
      help: GPU utilization (in %).
    - name: DCGM_FI_DEV_ECC_DBE_VOL_TOTAL
      prometheusType: counter
      help: Total number of double-bit volatile ECC errors.
    - {name: DCGM_FI_DEV_ECC_SBE_VOL_TOTAL, prometheusType: counter, help: Single-bit.}
collection:
  interval: 10s
  watchGroups:
    - name: ecc
      interval: 1m
      fields: ["DCGM_FI_DEV_ECC_*"]
"""


def line(name: str) -> CounterLine:
    return CounterLine(name, "gauge", "", "x.csv", 1)


def test_a_whole_file_is_read_as_upstream_reads_it() -> None:
    config = parse_exporter_config(FULL, PATH)
    assert [(m.field, m.prom_type, m.help, m.line_no) for m in config.metrics or ()] == [
        ("DCGM_FI_DEV_GPU_UTIL", "gauge", "GPU utilization (in %).", 4),
        ("DCGM_FI_DEV_ECC_DBE_VOL_TOTAL", "counter",
         "Total number of double-bit volatile ECC errors.", 7),
        ("DCGM_FI_DEV_ECC_SBE_VOL_TOTAL", "counter", "Single-bit.", 10)]
    assert config.metrics_file is None and config.interval_ms == 10_000
    (group,) = config.watch_groups
    assert (group.name, group.interval_ms) == ("ecc", 60_000)
    assert field_intervals(config.watch_groups, config.metrics or ()) == {
        "DCGM_FI_DEV_ECC_DBE_VOL_TOTAL": 60_000, "DCGM_FI_DEV_ECC_SBE_VOL_TOTAL": 60_000}


def test_metrics_file_is_absolute_or_next_to_the_config_file() -> None:
    config = parse_exporter_config("version: 1\nmetrics: {file: my.csv}\n", PATH)
    assert config.metrics_file == Path("/etc/dcgm-exporter/my.csv") and config.metrics is None
    config = parse_exporter_config("version: 1\nmetrics:\n  file: /data/c.csv\n", PATH)
    assert config.metrics_file == Path("/data/c.csv")
    bare = parse_exporter_config("version: 1\n", PATH)
    assert (bare.metrics, bare.metrics_file, bare.interval_ms, bare.watch_groups) == (
        None, None, None, ())


@pytest.mark.parametrize(("text", "message"), [
    ("", ":1:1: empty: expected at least `version: 1`"),
    ("- 1\n", ":1:1: expected a mapping, got a list"),
    ("metrics: {file: a.csv}\n", ":1:1: missing required key 'version'"),
    ('version: 1\n"a\\nb": 1\n', ":2:1: 'a\\nb': unknown key"),
    ("version: 1\nmetric: {}\n",
     ":2:1: metric: unknown key (expected one of version, metrics, collection)"),
    ("version: '1'\n", ":1:10: version: expected a whole number, got a string"),
    ("version: true\n", ":1:10: version: expected a whole number, got a boolean"),
    ("version: 2\n",
     ":1:10: version: schema version 2 is not supported (dcgm-exporter 4.8.3's is 1)"),
    ("version: 1\nversion: 1\n", ":2:1: invalid YAML: duplicate key 'version' (first on line 1)"),
    ("version: 1\nmetrics: [a]\n", ":2:10: metrics: expected a mapping, got a list"),
    ("version: 1\nmetrics: {}\n", ":2:10: metrics: set exactly one of file and fields"),
    ("version: 1\nmetrics:\n  file: a.csv\n  fields: []\n",
     ":3:3: metrics: set exactly one of file and fields"),
    ("version: 1\nmetrics:\n  file: 3\n", ":3:9: metrics.file: expected a string, got a number"),
    ("version: 1\nmetrics:\n  files: a.csv\n",
     ":3:3: metrics.files: unknown key (expected one of file, fields)"),
    ("version: 1\nmetrics:\n  fields: []\n", ":3:11: metrics.fields: no fields: list at least one"),
    ("version: 1\nmetrics:\n  fields:\n    - name: DCGM_FI_DEV_GPU_UTIL\n      help: x\n",
     ":4:7: metrics.fields[0]: missing required key 'prometheusType'"),
    ("version: 1\nmetrics:\n  fields:\n    - {name: DCGM_FI_DEV_GPU_UTIL, prometheusType: gage,"
     " help: x}\n", ":4:52: metrics.fields[0].prometheusType: unknown metric type 'gage'"),
    ("version: 1\nmetrics:\n  fields:\n    - {name: DCGM_FI_NOPE, prometheusType: gauge, help: x}"
     "\n", ":4:14: metrics.fields[0].name: unknown field 'DCGM_FI_NOPE'"),
    # A DCGM 4.7 name typed against its grammar, as in a counters file (issue 31).
    ("version: 1\nmetrics:\n  fields:\n    - {name: DCGM_FI_DEV_GPU_ENERGY_JOULES_TOTAL, "
     "prometheusType: gauge, help: x}\n", ":4:14: metrics.fields[0].name: "
     "DCGM_FI_DEV_GPU_ENERGY_JOULES_TOTAL is a counter (DCGM 4.6.1's name of "
     "DCGM_FI_DEV_TOTAL_ENERGY_CONSUMPTION, mJ → whole J), not a 'gauge'"),
    ("version: 1\nmetrics:\n  fields:\n"
     "    - {name: DCGM_FI_DEV_GPU_UTIL, prometheusType: gauge, help: a}\n"
     "    - {name: DCGM_FI_DEV_GPU_UTIL, prometheusType: gauge, help: b}\n",
     ":5:14: metrics.fields[1].name: DCGM_FI_DEV_GPU_UTIL is already listed as "
     "metrics.fields[0] (line 4)"),
    ("version: 1\nmetrics:\n  fields:\n    - {name: DCGM_FI_DEV_GPU_UTIL, prometheusType: gauge,"
     " help: x, unit: '%'}\n", ":4:68: metrics.fields[0].unit: unknown key"),
    ("version: 1\nmetrics:\n  fields:\n    - name: DCGM_FI_DEV_GPU_UTIL\n      prometheusType: "
     "gauge\n      help: \"two\\nlines\"\n", ":6:13: metrics.fields[0].help: a line break"),
    ("version: 1\ncollection: 5s\n", ":2:13: collection: expected a mapping, got a string"),
    ("version: 1\ncollection:\n  interval: 30000\n",
     ":3:13: collection.interval: expected a string, got a number"),
    ("version: 1\ncollection:\n  interval: 1.5ms\n",
     ":3:13: collection.interval: '1.5ms' is not a positive Go duration of whole milliseconds"),
    ("version: 1\ncollection:\n  interval: 0s\n", ":3:13: collection.interval: '0s' is not"),
    ("version: 1\ncollection:\n  interval: 50ms\n",
     ":3:13: collection.interval: 50ms is below the minimum 100 ms"),
    ("version: 1\ncollection:\n  intervall: 5s\n",
     ":3:3: collection.intervall: unknown key (expected one of interval, watchGroups)"),
    ("version: 1\ncollection:\n  watchGroups: {a: 1}\n",
     ":3:16: collection.watchGroups: expected a list, got a mapping"),
    ("version: 1\ncollection:\n  watchGroups:\n    - name: a\n      fields: [x]\n",
     ":4:7: collection.watchGroups[0]: missing required key 'interval'"),
    ("version: 1\ncollection:\n  watchGroups:\n    - {name: a, interval: 5s, fields: []}\n",
     ":4:39: collection.watchGroups[0].fields: no fields"),
    ("version: 1\ncollection:\n  watchGroups:\n    - {name: a, interval: 5s, fields: [1]}\n",
     ":4:40: collection.watchGroups[0].fields[0]: expected a string, got a number"),
    ("version: 1\ncollection:\n  watchGroups:\n    - {name: a, interval: 5s, fields: ['[a-']}\n",
     ":4:40: collection.watchGroups[0].fields[0]: '[a-' is not a valid glob (Go's path.Match)"),
    ("version: 1\ncollection:\n  watchGroups:\n    - {name: a, interval: 5s, fields: [x]}\n"
     "    - {name: a, interval: 6s, fields: [y]}\n",
     ":5:14: collection.watchGroups[1].name: watch group 'a' is already defined at "),
    ("version: 1\ncollection:\n  watchGroups:\n    - {name: a, interval: 5s, fields: [x], "
     "every: 2}\n", ":4:44: collection.watchGroups[0].every: unknown key"),
    ("version: &v 1\n", ":1:10: invalid YAML: anchors and aliases are not allowed"),
    ("version: !!python/object:os.system 1\n", ":1:10: invalid YAML: tag"),
    ("version: 1\nmetrics: {file: [}\n", ":2:18: invalid YAML:"),
])
def test_every_error_is_one_line_with_file_line_column_and_key(text: str, message: str) -> None:
    with pytest.raises(ExporterConfigError) as err:
        parse_exporter_config(text, PATH)
    assert str(err.value).startswith(PATH + message), str(err.value)
    assert "\n" not in str(err.value)


def test_watch_groups_are_matched_against_the_counters_in_force() -> None:
    text = ("version: 1\ncollection:\n  watchGroups:\n"
            "    - {name: clocks, interval: 30s, fields: ['DCGM_FI_DEV_*_CLOCK']}\n"
            "    - {name: power, interval: 2s,\n"
            "       fields: [DCGM_FI_DEV_POWER_USAGE, 'dcgm_?ower_usage']}\n")
    groups = parse_exporter_config(text, PATH).watch_groups
    counters = [line("DCGM_FI_DEV_SM_CLOCK"), line("DCGM_FI_DEV_MEM_CLOCK"),
                line("DCGM_FI_DEV_POWER_USAGE"), line("DCGM_FI_DEV_GPU_TEMP")]
    assert field_intervals(groups, counters) == {
        "DCGM_FI_DEV_SM_CLOCK": 30_000, "DCGM_FI_DEV_MEM_CLOCK": 30_000,
        "DCGM_FI_DEV_POWER_USAGE": 2_000}
    # A DCGM 1.x name is watched as the field it stands for.
    assert field_intervals(groups, [line("DCGM_FI_DEV_SM_CLOCK"), line("dcgm_power_usage")]) == {
        "DCGM_FI_DEV_SM_CLOCK": 30_000, "DCGM_FI_DEV_POWER_USAGE": 2_000}


def test_a_field_in_two_groups_or_a_group_matching_nothing_fails() -> None:
    two = ("version: 1\ncollection:\n  watchGroups:\n"
           "    - {name: a, interval: 30s, fields: ['DCGM_FI_DEV_*']}\n"
           "    - {name: b, interval: 2s, fields: [DCGM_FI_DEV_GPU_TEMP]}\n")
    with pytest.raises(ExporterConfigError) as err:
        field_intervals(parse_exporter_config(two, PATH).watch_groups,
                        [line("DCGM_FI_DEV_GPU_TEMP")])
    assert str(err.value) == (f"{PATH}:5:40: collection.watchGroups[1].fields[0]: "
                              "DCGM_FI_DEV_GPU_TEMP ('DCGM_FI_DEV_GPU_TEMP') is already in watch "
                              "group 'a': a field belongs to one group")
    none = ("version: 1\ncollection:\n  watchGroups:\n"
            "    - {name: nvlink, interval: 30s, fields: ['DCGM_FI_DEV_NVLINK_*']}\n")
    with pytest.raises(ExporterConfigError) as err:
        field_intervals(parse_exporter_config(none, PATH).watch_groups,
                        [line("DCGM_FI_DEV_GPU_TEMP")])
    assert str(err.value) == (f"{PATH}:4:7: collection.watchGroups[0]: watch group 'nvlink' "
                              "matches none of the 1 counters in force")


@pytest.mark.parametrize(("text", "ms"), [
    ("30s", 30_000), ("1m30s", 90_000), ("500ms", 500), ("1.5s", 1_500), ("1h", 3_600_000),
    ("2000000us", 2_000), ("1000000000ns", 1_000), (".5s", 500),
    ("0", None), ("0s", None), ("1us", None), ("1.5ms", None), ("-5s", None), ("+5s", None),
    ("5", None), ("", None), ("s", None), ("1d", None), ("5 s", None), (".s", None),
])
def test_go_durations_in_whole_positive_milliseconds(text: str, ms: int | None) -> None:
    assert parse_duration_ms(text) == ms


@pytest.mark.parametrize(("glob", "matches", "misses"), [
    ("DCGM_FI_DEV_*", ["DCGM_FI_DEV_GPU_TEMP", "DCGM_FI_DEV_"], ["DCGM_FI_PROF_X"]),
    ("DCGM_FI_DEV_?PU_TEMP", ["DCGM_FI_DEV_GPU_TEMP"], ["DCGM_FI_DEV_GGPU_TEMP"]),
    ("DCGM_FI_DEV_[GM]*", ["DCGM_FI_DEV_GPU_TEMP", "DCGM_FI_DEV_MEM_CLOCK"],
     ["DCGM_FI_DEV_SM_CLOCK"]),
    ("DCGM_FI_DEV_[^G]*", ["DCGM_FI_DEV_SM_CLOCK"], ["DCGM_FI_DEV_GPU_TEMP"]),
    ("DCGM_FI_DEV_[A-H]*", ["DCGM_FI_DEV_GPU_TEMP"], ["DCGM_FI_DEV_SM_CLOCK"]),
    ("DCGM_FI_DEV_\\*", ["DCGM_FI_DEV_*"], ["DCGM_FI_DEV_X"]),
    ("a.b", ["a.b"], ["axb"]),
])
def test_globs_are_go_path_match(glob: str, matches: list[str], misses: list[str]) -> None:
    regex = glob_regex(glob)
    assert regex is not None
    assert all(regex.fullmatch(name) for name in matches)
    assert not any(regex.fullmatch(name) for name in misses)


@pytest.mark.parametrize("glob", ["[", "[]", "[a-", "[z-a]", "x\\", "[-a]"])
def test_malformed_globs_are_refused(glob: str) -> None:
    assert glob_regex(glob) is None


def test_the_file_is_read_safely(tmp_path: Path) -> None:
    fifo = tmp_path / "config.yaml"
    import os

    os.mkfifo(fifo)
    with pytest.raises(ExporterConfigError, match=re.escape(f"{fifo}: not a regular file")):
        load_exporter_config(fifo)
    bad = tmp_path / "bad.yaml"
    bad.write_bytes(b"version: 1\nmetrics: {file: \xff}\n")
    with pytest.raises(ExporterConfigError) as err:
        load_exporter_config(bad)
    assert str(err.value) == f"{bad}:2:17: invalid YAML: not UTF-8 text (byte 0xff)"
    with pytest.raises(ExporterConfigError, match="cannot read config file"):
        load_exporter_config(tmp_path / "absent.yaml")


# YAML of the format's own keys and values, so that parsing goes deep.
TOKENS = ["version: ", "metrics:", "file: ", "fields:", "name: ", "prometheusType: ", "help: ",
          "collection:", "interval: ", "watchGroups:", "\n", "\n  ", "\n    ", "\n      ", "- ",
          "[", "]", "{", "}", ", ", ": ", "1", "2", "30s", "1m", "0s", "gauge", "counter",
          "DCGM_FI_DEV_GPU_TEMP", "DCGM_FI_DEV_*", "[a-", "'", '"', "#", "&a ", "*a", "!!str ",
          "\t", "\x00", "\u2028", "é", "---\n"]
yaml_like = st.lists(st.sampled_from(TOKENS) | st.text(max_size=3), max_size=40).map("".join)


@given(text=yaml_like | st.text())
def test_any_text_parses_or_fails_with_one_line(text: str) -> None:
    try:
        config = parse_exporter_config(text, PATH)
    except ExporterConfigError as exc:
        assert str(exc).startswith(f"{PATH}:"), exc
        assert "\n" not in str(exc) and "\r" not in str(exc), exc
        return
    assert config.interval_ms is None or config.interval_ms >= 100
    try:
        field_intervals(config.watch_groups, config.metrics or [line("DCGM_FI_DEV_GPU_TEMP")])
    except ExporterConfigError as exc:
        assert str(exc).startswith(f"{PATH}:"), exc
