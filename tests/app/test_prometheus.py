"""A real Prometheus (Debian package, loopback only) scrapes the real exporter process the way
the Prometheus Operator scrapes it through the chart's ServiceMonitor.

The scrape configuration reproduces what the Operator generates: target labels pod, namespace,
container, service, endpoint, job from Kubernetes service discovery, then the chart's
relabelings, with honor_labels. Prometheus 2.x asks for OpenMetrics first, so this also proves
its strict parser accepts our output (DCGM counters typed `unknown`, `# EOF`, escaping).

Then: every query of dashboard 12239 and of our own dashboard finds data, the Prometheus
Adapter's and KEDA's example queries answer per pod, the alert rules evaluate, and the pod label
is the workload's where a pod holds the device and absent everywhere else (never the exporter's
own pod).
"""

import json
import re
import shutil
import subprocess
import time
import urllib.error
import urllib.parse
import urllib.request
from collections.abc import Iterable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest
import yaml

from tests.app.test_process import Exporter, free_port
from tests.conftest import ROOT, require_tool
from tests.reference import dashboard_12239, panels, unit

DASHBOARD = ROOT / "helm" / "gpu-enricher" / "files" / "dashboards" / "gpu-enricher.json"
ALERTS = ROOT / "helm" / "gpu-enricher" / "files" / "alerts.yaml"


def alert_names() -> list[str]:
    """The chart's alerting rules, by name, as its file lists them."""
    groups = yaml.safe_load(ALERTS.read_text())["groups"]
    return sorted(rule["alert"] for group in groups for rule in group["rules"] if "alert" in rule)


ADAPTER = ROOT / "examples" / "prometheus-adapter-values.yaml"
HPA = ROOT / "examples" / "hpa.yaml"
KEDA = ROOT / "examples" / "keda-scaledobject.yaml"
CHART = ROOT / "helm" / "gpu-enricher"

EXPORTER_POD = "gpu-enricher-x7k2p"
EXPORTER_NAMESPACE = "gpu-monitoring"
# What Kubernetes service discovery and the Operator put on the target (pod/namespace/container
# of the exporter pod, the Service name as job).
TARGET_LABELS = {"pod": EXPORTER_POD, "namespace": EXPORTER_NAMESPACE,
                 "container": "gpu-enricher", "service": "gpu-enricher",
                 "endpoint": "metrics", "job": "gpu-enricher"}
# The chart's ServiceMonitor relabelings, as the chart writes them (camelCase);
# test_chart_servicemonitor_renders_these_relabelings keeps the chart and this test in step.
RELABELINGS: list[dict[str, Any]] = [
    {"sourceLabels": ["pod"], "targetLabel": "exporter_pod"},
    {"sourceLabels": ["namespace"], "targetLabel": "exporter_namespace"},
    {"action": "labeldrop", "regex": "pod|namespace|container"},
]

# Dashboard variables, substituted the way "All" selects them (their allValue; claim's is .*,
# so that series without a DRA claim still match); intervals as Grafana fills them.
VARIABLES = {"instance": ".+", "gpu": ".+", "namespace": ".+", "pod": ".+", "claim": ".*",
             "__rate_interval": "1m", "__interval": "1m", "__range": "1h"}
LABEL_VALUES = re.compile(r"^label_values\((?P<match>.+),\s*(?P<label>\w+)\)$")

Series = dict[str, Any]


def prometheus_relabel(relabeling: dict[str, Any]) -> dict[str, Any]:
    """An Operator RelabelConfig (camelCase) in Prometheus syntax (snake_case)."""
    return {re.sub(r"[A-Z]", lambda m: "_" + m.group().lower(), k): v
            for k, v in relabeling.items()}


def substitute(expr: str) -> str:
    return re.sub(r"\$\{?(\w+)\}?", lambda m: VARIABLES[m.group(1)], expr)


def exprs(dashboard: dict[str, Any]) -> list[str]:
    return [t["expr"] for p in panels(dashboard) for t in p.get("targets", [])]


def variable_queries(dashboard: dict[str, Any]) -> list[str]:
    return [v["query"] for v in dashboard["templating"]["list"] if v["type"] == "query"]


def by_labels(result: list[Series]) -> list[tuple[str, str]]:
    """An instant vector in a fixed order: (labels as JSON, value)."""
    return sorted((json.dumps(s["metric"], sort_keys=True), s["value"][1]) for s in result)


