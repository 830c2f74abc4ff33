"""The counters CSV parser: dcgm-exporter's syntax, and every error names file and line."""

import os
import threading
from collections.abc import Callable
from pathlib import Path

import pytest

from gpu_enricher.fields.catalog import DCGM_FIELD_IDS
from gpu_enricher.fields.counters import (
    MAX_COUNTERS_BYTES,
    CountersFileError,
    load_counters,
    parse_counters,
    plan_counters,
    value_field,
)
from gpu_enricher.fields.legacy_names import LEGACY_FIELDS
from gpu_enricher.fields.namings import RENAMES, Rename
from gpu_enricher.fields.table import IMPLEMENTED
from tests.reference import dcgm_counters_csv

BUNDLED_CSV = Path(__file__).parents[2] / "src" / "gpu_enricher" / "fields" / "default-counters.csv"


def test_parses_fields_types_help_comments_and_blank_lines() -> None:
    text = (
        "# a comment, with a comma\n"
        "\n"
        "DCGM_FI_DEV_SM_CLOCK,  gauge, SM clock frequency (in MHz).\n"
        '   DCGM_FI_DEV_DEC_UTIL ,  counter ,  "Decoder, utilization (in %)."  \n'
        "DCGM_FI_DRIVER_VERSION, label, Driver Version\n"
    )
    lines = parse_counters(text, "c.csv")
    assert [(c.field, c.prom_type, c.help, c.line_no) for c in lines] == [
        ("DCGM_FI_DEV_SM_CLOCK", "gauge", "SM clock frequency (in MHz).", 3),
        ("DCGM_FI_DEV_DEC_UTIL", "counter", "Decoder, utilization (in %).", 4),
        ("DCGM_FI_DRIVER_VERSION", "label", "Driver Version", 5),
    ]


@pytest.mark.parametrize(
    ("line", "message"),
    [
        ("DCGM_FI_DEV_SM_CLOCK, gauge", "expected 3 comma-separated values"),
        ("DCGM_FI_DEV_SM_CLOCK, gauge, a, b", "got 4"),
        ("DCGM_FI_DEV_SM_CLOCK, gauge, Help, with comma", "quote a help text"),
        ("DCGM_FI_DEV_SM_CLOCK, gaugee, SM clock", "unknown metric type 'gaugee'"),
        ("DCGM_FI_DEV_NOT_A_FIELD, gauge, nope", "unknown field 'DCGM_FI_DEV_NOT_A_FIELD'"),
        ("SM_CLOCK, gauge, missing prefix", "unknown field 'SM_CLOCK'"),
        (", gauge, no name", "empty field name"),
        ('DCGM_FI_DEV_SM_CLOCK, gauge, "unterminated', "malformed CSV"),
    ],
)
def test_every_error_names_file_and_line(line: str, message: str) -> None:
    text = "# header\n\nDCGM_FI_DEV_GPU_TEMP, gauge, ok\n" + line + "\n"
    with pytest.raises(CountersFileError) as err:
        parse_counters(text, "/etc/dcgm/counters.csv")
    assert str(err.value).startswith("/etc/dcgm/counters.csv:4: ")
    assert message in str(err.value)


def test_unreadable_file_names_the_path(tmp_path: Path) -> None:
    with pytest.raises(CountersFileError, match=r"missing\.csv: cannot read"):
        load_counters(tmp_path / "missing.csv")


@pytest.mark.reference_compat
def test_dcgm_exporters_own_default_file_loads_unchanged() -> None:
    reference_csv = dcgm_counters_csv()
    lines = load_counters(reference_csv)
    fields = {c.field for c in lines}
    assert "DCGM_FI_DEV_GPU_UTIL" in fields and "DCGM_FI_DRIVER_VERSION" in fields
    assert len(lines) >= 25
    plan, warnings = plan_counters(lines, frozenset(IMPLEMENTED), "simulated")
    # Fields dcgm-exporter knows that we do not implement are skipped, each with its line.
    skipped = {w.split(": ")[1].split()[0] for w in warnings}
    assert skipped == {c.field for c in lines if value_field(c.field) is None}
    assert all(w.startswith(f"{reference_csv}:") for w in warnings)
    assert {m.name for m in plan.metrics} >= {"DCGM_FI_DEV_GPU_UTIL", "DCGM_FI_DEV_FB_USED"}
    assert plan.label_fields == ("DCGM_FI_DRIVER_VERSION",)


