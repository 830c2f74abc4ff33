"""dcgm-exporter's own files that the compatibility tests read: its default counters file
(`etc/default-counters.csv`) and Grafana dashboard 12239 (NVIDIA DCGM Exporter Dashboard).

Both belong to another project and are never copied into this repository. Where the folder
`../shared/reference/` lies beside the checkout (CI has it), the tests read the real files there.
Elsewhere (a fresh clone) they read the facts this repository keeps about them in `tests/data/`:
the counters' field names and Prometheus types, active and commented out; the dashboard's panel
titles, queries and units and its variables. tests/fields/test_reference_data.py keeps those facts
equal to the real files wherever the real files exist. Under CI=true a missing real file fails
the test that wanted it: CI proves compatibility against the files themselves.

Regenerate the facts from the real files: `python -m tests.reference --write`.
"""

import argparse
import atexit
import functools
import json
import os
import re
import shutil
import sys
import tempfile
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Literal

import pytest

ROOT = Path(__file__).resolve().parents[1]
SHARED_REFERENCE = ROOT.parent / "shared" / "reference"
COUNTERS_NAME = "dcgm-default-counters.csv"
DASHBOARD_NAME = "dcgm-exporter-dashboard.json"
DATA = ROOT / "tests" / "data"
COUNTER_FACTS = DATA / "dcgm-exporter-counters-fields.txt"
DASHBOARD_FACTS = DATA / "dashboard-12239-facts.json"

Source = Literal["shared", "facts"]
State = Literal["active", "commented"]

# `FIELD, type, help`, possibly behind a comment mark; a field name has no blanks.
COUNTER_LINE = re.compile(r"^(?P<field>[A-Za-z_]\w*)\s*,\s*(?P<type>[A-Za-z]+)\s*,")
REGENERATE = "python -m tests.reference --write"


def on_ci() -> bool:
    return os.environ.get("CI", "").lower() == "true"


def shared_file(name: str) -> Path | None:
    """The real file in ../shared/reference/; None where it is absent (not on CI).

    Under CI=true an absent file fails the calling test: never a silent fallback there.
    """
    path = SHARED_REFERENCE / name
    if path.is_file():
        return path
    if on_ci():
        pytest.fail(f"CI=true and dcgm-exporter's {name} is missing from {SHARED_REFERENCE}: "
                    "CI checks compatibility against the real file, not the repository's facts",
                    pytrace=False)
    return None


def source(name: str) -> Source:
    """Where the tests take `name` from, without failing (for reports)."""
    return "shared" if (SHARED_REFERENCE / name).is_file() else "facts"


def describe() -> str:
    """One line for pytest's header: which source the reference tests use."""
    sources = {source(COUNTERS_NAME), source(DASHBOARD_NAME)}
    if sources == {"shared"}:
        return f"dcgm-exporter reference files: real files in {SHARED_REFERENCE}"
    where = f"repository facts in {DATA} ({SHARED_REFERENCE} lacks them)"
    if on_ci():
        return f"dcgm-exporter reference files: missing under CI=true, their tests fail; {where}"
    if sources == {"facts"}:
        return f"dcgm-exporter reference files: {where}"
    return f"dcgm-exporter reference files: partly real ({SHARED_REFERENCE}), partly {where}"


# --- the counters file ---------------------------------------------------------------------------


@dataclass(frozen=True)
class CounterFact:
    """One line of dcgm-exporter's counters file naming a field: read (active) or commented."""

    state: State
    field: str
    prom_type: str


def counter_facts_from_csv(text: str) -> tuple[CounterFact, ...]:
    """Each line of a counters file that names a field, in order, help texts left out."""
    facts: list[CounterFact] = []
    for line_no, raw in enumerate(text.splitlines(), start=1):
        line = raw.strip()
        if not line:
            continue
        commented = line.startswith("#")
        found = COUNTER_LINE.match(line.lstrip("#").strip() if commented else line)
        if found is None:
            if commented:
                continue  # prose
            raise ValueError(f"line {line_no}: not `FIELD, type, help`: {raw!r}")
        facts.append(CounterFact("commented" if commented else "active", found["field"],
                                 found["type"]))
    return tuple(facts)


