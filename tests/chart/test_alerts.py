"""The chart's alert rules: promtool accepts them and its unit tests prove when they fire.

tests/monitoring/alerts-test.yaml feeds crafted series (shaped like what Prometheus stores from
gpu-enricher behind the chart's ServiceMonitor) to helm/gpu-enricher/files/alerts.yaml.
"""

import subprocess
from pathlib import Path
from typing import Any

import yaml

from tests.conftest import ROOT, require_tool

RULES = ROOT / "helm" / "gpu-enricher" / "files" / "alerts.yaml"
RULE_TESTS = ROOT / "tests" / "monitoring" / "alerts-test.yaml"
ALERTS = {"GpuEnricherDown", "GpuNotReporting", "GpuTemperatureHigh",
          "GpuEnricherPodMappingDown", "GpuAllocatedButIdle", "GpuEnricherConfigReloadFailed",
          "GpuEnricherScrapesWait"}


def load(path: Path) -> dict[str, Any]:
    data: dict[str, Any] = yaml.safe_load(path.read_text())
    return data


def promtool(*args: str) -> str:
    result = subprocess.run([require_tool("promtool"), *args], capture_output=True, text=True,
                            timeout=60, check=False, cwd=ROOT)
    output = result.stdout + result.stderr
    assert result.returncode == 0, output
    return output


def test_promtool_check_rules() -> None:
    output = promtool("check", "rules", str(RULES))
    assert "SUCCESS" in output and "lint" not in output.lower(), output


def test_promtool_rule_unit_tests() -> None:
    assert "SUCCESS" in promtool("test", "rules", str(RULE_TESTS))


def test_every_alert_has_severity_annotations_and_a_unit_test() -> None:
    rules = [rule for group in load(RULES)["groups"] for rule in group["rules"]
             if "alert" in rule]
    assert {rule["alert"] for rule in rules} == ALERTS
    for rule in rules:
        assert rule["labels"]["severity"] in {"critical", "warning", "info"}, rule
        assert rule["annotations"]["summary"] and rule["annotations"]["description"], rule
        assert "Runbook:" in rule["annotations"]["description"], rule
    tests = load(RULE_TESTS)
    assert [(RULE_TESTS.parent / f).resolve() for f in tests["rule_files"]] == [RULES]
    firing: dict[str, list[dict[str, str]]] = {}
    for case in tests["tests"]:
        for check in case.get("alert_rule_test", ()):
            for alert in check["exp_alerts"]:
                firing.setdefault(check["alertname"], []).append(alert["exp_labels"])
    assert set(firing) == ALERTS, "every alert is shown to fire at least once"
    # The idle alert is proven for a whole GPU and for a MIG instance, each naming its pod,
    # under the classic names (node-a) and dcgm-exporter 4.9's (node-b, `hostname` only).
    idle = firing["GpuAllocatedButIdle"]
    assert {("GPU_I_ID" in labels, labels["pod"], "Hostname" in labels) for labels in idle} == {
        (False, "llm-trainer-0", True), (True, "notebook-alice", True),
        (False, "llm-trainer-1", False), (True, "notebook-bob", False)}
    # The temperature alert under both namings and on a node serving both: once per GPU.
    hot = firing["GpuTemperatureHigh"]
    assert sorted(labels["UUID"] for labels in hot) == ["GPU-2", "GPU-a0", "GPU-b0", "GPU-c0"]


def test_every_recording_rule_has_a_unit_test() -> None:
    recorded = {rule["record"] for group in load(RULES)["groups"] for rule in group["rules"]
                if "record" in rule}
    assert recorded == {"namespace:gpu_enricher_gpu_hours:increase1h",
                        "namespace_pod:gpu_enricher_gpu_hours:increase1h",
                        "namespace:gpu_enricher_energy_kwh:increase1h",
                        "namespace_pod:gpu_enricher_energy_kwh:increase1h"}
    tested = {check["expr"].split("{")[0] for case in load(RULE_TESTS)["tests"]
              for check in case.get("promql_expr_test", ())}
    assert tested == recorded
