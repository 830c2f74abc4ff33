"""The table of dcgm-exporter's two namings (fields/namings.py) against the DCGM catalog, the
field table and the two bundled lists: each row is one DCGM field under a new name, or a new
field in a base unit read from the classic one's NVML answer; the bundled 4.9 list is the classic
list renamed row by row; the conversions hold both ways."""

import re
from pathlib import Path

import pytest

from gpu_enricher.fields.catalog import DCGM_FIELD_IDS
from gpu_enricher.fields.collection import default_counters_path
from gpu_enricher.fields.convert import MIB
from gpu_enricher.fields.counters import load_counters, plan_counters
from gpu_enricher.fields.namings import (
    BY_CLASSIC,
    BY_CURRENT,
    RENAMES,
    Rename,
    Scale,
    from_classic,
    to_classic,
    with_base_units,
)
from gpu_enricher.fields.table import IMPLEMENTED
from tests.reference import dcgm_counters_csv


@pytest.mark.parametrize("rename", RENAMES, ids=lambda r: r.current)
def test_each_row_is_the_same_dcgm_field_or_a_new_one_read_from_the_same_answer(
        rename: Rename) -> None:
    assert rename.classic in IMPLEMENTED
    assert rename.current in DCGM_FIELD_IDS and rename.classic in DCGM_FIELD_IDS
    same_id = DCGM_FIELD_IDS[rename.current] == DCGM_FIELD_IDS[rename.classic]
    assert same_id == (rename.scale is Scale.SAME), "a unit change is a new DCGM field id"
    classic = IMPLEMENTED[rename.classic]
    if rename.new_field:
        spec = IMPLEMENTED[rename.current]
        assert spec.source == classic.source, "one NVML answer serves both names"
        assert (spec.mig, spec.slow) == (classic.mig, classic.slow)
        assert (spec.help, spec.prom_type) == (rename.help, rename.prom_type)
    else:
        assert rename.current not in IMPLEMENTED, "a spelling of the same id, not a twin"


@pytest.mark.parametrize("rename", RENAMES, ids=lambda r: r.current)
def test_the_type_follows_dcgms_naming_grammar(rename: Rename) -> None:
    """DCGM's dcgm_field_naming.py: a `_TOTAL` suffix is a counter; units and `_RATIO` are
    gauges; the driver version is a label."""
    if rename.current == "DCGM_FI_SYSTEM_DRIVER_VERSION":
        assert rename.prom_type == "label"
    elif rename.current.endswith("_TOTAL"):
        assert rename.prom_type == "counter"
    else:
        assert rename.prom_type == "gauge"
    assert re.fullmatch(r"DCGM_FI_(DEV|PROF|SYSTEM)_[A-Z0-9_]+", rename.current)


def test_the_4_9_list_is_the_classic_list_renamed_row_by_row() -> None:
    classic = load_counters(default_counters_path("classic"))
    renamed = load_counters(default_counters_path("4.9"))
    assert len(classic) == len(renamed)
    for old, new in zip(classic, renamed, strict=True):
        rename = BY_CLASSIC.get(old.field)
        if rename is None:  # the rows 4.9 keeps: vGPU licence, PCIe bytes
            assert (new.field, new.prom_type, new.help) == (old.field, old.prom_type, old.help)
            continue
        assert new.field == rename.current
        assert rename.default or old.field == "DCGM_FI_PROF_SM_ACTIVE", "our one extra row"
        assert (new.prom_type, new.help) == (rename.prom_type, rename.help)
    plan, warnings = plan_counters(renamed, frozenset(IMPLEMENTED), "test")
    assert warnings == ()
    assert plan.labels == (("DCGM_FI_SYSTEM_DRIVER_VERSION", "DCGM_FI_DRIVER_VERSION"),)
    # Both lists read the same NVML answers: the fields sampled differ only by the base-unit
    # twins of the classic fields.
    classic_plan, _ = plan_counters(classic, frozenset(IMPLEMENTED), "test")
    twins = {BY_CURRENT[f].classic for f in plan.sampled_fields if f in BY_CURRENT}
    assert (plan.sampled_fields - set(BY_CURRENT)) | twins == classic_plan.sampled_fields


@pytest.mark.reference_compat
def test_every_renamed_row_of_dcgm_exporters_default_list_has_its_row() -> None:
    """The 22 rows of dcgm-exporter's default file that DCGM 4.7 deprecates (4.9's release
    notes: renamed, 11 in a new unit), and its driver-version label."""
    reference = load_counters(dcgm_counters_csv())
    renamed = [line.field for line in reference if line.field in BY_CLASSIC]
    kept = [line.field for line in reference if line.field not in BY_CLASSIC]
    assert sorted(kept) == ["DCGM_FI_DEV_VGPU_LICENSE_STATUS", "DCGM_FI_PROF_PCIE_RX_BYTES",
                            "DCGM_FI_PROF_PCIE_TX_BYTES"]
    metrics = [name for name in renamed if name != "DCGM_FI_DRIVER_VERSION"]
    assert len(metrics) == 22
    assert sum(BY_CLASSIC[name].new_field for name in metrics) == 11
    assert all(BY_CLASSIC[name].default for name in renamed)


@pytest.mark.parametrize(("scale", "classic", "current"), [
    (Scale.HERTZ, 1980, 1_980_000_000),
    (Scale.JOULES, 123_456_789, 123_456),
    (Scale.RATIO, 76, 0.76),
    (Scale.BYTES, 22067, 22067 * MIB),
    (Scale.BYTES_PER_SECOND, 7, 7_168_000),
    (Scale.SECONDS, 2_500_000_000, 2.5),
    (Scale.SAME, 63, 63),
])
def test_the_conversions_hold_both_ways(scale: Scale, classic: int, current: float) -> None:
    assert from_classic(scale, classic) == current
    assert to_classic(scale, current) == (classic // 1000 * 1000 if scale is Scale.JOULES
                                          else classic)


def test_a_backend_of_classic_readings_gets_every_base_unit_field() -> None:
    values = with_base_units({"DCGM_FI_DEV_FB_USED": 2, "DCGM_FI_DEV_GPU_UTIL": 50,
                              "DCGM_FI_DEV_GPU_TEMP": 40})
    assert values == {"DCGM_FI_DEV_FB_USED": 2, "DCGM_FI_DEV_GPU_UTIL": 50,
                      "DCGM_FI_DEV_GPU_TEMP": 40, "DCGM_FI_DEV_FB_USED_BYTES": 2 * MIB,
                      "DCGM_FI_DEV_GPU_UTIL_RATIO": 0.5}


def test_docs_list_every_row_with_its_source() -> None:
    """docs/namings.md's table names every row of the code's (the per-link NVLink rows as
    their first and last), so the page says what the exporter does."""
    doc = (Path(__file__).parents[2] / "docs" / "namings.md").read_text()
    for rename in RENAMES:
        if "_NVLINK_BANDWIDTH_L" in rename.classic:
            assert "`DCGM_FI_DEV_NVLINK_BANDWIDTH_L0` … `_L17`" in doc
            continue
        row = next((line for line in doc.splitlines()
                    if line.startswith(f"| `{rename.classic}` (")), None)
        assert row is not None, rename.classic
        assert f"`{rename.current}` (" in row and rename.since in row, row
