"""The counters CSV parser: dcgm-exporter's syntax, and every error names file and line."""

from pathlib import Path

import pytest

from gpu_enricher.counters import CountersFileError, load_counters, parse_counters, plan_counters
from gpu_enricher.fields import IMPLEMENTED
from tests.reference import dcgm_counters_csv

BUNDLED_CSV = Path(__file__).parents[2] / "src" / "gpu_enricher" / "default-counters.csv"


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
    assert "DCGM_FI_DEV_XID_ERRORS" in skipped
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