def test_bundled_default_covers_the_core_fields() -> None:
    plan, warnings = plan_counters(load_counters(BUNDLED_CSV), frozenset(IMPLEMENTED), "sim")
    assert warnings == ()
    assert {m.name for m in plan.metrics} >= {
        "DCGM_FI_DEV_GPU_UTIL", "DCGM_FI_DEV_MEM_COPY_UTIL", "DCGM_FI_DEV_ENC_UTIL",
        "DCGM_FI_DEV_DEC_UTIL", "DCGM_FI_DEV_FB_FREE", "DCGM_FI_DEV_FB_USED",
        "DCGM_FI_DEV_FB_RESERVED", "DCGM_FI_DEV_FB_TOTAL", "DCGM_FI_DEV_POWER_USAGE",
        "DCGM_FI_DEV_TOTAL_ENERGY_CONSUMPTION", "DCGM_FI_DEV_SM_CLOCK", "DCGM_FI_DEV_MEM_CLOCK",
        "DCGM_FI_DEV_GPU_TEMP", "DCGM_FI_DEV_MEMORY_TEMP", "DCGM_FI_DEV_PCIE_REPLAY_COUNTER",
        "DCGM_FI_PROF_GR_ENGINE_ACTIVE", "DCGM_FI_PROF_PIPE_TENSOR_ACTIVE",
    }
    assert plan.label_fields == ("DCGM_FI_DRIVER_VERSION",)


def test_plan_skips_undeliverable_text_metrics_and_duplicates_with_line() -> None:
    lines = parse_counters(
        "DCGM_FI_PROF_SM_ACTIVE, gauge, prof\n"
        "DCGM_FI_DRIVER_VERSION, gauge, text as gauge\n"
        "DCGM_FI_DEV_GPU_TEMP, gauge, t\n"
        "DCGM_FI_DEV_GPU_TEMP, gauge, again\n"
        "DCGM_FI_DEV_SERIAL, label, s\n"
        "DCGM_FI_DRIVER_VERSION, label, d\n",
        "x.csv",
    )
    deliverable = frozenset(IMPLEMENTED) - {"DCGM_FI_PROF_SM_ACTIVE"}
    plan, warnings = plan_counters(lines, deliverable, "nvml")
    assert [m.name for m in plan.metrics] == ["DCGM_FI_DEV_GPU_TEMP"]
    assert plan.label_fields == ("DCGM_FI_DEV_SERIAL", "DCGM_FI_DRIVER_VERSION")
    assert warnings[0].startswith("x.csv:1: DCGM_FI_PROF_SM_ACTIVE cannot be delivered by the nvml")
    assert warnings[1].startswith("x.csv:2: DCGM_FI_DRIVER_VERSION is text")
    assert warnings[2].startswith("x.csv:4: DCGM_FI_DEV_GPU_TEMP already listed at x.csv:3")
    assert len(warnings) == 3


