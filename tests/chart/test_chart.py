"""The Helm chart: helm lint, helm template over value combinations, every manifest validated
against Kubernetes' schemas (kubernetes-validate, offline), and what matters asserted."""

import filecmp
import importlib.util
import json
import operator
import os
import re
import shutil
import subprocess
import sys
import tomllib
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest
import yaml

from gpu_enricher.cli.flag_values import UsageError
from gpu_enricher.cli.settings import parse_config
from gpu_enricher.config import Config
from gpu_enricher.exposition.label_drop import REFUSED, refusal
from gpu_enricher.fields.collection import CountersSources, load_collection
from gpu_enricher.fields.names import HOSTNAME_LABEL_NAMES, Hostname
from tests.conftest import ROOT, require_tool

CHART = ROOT / "helm" / "gpu-enricher"
PACKAGE_VERSION = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]["version"]
NAMESPACE = "gpu-monitoring"
RELEASE = "rel"
SERVICE_MONITOR_API = "monitoring.coreos.com/v1/ServiceMonitor"
CUSTOM_RESOURCES = {"ServiceMonitor", "PrometheusRule"}  # no bundled schema: warn only
RBAC_KINDS = {"Role", "ClusterRole", "RoleBinding", "ClusterRoleBinding"}
MICROK8S_ROOT = "/var/snap/microk8s/common/var/lib/kubelet"
SOCKET_DIR = "/var/lib/kubelet/pod-resources"  # in the container, whatever the node's root
TEST_DASHBOARD = "zz-chart-test-dashboard.json"
HOST_PROC = "/host/proc"  # the host's /proc in the container (procAccess: hostPath)
LOG_ROOT = "/host/var/log"  # the host's /var/log/{pods,containers} in the container
POD_READER_RULES = [{"apiGroups": [""], "resources": ["pods"],
                     "verbs": ["get", "list", "watch"]}]
SLICE_READER_RULES = [{"apiGroups": ["resource.k8s.io"], "resources": ["resourceslices"],
                       "verbs": ["get", "list", "watch"]}]
DRA_ENV = {"name": "KUBERNETES_ENABLE_DRA", "value": "true"}
DRA_DRIVERS = ["gpu.nvidia.com", "gpu.example.com"]
ALLOWLIST = ["^app(\\.kubernetes\\.io/name)?$", "^team$", "^[a-z]{2}/owner$"]
DROP_LABELS = ["UUID", "pci_bus_id", "DCGM_FI_DRIVER_VERSION", "app_kubernetes_io_name"]

def host_label_value(hostname: str | None) -> str:
    """The chart's hostnameLabelName for a Config's host label names."""
    assert isinstance(hostname, Hostname)
    return "both" if hostname.labels == HOSTNAME_LABEL_NAMES else hostname.labels[0]


# The top-level values that are one exporter flag each and nothing else in the manifests:
# value → (flag, what the exporter's parsed Config holds for it, a value other than the
# default). Each is rendered on every pod, its default being the exporter's (as
# collectInterval); dropLabels, a list, only when not empty (as kubernetes.resourceNames).
FLAG_VALUES: dict[str, tuple[str, Callable[[Config], Any], Any]] = {
    "slowFieldsInterval": ("--slow-fields-interval",
                           operator.attrgetter("slow_fields_interval_ms"), 0),
    # A percentage in the chart and on the command line, a fraction in Config.
    "kubeletListCpuBudget": ("--kubelet-list-cpu-budget",
                             lambda c: round(c.kubelet_list_cpu_budget * 100, 6), 0.5),
    "xidCountWindowSize": ("--xid-count-window-size", operator.attrgetter("xid_window_ms"),
                           60000),
    "clockEventsCountWindowSize": ("--clock-events-count-window-size",
                                   operator.attrgetter("clock_events_window_ms"), 120000),
    "hostnameLabelName": ("--hostname-label-name", lambda c: host_label_value(c.hostname),
                          "hostname"),
    "naming": ("--naming", operator.attrgetter("naming"), "4.9"),
    "configCheckInterval": ("--config-check-interval",
                            operator.attrgetter("config_check_interval_ms"), 0),
    "startupLabelWait": ("--startup-label-wait", operator.attrgetter("startup_label_wait_ms"),
                         0),
    "webReadHeaderTimeout": ("--web-read-header-timeout",
                             operator.attrgetter("web_read_header_timeout_ms"), 2500),
    # Past 1e6: a value Helm holds as a float must still render as digits.
    "webIdleTimeout": ("--web-idle-timeout", operator.attrgetter("web_idle_timeout_ms"),
                       3600000),
    "webMaxConnections": ("--web-max-connections", operator.attrgetter("web_max_connections"),
                          100000),
}
LIST_FLAG_VALUES: dict[str, tuple[str, Callable[[Config], Any], Any]] = {
    "dropLabels": ("--drop-labels", operator.attrgetter("drop_labels"), DROP_LABELS[:2]),
}

# Verbatim: another test reproduces them in a real Prometheus.
RELABELINGS = [
    {"sourceLabels": ["pod"], "targetLabel": "exporter_pod"},
    {"sourceLabels": ["namespace"], "targetLabel": "exporter_namespace"},
    {"action": "labeldrop", "regex": "pod|namespace|container"},
]
NODE_NAME_RELABELING = {"sourceLabels": ["__meta_kubernetes_pod_node_name"],
                        "targetLabel": "instance"}
SECURITY_CONTEXT = {
    "runAsUser": 0,
    "runAsNonRoot": False,
    "allowPrivilegeEscalation": False,
    "readOnlyRootFilesystem": True,
    "capabilities": {"drop": ["ALL"]},
    "seccompProfile": {"type": "RuntimeDefault"},
}
CUSTOM_COUNTERS = ("# two fields\nDCGM_FI_DEV_GPU_UTIL, gauge, GPU utilization (in %).\n"
                   'DCGM_FI_DEV_FB_USED, gauge, "Framebuffer memory used (in MiB), quoted."\n')
EXTRA_RULE = {"alert": "ChartTestRule", "expr": "vector(1)", "for": "5m",
              "labels": {"severity": "info"}}

WATCH_GROUPS = [{"name": "memory", "interval": "1m30s", "fields": ["DCGM_FI_DEV_FB_*"]}]

ALL_FEATURES: dict[str, Any] = {
    "serviceMonitor": {
        "enabled": True, "relabelInstanceToNodeName": True, "scrapeTimeout": "10s",
        "additionalLabels": {"release": "kube-prometheus-stack"},
        "extraRelabelings": [{"targetLabel": "cluster", "replacement": "c1"}],
        "metricRelabelings": [{"action": "drop", "sourceLabels": ["__name__"],
                               "regex": "DCGM_FI_DEV_VGPU_.*"}],
    },
    "prometheusRule": {"enabled": True, "additionalRules": [EXTRA_RULE],
                       "additionalLabels": {"release": "kube-prometheus-stack"}},
    "dashboards": {"namespace": "monitoring", "annotations": {"grafana_folder": "GPUs"}},
    "runtimeClassName": "nvidia",
    "hostPID": True,
    "kubernetes": {"virtualGpus": True, "gpuIdType": "device-name",
                   "resourceNames": ["nvidia.com/gpu.shared", "nvidia.com/gpu.mps"],
                   "podLabels": {"enabled": True, "allowlistRegex": ALLOWLIST},
                   "podUid": {"enabled": True},
                   "dra": {"enabled": True, "driverNames": DRA_DRIVERS}},
    "processMetrics": {"enabled": True},
    "counters": CUSTOM_COUNTERS,
    "watchGroups": WATCH_GROUPS,
    "collectInterval": 1000,
    "port": 9500,
    "noHostname": True,
    "debug": True,
    "logFormat": "json",
    "slowFieldsInterval": 0,
    "kubeletListCpuBudget": 0.5,
    "xidCountWindowSize": 60000,
    "clockEventsCountWindowSize": 120000,
    "hostnameLabelName": "hostname",
    "dropLabels": DROP_LABELS,
    "configCheckInterval": 0,
    "webReadHeaderTimeout": 2500,
    "webIdleTimeout": 3600000,
    "webMaxConnections": 100000,
    "extraArgs": ["--devices=g"],
    "extraEnv": [{"name": "GPU_ENRICHER_EXTRA", "value": "1"}],
    "nodeSelector": {"kubernetes.io/os": "linux"},
    "affinity": {"nodeAffinity": {"requiredDuringSchedulingIgnoredDuringExecution": {
        "nodeSelectorTerms": [{"matchExpressions": [
            {"key": "kubernetes.io/arch", "operator": "In", "values": ["amd64"]}]}]}}},
    "tolerations": [{"key": "dedicated", "operator": "Equal", "value": "gpu",
                     "effect": "NoSchedule"}],
    "updateStrategy": {"maxUnavailable": "10%"},
    "imagePullSecrets": [{"name": "registry"}],
    "podAnnotations": {"example.com/a": "b"},
    "podLabels": {"team": "gpu"},
    "service": {"annotations": {"prometheus.io/scrape": "true"}, "labels": {"tier": "m"}},
    "serviceAccount": {"annotations": {"example.com/sa": "x"}},
}

