"""Issue 31 in the chart: the naming switch (`naming`: the bundled list it mounts and the flag),
both host labels by default, and the recording rules between the namings
(files/naming-rules.yaml): written by scripts/naming-rules.py, accepted and unit-tested by
promtool, rendered into the PrometheusRule only when asked for."""

import re
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest
import yaml

from gpu_enricher.cli.settings import parse_config
from gpu_enricher.fields.collection import CountersSources, load_collection
from gpu_enricher.fields.names import HOSTNAME_LABEL_NAMES
from gpu_enricher.fields.namings import BY_CURRENT
from tests.chart.test_alerts import promtool
from tests.chart.test_chart import CHART, helm_template, write_values
from tests.conftest import ROOT, require_tool

RULES = CHART / "files" / "naming-rules.yaml"
RULE_TESTS = ROOT / "tests" / "monitoring" / "naming-rules-test.yaml"
GROUPS = ("gpu-enricher-classic-names", "gpu-enricher-4.9-names")


@pytest.fixture(scope="module")
def helm() -> str:
    return require_tool("helm")


def docs(helm: str, tmp_path: Path, values: dict[str, Any], *args: str) -> list[dict[str, Any]]:
    text = helm_template(helm, CHART, write_values(tmp_path, "v", values), *args).stdout
    return [d for d in yaml.safe_load_all(text) if d]


def one(found: list[dict[str, Any]], kind: str) -> dict[str, Any]:
    (doc,) = [d for d in found if d["kind"] == kind]
    return doc


def test_the_rules_file_is_what_the_generator_writes() -> None:
    result = subprocess.run([sys.executable, str(ROOT / "scripts" / "naming-rules.py"),
                             "--check"], capture_output=True, text=True, timeout=60, check=False)
    assert result.returncode == 0, result.stdout + result.stderr


def test_promtool_accepts_and_unit_tests_the_rules() -> None:
    output = promtool("check", "rules", str(RULES))
    assert "SUCCESS: 48 rules found" in output and "lint" not in output.lower(), output
    assert "SUCCESS" in promtool("test", "rules", str(RULE_TESTS))


def test_each_default_row_is_bridged_both_ways_and_marked() -> None:
    groups = {g["name"]: g["rules"] for g in yaml.safe_load(RULES.read_text())["groups"]}
    assert tuple(groups) == GROUPS
    classic = {r["record"]: r for r in groups[GROUPS[0]]}
    current = {r["record"]: r for r in groups[GROUPS[1]]}
    assert len(classic) == len(current) == 24
    for name, rule in current.items():
        rename = BY_CURRENT[name]
        assert rule["labels"] == {"derived_from": rename.classic}
        assert classic[rename.classic]["labels"] == {"derived_from": name}
        # It reads only scraped series and yields where the target serves the name.
        assert f'{rename.classic}{{derived_from=""}}' in rule["expr"]
        assert f'unless {name}{{derived_from=""}}' in rule["expr"]
    tested = {name for case in yaml.safe_load(RULE_TESTS.read_text())["tests"]
              for check in case["promql_expr_test"]
              for name in re.findall(r"DCGM_FI_\w+", check["expr"])}
    # Every unit the rules convert (%, MiB, MHz, mJ, MB/s) has a case in each direction it
    # is used by dashboards.
    assert {"DCGM_FI_DEV_GPU_UTIL", "DCGM_FI_DEV_GPU_UTIL_RATIO", "DCGM_FI_DEV_FB_USED",
            "DCGM_FI_DEV_FB_USED_BYTES", "DCGM_FI_DEV_SM_CLOCK", "DCGM_FI_DEV_SM_CLOCK_HERTZ",
            "DCGM_FI_DEV_TOTAL_ENERGY_CONSUMPTION", "DCGM_FI_DEV_GPU_ENERGY_JOULES_TOTAL",
            "DCGM_FI_DEV_NVLINK_BANDWIDTH_TOTAL"} <= tested


@pytest.mark.parametrize(("classic_names", "names49"),
                         [(False, False), (True, False), (False, True), (True, True)])
def test_the_prometheusrule_carries_the_groups_asked_for(
        helm: str, tmp_path: Path, classic_names: bool, names49: bool) -> None:
    values = {"prometheusRule": {"enabled": True, "namingRules": {
        "classicNames": classic_names, "names49": names49}}}
    rule = one(docs(helm, tmp_path, values), "PrometheusRule")
    names = [g["name"] for g in rule["spec"]["groups"]]
    expected = [g for g, on in zip(GROUPS, (classic_names, names49), strict=True) if on]
    assert [n for n in names if n in GROUPS] == expected
    shipped = {g["name"]: g for g in yaml.safe_load(RULES.read_text())["groups"]}
    for group in rule["spec"]["groups"]:
        if group["name"] in GROUPS:
            assert group == shipped[group["name"]], "the file's group, verbatim"
    assert "gpu-enricher" in names, "the alerts stay"


@pytest.mark.parametrize("how", ["values", "set"])
def test_naming_4_9_mounts_the_4_9_list_and_passes_the_flag(
        helm: str, tmp_path: Path, how: str) -> None:
    """`naming: "4.9"` (or `--set naming=4.9`, which Helm reads as a number): the counters
    ConfigMap holds the bundled 4.9 list, the exporter is told --naming=4.9, and what it reads
    from the mount is served under the 4.9 names."""
    found = (docs(helm, tmp_path, {"naming": "4.9"}) if how == "values"
             else docs(helm, tmp_path, {}, "--set", "naming=4.9"))
    counters = next(d for d in found if d["kind"] == "ConfigMap"
                    and d["metadata"]["name"].endswith("-counters"))
    text = counters["data"]["counters.csv"]
    assert text == (CHART / "files" / "default-counters-4.9.csv").read_text()
    (container,) = one(found, "DaemonSet")["spec"]["template"]["spec"]["containers"]
    assert "--naming=4.9" in container["args"]
    config, warnings = parse_config(container["args"], {"NODE_NAME": "node-a"})
    assert config.naming == "4.9" and warnings == []
    (tmp_path / "counters.csv").write_text(text)
    lines = load_collection(CountersSources(collectors=tmp_path / "counters.csv",
                                            collectors_origin="--collectors")).counters
    assert "DCGM_FI_DEV_GPU_UTIL_RATIO" in {line.field for line in lines}


def test_both_host_labels_by_default_one_when_chosen(helm: str, tmp_path: Path) -> None:
    (container,) = one(docs(helm, tmp_path, {}), "DaemonSet")["spec"]["template"]["spec"][
        "containers"]
    assert "--hostname-label-name=both" in container["args"]
    config, _ = parse_config(container["args"], {"NODE_NAME": "node-a"})
    assert config.hostname == "node-a"
    assert config.hostname.labels == HOSTNAME_LABEL_NAMES
    (chosen,) = one(docs(helm, tmp_path, {"hostnameLabelName": "hostname"}),
                    "DaemonSet")["spec"]["template"]["spec"]["containers"]
    config, _ = parse_config(chosen["args"], {"NODE_NAME": "node-a"})
    assert config.hostname.labels == ("hostname",)