# dcgm-exporter's etc/1.x-compatibility-metrics.csv, as its lines stand (names, types, which are
# commented out; `dcgm_fi_prof_pcie_{tx,rx}_bytes` are listed twice), help texts shortened.
LEGACY_CSV = """\
# Format
# DCGM FIELD, Prometheus metric type, help message

# Clocks
dcgm_sm_clock,     gauge, SM clock (in MHz).
dcgm_memory_clock, gauge, Memory clock (in MHz).
dcgm_memory_temp, gauge, Memory temperature (in C).
dcgm_gpu_temp,    gauge, GPU temperature (in C).
dcgm_power_usage,              gauge, Power draw (in W).
dcgm_total_energy_consumption, counter, Total energy since boot (in mJ).
dcgm_fi_prof_pcie_tx_bytes,  counter, PCIe TX via NVML.
dcgm_fi_prof_pcie_rx_bytes,  counter, PCIe RX via NVML.
dcgm_pcie_replay_counter, counter, PCIe retries.
dcgm_gpu_utilization,      gauge, GPU utilization (in %).
dcgm_mem_copy_utilization, gauge, Memory utilization (in %).
dcgm_enc_utilization,      gauge, Encoder utilization (in %).
dcgm_dec_utilization,      gauge, Decoder utilization (in %).
dcgm_xid_errors,            gauge, Last XID error.
# dcgm_power_violation,       counter, Power throttling (in us).
# dcgm_thermal_violation,     counter, Thermal throttling (in us).
# dcgm_sync_boost_violation,  counter, Sync-boost throttling (in us).
# dcgm_board_limit_violation, counter, Board-limit throttling (in us).
# dcgm_low_util_violation,    counter, Low-utilization throttling (in us).
# dcgm_reliability_violation, counter, Reliability throttling (in us).
dcgm_fb_free, gauge, Framebuffer free (in MiB).
dcgm_fb_used, gauge, Framebuffer used (in MiB).
# dcgm_ecc_sbe_volatile_total,  counter, SBE volatile.
# dcgm_ecc_dbe_volatile_total,  counter, DBE volatile.
# dcgm_ecc_sbe_aggregate_total, counter, SBE aggregate.
# dcgm_ecc_dbe_aggregate_total, counter, DBE aggregate.
# dcgm_retired_pages_sbe,     counter, Retired pages (SBE).
# dcgm_retired_pages_dbe,     counter, Retired pages (DBE).
# dcgm_retired_pages_pending, counter, Pages pending retirement.
# dcgm_nvlink_flit_crc_error_count_total, counter, NVLink flow-control CRC errors.
# dcgm_nvlink_data_crc_error_count_total, counter, NVLink data CRC errors.
# dcgm_nvlink_replay_error_count_total,   counter, NVLink retries.
# dcgm_nvlink_recovery_error_count_total, counter, NVLink recovery errors.
dcgm_nvlink_bandwidth_total,            counter, NVLink bandwidth for all lanes
dcgm_fi_prof_gr_engine_active,   gauge, Graphics engine active (in %).
# dcgm_fi_prof_sm_active,          gauge, SM active (in %).
# dcgm_fi_prof_sm_occupancy,       gauge, SM occupancy (in %).
dcgm_fi_prof_pipe_tensor_active, gauge, Tensor pipe active (in %).
dcgm_fi_prof_dram_active,        gauge, DRAM active (in %).
dcgm_fi_prof_pcie_tx_bytes,      counter, PCIe TX bytes.
dcgm_fi_prof_pcie_rx_bytes,      counter, PCIe RX bytes.
"""


def _commented_in(text: str) -> list[str]:
    return [line.lstrip("# ").split(",")[0] for line in text.splitlines()
            if line.startswith("# dcgm_")]


def test_dcgm_1x_compatibility_file_loads_unchanged_under_its_own_names() -> None:
    lines = parse_counters(LEGACY_CSV, "1.x-compatibility-metrics.csv")
    assert all(c.field in LEGACY_FIELDS for c in lines)
    plan, warnings = plan_counters(lines, frozenset(IMPLEMENTED), "simulated")
    # Each series is named as the file names it and carries the value of the field it maps to.
    assert all(m.field == value_field(m.name) for m in plan.metrics)
    names = [m.name for m in plan.metrics]
    assert {"dcgm_sm_clock", "dcgm_gpu_temp", "dcgm_power_usage", "dcgm_gpu_utilization",
            "dcgm_fb_used", "dcgm_fi_prof_gr_engine_active"} <= set(names)
    assert {(m.name, m.field) for m in plan.metrics} >= {
        ("dcgm_sm_clock", "DCGM_FI_DEV_SM_CLOCK"), ("dcgm_memory_clock", "DCGM_FI_DEV_MEM_CLOCK"),
        ("dcgm_fb_free", "DCGM_FI_DEV_FB_FREE"),
        ("dcgm_fi_prof_dram_active", "DCGM_FI_PROF_DRAM_ACTIVE")}
    assert plan.sampled_fields == {m.field for m in plan.metrics}
    # Every active line is either planned or skipped with one warning naming its line.
    planned = set(names)
    skipped = {w.split(": ")[1].split()[0] for w in warnings}
    assert {c.field for c in lines} == planned | skipped
    assert all(w.startswith("1.x-compatibility-metrics.csv:") for w in warnings)
    assert any("dcgm_fi_prof_pcie_tx_bytes already listed at" in w for w in warnings)
    not_implemented = [w for w in warnings if "not implement yet" in w]
    assert all("(DCGM 1.x name of DCGM_FI_" in w for w in not_implemented)
    # The same file with every commented line switched on still loads: every name is known.
    every = LEGACY_CSV.replace("# dcgm_", "dcgm_")
    assert len(parse_counters(every, "all.csv")) == len(lines) + len(_commented_in(LEGACY_CSV))