# name → (values, extra helm arguments)
COMBINATIONS: dict[str, tuple[dict[str, Any], list[str]]] = {
    "defaults": ({}, []),
    "all-features": (ALL_FEATURES, []),
    "gpu-node-selection-off": ({"gpuNodeSelector": {"enabled": False}, "gpuToleration": False},
                               []),
    "servicemonitor-crd-detected": ({}, ["--api-versions", SERVICE_MONITOR_API]),
    "microk8s": ({"kubeletRoot": MICROK8S_ROOT}, []),
    "kubernetes-off": ({"kubernetes": {"enabled": False}, "serviceAccount": {"create": False},
                        "dashboards": {"enabled": False}}, []),
    "process-metrics": ({"processMetrics": {"enabled": True}}, []),
    "process-metrics-hostpid-no-api": ({"processMetrics": {
        "enabled": True, "procAccess": "hostPID", "kubernetesApi": False,
        "logFallback": False}, "kubernetes": {"enabled": False}}, []),
    "process-metrics-logs-only": ({"processMetrics": {"enabled": True, "kubernetesApi": False}},
                                  []),
    "virtual-gpus": ({"kubernetes": {"virtualGpus": True}}, []),
    "pod-labels-and-uid": ({"kubernetes": {"podLabels": {"enabled": True},
                                           "podUid": {"enabled": True}},
                            "serviceAccount": {"create": False}}, []),
    "pod-uid": ({"kubernetes": {"podUid": {"enabled": True}}}, []),
    "dra": ({"kubernetes": {"dra": {"enabled": True}}}, []),
    "dra-and-pod-labels": ({"kubernetes": {"dra": {"enabled": True},
                                           "podLabels": {"enabled": True}}}, []),
    "dra-process-metrics-no-api": ({"kubernetes": {"dra": {"enabled": True}},
                                    "processMetrics": {"enabled": True,
                                                       "kubernetesApi": False}}, []),
    "dra-kubernetes-off": ({"kubernetes": {"enabled": False, "dra": {"enabled": True}}}, []),
}
# The combinations whose features read pods from the Kubernetes API: the pods rule.
READS_PODS = {"all-features", "process-metrics", "pod-labels-and-uid", "pod-uid",
              "dra-and-pod-labels", "dra-process-metrics-no-api"}
# DRA on (with -k): KUBERNETES_ENABLE_DRA and the resourceslices rule.
DRA = {"all-features", "dra", "dra-and-pod-labels", "dra-process-metrics-no-api"}
# The combinations that read the Kubernetes API: a ClusterRole and a token.
KUBERNETES_API = READS_PODS | DRA
# host /proc access: "hostPath" (mounted at HOST_PROC), "hostPID" or None.
PROC_ACCESS = {"all-features": "hostPath", "process-metrics": "hostPath",
               "process-metrics-hostpid-no-api": "hostPID",
               "process-metrics-logs-only": "hostPath", "virtual-gpus": "hostPath",
               "dra-process-metrics-no-api": "hostPath"}
LOG_FALLBACK = {"all-features", "process-metrics", "process-metrics-logs-only", "virtual-gpus",
                "dra-process-metrics-no-api"}


@dataclass
class Rendered:
    values: dict[str, Any]
    text: str
    docs: list[dict[str, Any]]

    def kinds(self) -> list[str]:
        return [d["kind"] for d in self.docs]

    def one(self, kind: str) -> dict[str, Any]:
        found = [d for d in self.docs if d["kind"] == kind]
        assert len(found) == 1, f"{len(found)} {kind} objects"
        return found[0]

    def all(self, kind: str) -> list[dict[str, Any]]:
        return [d for d in self.docs if d["kind"] == kind]

    @property
    def pod(self) -> dict[str, Any]:
        return self.one("DaemonSet")["spec"]["template"]["spec"]  # type: ignore[no-any-return]

    @property
    def container(self) -> dict[str, Any]:
        containers = self.pod["containers"]
        assert len(containers) == 1
        return containers[0]  # type: ignore[no-any-return]

    def env(self, node_name: str = "node-a") -> dict[str, str]:
        """The container's literal environment, the downward API's fields filled as the
        kubelet would fill them: what the exporter's parser reads besides the args."""
        fields = {"spec.nodeName": node_name, "metadata.name": "gpu-enricher-abcde",
                  "metadata.namespace": NAMESPACE}
        env = {e["name"]: e["value"] for e in self.container["env"] if "value" in e}
        env.update({e["name"]: fields[e["valueFrom"]["fieldRef"]["fieldPath"]]
                    for e in self.container["env"] if "fieldRef" in e.get("valueFrom", {})})
        return env


def kubeval_python() -> str:
    """The interpreter that has kubernetes-validate (this one, through the test extras)."""
    if importlib.util.find_spec("kubernetes_validate") is None:
        message = "kubernetes-validate is not installed (pip install kubernetes-validate)"
        if os.environ.get("CI", "").lower() == "true":
            pytest.fail(f"CI=true and {message}")
        pytest.skip(message)
    return sys.executable


def helm_template(helm: str, chart: Path, values_file: Path | None, *args: str,
                  check: bool = True) -> subprocess.CompletedProcess[str]:
    command = [helm, "template", RELEASE, str(chart), "--namespace", NAMESPACE, *args]
    if values_file is not None:
        command += ["--values", str(values_file)]
    result = subprocess.run(command, capture_output=True, text=True, timeout=60, check=False)
    if check:
        assert result.returncode == 0, result.stderr
    return result


def write_values(directory: Path, name: str, values: dict[str, Any]) -> Path:
    path = directory / f"{name}.yaml"
    path.write_text(yaml.safe_dump(values, sort_keys=False))
    return path


@pytest.fixture(scope="module")
def helm() -> str:
    return require_tool("helm")


