"""The repository's facts about dcgm-exporter's files (tests/data) hold together and, wherever the
real files are at hand (../shared/reference/, always on CI), equal what the real files say."""

import json
import re
from pathlib import Path

import pytest

from gpu_enricher.fields.catalog import is_known_field
from gpu_enricher.fields.counters import load_counters, parse_counters
from tests import reference
from tests.reference import (
    COUNTER_FACTS,
    COUNTERS_NAME,
    DASHBOARD_FACTS,
    DASHBOARD_NAME,
    REGENERATE,
    counter_facts,
    counter_facts_from_csv,
    dashboard_facts,
    dashboard_facts_from_json,
    dashboard_from_facts,
    format_counter_facts,
    format_dashboard_facts,
    synthesize_counters_csv,
)

METRIC = re.compile(r"\bDCGM_\w+")


@pytest.mark.reference_compat
def test_counter_facts_hold_together_and_match_dcgm_exporters_file() -> None:
    facts = counter_facts()
    assert all(is_known_field(f.field) for f in facts), [
        f.field for f in facts if not is_known_field(f.field)]
    assert {f.prom_type for f in facts} == {"gauge", "counter", "label"}
    active = [(f.field, f.prom_type) for f in facts if f.state == "active"]
    assert len(active) >= 25 and len({field for field, _ in active}) == len(active)
    assert {("DCGM_FI_DEV_GPU_UTIL", "gauge"), ("DCGM_FI_DRIVER_VERSION", "label"),
            ("DCGM_FI_DEV_XID_ERRORS", "gauge")} <= set(active)
    commented = {f.field for f in facts if f.state == "commented"}
    assert {"DCGM_FI_DEV_SERIAL", "DCGM_EXP_XID_ERRORS_COUNT"} <= commented
    # The file synthesized from the facts reads back as exactly their active lines.
    synthesized = synthesize_counters_csv(facts)
    assert counter_facts_from_csv(synthesized) == facts
    assert [(c.field, c.prom_type) for c in parse_counters(synthesized, "synthesized")] == active

    real = reference.shared_file(COUNTERS_NAME)  # fails under CI=true when missing
    if real is not None:
        wanted = format_counter_facts(counter_facts_from_csv(real.read_text(encoding="utf-8")))
        assert COUNTER_FACTS.read_text(encoding="utf-8") == wanted, (
            f"{COUNTER_FACTS.name} differs from {real}: {REGENERATE}")
        assert [(c.field, c.prom_type) for c in load_counters(real)] == active


@pytest.mark.reference_compat
def test_dashboard_facts_hold_together_and_match_dashboard_12239() -> None:
    facts = dashboard_facts()
    exprs = [e for p in facts.panels for e in p.exprs]
    assert len(exprs) == 8 and len(facts.panels) == 8
    assert all(p.title and p.unit and p.type in ("graph", "gauge") for p in facts.panels)
    assert len({p.title for p in facts.panels}) == len(facts.panels)
    assert [(v.name, v.type) for v in facts.variables] == [
        ("datasource", "datasource"), ("instance", "query"), ("gpu", "query")]
    assert [v.query for v in facts.variables if v.type == "query"] == [
        "label_values(DCGM_FI_DEV_GPU_TEMP, instance)", "label_values(DCGM_FI_DEV_GPU_TEMP, gpu)"]
    # Every metric the dashboard queries is one dcgm-exporter's default counters enable.
    enabled = {f.field for f in counter_facts() if f.state == "active"}
    queried = {m for text in [*exprs, *(v.query for v in facts.variables)]
               for m in METRIC.findall(text)}
    assert queried and queried <= enabled, queried - enabled
    # The dashboard rebuilt from the facts (what the tests read without the real file) says
    # the same again.
    assert dashboard_facts_from_json(dashboard_from_facts(facts)) == facts

    real = reference.shared_file(DASHBOARD_NAME)  # fails under CI=true when missing
    if real is not None:
        wanted = format_dashboard_facts(
            dashboard_facts_from_json(json.loads(real.read_text(encoding="utf-8"))))
        assert DASHBOARD_FACTS.read_text(encoding="utf-8") == wanted, (
            f"{DASHBOARD_FACTS.name} differs from {real}: {REGENERATE}")


def test_without_the_real_files_the_facts_stand_in_but_ci_fails(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(reference, "SHARED_REFERENCE", tmp_path / "shared" / "reference")
    monkeypatch.delenv("CI", raising=False)
    assert reference.source(COUNTERS_NAME) == reference.source(DASHBOARD_NAME) == "facts"
    assert reference.describe().startswith("dcgm-exporter reference files: repository facts")
    csv = reference.dcgm_counters_csv()
    assert [(c.field, c.prom_type) for c in load_counters(csv)] == [
        (f.field, f.prom_type) for f in counter_facts() if f.state == "active"]
    assert dashboard_facts_from_json(reference.dashboard_12239()) == dashboard_facts()

    monkeypatch.setenv("CI", "true")
    assert "fail" in reference.describe()
    for load in (reference.dcgm_counters_csv, reference.dashboard_12239):
        with pytest.raises(pytest.fail.Exception, match=r"CI=true and dcgm-exporter's .* missing"):
            load()