# go-dcgm's legacy field table (pkg/dcgm/legacy_fields.csv): name → DCGM field id.
LEGACY_IDS = {
    "dcgm_sm_clock": 100, "dcgm_memory_clock": 101, "dcgm_memory_temp": 140,
    "dcgm_gpu_temp": 150, "dcgm_power_usage": 155, "dcgm_total_energy_consumption": 156,
    "dcgm_pcie_tx_throughput": 200, "dcgm_pcie_rx_throughput": 201,
    "dcgm_pcie_replay_counter": 202, "dcgm_gpu_utilization": 203,
    "dcgm_mem_copy_utilization": 204, "dcgm_enc_utilization": 206,
    "dcgm_dec_utilization": 207, "dcgm_xid_errors": 230, "dcgm_power_violation": 240,
    "dcgm_thermal_violation": 241, "dcgm_sync_boost_violation": 242,
    "dcgm_board_limit_violation": 243, "dcgm_low_util_violation": 244,
    "dcgm_reliability_violation": 245, "dcgm_fb_free": 251, "dcgm_fb_used": 252,
    "dcgm_ecc_sbe_volatile_total": 310, "dcgm_ecc_dbe_volatile_total": 311,
    "dcgm_ecc_sbe_aggregate_total": 312, "dcgm_ecc_dbe_aggregate_total": 313,
    "dcgm_retired_pages_sbe": 390, "dcgm_retired_pages_dbe": 391,
    "dcgm_retired_pages_pending": 392, "dcgm_nvlink_flit_crc_error_count_total": 409,
    "dcgm_nvlink_data_crc_error_count_total": 419, "dcgm_nvlink_replay_error_count_total": 429,
    "dcgm_nvlink_recovery_error_count_total": 439, "dcgm_nvlink_bandwidth_total": 449,
    "dcgm_fi_prof_gr_engine_active": 1001, "dcgm_fi_prof_sm_active": 1002,
    "dcgm_fi_prof_sm_occupancy": 1003, "dcgm_fi_prof_pipe_tensor_active": 1004,
    "dcgm_fi_prof_dram_active": 1005, "dcgm_fi_prof_pcie_tx_bytes": 1009,
    "dcgm_fi_prof_pcie_rx_bytes": 1010,
}


def test_legacy_table_maps_each_name_to_the_field_of_its_dcgm_id() -> None:
    assert {name: DCGM_FIELD_IDS[field] for name, field in LEGACY_FIELDS.items()} == LEGACY_IDS
    assert set(_commented_in(LEGACY_CSV)) <= set(LEGACY_FIELDS)
    # Whatever spelling fields/table.py implements a field under, its legacy name resolves to it.
    for name, field in LEGACY_FIELDS.items():
        spellings = {n for n, i in DCGM_FIELD_IDS.items() if i == DCGM_FIELD_IDS[field]}
        resolved = value_field(name)
        assert (resolved is not None) == bool(spellings & set(IMPLEMENTED)), name
        assert resolved is None or resolved in spellings


def test_other_spellings_of_an_implemented_field_export_under_their_own_name() -> None:
    lines = parse_counters(
        "DCGM_FI_DEV_GPU_TEMP_CELSIUS, gauge, t\n"  # DCGM 4.6's name of DCGM_FI_DEV_GPU_TEMP
        "DCGM_FI_DEV_GPU_TEMP, gauge, t again\n"  # a different series name: both export
        "DCGM_FI_SYSTEM_DRIVER_VERSION, label, d\n"
        "dcgm_gpu_temp, label, legacy as label\n",
        "a.csv",
    )
    plan, warnings = plan_counters(lines, frozenset(IMPLEMENTED), "nvml")
    assert [(m.name, m.field) for m in plan.metrics] == [
        ("DCGM_FI_DEV_GPU_TEMP_CELSIUS", "DCGM_FI_DEV_GPU_TEMP"),
        ("DCGM_FI_DEV_GPU_TEMP", "DCGM_FI_DEV_GPU_TEMP")]
    # A label is named as its line writes it, as dcgm-exporter names it (4.9's driver-version
    # label), with the value of the field the name resolves to.
    assert plan.labels == (("DCGM_FI_SYSTEM_DRIVER_VERSION", "DCGM_FI_DRIVER_VERSION"),
                           ("dcgm_gpu_temp", "DCGM_FI_DEV_GPU_TEMP"))
    assert plan.sampled_fields == {"DCGM_FI_DEV_GPU_TEMP", "DCGM_FI_DRIVER_VERSION"}
    assert warnings == ()


