"""The Helm chart: helm lint, helm template over value combinations, every manifest validated
against Kubernetes' schemas (kubernetes-validate, offline), and what matters asserted."""

import filecmp
import importlib.util
import json
import os
import shutil
import subprocess
import sys
import tomllib
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest
import yaml

from gpu_enricher.cli import parse_config
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
                   "resourceNames": ["nvidia.com/gpu.shared", "nvidia.com/gpu.mps"]},
    "counters": CUSTOM_COUNTERS,
    "collectInterval": 1000,
    "port": 9500,
    "noHostname": True,
    "debug": True,
    "logFormat": "json",
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
}


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

def test_default_counters_copy_is_identical() -> None:
    """The chart's default counters are the package's own (a chart cannot read outside itself)."""
    copy = CHART / "files" / "default-counters.csv"
    original = ROOT / "src" / "gpu_enricher" / "default-counters.csv"
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
], ids=lambda v: yaml.safe_dump(v, default_flow_style=True).strip())
def test_schema_rejects_bad_values(helm: str, values: dict[str, Any], tmp_path: Path) -> None:
    result = helm_template(helm, CHART, write_values(tmp_path, "bad", values), check=False)
    assert result.returncode != 0
    assert "schema" in result.stderr, result.stderr


# Every rendered manifest is valid Kubernetes.

@pytest.mark.parametrize("name", list(COMBINATIONS))
def test_manifests_validate(name: str, rendered: dict[str, Rendered],
                            kubernetes_versions: list[str], tmp_path: Path) -> None:
    manifest = tmp_path / "manifest.yaml"
    manifest.write_text(rendered[name].text)
    command = [kubeval_python(), "-m", "kubernetes_validate", "--strict"]
    for version in kubernetes_versions:
        command += ["-k", version]
    # A file, not stdin: kubernetes-validate reads stdin once, whatever the number of versions.
    result = subprocess.run([*command, str(manifest)], capture_output=True, text=True,
                            timeout=120, check=False)
    output = result.stdout + result.stderr
    assert result.returncode == 0, output
    core = [d for d in rendered[name].docs if d["kind"] not in CUSTOM_RESOURCES]
    passed = [line for line in output.splitlines()
              if line.startswith("INFO") and " passed " in line]
    assert len(passed) == len(core) * len(kubernetes_versions), output
    for line in output.splitlines():
        if line.startswith("WARN"):
            assert any(f"kind {kind} " in line for kind in CUSTOM_RESOURCES), line
        else:
            assert line.startswith("INFO"), line


# What matters, in every combination.

@pytest.mark.parametrize("name", list(COMBINATIONS))
def test_never_rbac_privileged_or_sys_admin(name: str, rendered: dict[str, Rendered]) -> None:
    r = rendered[name]
    assert not RBAC_KINDS & set(r.kinds())
    assert not any(kind.endswith("Binding") for kind in r.kinds())
    assert r.container["securityContext"] == SECURITY_CONTEXT
    assert "SYS_ADMIN" not in r.text
    assert "privileged: true" not in r.text
    assert "hostNetwork" not in r.pod
    assert r.pod["automountServiceAccountToken"] is False
    for account in r.all("ServiceAccount"):
        assert account["automountServiceAccountToken"] is False
    assert r.pod.get("hostPID", False) is bool(r.values.get("hostPID", False))


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
    volume = next(v for v in r.pod["volumes"] if "hostPath" in v)
    assert volume["hostPath"] == {"path": f"{root}/pod-resources", "type": "Directory"}
    mount = next(m for m in r.container["volumeMounts"] if m["name"] == volume["name"])
    assert mount == {"name": volume["name"], "mountPath": SOCKET_DIR, "readOnly": True}
    assert "--kubernetes" in r.container["args"]
    assert f"--pod-resources-kubelet-socket={SOCKET_DIR}/kubelet.sock" in r.container["args"]
    config, _ = parse_config(r.container["args"], {})
    assert config.kubernetes and str(config.kubelet_socket) == f"{SOCKET_DIR}/kubelet.sock"
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
    assert (config.collect_interval_ms, config.log_format, config.debug) == (5000, "text", False)
    assert config.hostname == "node-a" and config.gpu_id_type == "uid"
    assert not config.virtual_gpus and config.extra_resources == frozenset()
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


def test_all_flags_reach_the_container(rendered: dict[str, Rendered]) -> None:
    r = rendered["all-features"]
    args = r.container["args"]
    for flag in ("--collect-interval=1000", "--kubernetes-virtual-gpus", "--no-hostname",
                 "--debug", "--log-format=json", "--kubernetes-gpu-id-type=device-name",
                 "--nvidia-resource-names=nvidia.com/gpu.shared,nvidia.com/gpu.mps",
                 "--address=:9500"):
        assert flag in args
    assert args[-1] == "--devices=g"  # extraArgs come last
    config, warnings = parse_config(args, {"NODE_NAME": "node-a"})
    assert config.collect_interval_ms == 1000
    assert config.virtual_gpus and config.kubernetes and config.debug
    assert config.hostname is None and config.log_format == "json"
    assert config.gpu_id_type == "device-name"
    assert config.extra_resources == {"nvidia.com/gpu.shared", "nvidia.com/gpu.mps"}
    assert len(warnings) == 1 and "--devices" in warnings[0]
    assert {"name": "GPU_ENRICHER_EXTRA", "value": "1"} in r.container["env"]
    assert r.pod["runtimeClassName"] == "nvidia"
    assert r.pod["hostPID"] is True
    assert r.pod["nodeSelector"] == {"nvidia.com/gpu.present": "true",
                                     "kubernetes.io/os": "linux"}
    assert r.pod["affinity"] == ALL_FEATURES["affinity"]
    assert r.pod["tolerations"] == [{"key": "nvidia.com/gpu", "operator": "Exists",
                                     "effect": "NoSchedule"}, *ALL_FEATURES["tolerations"]]
    assert r.pod["imagePullSecrets"] == [{"name": "registry"}]
    assert r.one("Service")["spec"]["ports"][0]["targetPort"] == "metrics"


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