def load_json(path: Path) -> dict[str, Any]:
    data: dict[str, Any] = json.loads(path.read_text())
    return data


def load_yaml(path: Path) -> dict[str, Any]:
    data: dict[str, Any] = yaml.safe_load(path.read_text())
    return data


@dataclass
class Prometheus:
    base: str
    proc: subprocess.Popen[bytes]
    log: Path

    def get(self, path: str, params: Iterable[tuple[str, str]] = ()) -> Any:
        url = f"{self.base}{path}?{urllib.parse.urlencode(list(params))}"
        with urllib.request.urlopen(url, timeout=5) as resp:
            answer = json.load(resp)
        assert answer["status"] == "success", answer
        return answer["data"]

    def query(self, promql: str, at: float | None = None) -> list[Series]:
        """The instant vector of `promql` now, or at Unix time `at` (two queries that must see
        the same samples)."""
        params = [("query", promql)] + ([] if at is None else [("time", f"{at:.3f}")])
        data = self.get("/api/v1/query", params)
        assert data["resultType"] == "vector", (promql, data)
        result: list[Series] = data["result"]
        return result

    def label_values(self, variable_query: str) -> list[str]:
        """A Grafana `label_values(selector, label)` variable through the label values API."""
        found = LABEL_VALUES.match(substitute(variable_query))
        assert found, variable_query
        values: list[str] = self.get(f"/api/v1/label/{found['label']}/values",
                                     [("match[]", found["match"])])
        return values

    def eventually(self, queries: Iterable[str], timeout: float = 20) -> dict[str, list[Series]]:
        """Poll until every query returns at least one series."""
        pending = list(dict.fromkeys(queries))
        results: dict[str, list[Series]] = {}
        deadline = time.monotonic() + timeout
        while True:
            assert self.proc.poll() is None, self.log.read_text()[-3000:]
            for promql in list(pending):
                result = self.query(promql)
                if result:
                    results[promql] = result
                    pending.remove(promql)
            if not pending:
                return results
            assert time.monotonic() < deadline, f"no series for {pending}"
            time.sleep(0.25)


def scrape_config(exporter: Exporter, pod: str) -> dict[str, Any]:
    """One exporter as the Operator's ServiceMonitor scrapes it (TARGET_LABELS, the exporter
    pod named `pod`)."""
    return {
        # The Operator's job name; the job label comes from the Service (TARGET_LABELS).
        "job_name": f"serviceMonitor/{EXPORTER_NAMESPACE}/{pod}/0",
        "honor_labels": True,
        "static_configs": [{"targets": [f"127.0.0.1:{exporter.port}"],
                            "labels": {**TARGET_LABELS, "pod": pod}}],
        "relabel_configs": [prometheus_relabel(r) for r in RELABELINGS],
    }


@contextmanager
def running_prometheus(tmp: Path, targets: dict[str, Exporter],
                       rule_files: Iterable[Path]) -> Iterator[Prometheus]:
    """A real Prometheus scraping `targets` (exporter pod name → exporter) every second and
    evaluating `rule_files` every second; yields once every exporter is ready and Prometheus
    stored a sample of each, and stops it (and the exporters) after."""
    binary = require_tool("prometheus")
    port = free_port()
    config = {
        "global": {"scrape_interval": "1s", "evaluation_interval": "1s"},
        "rule_files": [str(f) for f in rule_files],
        "scrape_configs": [scrape_config(exp, pod) for pod, exp in targets.items()],
    }
    (tmp / "prometheus.yml").write_text(yaml.safe_dump(config))
    log = tmp / "prometheus.log"
    with log.open("wb") as log_file:
        proc = subprocess.Popen(
            [binary, f"--config.file={tmp / 'prometheus.yml'}",
             f"--web.listen-address=127.0.0.1:{port}", f"--storage.tsdb.path={tmp / 'data'}"],
            stdout=subprocess.DEVNULL, stderr=log_file)
    prom = Prometheus(f"http://127.0.0.1:{port}", proc, log)
    try:
        for exporter in targets.values():
            exporter.wait_ready()
        deadline = time.monotonic() + 30
        while True:  # the API answers first, the first scrape follows ~5 s after start
            assert proc.poll() is None, log.read_text()[-3000:]
            try:
                if len(prom.query("count by (instance) (gpu_enricher_gpu_up)")) == len(targets):
                    break
            except (urllib.error.URLError, ConnectionError):
                pass
            assert time.monotonic() < deadline, "Prometheus never stored a sample"
            time.sleep(0.2)
        yield prom
    finally:
        proc.terminate()
        try:
            proc.wait(timeout=15)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait()
        for exporter in targets.values():
            exporter.stop()