def test_unknown_lowercase_name_is_an_error() -> None:
    with pytest.raises(CountersFileError, match=r"x\.csv:1: unknown field 'dcgm_sm_clocks'.*1\.x"):
        parse_counters("dcgm_sm_clocks, gauge, typo\n", "x.csv")
    with pytest.raises(CountersFileError, match="unknown field 'DCGM_SM_CLOCK'"):
        parse_counters("DCGM_SM_CLOCK, gauge, upper-cased legacy name\n", "x.csv")


# Issue 13, defect 3: only "\n" ends a line (and "\r\n", as Go's encoding/csv reads it); every
# other character str.splitlines breaks on stays inside the help text.
SPLITLINES_ONLY = ["\u2028", "\u2029", "\x85", "\x0b", "\x0c", "\x1c", "\x1d", "\x1e"]


@pytest.mark.parametrize("sep", SPLITLINES_ONLY, ids=lambda s: f"U+{ord(s):04X}")
def test_only_newline_ends_a_line(sep: str) -> None:
    text = f"DCGM_FI_DEV_GPU_TEMP, gauge, before{sep}after\nDCGM_FI_DEV_SM_CLOCK, gauge, c\n"
    lines = parse_counters(text, "c.csv")
    assert [(c.field, c.help, c.line_no) for c in lines] == [
        ("DCGM_FI_DEV_GPU_TEMP", f"before{sep}after", 1), ("DCGM_FI_DEV_SM_CLOCK", "c", 2)]
    # A later error still names its own line.
    with pytest.raises(CountersFileError, match=r"^c\.csv:2: unknown field 'NOPE'"):
        parse_counters(f"DCGM_FI_DEV_GPU_TEMP, gauge, a{sep}b\nNOPE, gauge, x\n", "c.csv")


def test_crlf_ends_a_line_and_a_lone_carriage_return_is_an_error() -> None:
    lines = parse_counters("# c\r\nDCGM_FI_DEV_GPU_TEMP, gauge, t\r\n\r\n"
                           "DCGM_FI_DEV_SM_CLOCK, gauge, \"s\"\r\n", "w.csv")
    assert [(c.help, c.line_no) for c in lines] == [("t", 2), ("s", 4)]
    # A "\r" inside a line would end the HELP line in the exposition: refused, even quoted.
    for line in ('DCGM_FI_DEV_SM_CLOCK, gauge, "a\rb"', "DCGM_FI_DEV_SM_CLOCK, gauge, a\rb"):
        with pytest.raises(CountersFileError, match=r"^w\.csv:2: .*carriage return"):
            parse_counters(f"DCGM_FI_DEV_GPU_TEMP, gauge, t\n{line}\n", "w.csv")


def test_help_with_a_line_separator_keeps_the_exposition_one_line_per_entry() -> None:
    from gpu_enricher.exposition.render import Family, Sample, render_openmetrics, render_text

    help_text = "a\u2028b\u2029c\x85d\x0be\x0cf\x1cg\\h"
    (line,) = parse_counters(f"DCGM_FI_DEV_GPU_TEMP, gauge, {help_text}\n", "h.csv")
    family = Family(line.field, line.prom_type, line.help, (Sample('gpu="0"', "41"),))
    text = render_text([family]).decode()
    assert text.split("\n") == [
        "# HELP DCGM_FI_DEV_GPU_TEMP a\u2028b\u2029c\x85d\x0be\x0cf\x1cg\\\\h",
        "# TYPE DCGM_FI_DEV_GPU_TEMP gauge", 'DCGM_FI_DEV_GPU_TEMP{gpu="0"} 41', ""]
    assert "\r" not in text
    assert render_openmetrics([family]).decode().count("\n") == 4


def test_a_long_line_is_shortened_in_the_error() -> None:
    long_line = "DCGM_FI_DEV_GPU_TEMP, gauge" + "x" * 1000
    with pytest.raises(CountersFileError) as err:
        parse_counters(long_line + "\n", "l.csv")
    message = str(err.value)
    assert repr(long_line[:80]) + "…" in message and len(message) < 300
    with pytest.raises(CountersFileError) as err:
        parse_counters("DCGM_FI_" + "Y" * 1000 + ", gauge, h\n", "l.csv")
    assert "…" in str(err.value) and len(str(err.value)) < 300