def format_counter_facts(facts: tuple[CounterFact, ...]) -> str:
    header = (
        "# Facts about dcgm-exporter's default counters file (etc/default-counters.csv), not the\n"
        "# file: each line naming a field, in the file's order, as `state field type`. `active`\n"
        "# lines are read by dcgm-exporter, `commented` ones are there but commented out.\n"
        "# tests/fields/test_reference_data.py keeps this equal to the file where it is at hand.\n"
        f"# Regenerate: {REGENERATE}\n"
    )
    width = max(len(f.field) for f in facts)
    return header + "".join(f"{f.state:<9} {f.field:<{width}} {f.prom_type}\n" for f in facts)


def parse_counter_facts(text: str) -> tuple[CounterFact, ...]:
    facts: list[CounterFact] = []
    for line_no, raw in enumerate(text.splitlines(), start=1):
        if not raw.strip() or raw.startswith("#"):
            continue
        words = raw.split()
        if len(words) != 3 or words[0] not in ("active", "commented"):
            raise ValueError(f"{COUNTER_FACTS}:{line_no}: not `active|commented FIELD TYPE`")
        state: State = "active" if words[0] == "active" else "commented"
        facts.append(CounterFact(state, words[1], words[2]))
    return tuple(facts)


def counter_facts() -> tuple[CounterFact, ...]:
    """The repository's facts about the counters file."""
    return parse_counter_facts(COUNTER_FACTS.read_text(encoding="utf-8"))


def synthesize_counters_csv(facts: tuple[CounterFact, ...]) -> str:
    """A counters file with the facts' fields, types and comment marks; neutral help texts."""
    lines = [f"# Synthesized by tests/reference.py from {COUNTER_FACTS.relative_to(ROOT)}",
             "# (dcgm-exporter's default counters; the help texts are placeholders)."]
    for fact in facts:
        mark = "# " if fact.state == "commented" else ""
        lines.append(f"{mark}{fact.field}, {fact.prom_type}, "
                     f"{fact.field} as dcgm-exporter's default counters list it.")
    return "\n".join(lines) + "\n"


@functools.cache
def _scratch() -> Path:
    path = Path(tempfile.mkdtemp(prefix="dcgm-reference-"))
    atexit.register(shutil.rmtree, path, True)
    return path


def dcgm_counters_csv() -> Path:
    """dcgm-exporter's default counters file, or one synthesized from the repository's facts."""
    real = shared_file(COUNTERS_NAME)
    if real is not None:
        return real
    path = _scratch() / COUNTERS_NAME
    if not path.exists():
        path.write_text(synthesize_counters_csv(counter_facts()), encoding="utf-8")
    return path


# --- dashboard 12239 -----------------------------------------------------------------------------


@dataclass(frozen=True)
class PanelFact:
    title: str
    type: str
    unit: str
    exprs: tuple[str, ...]


@dataclass(frozen=True)
class VariableFact:
    name: str
    type: str
    query: str


@dataclass(frozen=True)
class DashboardFacts:
    panels: tuple[PanelFact, ...]
    variables: tuple[VariableFact, ...]


def panels(dashboard: dict[str, Any]) -> Iterator[dict[str, Any]]:
    for panel in dashboard["panels"]:
        yield panel
        yield from panel.get("panels", [])  # collapsed rows nest theirs


def unit(panel: dict[str, Any]) -> str:
    """A panel's unit, old (graph yaxes, gauge fieldOptions) or current (fieldConfig)."""
    if "yaxes" in panel:
        return str(panel["yaxes"][0]["format"])
    if "fieldOptions" in panel.get("options", {}):
        return str(panel["options"]["fieldOptions"]["defaults"]["unit"])
    return str(panel["fieldConfig"]["defaults"]["unit"])


def dashboard_facts_from_json(dashboard: dict[str, Any]) -> DashboardFacts:
    """The panels that query (title, type, unit, exprs) and the variables of a dashboard."""
    querying = tuple(
        PanelFact(str(p["title"]), str(p["type"]), unit(p),
                  tuple(str(t["expr"]) for t in p["targets"]))
        for p in panels(dashboard) if p.get("targets"))
    variables = tuple(VariableFact(str(v["name"]), str(v["type"]), str(v["query"]))
                      for v in dashboard["templating"]["list"])
    return DashboardFacts(querying, variables)