@pytest.fixture(scope="module")
def prometheus(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Prometheus]:
    exporter = Exporter(["--simulate", "-c", "1000"], {"NODE_NAME": "sim-node"})
    with running_prometheus(tmp_path_factory.mktemp("prometheus"), {EXPORTER_POD: exporter},
                            [ALERTS]) as prom:
        yield prom


def test_target_is_up_with_the_servicemonitor_labels(prometheus: Prometheus) -> None:
    targets = prometheus.get("/api/v1/targets")["activeTargets"]
    assert len(targets) == 1
    target = targets[0]
    assert target["health"] == "up" and target["lastError"] == "", target
    assert target["labels"] == {
        "instance": target["labels"]["instance"], "job": "gpu-enricher", "service": "gpu-enricher",
        "endpoint": "metrics", "exporter_pod": EXPORTER_POD,
        "exporter_namespace": EXPORTER_NAMESPACE}
    # The exporter-down alert's selector matches the job the ServiceMonitor produces.
    up = prometheus.query('up{job=~".*gpu-enricher.*"} == 1')
    assert len(up) == 1


@pytest.mark.reference_compat
def test_dashboard_12239_queries_return_data(prometheus: Prometheus) -> None:
    reference = dashboard_12239()
    queries = exprs(reference)
    assert len(queries) == 8
    prometheus.eventually(substitute(q) for q in queries)
    variables = variable_queries(reference)
    assert variables == ["label_values(DCGM_FI_DEV_GPU_TEMP, instance)",
                         "label_values(DCGM_FI_DEV_GPU_TEMP, gpu)"]
    assert prometheus.label_values(variables[0])
    assert prometheus.label_values(variables[1]) == ["0", "1", "2", "3"]
    temps = prometheus.query("DCGM_FI_DEV_GPU_TEMP")
    # Both host labels by default (issue 31): 4.8.2's Hostname and 4.8.3's hostname.
    assert all(s["metric"]["Hostname"] == s["metric"]["hostname"] == "sim-node"
               and s["metric"]["modelName"] for s in temps)
    assert len(prometheus.query("DCGM_FI_DEV_TOTAL_ENERGY_CONSUMPTION")) == 6
    assert prometheus.query('gpu_enricher_gpu_up{gpu="0"} == 1')


@pytest.mark.reference_compat
def test_on_a_classic_node_our_panels_show_what_12239s_show(prometheus: Prometheus) -> None:
    """Our panels read the 4.9 names only where a node serves no classic one: on a classic
    node each shows exactly what dashboard 12239's panel of the same title shows."""
    ours = {p["title"]: p for p in panels(load_json(DASHBOARD))}
    prometheus.eventually(substitute(q) for q in exprs(dashboard_12239()))
    for panel in panels(dashboard_12239()):
        for target, counterpart in zip(panel["targets"], ours[panel["title"]]["targets"],
                                       strict=True):
            at = time.time()
            theirs = prometheus.query(substitute(target["expr"]), at)
            mine = prometheus.query(substitute(counterpart["expr"]), at)
            assert theirs and by_labels(mine) == by_labels(theirs), panel["title"]


