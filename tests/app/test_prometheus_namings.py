"""Issue 31: a real Prometheus scrapes gpu-enricher under dcgm-exporter 4.9's naming, and a
mixed fleet (one node classic, one node 4.9) with the chart's naming rules, as the Operator's
ServiceMonitor scrapes them (tests/app/test_prometheus.py's scrape configuration).

Under 4.9's names alone, every panel of our dashboard has data, the alerts evaluate on the
same inputs as on a classic node, and the Adapter's and KEDA's queries answer per pod; dashboard
12239 needs the classic-name rules there. In the mixed fleet with both rule groups, every panel
of both dashboards has data from both nodes, each naming is complete on both, and nothing is
counted twice.
"""

import re
import time
from collections import Counter
from collections.abc import Iterator

import pytest
import yaml

from tests.app.test_process import Exporter
from tests.app.test_prometheus import (
    ALERTS,
    CHART,
    DASHBOARD,
    EXPORTER_POD,
    Prometheus,
    alert_names,
    assert_adapter_and_keda_answer_per_pod,
    exprs,
    load_json,
    running_prometheus,
    substitute,
    variable_queries,
)
from tests.reference import dashboard_12239, panels

NAMING_RULES = CHART / "files" / "naming-rules.yaml"
CLASSIC_POD, NEW_POD = "gpu-enricher-classic", "gpu-enricher-v49"
# Labels that tell a DCGM series apart on one node (a device and its holder).
IDENTITY = ("instance", "gpu", "GPU_I_ID", "namespace", "pod", "container", "vgpu",
            "dra_claim_name", "hpc_job")


def simulated(naming: str, node: str) -> Exporter:
    return Exporter(["--simulate", "--naming", naming, "-c", "1000"], {"NODE_NAME": node})


@pytest.fixture(scope="module")
def fleet_49(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Prometheus]:
    """One node serving dcgm-exporter 4.9's names, no naming rules."""
    with running_prometheus(tmp_path_factory.mktemp("prometheus-49"),
                            {EXPORTER_POD: simulated("4.9", "node-49")}, [ALERTS]) as prom:
        yield prom


@pytest.fixture(scope="module")
def mixed(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Prometheus]:
    """One node classic, one 4.9, and both groups of the chart's naming rules."""
    targets = {CLASSIC_POD: simulated("classic", "node-classic"),
               NEW_POD: simulated("4.9", "node-49")}
    with running_prometheus(tmp_path_factory.mktemp("prometheus-mixed"), targets,
                            [ALERTS, NAMING_RULES]) as prom:
        yield prom


def instances(prom: Prometheus) -> dict[str, str]:
    """exporter pod → the instance label Prometheus gives its target."""
    return {s["metric"]["exporter_pod"]: s["metric"]["instance"]
            for s in prom.query("count by (exporter_pod, instance) (gpu_enricher_gpu_up)")}


def panel_exprs(dashboard: dict[str, object]) -> list[str]:
    return [substitute(q) for q in exprs(dashboard) if "DCGM_" in q]


def assert_rules_healthy(prom: Prometheus, recording: int) -> None:
    deadline = time.monotonic() + 15
    while True:
        rules = [r for g in prom.get("/api/v1/rules")["groups"] for r in g["rules"]]
        if rules and all(r["health"] != "unknown" for r in rules):
            break
        assert time.monotonic() < deadline, rules
        time.sleep(0.25)
    assert sorted(r["name"] for r in rules if r["type"] == "alerting") == alert_names()
    assert [r["type"] for r in rules].count("recording") == recording
    for rule in rules:
        assert rule["health"] == "ok", rule
        # Nothing fires on the simulated nodes: their hot L4 (78-88 °C) may make the
        # temperature alert pending, never firing (10 minutes of `for`).
        assert all(alert["state"] == "pending" and rule["name"] == "GpuTemperatureHigh"
                   for alert in rule.get("alerts", ())), rule


def alert_inputs(expr: str) -> str:
    """An alert's expression with its thresholds opened up: every series it judges."""
    return re.sub(r"(== 0|< 0\.01|> 85)", ">= 0", expr)


def held_whole_gpus_and_temperatures(prom: Prometheus) -> dict[str, tuple[int, int]]:
    """instance → (series the idle alert judges, GPUs the temperature alert judges)."""
    rules = {r["alert"]: r["expr"] for g in yaml.safe_load(ALERTS.read_text())["groups"]
             for r in g["rules"] if "alert" in r}
    idle = Counter(s["metric"]["instance"]
                   for s in prom.query(alert_inputs(rules["GpuAllocatedButIdle"])))
    temps = Counter(s["metric"]["instance"]
                    for s in prom.query(alert_inputs(rules["GpuTemperatureHigh"])))
    return {i: (idle[i], temps[i]) for i in set(idle) | set(temps)}


def test_under_4_9_names_every_panel_of_our_dashboard_has_data(fleet_49: Prometheus) -> None:
    dashboard = load_json(DASHBOARD)
    found = fleet_49.eventually(substitute(q) for q in exprs(dashboard))
    assert all(found.values())
    for variable in variable_queries(dashboard):
        assert fleet_49.label_values(variable), variable
    assert fleet_49.query("DCGM_FI_DEV_GPU_UTIL") == [], "the node serves no classic name"
    # The utilisation panel is the ratio in %, the memory panel bytes in MiB.
    (util,) = [t["expr"] for p in panels(dashboard) if p["title"] == "GPU Utilization"
               for t in p["targets"]]
    at = time.time()
    shown = {s["metric"]["gpu"]: float(s["value"][1]) for s in fleet_49.query(substitute(util), at)}
    ratio = {s["metric"]["gpu"]: float(s["value"][1])
             for s in fleet_49.query("DCGM_FI_DEV_GPU_UTIL_RATIO", at)}
    assert shown and shown == pytest.approx({g: 100 * r for g, r in ratio.items()})