def test_error_messages_escape_control_characters() -> None:
    with pytest.raises(CountersFileError) as err:
        parse_counters("DCGM_FI_DEV_GPU_TEMP, gau\u2028ge, h\n", "e.csv")
    assert str(err.value).startswith("e.csv:1: unknown metric type 'gau\\u2028ge'")
    assert str(err.value).isprintable()


def test_a_non_utf8_byte_names_its_file_and_line(tmp_path: Path) -> None:
    path = tmp_path / "latin1.csv"
    path.write_bytes(
        b"# ok\nDCGM_FI_DEV_GPU_TEMP, gauge, ok\nDCGM_FI_DEV_SM_CLOCK, gauge, caf\xe9\n")
    with pytest.raises(CountersFileError) as err:
        load_counters(path)
    assert str(err.value).startswith(f"{path}:3: not UTF-8 text: byte 0xe9 at column 33")


# Issue 13, defect 8: only a regular file of at most 1 MiB is read, and nothing blocks.
def _call_unblocking(fifo: Path, call: Callable[[], object]) -> BaseException | object:
    """`call()`'s result or exception; if it blocks on opening `fifo` (the defect), a writer is
    opened so that it returns and the test fails instead of hanging."""
    outcome: list[BaseException | object] = []

    def target() -> None:
        try:
            outcome.append(call())
        except BaseException as exc:  # handed back to the test, whatever it is
            outcome.append(exc)

    thread = threading.Thread(target=target, daemon=True)
    thread.start()
    thread.join(5)
    if thread.is_alive():
        os.close(os.open(fifo, os.O_WRONLY | os.O_NONBLOCK))
        thread.join(5)
        pytest.fail(f"opening the FIFO {fifo} blocked")
    return outcome[0]


def test_a_fifo_is_refused_without_blocking(tmp_path: Path) -> None:
    fifo = tmp_path / "counters.csv"
    os.mkfifo(fifo)
    outcome = _call_unblocking(fifo, lambda: load_counters(fifo))
    assert isinstance(outcome, CountersFileError)
    assert str(outcome) == f"{fifo}: not a regular file but a FIFO (named pipe)"


@pytest.mark.parametrize(
    ("path", "kind"),
    [("/dev/null", "character device"), ("/dev/zero", "character device"), (None, "directory")],
)
def test_devices_and_directories_are_refused(tmp_path: Path, path: str | None, kind: str) -> None:
    target = tmp_path if path is None else Path(path)
    if not target.exists():
        pytest.skip(f"{target} does not exist here")
    with pytest.raises(CountersFileError) as err:
        load_counters(target)
    assert str(err.value) == f"{target}: not a regular file but a {kind}"


def test_a_symlink_to_a_regular_file_is_read(tmp_path: Path) -> None:
    # Kubernetes mounts a ConfigMap's keys as symlinks.
    real = tmp_path / "..data"
    real.write_text("DCGM_FI_DEV_GPU_TEMP, gauge, t\n")
    (tmp_path / "counters.csv").symlink_to(real)
    assert [c.field for c in load_counters(tmp_path / "counters.csv")] == ["DCGM_FI_DEV_GPU_TEMP"]


def test_a_file_over_1_mib_is_refused_and_one_of_1_mib_is_read(tmp_path: Path) -> None:
    field_line = b"DCGM_FI_DEV_GPU_TEMP, gauge, t\n"
    path = tmp_path / "big.csv"
    path.write_bytes(field_line + b"#" * (MAX_COUNTERS_BYTES - len(field_line) - 1) + b"\n")
    assert path.stat().st_size == MAX_COUNTERS_BYTES == 1 << 20
    assert len(load_counters(path)) == 1
    with path.open("ab") as f:
        f.write(b"\n")
    with pytest.raises(CountersFileError) as err:
        load_counters(path)
    assert str(err.value) == (
        f"{path}: counters file larger than the 1 MiB limit (1048576 bytes): 1048577 bytes")