def test_our_dashboard_queries_return_data(prometheus: Prometheus) -> None:
    dashboard = load_json(DASHBOARD)
    prometheus.eventually(substitute(q) for q in exprs(dashboard))
    for variable in variable_queries(dashboard):
        assert prometheus.label_values(variable), variable
    assert prometheus.label_values(
        'label_values(gpu_enricher_device_allocation_info{admin_access!="true"}, namespace)') == [
        "inference", "ml", "research", "vision"]  # vision: through DRA claims
    # The GPU Operator's exporter pod monitors through an admin-access claim: listed, marked.
    assert prometheus.label_values(
        'label_values(gpu_enricher_device_allocation_info{admin_access="true"}, namespace)'
    ) == ["gpu-operator"]
    variables = {v["name"]: v for v in dashboard["templating"]["list"]}
    for name, variable in variables.items():  # "All" as substituted above
        if variable.get("allValue") is not None:
            assert VARIABLES[name] == variable["allValue"], name
    assert prometheus.label_values(variables["claim"]["query"]) == ["single-gpu", "small-slice"]
    (claims,) = [substitute(t["expr"]) for p in panels(dashboard)
                 if p["title"] == "GPUs by DRA claim" for t in p["targets"]]
    rows = prometheus.query(claims)
    assert sorted((r["metric"]["dra_claim_name"], r["metric"]["pod"], r["metric"]["gpu"],
                   r["metric"].get("GPU_I_ID", "")) for r in rows) == [
        ("single-gpu", "detector-0", "3", ""), ("small-slice", "slicer-0", "2", "2")]


@pytest.mark.reference_compat
def test_dashboard_has_every_panel_of_12239_with_its_query_and_unit() -> None:
    reference = dashboard_12239()
    ours = load_json(DASHBOARD)
    by_title = {p["title"]: p for p in panels(ours)}
    for panel in panels(reference):
        counterpart = by_title[panel["title"]]
        assert unit(counterpart) == unit(panel), panel["title"]
        for target in panel["targets"]:
            # 12239's classic selector where a node serves it, else 4.9's (either naming).
            found = re.search(r"DCGM_\w+\{[^}]*\}", target["expr"])
            assert found, target["expr"]
            assert any(found[0] in t["expr"] and " or on(instance) " in t["expr"]
                       for t in counterpart["targets"]), panel["title"]
    assert ours["uid"] == "gpu-enricher" and ours["schemaVersion"] >= 39
    variables = {v["name"]: v for v in ours["templating"]["list"]}
    assert variables["datasource"]["type"] == "datasource"
    assert variables["datasource"]["query"] == "prometheus"
    for name, v in variables.items():
        if name != "datasource":
            assert v["datasource"] == {"type": "prometheus", "uid": "${datasource}"}, name
    for name, v in {v["name"]: v for v in dashboard_12239()["templating"]["list"]
                    if v["type"] == "query"}.items():
        either = '{__name__=~"DCGM_FI_DEV_GPU_TEMP|DCGM_FI_DEV_GPU_TEMP_CELSIUS"}'
        assert variables[name]["query"] == v["query"].replace("DCGM_FI_DEV_GPU_TEMP", either), name
    assert variables["namespace"]["query"] == (  # monitors (admin-access claims) hold nothing
        'label_values(gpu_enricher_device_allocation_info{admin_access!="true"}, namespace)')
    assert "gpu_enricher_device_allocation_info" in variables["pod"]["query"]
    ids = [p["id"] for p in panels(ours)]
    assert len(ids) == len(set(ids)), "panel ids are unique"
    rows = [p["title"] for p in panels(ours) if p["type"] == "row"]
    assert len(rows) == 7, rows
    for panel in panels(ours):
        assert {"h", "w", "x", "y"} <= set(panel["gridPos"]), panel["title"]
        if panel["type"] != "row":
            assert panel["datasource"] == {"type": "prometheus", "uid": "${datasource}"}
            assert all(t["datasource"] == panel["datasource"] for t in panel["targets"])
    text = json.dumps(ours)
    for metric in ("gpu_enricher_kubelet_allocated_devices",
                   "gpu_enricher_kubelet_allocatable_devices",
                   "gpu_enricher_device_allocation_info", "gpu_enricher_gpu_up",
                   "gpu_enricher_kubelet_up", "gpu_enricher_collection_errors_total",
                   "gpu_enricher_last_collection_duration_seconds",
                   "gpu_enricher_pod_gpu_seconds_total", "gpu_enricher_pod_energy_joules_total"):
        assert metric in text, metric