def format_dashboard_facts(facts: DashboardFacts) -> str:
    document = {
        "about": ("Facts about Grafana dashboard 12239 (NVIDIA DCGM Exporter Dashboard, "
                  "grafana/dcgm-exporter-dashboard.json in dcgm-exporter), not the dashboard: "
                  "each panel's title, type, unit and queries, and the variables. "
                  "tests/fields/test_reference_data.py keeps them equal to the file where it is "
                  f"at hand. Regenerate: {REGENERATE}"),
        "panels": [{"title": p.title, "type": p.type, "unit": p.unit, "exprs": list(p.exprs)}
                   for p in facts.panels],
        "variables": [{"name": v.name, "type": v.type, "query": v.query}
                      for v in facts.variables],
    }
    return json.dumps(document, indent=2, ensure_ascii=False) + "\n"


def dashboard_facts() -> DashboardFacts:
    """The repository's facts about dashboard 12239."""
    document = json.loads(DASHBOARD_FACTS.read_text(encoding="utf-8"))
    return DashboardFacts(
        tuple(PanelFact(p["title"], p["type"], p["unit"], tuple(p["exprs"]))
              for p in document["panels"]),
        tuple(VariableFact(v["name"], v["type"], v["query"]) for v in document["variables"]))


def dashboard_from_facts(facts: DashboardFacts) -> dict[str, Any]:
    """A Grafana dashboard (current schema) holding just the facts: the tests' helpers read it
    the way they read the real one."""
    return {
        "title": "dashboard 12239, rebuilt from tests/data/dashboard-12239-facts.json",
        "panels": [{"id": number, "title": p.title, "type": p.type,
                    "fieldConfig": {"defaults": {"unit": p.unit}},
                    "targets": [{"refId": chr(ord("A") + i), "expr": e}
                                for i, e in enumerate(p.exprs)]}
                   for number, p in enumerate(facts.panels, start=1)],
        "templating": {"list": [{"name": v.name, "type": v.type, "query": v.query}
                                for v in facts.variables]},
    }


def dashboard_12239() -> dict[str, Any]:
    """Dashboard 12239 as JSON: the real file, or rebuilt from the repository's facts."""
    real = shared_file(DASHBOARD_NAME)
    if real is not None:
        data: dict[str, Any] = json.loads(real.read_text(encoding="utf-8"))
        return data
    return dashboard_from_facts(dashboard_facts())


# --- regeneration --------------------------------------------------------------------------------


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        prog="python -m tests.reference",
        description=f"Derive tests/data's facts from the real files in {SHARED_REFERENCE}.")
    parser.add_argument("--write", action="store_true", help="write them (default: compare)")
    args = parser.parse_args(argv)
    counters = SHARED_REFERENCE / COUNTERS_NAME
    dashboard = SHARED_REFERENCE / DASHBOARD_NAME
    for path in (counters, dashboard):
        if not path.is_file():
            print(f"{path} is missing", file=sys.stderr)
            return 2
    wanted = {
        COUNTER_FACTS: format_counter_facts(counter_facts_from_csv(counters.read_text("utf-8"))),
        DASHBOARD_FACTS: format_dashboard_facts(
            dashboard_facts_from_json(json.loads(dashboard.read_text("utf-8")))),
    }
    stale = 0
    for path, text in wanted.items():
        current = path.read_text(encoding="utf-8") if path.exists() else None
        if current == text:
            print(f"{path.relative_to(ROOT)}: up to date")
        elif args.write:
            path.parent.mkdir(parents=True, exist_ok=True)
            path.write_text(text, encoding="utf-8")
            print(f"{path.relative_to(ROOT)}: written")
        else:
            print(f"{path.relative_to(ROOT)}: stale", file=sys.stderr)
            stale += 1
    return 1 if stale else 0


if __name__ == "__main__":
    sys.exit(main())