def test_under_4_9_names_the_alerts_judge_what_they_judge_on_a_classic_node(
        fleet_49: Prometheus, mixed: Prometheus) -> None:
    assert_rules_healthy(fleet_49, recording=4)
    (alone,) = held_whole_gpus_and_temperatures(fleet_49).values()
    by_instance = held_whole_gpus_and_temperatures(mixed)
    pods = instances(mixed)
    # The simulated node: 3 whole GPUs held by pods (the MIG A100 has no GPM, so no engine
    # activity to judge its instances by), 4 GPUs hot or not.
    assert alone == by_instance[pods[NEW_POD]] == by_instance[pods[CLASSIC_POD]] == (3, 4)


def test_under_4_9_names_the_adapter_and_keda_answer_per_pod(fleet_49: Prometheus) -> None:
    assert_adapter_and_keda_answer_per_pod(fleet_49)


@pytest.mark.reference_compat
def test_under_4_9_names_dashboard_12239_needs_the_classic_name_rules(
        fleet_49: Prometheus, mixed: Prometheus) -> None:
    """Without rules, 12239's classic queries find nothing on a 4.9 node (the gap the rules
    close); with them, every query has data from it too."""
    fleet_49.eventually(["DCGM_FI_DEV_GPU_TEMP_CELSIUS"])
    assert all(fleet_49.query(q) == [] for q in panel_exprs(dashboard_12239()))
    new = instances(mixed)[NEW_POD]
    found = mixed.eventually(
        q.replace('instance=~".+"', f'instance="{new}"') for q in panel_exprs(dashboard_12239()))
    assert all(found.values())
    instance_values, gpu_values = variable_queries(dashboard_12239())
    assert new in mixed.label_values(instance_values)
    assert mixed.label_values(gpu_values) == ["0", "1", "2", "3"]


def test_mixed_fleet_every_panel_of_both_dashboards_has_both_nodes_once(
        mixed: Prometheus) -> None:
    pods = instances(mixed)
    assert set(pods) == {CLASSIC_POD, NEW_POD}
    for dashboard in (load_json(DASHBOARD), dashboard_12239()):
        for expr in panel_exprs(dashboard):
            result = mixed.eventually([expr])[expr]
            if all("instance" in s["metric"] for s in result):
                assert {s["metric"]["instance"] for s in result} == set(pods.values()), expr
                keys = Counter(tuple(s["metric"].get(k, "") for k in IDENTITY) for s in result)
                assert max(keys.values()) == 1, (expr, keys.most_common(2))


def test_mixed_fleet_each_naming_is_complete_on_both_nodes_and_never_doubled(
        mixed: Prometheus) -> None:
    pods = instances(mixed)
    classic, new = pods[CLASSIC_POD], pods[NEW_POD]
    for name, native, derived in (("DCGM_FI_DEV_GPU_UTIL", classic, new),
                                  ("DCGM_FI_DEV_GPU_UTIL_RATIO", new, classic),
                                  ("DCGM_FI_DEV_FB_USED", classic, new),
                                  ("DCGM_FI_DEV_FB_USED_BYTES", new, classic)):
        series = mixed.eventually([f'{name}{{instance="{derived}"}}'])
        assert series
        result = mixed.query(name)
        assert {s["metric"]["instance"] for s in result} == {native, derived}, name
        for s in result:
            assert ("derived_from" in s["metric"]) == (s["metric"]["instance"] == derived), s
        keys = Counter(tuple(s["metric"].get(k, "") for k in IDENTITY) for s in result)
        assert max(keys.values()) == 1, name
    # The derived classic figure is the classic reading the 4.9 one stands for: the rule's
    # expression at the time the rule last evaluated gives the value it recorded (or, when a
    # scrape was being written as the rule ran, at the scrape before: 1 s earlier).
    derived_util = mixed.query(f'DCGM_FI_DEV_GPU_UTIL{{instance="{new}"}}')
    evaluated_at = float(derived_util[0]["value"][0])
    recorded = sorted(float(s["value"][1]) for s in derived_util)
    recomputed = [sorted(float(s["value"][1]) for s in mixed.query(
        f'round(DCGM_FI_DEV_GPU_UTIL_RATIO{{instance="{new}"}} * 100)', at))
        for at in (evaluated_at, evaluated_at - 1.0)]
    assert recorded in recomputed, (recorded, recomputed)
    # The other naming's labels come along: the 4.9 node's classic copies say Hostname and
    # DCGM_FI_DRIVER_VERSION, as classic dashboards' legends and joins expect.
    assert all(s["metric"]["Hostname"] == "node-49" and s["metric"]["DCGM_FI_DRIVER_VERSION"]
               for s in derived_util)
    assert_rules_healthy(mixed, recording=4 + 48)


def test_mixed_fleet_the_adapter_and_keda_answer_per_pod(mixed: Prometheus) -> None:
    assert_adapter_and_keda_answer_per_pod(mixed)