def test_alert_rules_evaluate_against_real_data(prometheus: Prometheus) -> None:
    deadline = time.monotonic() + 10
    while True:
        rules = [rule for group in prometheus.get("/api/v1/rules")["groups"]
                 for rule in group["rules"]]
        if rules and all(r["health"] != "unknown" for r in rules):
            break
        assert time.monotonic() < deadline, rules
        time.sleep(0.25)
    assert sorted(r["name"] for r in rules if r["type"] == "alerting") == alert_names()
    for rule in rules:
        assert rule["health"] == "ok", rule
        # Nothing fires on the simulated node: its hot L4 (78-88 °C) may make the temperature
        # alert pending, never firing (10 minutes of `for`).
        assert all(alert["state"] == "pending" and rule["name"] == "GpuTemperatureHigh"
                   for alert in rule.get("alerts", ())), rule
    # The chargeback recording rules: GPU-hours of the simulated node's namespaces.
    recorded = prometheus.eventually(['namespace:gpu_enricher_gpu_hours:increase1h{namespace="ml"}',
                                      'namespace_pod:gpu_enricher_gpu_hours:increase1h'
                                      '{namespace="research",pod="notebook-alice"}'])
    assert all(float(s["value"][1]) > 0 for found in recorded.values() for s in found), recorded


def adapter_query(rule: dict[str, Any], namespace: str, pod: str) -> str:
    """A Prometheus Adapter rule's metricsQuery for one pod, as the adapter fills it in."""
    return (str(rule["metricsQuery"])
            .replace("<<.LabelMatchers>>", f'namespace="{namespace}",pod="{pod}"')
            .replace("<<.GroupBy>>", "pod"))


def assert_adapter_and_keda_answer_per_pod(prometheus: Prometheus) -> None:
    """The examples' Adapter rules and KEDA query against whatever the fleet serves."""
    custom = load_yaml(ADAPTER)["rules"]["custom"]
    published = {rule["name"]["as"] for rule in custom}
    assert {"gpu_utilization", "gpu_memory_used"} <= published
    for rule in custom:
        assert rule["resources"]["overrides"] == {"namespace": {"resource": "namespace"},
                                                  "pod": {"resource": "pod"}}
        assert "<<.Series>>" not in rule["metricsQuery"], "either naming: names its series"
        found = prometheus.eventually([rule["seriesQuery"]])[rule["seriesQuery"]]
        assert all(s["metric"]["pod"] != EXPORTER_POD for s in found)
        assert all(re.fullmatch(rule["name"]["matches"], s["metric"]["__name__"])
                   for s in found), rule
        per_pod = prometheus.query(adapter_query(rule, "ml", "llm-trainer-0"))
        assert [s["metric"] for s in per_pod] == [{"pod": "llm-trainer-0"}], rule
        # A MIG instance has no GPU_UTIL, hence gpu_engine_active (docs/autoscaling.md), which
        # needs NVML GPM: the simulated node's MIG GPU is an A100, which has none, as real ones.
        mig = prometheus.query(adapter_query(rule, "research", "notebook-alice"))
        if rule["name"]["as"] in ("gpu_utilization", "gpu_engine_active"):
            assert mig == [], rule
        else:
            assert [s["metric"] for s in mig] == [{"pod": "notebook-alice"}], rule
    hpa = load_yaml(HPA)
    assert hpa["apiVersion"] == "autoscaling/v2"
    metric = hpa["spec"]["metrics"][0]
    assert metric["type"] == "Pods" and metric["pods"]["metric"]["name"] == "gpu_utilization"
    assert metric["pods"]["target"]["type"] == "AverageValue"
    keda = load_yaml(KEDA)
    assert keda["apiVersion"] == "keda.sh/v1alpha1"
    trigger = keda["spec"]["triggers"][0]
    assert trigger["type"] == "prometheus"
    result = prometheus.query(trigger["metadata"]["query"])
    assert len(result) == 1 and float(result[0]["value"][1]) > 0, result


def test_adapter_rules_and_keda_query_answer_per_pod(prometheus: Prometheus) -> None:
    assert_adapter_and_keda_answer_per_pod(prometheus)
    # On a classic node the published utilisation is DCGM_FI_DEV_GPU_UTIL's, as before.
    (rule,) = [r for r in load_yaml(ADAPTER)["rules"]["custom"]
               if r["name"]["as"] == "gpu_utilization"]
    at = time.time()
    published = prometheus.query(adapter_query(rule, "ml", "llm-trainer-0"), at)
    classic = prometheus.query('avg(DCGM_FI_DEV_GPU_UTIL{namespace="ml",pod="llm-trainer-0"}) '
                               "by (pod)", at)
    assert published == classic and published