@pytest.fixture(scope="module")
def test_chart(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """The chart plus one small dashboard, so the dashboard ConfigMaps render whatever
    files/dashboards holds."""
    chart = tmp_path_factory.mktemp("chart") / "gpu-enricher"
    shutil.copytree(CHART, chart)
    (chart / "files" / "dashboards").mkdir(parents=True, exist_ok=True)
    (chart / "files" / "dashboards" / TEST_DASHBOARD).write_text('{"title": "chart test"}\n')
    return chart


@pytest.fixture(scope="module")
def rendered(helm: str, test_chart: Path,
             tmp_path_factory: pytest.TempPathFactory) -> dict[str, Rendered]:
    directory = tmp_path_factory.mktemp("values")
    out: dict[str, Rendered] = {}
    for name, (values, args) in COMBINATIONS.items():
        text = helm_template(helm, test_chart, write_values(directory, name, values), *args).stdout
        docs = [d for d in yaml.safe_load_all(text) if d]
        out[name] = Rendered(values, text, docs)
    return out


@pytest.fixture(scope="module")
def kubernetes_versions() -> list[str]:
    python = kubeval_python()
    latest = subprocess.run(
        [python, "-c", "import kubernetes_validate; print(kubernetes_validate.latest_version())"],
        capture_output=True, text=True, check=True, timeout=60).stdout.strip()
    assert latest
    return ["1.29.0", latest]


# Files.

@pytest.mark.parametrize("name", ["default-counters.csv", "default-counters-4.9.csv"])
def test_default_counters_copy_is_identical(name: str) -> None:
    """The chart's default counters (each naming's) are the package's own (a chart cannot read
    outside itself)."""
    copy = CHART / "files" / name
    original = ROOT / "src" / "gpu_enricher" / "fields" / name
    assert filecmp.cmp(copy, original, shallow=False), \
        f"{copy} differs from {original}: cp {original} {copy}"


def test_chart_metadata() -> None:
    chart = yaml.safe_load((CHART / "Chart.yaml").read_text())
    assert chart["apiVersion"] == "v2"
    assert chart["name"] == "gpu-enricher"
    assert chart["appVersion"] == PACKAGE_VERSION


# helm lint, schema.

def test_schema_describes_every_value() -> None:
    """Every key of values.yaml has a type or enum in values.schema.json, and the schema
    admits nothing else (additionalProperties: false) where the chart defines the object."""
    schema = json.loads((CHART / "values.schema.json").read_text())
    values = yaml.safe_load((CHART / "values.yaml").read_text())

    def walk(value: Any, node: dict[str, Any], path: str) -> None:
        assert "type" in node or "enum" in node or "oneOf" in node, f"{path}: no type"
        if isinstance(value, dict) and node.get("additionalProperties") is False:
            assert set(node.get("required", [])) <= set(value), path
            for key, child in value.items():
                assert key in node["properties"], f"{path}.{key} is not in the schema"
                walk(child, node["properties"][key], f"{path}.{key}")

    walk(values, schema, "values")
    assert set(schema["properties"]) - {"global"} == set(values)

@pytest.mark.parametrize("values", [{}, ALL_FEATURES], ids=["defaults", "all-features"])
def test_helm_lint_strict(helm: str, values: dict[str, Any], tmp_path: Path) -> None:
    result = subprocess.run(
        [helm, "lint", "--strict", str(CHART),
         "--values", str(write_values(tmp_path, "v", values))],
        capture_output=True, text=True, timeout=60, check=False)
    assert result.returncode == 0, result.stdout + result.stderr
    assert "[WARNING]" not in result.stdout and "[ERROR]" not in result.stdout, result.stdout


@pytest.mark.parametrize("values", [
    {"collectInterval": "fast"},
    {"collectInterval": 50},
    {"logFormat": "xml"},
    {"port": 0},
    {"kubernetes": {"gpuIdType": "index"}},
    {"kubernetes": {"resourceNames": "nvidia.com/gpu.shared"}},
    {"serviceMonitor": {"enabled": "sometimes"}},
    {"serviceMonitor": {"interval": "15"}},
    {"updateStrategy": {"maxUnavailable": 0}},
    {"securityContext": {"privileged": True}},
    {"securityContext": {"capabilities": {"add": ["SYS_ADMIN"]}}},
    {"kubeletRoot": "var/lib/kubelet"},
    {"unknownValue": 1},
    {"processMetrics": {"enabled": "yes"}},
    {"processMetrics": {"procAccess": "nsenter"}},
    {"processMetrics": {"kubernetesApi": "false"}},
    {"processMetrics": {"logRoot": "/var/log"}},
    {"kubernetes": {"podLabels": {"allowlistRegex": "^app$"}}},
    {"kubernetes": {"podLabels": {"allowlistRegex": ["^app$,^team$"]}}},
    {"kubernetes": {"podLabels": True}},
    {"kubernetes": {"podUid": {"enabled": 1}}},
    {"kubernetes": {"dra": True}},
    {"kubernetes": {"dra": {"enabled": "true"}}},
    {"kubernetes": {"dra": {"driverNames": []}}},
    {"kubernetes": {"dra": {"driverNames": "gpu.nvidia.com"}}},
    {"kubernetes": {"dra": {"driverNames": ["gpu.nvidia.com,gpu.example.com"]}}},
    {"kubernetes": {"dra": {"driverNames": ["gpu.nvidia.com", "gpu.nvidia.com"]}}},
    {"kubernetes": {"dra": {"resourceSlices": True}}},
    {"webConfig": {"enabled": "true"}},
    {"webConfig": {"basicAuthUsers": {"prometheus": "s3cret"}}},  # a password, not a hash
    {"webConfig": {"basicAuthUsers": {"a:b": "$2y$10$" + "a" * 53}}},
    {"webConfig": {"tls": {"clientAuthType": "RequireAnyClientCert"}}},
    {"webConfig": {"tls": {"minVersion": "TLS11"}}},
    {"webConfig": {"tls": {"existingSecret": "Not_A_Name"}}},
    {"webConfig": {"tls": {"certFile": "/tls.crt"}}},
    {"webConfig": {"headers": {"Server": "gpu-enricher"}}},
    {"webConfig": {"headers": {"X-Frame-Options": "allow"}}},
    {"webConfig": {"probeBasicAuth": {"username": "a:b", "password": "x"}}},
    {"serviceMonitor": {"tlsConfig": {"ca": {"secret": {"name": "ca", "key": "ca.crt"},
                                             "configMap": {"name": "ca", "key": "ca.crt"}}}}},
    {"serviceMonitor": {"tlsConfig": {"ca": {"secret": {"name": "ca"}}}}},
    {"serviceMonitor": {"tlsConfig": {"keySecret": {"name": "client"}}}},
    {"serviceMonitor": {"tlsConfig": {"insecureSkipVerify": "yes"}}},
    {"serviceMonitor": {"basicAuth": {"username": {"name": "auth", "key": "user"}}}},
    {"serviceMonitor": {"basicAuth": {"username": {"name": "auth", "key": "user"},
                                      "password": "s3cret"}}},
    {"slowFieldsInterval": -1},
    {"xidCountWindowSize": 0},
    {"clockEventsCountWindowSize": "5m"},
    {"hostnameLabelName": "HOSTNAME"},
    {"configCheckInterval": -1},
    {"configCheckInterval": "5s"},
    {"webReadHeaderTimeout": 0},
    {"webIdleTimeout": "120000"},
    {"webIdleTimeout": 1.5},
    {"webMaxConnections": -1},
    {"webMaxConnections": None},
    {"dropLabels": "UUID"},
    {"dropLabels": ["UUID,device"]},
    {"dropLabels": ["UUID", "UUID"]},
    {"dropLabels": ["gpu"]},
    {"dropLabels": ["pod"]},
    {"dropLabels": ["__name__"]},
    {"dropLabels": ["pci-bus-id"]},
    {"dropLabels": [""]},
], ids=lambda v: yaml.safe_dump(v, default_flow_style=True).strip())
def test_schema_rejects_bad_values(helm: str, values: dict[str, Any], tmp_path: Path) -> None:
    result = helm_template(helm, CHART, write_values(tmp_path, "bad", values), check=False)
    assert result.returncode != 0
    assert "schema" in result.stderr, result.stderr


# Every rendered manifest is valid Kubernetes.

@pytest.mark.parametrize("name", list(COMBINATIONS))
def test_manifests_validate(name: str, helm: str, test_chart: Path,
                            kubernetes_versions: list[str], tmp_path: Path) -> None:
    """Rendered for each Kubernetes version (as `helm install` renders for the cluster's, which
    decides e.g. recursiveReadOnly) and validated against that version's schemas."""
    values, args = COMBINATIONS[name]
    values_file = write_values(tmp_path, name, values)
    for version in kubernetes_versions:
        text = helm_template(helm, test_chart, values_file, *args,
                             "--kube-version", version).stdout
        manifest = tmp_path / f"manifest-{version}.yaml"
        manifest.write_text(text)
        command = [kubeval_python(), "-m", "kubernetes_validate", "--strict", "-k", version]
        # A file, not stdin.
        result = subprocess.run([*command, str(manifest)], capture_output=True, text=True,
                                timeout=120, check=False)
        output = result.stdout + result.stderr
        assert result.returncode == 0, output
        docs = [d for d in yaml.safe_load_all(text) if d]
        core = [d for d in docs if d["kind"] not in CUSTOM_RESOURCES]
        passed = [line for line in output.splitlines()
                  if line.startswith("INFO") and " passed " in line]
        assert len(passed) == len(core), output
        for line in output.splitlines():
            if line.startswith("WARN"):
                assert any(f"kind {kind} " in line for kind in CUSTOM_RESOURCES), line
            else:
                assert line.startswith("INFO"), line


# What matters, in every combination.

@pytest.mark.parametrize("name", list(COMBINATIONS))
def test_never_privileged_or_sys_admin(name: str, rendered: dict[str, Rendered]) -> None:
    """Whatever the features: the same container security context (the /proc files process
    metrics read are world-readable), no privilege, no host network."""
    r = rendered[name]
    assert r.container["securityContext"] == SECURITY_CONTEXT
    assert "SYS_ADMIN" not in r.text
    assert "privileged: true" not in r.text
    assert "hostNetwork" not in r.pod
    for account in r.all("ServiceAccount"):  # the account never hands out a token itself
        assert account["automountServiceAccountToken"] is False
    hostpid = bool(r.values.get("hostPID", False)) or PROC_ACCESS.get(name) == "hostPID"
    assert r.pod["hostPID"] is hostpid


@pytest.mark.parametrize("name", list(COMBINATIONS))
def test_rbac_and_token_only_for_the_kubernetes_api(name: str,
                                                    rendered: dict[str, Rendered]) -> None:
    """A ClusterRole with get/list/watch on pods (pod features) and/or on resource.k8s.io
    resourceslices (DRA), each rule only for its features, its binding to the pods' account,
    and the token: all three exactly when a feature reads the Kubernetes API, none
    otherwise."""
    r = rendered[name]
    api = name in KUBERNETES_API
    assert r.pod["automountServiceAccountToken"] is api
    if not api:
        assert not RBAC_KINDS & set(r.kinds())
        return
    claims = {"Role", "RoleBinding"} if name in DRA else set()
    assert RBAC_KINDS & set(r.kinds()) == {"ClusterRole", "ClusterRoleBinding", *claims}
    if claims:  # get on resourceclaims, in the release's namespace only (admin access)
        claim_role, claim_binding = r.one("Role"), r.one("RoleBinding")
        assert claim_role["metadata"]["namespace"] == NAMESPACE
        assert claim_role["rules"] == [{"apiGroups": ["resource.k8s.io"],
                                        "resources": ["resourceclaims"], "verbs": ["get"]}]
        assert claim_binding["roleRef"]["name"] == claim_role["metadata"]["name"]
        assert claim_binding["subjects"][0]["name"] == r.pod["serviceAccountName"]
    role, binding = r.one("ClusterRole"), r.one("ClusterRoleBinding")
    assert role["rules"] == (POD_READER_RULES if name in READS_PODS else []) + (
        SLICE_READER_RULES if name in DRA else [])
    assert binding["roleRef"] == {"apiGroup": "rbac.authorization.k8s.io",
                                  "kind": "ClusterRole", "name": role["metadata"]["name"]}
    assert binding["subjects"] == [{"kind": "ServiceAccount",
                                    "name": r.pod["serviceAccountName"],
                                    "namespace": NAMESPACE}]
    # The exporter agrees that it reads the API, for this node.
    config, _ = parse_config(r.container["args"], r.env())
    assert config.kube_api and config.node_name == "node-a"
    assert config.reads_slices is (name in DRA)
    assert config.own_pod == (NAMESPACE, "gpu-enricher-abcde"), "never its own GPUs' holder"


def test_rbac_binds_the_default_account_without_a_created_one(
        rendered: dict[str, Rendered]) -> None:
    r = rendered["pod-labels-and-uid"]
    assert "ServiceAccount" not in r.kinds() and r.pod["serviceAccountName"] == "default"
    assert r.one("ClusterRoleBinding")["subjects"][0]["name"] == "default"


@pytest.mark.parametrize("name", list(COMBINATIONS))
def test_host_proc_and_logs_follow_the_exporter(name: str,
                                                 rendered: dict[str, Rendered]) -> None:
    """The host's /proc and log directories are there exactly when the exporter reads them,
    where its flags say, read-only."""
    r = rendered[name]
    config, _ = parse_config(r.container["args"], {"NODE_NAME": "node-a"})
    access = PROC_ACCESS.get(name)
    assert config.reads_proc is (access is not None)
    assert config.process_metrics is bool(r.values.get("processMetrics", {}).get("enabled"))
    volumes = {v["name"]: v for v in r.pod["volumes"]}
    mounts = {m["name"]: m for m in r.container["volumeMounts"]}
    if access == "hostPath":
        assert volumes["host-proc"]["hostPath"] == {"path": "/proc", "type": "Directory"}
        assert str(config.proc_root) == HOST_PROC
        assert mounts["host-proc"]["mountPath"] == HOST_PROC
        assert mounts["host-proc"]["readOnly"] is True
        # helm template renders for Kubernetes 1.32 here: submounts read-only too.
        assert mounts["host-proc"]["recursiveReadOnly"] == "IfPossible"
    else:
        assert "host-proc" not in volumes and "host-proc" not in mounts
        assert not any(v.get("hostPath", {}).get("path") == "/proc" for v in volumes.values())
    if access == "hostPID":
        assert r.pod["hostPID"] is True and str(config.proc_root) == "/proc"
    logs = {"pod-logs": "pods", "container-logs": "containers"}
    if name in LOG_FALLBACK:
        assert str(config.kubelet_log_root) == LOG_ROOT
        for volume, directory in logs.items():
            assert volumes[volume]["hostPath"] == {"path": f"/var/log/{directory}",
                                                   "type": "Directory"}
            assert mounts[volume] == {"name": volume, "readOnly": True,
                                      "mountPath": f"{config.kubelet_log_root}/{directory}"}
    else:
        assert not set(logs) & set(volumes) and not set(logs) & set(mounts)
        assert not any(a.startswith("--kubelet-log-root") for a in r.container["args"])
    if access is None:
        assert not any(a.startswith(("--proc-root", "--process-metrics"))
                       for a in r.container["args"])
    # Every hostPath is one of these, and every hostPath mount is read-only.
    known = {"/proc", "/var/log/pods", "/var/log/containers",
             f"{r.values.get('kubeletRoot', '/var/lib/kubelet')}/pod-resources"}
    for volume in volumes.values():
        if "hostPath" in volume:
            assert volume["hostPath"]["path"] in known
            assert mounts[volume["name"]]["readOnly"] is True


def test_recursive_read_only_only_where_the_api_has_it(helm: str, test_chart: Path,
                                                       tmp_path: Path) -> None:
    """recursiveReadOnly (beta, on by default, in 1.31) is not rendered for older clusters,
    whose API servers do not know the field."""
    values = write_values(tmp_path, "v", {"processMetrics": {"enabled": True}})
    for version, expected in (("1.30.0", None), ("1.31.0", "IfPossible")):
        text = helm_template(helm, test_chart, values, "--kube-version", version).stdout
        daemonset = next(d for d in yaml.safe_load_all(text) if d and d["kind"] == "DaemonSet")
        (container,) = daemonset["spec"]["template"]["spec"]["containers"]
        mount = next(m for m in container["volumeMounts"] if m["name"] == "host-proc")
        assert mount.get("recursiveReadOnly") == expected, version


def test_process_metrics_without_the_api(rendered: dict[str, Rendered]) -> None:
    """kubernetesApi: false: no RBAC, no token, and the exporter is told never to call the
    API (--kubernetes-api=false): pods are named from the log directories."""
    for name in ("process-metrics-logs-only", "process-metrics-hostpid-no-api"):
        r = rendered[name]
        config, _ = parse_config(r.container["args"], {"NODE_NAME": "node-a"})
        assert config.process_metrics and config.reads_proc and not config.kube_api
        assert r.pod["automountServiceAccountToken"] is False
        assert not RBAC_KINDS & set(r.kinds())
    hostpid = rendered["process-metrics-hostpid-no-api"]
    assert not any("hostPath" in v for v in hostpid.pod["volumes"])  # kubernetes off too


def test_pod_labels_and_uid_flags(rendered: dict[str, Rendered]) -> None:
    r = rendered["all-features"]
    args = r.container["args"]
    assert "--kubernetes-enable-pod-labels" in args and "--kubernetes-enable-pod-uid" in args
    assert f"--kubernetes-pod-label-allowlist-regex={','.join(ALLOWLIST)}" in args
    config, _ = parse_config(args, {"NODE_NAME": "node-a"})
    assert config.pod_labels and config.pod_uid and config.process_metrics
    assert config.pod_label_allowlist == tuple(ALLOWLIST)
    plain = rendered["pod-labels-and-uid"]
    config, _ = parse_config(plain.container["args"], {})
    assert config.pod_labels and config.pod_uid and config.pod_label_allowlist == ()
    assert not config.process_metrics and not config.reads_proc
    assert not any(a.startswith("--kubernetes-pod-label-allowlist-regex")
                   for a in plain.container["args"])
    only_uid, _ = parse_config(rendered["pod-uid"].container["args"], {})
    assert only_uid.pod_uid and not only_uid.pod_labels


@pytest.mark.parametrize("name", sorted(DRA))
def test_dra_env_flag_rule_and_token(name: str, rendered: dict[str, Rendered]) -> None:
    """kubernetes.dra.enabled: KUBERNETES_ENABLE_DRA=true (the GPU Operator's variable; the
    exporter reads it), the driver names as a flag, the resourceslices rule (exactly
    get/list/watch in resource.k8s.io, its own rule beside the pods one), the token."""
    r = rendered[name]
    assert r.container["env"].count(DRA_ENV) == 1
    assert "--kubernetes-enable-dra" not in " ".join(r.container["args"])  # the env var does it
    drivers = r.values["kubernetes"]["dra"].get("driverNames", ["gpu.nvidia.com"])
    assert f"--kubernetes-dra-driver-names={','.join(drivers)}" in r.container["args"]
    config, warnings = parse_config(r.container["args"], r.env())
    assert config.dra and config.reads_slices and config.kube_api
    assert config.dra_drivers == frozenset(drivers)
    assert not any("--kubernetes-enable-dra" in w for w in warnings)
    assert r.pod["automountServiceAccountToken"] is True
    rules = r.one("ClusterRole")["rules"]
    slice_rules = [rule for rule in rules if "resourceslices" in rule["resources"]]
    assert slice_rules == SLICE_READER_RULES
    assert all(rule["resources"] in (["pods"], ["resourceslices"]) for rule in rules)
    assert len(r.all("ClusterRole")) == 1 and len(r.all("ClusterRoleBinding")) == 1


def test_dra_alone_reads_no_pods(rendered: dict[str, Rendered]) -> None:
    """DRA by itself grants resourceslices only; with pod labels both rules are in the one
    ClusterRole."""
    assert rendered["dra"].one("ClusterRole")["rules"] == SLICE_READER_RULES
    both = rendered["dra-and-pod-labels"].one("ClusterRole")["rules"]
    assert both == POD_READER_RULES + SLICE_READER_RULES
    config, _ = parse_config(rendered["dra-and-pod-labels"].container["args"],
                             rendered["dra-and-pod-labels"].env())
    assert config.pod_labels and config.reads_slices


def test_dra_with_process_metrics_off_the_api(rendered: dict[str, Rendered]) -> None:
    """processMetrics.kubernetesApi: false cannot hold with DRA: the exporter has one switch
    for the API (--kubernetes-api), which DRA needs, and then names processes' pods from it
    too, so the pods rule comes back and --kubernetes-api=false is not passed."""
    r = rendered["dra-process-metrics-no-api"]
    assert "--kubernetes-api=false" not in r.container["args"]
    config, _ = parse_config(r.container["args"], r.env())
    assert config.process_metrics and config.kube_api and config.reads_slices
    assert r.one("ClusterRole")["rules"] == POD_READER_RULES + SLICE_READER_RULES


def test_dra_needs_pod_attribution(rendered: dict[str, Rendered]) -> None:
    """The claims come from the kubelet: with kubernetes.enabled false, dra.enabled renders
    nothing (no env var, no rule, no token)."""
    r = rendered["dra-kubernetes-off"]
    assert "KUBERNETES_ENABLE_DRA" not in r.env()
    assert not any(a.startswith("--kubernetes") for a in r.container["args"])
    assert not RBAC_KINDS & set(r.kinds()) and r.pod["automountServiceAccountToken"] is False
    config, warnings = parse_config(r.container["args"], r.env())
    assert not config.dra and not config.kube_api and warnings == []


@pytest.mark.parametrize("name", list(COMBINATIONS))
def test_container_basics(name: str, rendered: dict[str, Rendered]) -> None:
    r = rendered[name]
    c = r.container
    assert {"name": "NODE_NAME", "valueFrom": {"fieldRef": {"fieldPath": "spec.nodeName"}}} \
        in c["env"]
    port = r.values.get("port", 9400)
    assert c["ports"] == [{"name": "metrics", "containerPort": port, "protocol": "TCP"}]
    assert c["livenessProbe"]["httpGet"] == {"path": "/health", "port": "metrics"}
    assert c["readinessProbe"]["httpGet"] == {"path": "/ready", "port": "metrics"}
    assert f"--address=:{port}" in c["args"]
    mounts = {m["name"]: m for m in c["volumeMounts"]}
    volumes = {v["name"]: v for v in r.pod["volumes"]}
    assert mounts["tmp"]["mountPath"] == "/tmp" and "emptyDir" in volumes["tmp"]
    assert r.pod["priorityClassName"] == "system-node-critical"
    strategy = r.one("DaemonSet")["spec"]["updateStrategy"]
    assert strategy == {"type": "RollingUpdate", "rollingUpdate": {
        "maxUnavailable": r.values.get("updateStrategy", {}).get("maxUnavailable", 1)}}
    # The args are the exporter's own flags: its parser accepts them.
    config, _ = parse_config(c["args"], {"NODE_NAME": "node-a"})
    assert config.port == port
    assert str(config.collectors) == "/etc/gpu-enricher/counters.csv"


@pytest.mark.parametrize("name", ["defaults", "all-features", "microk8s",
                                  "gpu-node-selection-off", "servicemonitor-crd-detected"])
def test_pod_resources_socket(name: str, rendered: dict[str, Rendered]) -> None:
    r = rendered[name]
    root = r.values.get("kubeletRoot", "/var/lib/kubelet")
    volume = next(v for v in r.pod["volumes"] if v["name"] == "pod-resources")
    assert volume["hostPath"] == {"path": f"{root}/pod-resources", "type": "Directory"}
    mount = next(m for m in r.container["volumeMounts"] if m["name"] == volume["name"])
    assert mount == {"name": volume["name"], "mountPath": SOCKET_DIR, "readOnly": True}
    assert "--kubernetes" in r.container["args"]
    assert f"--pod-resources-kubelet-socket={SOCKET_DIR}/kubelet.sock" in r.container["args"]
    config, _ = parse_config(r.container["args"], {})
    assert config.kubernetes and str(config.kubelet_socket) == f"{SOCKET_DIR}/kubelet.sock"
    if name not in PROC_ACCESS:  # else the host's /proc and logs too (tested below)
        assert [v for v in r.pod["volumes"] if "hostPath" in v] == [volume]


def test_kubernetes_off_mounts_nothing_from_the_host(rendered: dict[str, Rendered]) -> None:
    r = rendered["kubernetes-off"]
    assert not any("hostPath" in v for v in r.pod["volumes"])
    assert not any(a.startswith("--kubernetes") or a.startswith("--pod-resources")
                   for a in r.container["args"])
    assert "ServiceAccount" not in r.kinds() and r.pod["serviceAccountName"] == "default"
    assert "ConfigMap" in r.kinds()  # the counters
    assert len(r.all("ConfigMap")) == 1  # no dashboards


def test_defaults(rendered: dict[str, Rendered], test_chart: Path) -> None:
    r = rendered["defaults"]
    dashboards = list((test_chart / "files" / "dashboards").glob("*.json"))
    assert len(r.all("ConfigMap")) == 1 + len(dashboards)
    assert set(r.kinds()) == {"ConfigMap", "DaemonSet", "Service", "ServiceAccount"}
    # No RBAC, no token, no host /proc, logs or PID namespace: the kubelet's socket only.
    assert r.pod["automountServiceAccountToken"] is False and r.pod["hostPID"] is False
    assert [v["hostPath"]["path"] for v in r.pod["volumes"] if "hostPath" in v] == [
        "/var/lib/kubelet/pod-resources"]
    assert "ServiceMonitor" not in r.kinds() and "PrometheusRule" not in r.kinds()
    assert r.pod["nodeSelector"] == {"nvidia.com/gpu.present": "true"}
    assert r.pod["tolerations"] == [{"key": "nvidia.com/gpu", "operator": "Exists",
                                     "effect": "NoSchedule"}]
    assert "runtimeClassName" not in r.pod and "affinity" not in r.pod
    assert r.container["resources"] == {"requests": {"cpu": "50m", "memory": "96Mi"},
                                        "limits": {"cpu": "250m", "memory": "192Mi"}}
    assert r.container["image"] == f"gpu-enricher:{PACKAGE_VERSION}"
    config, warnings = parse_config(r.container["args"], {"NODE_NAME": "node-a"})
    assert warnings == []
    # No web config: plain HTTP, no Secret mounted (the probes: test_container_basics).
    assert config.web_config_file is None
    assert not any("secret" in v for v in r.pod["volumes"])
    assert (config.collect_interval_ms, config.log_format, config.debug) == (5000, "text", False)
    assert config.hostname == "node-a" and config.gpu_id_type == "uid"
    assert not config.virtual_gpus and config.extra_resources == frozenset()
    assert not (config.process_metrics or config.reads_proc or config.kube_api)
    assert not (config.pod_labels or config.pod_uid)
    # DRA is off: no env var, no flag, no resourceslices rule anywhere.
    assert not (config.dra or config.reads_slices)
    assert "KUBERNETES_ENABLE_DRA" not in r.env()
    assert not any(a.startswith("--kubernetes-dra") for a in r.container["args"])
    assert "resourceslices" not in r.text and "resource.k8s.io" not in r.text
    service = r.one("Service")
    assert service["spec"]["type"] == "ClusterIP"
    assert service["spec"]["ports"] == [{"name": "metrics", "port": 9400,
                                         "targetPort": "metrics", "protocol": "TCP"}]
    pod_labels = r.one("DaemonSet")["spec"]["template"]["metadata"]["labels"]
    assert service["spec"]["selector"].items() <= pod_labels.items()
    assert r.one("DaemonSet")["spec"]["selector"]["matchLabels"] == service["spec"]["selector"]


def test_default_counters_configmap(rendered: dict[str, Rendered]) -> None:
    r = rendered["defaults"]
    counters = next(c for c in r.all("ConfigMap") if c["metadata"]["name"].endswith("-counters"))
    default = (CHART / "files" / "default-counters.csv").read_text()
    assert counters["data"]["counters.csv"] == default
    mount = next(m for m in r.container["volumeMounts"] if m["name"] == "counters")
    assert mount["mountPath"] == "/etc/gpu-enricher" and mount["readOnly"] is True
    volume = next(v for v in r.pod["volumes"] if v["name"] == "counters")
    assert volume["configMap"]["name"] == counters["metadata"]["name"]
    assert "--collectors=/etc/gpu-enricher/counters.csv" in r.container["args"]


def test_custom_counters_roll_the_pods(rendered: dict[str, Rendered]) -> None:
    custom = rendered["all-features"]
    counters = next(c for c in custom.all("ConfigMap")
                    if c["metadata"]["name"].endswith("-counters"))
    assert counters["data"]["counters.csv"] == CUSTOM_COUNTERS

    def checksum(r: Rendered) -> str:
        annotations = r.one("DaemonSet")["spec"]["template"]["metadata"]["annotations"]
        return annotations["checksum/counters"]  # type: ignore[no-any-return]
    assert checksum(custom) != checksum(rendered["defaults"])


def test_watch_groups_become_a_config_file_next_to_the_counters(
        rendered: dict[str, Rendered], tmp_path: Path) -> None:
    """watchGroups: dcgm-exporter's config file (schema 1) in the counters ConfigMap, passed with
    --config-file, read by the exporter as it reads the file a chart mounts."""
    r = rendered["all-features"]
    counters = next(c for c in r.all("ConfigMap") if c["metadata"]["name"].endswith("-counters"))
    assert "--config-file=/etc/gpu-enricher/config.yaml" in r.container["args"]
    for name, text in counters["data"].items():  # the mounted folder
        (tmp_path / name).write_text(text)
    config, _ = parse_config(r.container["args"], r.env())
    assert config.config_file == Path("/etc/gpu-enricher/config.yaml")
    collection = load_collection(CountersSources(
        collectors=tmp_path / "counters.csv", collectors_origin="--collectors",
        config_file=tmp_path / "config.yaml"))
    assert dict(collection.field_intervals_ms) == {"DCGM_FI_DEV_FB_USED": 90_000}
    defaults = rendered["defaults"]
    assert not any(a.startswith("--config-file") for a in defaults.container["args"])
    assert "config.yaml" not in next(
        c for c in defaults.all("ConfigMap")
        if c["metadata"]["name"].endswith("-counters"))["data"]


def test_all_flags_reach_the_container(rendered: dict[str, Rendered]) -> None:
    r = rendered["all-features"]
    args = r.container["args"]
    for flag in ("--collect-interval=1000", "--kubernetes-virtual-gpus", "--no-hostname",
                 "--debug", "--log-format=json", "--kubernetes-gpu-id-type=device-name",
                 "--nvidia-resource-names=nvidia.com/gpu.shared,nvidia.com/gpu.mps",
                 "--address=:9500", "--process-metrics", f"--proc-root={HOST_PROC}",
                 f"--kubelet-log-root={LOG_ROOT}", "--kubernetes-enable-pod-labels",
                 "--kubernetes-enable-pod-uid",
                 f"--kubernetes-dra-driver-names={','.join(DRA_DRIVERS)}",
                 "--slow-fields-interval=0", "--xid-count-window-size=60000",
                 "--kubelet-list-cpu-budget=0.5",
                 "--clock-events-count-window-size=120000", "--hostname-label-name=hostname",
                 f"--drop-labels={','.join(DROP_LABELS)}", "--config-check-interval=0",
                 "--web-read-header-timeout=2500", "--web-idle-timeout=3600000",
                 "--web-max-connections=100000"):
        assert flag in args
    assert args[-1] == "--devices=g"  # extraArgs come last
    config, warnings = parse_config(args, r.env())
    assert (config.slow_fields_interval_ms, config.xid_window_ms,
            config.clock_events_window_ms) == (0, 60000, 120000)
    assert config.drop_labels == frozenset(DROP_LABELS)  # pod labels on: no unknown warning
    assert config.config_check_interval_ms == 0
    assert (config.web_read_header_timeout_ms, config.web_idle_timeout_ms,
            config.web_max_connections) == (2500, 3600000, 100000)
    assert config.dra and config.dra_drivers == frozenset(DRA_DRIVERS)
    assert config.collect_interval_ms == 1000
    assert config.virtual_gpus and config.kubernetes and config.debug
    assert config.hostname is None and config.log_format == "json"
    assert config.gpu_id_type == "device-name"
    assert config.extra_resources == {"nvidia.com/gpu.shared", "nvidia.com/gpu.mps"}
    assert warnings == [] and config.devices == "g", "extraArgs reach the exporter"
    assert r.container["env"][-2:] == [DRA_ENV, {"name": "GPU_ENRICHER_EXTRA", "value": "1"}]
    assert r.pod["runtimeClassName"] == "nvidia"
    assert r.pod["hostPID"] is True
    assert r.pod["nodeSelector"] == {"nvidia.com/gpu.present": "true",
                                     "kubernetes.io/os": "linux"}
    assert r.pod["affinity"] == ALL_FEATURES["affinity"]
    assert r.pod["tolerations"] == [{"key": "nvidia.com/gpu", "operator": "Exists",
                                     "effect": "NoSchedule"}, *ALL_FEATURES["tolerations"]]
    assert r.pod["imagePullSecrets"] == [{"name": "registry"}]
    assert r.one("Service")["spec"]["ports"][0]["targetPort"] == "metrics"


def test_flag_values_default_to_the_exporters_defaults(rendered: dict[str, Rendered]) -> None:
    """values.yaml's defaults are rendered, each flag once, and are the exporter's own: the pods
    run as the exporter would with none of these flags (a changed default in cli/flag_values.py
    fails here until values.yaml follows). An empty dropLabels renders no flag."""
    args = rendered["defaults"].container["args"]
    defaults = yaml.safe_load((CHART / "values.yaml").read_text())
    config, _ = parse_config(args, {"NODE_NAME": "node-a"})
    exporter, _ = parse_config([], {"NODE_NAME": "node-a"})
    for name, (flag, setting, _other) in FLAG_VALUES.items():
        assert [a for a in args if a.startswith(f"{flag}=")] == [f"{flag}={defaults[name]}"]
        assert setting(config) == setting(exporter) == defaults[name], name
    for name, (flag, setting, _other) in LIST_FLAG_VALUES.items():
        assert defaults[name] == []
        assert not any(a.startswith(flag) for a in args)
        assert setting(config) == setting(exporter) == frozenset()


@pytest.mark.parametrize("name", [*FLAG_VALUES, *LIST_FLAG_VALUES])
def test_flag_value_renders_its_flag(name: str, helm: str, rendered: dict[str, Rendered],
                                     tmp_path: Path) -> None:
    """One value set: its flag, in the exporter's --flag=VALUE syntax (a list joined with
    commas), replaces the default one or is added, and nothing else in the args changes; the
    exporter's parser accepts the args and holds the value."""
    flag, setting, value = {**FLAG_VALUES, **LIST_FLAG_VALUES}[name]
    text = helm_template(helm, CHART, write_values(tmp_path, name, {name: value})).stdout
    daemonset = next(d for d in yaml.safe_load_all(text) if d and d["kind"] == "DaemonSet")
    (container,) = daemonset["spec"]["template"]["spec"]["containers"]
    args = container["args"]
    rendered_value = ",".join(value) if isinstance(value, list) else value
    assert [a for a in args if a.startswith(f"{flag}=")] == [f"{flag}={rendered_value}"]
    default_args = rendered["defaults"].container["args"]
    assert [a for a in args if not a.startswith(f"{flag}=")] == \
        [a for a in default_args if not a.startswith(f"{flag}=")]
    config, warnings = parse_config(args, {"NODE_NAME": "node-a"})
    assert setting(config) == (frozenset(value) if isinstance(value, list) else value)
    assert warnings == []


@pytest.mark.parametrize("name", [n for n in FLAG_VALUES
                                  if n not in ("hostnameLabelName", "naming")])
def test_schema_minimum_is_the_exporters(name: str, helm: str, tmp_path: Path) -> None:
    """The schema's minimum is the least value the exporter's parser takes: that one renders
    and parses; one less is refused by both, by helm before anything reaches a node (the
    exporter would exit 2 and crash-loop on every GPU node)."""
    flag, setting, _ = FLAG_VALUES[name]
    minimum = json.loads((CHART / "values.schema.json").read_text())[
        "properties"][name]["minimum"]
    text = helm_template(helm, CHART, write_values(tmp_path, "min", {name: minimum})).stdout
    daemonset = next(d for d in yaml.safe_load_all(text) if d and d["kind"] == "DaemonSet")
    (container,) = daemonset["spec"]["template"]["spec"]["containers"]
    config, _ = parse_config(container["args"], {"NODE_NAME": "node-a"})
    assert setting(config) == minimum
    with pytest.raises(UsageError):
        parse_config([f"{flag}={minimum - 1}"], {"NODE_NAME": "node-a"})
    refused = helm_template(helm, CHART, write_values(tmp_path, "below", {name: minimum - 1}),
                            check=False)
    assert refused.returncode != 0
    assert f"- {name}: Must be greater than or equal to {minimum}" in refused.stderr, \
        refused.stderr


SCHEMA_ERRORS: list[tuple[dict[str, Any], str]] = [
    ({"webMaxConnections": -5}, "- webMaxConnections: Must be greater than or equal to 1"),
    ({"kubeletListCpuBudget": 150},
     "- kubeletListCpuBudget: Must be less than or equal to 100"),
    ({"configCheckInterval": "5s"},
     "- configCheckInterval: Invalid type. Expected: integer, given: string"),
    ({"webIdleTimeout": 1.5}, "- webIdleTimeout: Invalid type. Expected: integer, given: number"),
    ({"dropLabels": "UUID,device"}, "- dropLabels: Invalid type. Expected: array, given: string"),
    ({"dropLabels": ["UUID", "gpu"]}, "- dropLabels.1: Must not validate the schema (not)"),
    ({"hostnameLabelName": "HOSTNAME"}, "- hostnameLabelName: hostnameLabelName must be one of"),
]


@pytest.mark.parametrize(("values", "error"), SCHEMA_ERRORS, ids=[
    yaml.safe_dump(v, default_flow_style=True).strip() for v, _ in SCHEMA_ERRORS])
def test_schema_error_names_the_flag_value(helm: str, values: dict[str, Any], error: str,
                                           tmp_path: Path) -> None:
    """helm's own message names the value and what is wrong with it."""
    result = helm_template(helm, CHART, write_values(tmp_path, "bad", values), check=False)
    assert result.returncode != 0
    assert "values don't meet the specifications of the schema" in result.stderr
    assert error in result.stderr, result.stderr


def test_schema_drop_labels_are_the_exporters() -> None:
    """dropLabels' schema refuses exactly what the exporter's --drop-labels refuses: its list
    of labels that tell series apart (label_drop.REFUSED), names that are not label names or
    are Prometheus's own (__*), and commas (the value is joined with them)."""
    items = json.loads((CHART / "values.schema.json").read_text())[
        "properties"]["dropLabels"]["items"]
    assert items["not"]["enum"] == sorted(REFUSED)
    pattern = re.compile(items["pattern"])  # RE2 and Python agree on this one
    for name in ("UUID", "pci_bus_id", "Hostname", "hostname", "DCGM_FI_DRIVER_VERSION",
                 "app_kubernetes_io_name", "_", "_x", "_1", "x1", "__name__", "__", "1gpu",
                 "pci-bus-id", "UUID,device", "a b", "", "é"):
        assert (pattern.fullmatch(name) is not None) is (refusal(name) is None), name


def test_extra_args_still_override_the_flag_values(helm: str, tmp_path: Path) -> None:
    """extraArgs come after the chart's args and the last occurrence of a flag wins: what
    operators set through extraArgs before these values existed keeps working."""
    extra = ["--web-max-connections=64", "--config-check-interval=0", "--drop-labels=UUID"]
    text = helm_template(helm, CHART, write_values(tmp_path, "v", {"extraArgs": extra})).stdout
    daemonset = next(d for d in yaml.safe_load_all(text) if d and d["kind"] == "DaemonSet")
    (container,) = daemonset["spec"]["template"]["spec"]["containers"]
    assert container["args"][-3:] == extra
    config, _ = parse_config(container["args"], {"NODE_NAME": "node-a"})
    assert config.web_max_connections == 64 and config.config_check_interval_ms == 0
    assert config.drop_labels == {"UUID"}


def test_gpu_node_selection_off(rendered: dict[str, Rendered]) -> None:
    r = rendered["gpu-node-selection-off"]
    assert "nodeSelector" not in r.pod
    assert "tolerations" not in r.pod


# Prometheus Operator objects.

def test_servicemonitor_follows_the_crd(rendered: dict[str, Rendered]) -> None:
    assert "ServiceMonitor" not in rendered["defaults"].kinds()
    detected = rendered["servicemonitor-crd-detected"]
    assert "ServiceMonitor" in detected.kinds()
    assert "PrometheusRule" not in detected.kinds()  # its own CRD was not announced
    assert "ServiceMonitor" in rendered["all-features"].kinds()  # forced


def test_servicemonitor_relabelings(rendered: dict[str, Rendered]) -> None:
    monitor = rendered["servicemonitor-crd-detected"].one("ServiceMonitor")
    service = rendered["servicemonitor-crd-detected"].one("Service")
    # A ServiceMonitor selects Services by their metadata labels.
    selector = monitor["spec"]["selector"]["matchLabels"]
    assert selector and selector.items() <= service["metadata"]["labels"].items()
    assert monitor["spec"]["namespaceSelector"] == {"matchNames": [NAMESPACE]}
    (endpoint,) = monitor["spec"]["endpoints"]
    assert endpoint["port"] == "metrics" and endpoint["path"] == "/metrics"
    assert endpoint["interval"] == "15s"
    assert endpoint["honorLabels"] is True
    assert endpoint["relabelings"] == RELABELINGS
    assert "metricRelabelings" not in endpoint
    # Without webConfig: plain http, whatever tlsConfig and basicAuth say (test_chart_tls.py).
    assert not {"scheme", "tlsConfig", "basicAuth"} & set(endpoint)


def test_servicemonitor_all_options(rendered: dict[str, Rendered]) -> None:
    monitor = rendered["all-features"].one("ServiceMonitor")
    assert monitor["metadata"]["labels"]["release"] == "kube-prometheus-stack"
    (endpoint,) = monitor["spec"]["endpoints"]
    assert endpoint["honorLabels"] is True
    assert endpoint["scrapeTimeout"] == "10s"
    options = ALL_FEATURES["serviceMonitor"]
    assert endpoint["relabelings"] == [NODE_NAME_RELABELING, *RELABELINGS,
                                       *options["extraRelabelings"]]
    assert endpoint["metricRelabelings"] == options["metricRelabelings"]


def test_prometheusrule(rendered: dict[str, Rendered]) -> None:
    rule = rendered["all-features"].one("PrometheusRule")
    groups = yaml.safe_load((CHART / "files" / "alerts.yaml").read_text())["groups"]
    assert rule["spec"]["groups"][:-1] == groups
    extra = rule["spec"]["groups"][-1]
    assert extra == {"name": f"{RELEASE}-gpu-enricher.additional", "rules": [EXTRA_RULE]}
    assert rule["metadata"]["labels"]["release"] == "kube-prometheus-stack"


def test_dashboards(rendered: dict[str, Rendered], test_chart: Path) -> None:
    r = rendered["all-features"]
    files = sorted((test_chart / "files" / "dashboards").glob("*.json"))
    assert TEST_DASHBOARD in [f.name for f in files]
    maps = [c for c in r.all("ConfigMap") if "-dashboard-" in c["metadata"]["name"]]
    assert len(maps) == len(files)
    by_key = {key: (c, value) for c in maps for key, value in c["data"].items()}
    for path in files:
        configmap, content = by_key[path.name]
        assert content == path.read_text()
        assert configmap["metadata"]["labels"]["grafana_dashboard"] == "1"
        assert configmap["metadata"]["namespace"] == "monitoring"
        assert configmap["metadata"]["annotations"] == {"grafana_folder": "GPUs"}
    defaults = rendered["defaults"]
    assert all(c["metadata"]["namespace"] == NAMESPACE and
               c["metadata"]["labels"]["grafana_dashboard"] == "1"
               for c in defaults.all("ConfigMap") if "-dashboard-" in c["metadata"]["name"])


def test_hpc_job_mapping_as_the_gpu_operator_renders_it(helm: str, tmp_path: Path) -> None:
    """hpcJobMapping: the host directory read-only at the same path, and the GPU Operator's
    variable (no flag), which the exporter reads as --hpc-job-mapping-dir."""
    directory = "/run/slurm/job-mapping"
    values = {"hpcJobMapping": {"enabled": True, "directory": directory}}
    text = helm_template(helm, CHART, write_values(tmp_path, "hpc", values)).stdout
    r = Rendered(values, text, [d for d in yaml.safe_load_all(text) if d])
    assert {"name": "DCGM_HPC_JOB_MAPPING_DIR", "value": directory} in r.container["env"]
    assert {"name": "hpc-job-mapping", "mountPath": directory,
            "readOnly": True} in r.container["volumeMounts"]
    volume = {"path": directory, "type": "DirectoryOrCreate"}  # the prolog may come later
    assert {"name": "hpc-job-mapping", "hostPath": volume} in r.pod["volumes"]
    assert not any(a.startswith("--hpc") for a in r.container["args"])
    config, warnings = parse_config(r.container["args"], r.env())
    assert config.hpc_job_mapping_dir == Path(directory) and not warnings
    default = helm_template(helm, CHART, None).stdout
    assert "hpc-job-mapping" not in default and "DCGM_HPC_JOB_MAPPING_DIR" not in default


def test_counters_config_map_is_watched_with_a_role_in_its_namespace(
        helm: str, tmp_path: Path) -> None:
    """countersConfigMap: -m, the token, and get/list/watch on ConfigMaps in that namespace
    only (a Role there, bound to the exporter's account in the release's namespace)."""
    values = {"countersConfigMap": "gpu-operator:dcgm-metrics"}
    text = helm_template(helm, CHART, write_values(tmp_path, "cm", values)).stdout
    r = Rendered(values, text, [d for d in yaml.safe_load_all(text) if d])
    assert "--configmap-data=gpu-operator:dcgm-metrics" in r.container["args"]
    assert r.pod["automountServiceAccountToken"] is True
    assert "ClusterRole" not in r.kinds(), "nothing cluster-wide for a ConfigMap"
    role, binding = r.one("Role"), r.one("RoleBinding")
    assert role["metadata"]["namespace"] == binding["metadata"]["namespace"] == "gpu-operator"
    assert role["rules"] == [{"apiGroups": [""], "resources": ["configmaps"],
                              "verbs": ["get", "list", "watch"]}]
    assert binding["subjects"] == [{"kind": "ServiceAccount", "name": r.pod["serviceAccountName"],
                                    "namespace": NAMESPACE}]
    config, _ = parse_config(r.container["args"], r.env())
    assert config.configmap == ("gpu-operator", "dcgm-metrics")
    refused = helm_template(helm, CHART, write_values(tmp_path, "bad", {
        "countersConfigMap": "no-colon"}), check=False)
    assert refused.returncode != 0 and "countersConfigMap" in refused.stderr