def test_cli_exits_2_on_a_fifo(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    from gpu_enricher.cli.main import EXIT_USAGE, main

    fifo = tmp_path / "counters.csv"
    os.mkfifo(fifo)
    assert _call_unblocking(fifo, lambda: main(["--simulate", "-f", str(fifo)])) == EXIT_USAGE
    assert capsys.readouterr().err.splitlines() == [
        f"gpu-enricher: error: {fifo}: not a regular file but a FIFO (named pipe)"]


def test_the_limit_holds_when_the_size_reported_is_wrong(
        monkeypatch: pytest.MonkeyPatch) -> None:
    # /proc's files are regular and report size 0: the read itself stops past the limit.
    import gpu_enricher.fields.counters as counters

    status = Path("/proc/self/status")
    if not status.is_file() or status.stat().st_size != 0:
        pytest.skip("no /proc/self/status of reported size 0 here")
    monkeypatch.setattr(counters, "MAX_COUNTERS_BYTES", 10)
    with pytest.raises(CountersFileError) as err:
        load_counters(status)
    assert str(err.value).startswith("/proc/self/status: counters file larger than")
    assert str(err.value).endswith(": more than 10 bytes read")


def test_text_that_cannot_be_encoded_is_refused() -> None:
    # parse_counters is pure and takes any str; a lone surrogate could never be rendered.
    with pytest.raises(CountersFileError, match=r"^s\.csv:1: not UTF-8 text: surrogates"):
        parse_counters("DCGM_FI_DEV_GPU_TEMP, gauge, \ud800\n", "s.csv")


WRONG_TYPE = {"gauge": "counter", "counter": "gauge", "label": "gauge"}


@pytest.mark.parametrize("rename", RENAMES, ids=lambda r: r.current)
def test_a_dcgm_4_7_name_with_a_type_that_contradicts_it_names_file_and_line(
        rename: Rename) -> None:
    wrong = WRONG_TYPE[rename.prom_type]
    text = f"DCGM_FI_DEV_GPU_TEMP, gauge, ok\n{rename.current}, {wrong}, help\n"
    with pytest.raises(CountersFileError) as err:
        parse_counters(text, "c.csv")
    message = str(err.value)
    assert message.startswith(f"c.csv:2: {rename.current} is a {rename.prom_type} (")
    assert f"name of {rename.classic}" in message and f"not a '{wrong}'" in message
    # Its own type, or a label (any field may be one, as in dcgm-exporter), is taken.
    assert parse_counters(f"{rename.current}, {rename.prom_type}, h\n", "c.csv")
    assert parse_counters(f"{rename.current}, label, h\n", "c.csv")


def test_a_classic_name_keeps_dcgm_exporters_tolerance_of_types() -> None:
    """dcgm-exporter 4.8.3 turned NVLINK_BANDWIDTH_TOTAL from counter to gauge in its own
    file: both are taken for the classic names, whose files users already run."""
    for prom_type in ("counter", "gauge"):
        assert parse_counters(f"DCGM_FI_DEV_NVLINK_BANDWIDTH_TOTAL, {prom_type}, h\n", "c.csv")


@pytest.mark.parametrize("name", ["DCGM_FI_DEV_SM_CLOCK_HERTS", "DCGM_FI_DEV_FB_USED_BYTE",
                                  "DCGM_FI_DEV_GPU_UTIL_PERCENT"])
def test_a_name_neither_classic_nor_dcgm_4_7_is_an_unknown_field(name: str) -> None:
    with pytest.raises(CountersFileError, match=rf"^n\.csv:1: unknown field '{name}'"):
        parse_counters(f"{name}, gauge, h\n", "n.csv")


def test_gpu_util_ratio_is_dcgm_4_7s_ratio_not_dcgm_4_6s_percent() -> None:
    """DCGM 4.6 named field 203 (an integer percent) DCGM_FI_DEV_GPU_UTIL_RATIO; DCGM 4.7 gives
    that name to its own field 1613, a 0..1 ratio, which dcgm-exporter 4.9 serves."""
    assert DCGM_FIELD_IDS["DCGM_FI_DEV_GPU_UTIL_RATIO"] == 1613
    assert DCGM_FIELD_IDS["DCGM_FI_DEV_GPU_UTIL"] == 203
    assert value_field("DCGM_FI_DEV_GPU_UTIL_RATIO") == "DCGM_FI_DEV_GPU_UTIL_RATIO"
    assert IMPLEMENTED["DCGM_FI_DEV_GPU_UTIL_RATIO"].convert(76) == 0.76