WORKLOAD_FAMILIES = frozenset({
    "gpu_enricher_device_allocation_info", "gpu_enricher_process_memory_used_bytes",
    "gpu_enricher_process_sm_utilization_ratio", "gpu_enricher_pod_memory_used_bytes",
    "gpu_enricher_pod_sm_utilization_ratio", "gpu_enricher_unallocated_process_info",
    "gpu_enricher_pod_gpu_seconds_total", "gpu_enricher_pod_energy_joules_total",
})


def test_pod_labels_only_where_a_pod_holds_the_device(prometheus: Prometheus) -> None:
    # Nothing anywhere carries the exporter's own pod, nor a renamed workload label.
    for promql in (f'{{pod="{EXPORTER_POD}"}}', f'{{namespace="{EXPORTER_NAMESPACE}"}}',
                   '{exported_pod!=""}', '{exported_namespace!=""}',
                   '{exported_container!=""}'):
        assert prometheus.query(promql) == [], promql
    # Self-metrics: no pod/namespace/container, the exporter pod as exporter_pod.
    selfmetrics = prometheus.query('{__name__=~"gpu_enricher_.+"}')
    names = {s["metric"]["__name__"] for s in selfmetrics}
    assert {"gpu_enricher_build_info", "gpu_enricher_gpu_up", "gpu_enricher_kubelet_up",
            "gpu_enricher_collections_total"} <= names
    for series in selfmetrics:
        labels = series["metric"]
        assert labels["exporter_pod"] == EXPORTER_POD, labels
        assert labels["exporter_namespace"] == EXPORTER_NAMESPACE, labels
        if labels["__name__"] in WORKLOAD_FAMILIES:
            # They list the holders and the processes' pods: workloads, never the exporter.
            assert labels.get("pod") != EXPORTER_POD, labels
        else:
            assert not {"pod", "namespace", "container"} & set(labels), labels
    # A host process: no pod labels at all, not empty ones.
    host = prometheus.query('gpu_enricher_process_memory_used_bytes{process_name="gpu-burn"}')
    assert len(host) == 1 and not {"pod", "namespace", "container"} & set(host[0]["metric"])
    # The free MIG instance: no pod labels on its DCGM series.
    for promql in ('{__name__=~"DCGM_.+", gpu="2", GPU_I_ID="5"}',):
        free = prometheus.query(promql)
        assert free, promql
        for series in free:
            assert not {"pod", "namespace", "container"} & set(series["metric"]), series
            assert series["metric"]["exporter_pod"] == EXPORTER_POD
    # Held devices keep the exporter's pod labels (the workload), not exported_*.
    for promql, holder in (('{__name__=~"DCGM_.+", gpu="0"}', ("ml", "llm-trainer-0", "pytorch")),
                           ('{__name__=~"DCGM_.+", gpu="2", GPU_I_ID="1"}',
                            ("research", "notebook-alice", "jupyter")),
                           # Held through DRA claims: the same labels, plus dra_*.
                           ('{__name__=~"DCGM_.+", gpu="3"}', ("vision", "detector-0", "infer")),
                           ('{__name__=~"DCGM_.+", gpu="2", GPU_I_ID="2"}',
                            ("vision", "slicer-0", "main"))):
        held = prometheus.query(promql)
        assert held, promql
        for series in held:
            labels = series["metric"]
            assert (labels["namespace"], labels["pod"], labels["container"]) == holder, labels
            assert ("dra_claim_name" in labels) == (holder[0] == "vision"), labels
            assert labels["exporter_pod"] == EXPORTER_POD
            assert not any(name.startswith("exported_") for name in labels), labels


def helm_binary() -> str:
    local = ROOT / ".tools" / "bin" / "helm"
    if shutil.which("helm") is None and local.is_file():
        return str(local)
    return require_tool("helm")


def test_chart_servicemonitor_renders_these_relabelings() -> None:
    helm = helm_binary()
    result = subprocess.run(
        [helm, "template", str(CHART), "--set", "serviceMonitor.enabled=true"],
        capture_output=True, text=True, timeout=60, check=False)
    assert result.returncode == 0, result.stderr
    monitors = [doc for doc in yaml.safe_load_all(result.stdout)
                if doc and doc.get("kind") == "ServiceMonitor"]
    assert len(monitors) == 1
    endpoints = monitors[0]["spec"]["endpoints"]
    assert len(endpoints) == 1
    assert endpoints[0]["honorLabels"] is True
    assert endpoints[0]["relabelings"] == RELABELINGS
