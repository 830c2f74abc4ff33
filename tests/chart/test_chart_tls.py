"""The chart's webConfig: the web-config Secret and the server certificate's Secret mounted as
directories, --web-config-file, probes that get through what the file asks for, and a
ServiceMonitor that scrapes through it; then the rendered pod run for real: the exporter started
with the rendered args and files (certificates made by openssl), probed as the kubelet probes it
and scraped as the ServiceMonitor tells Prometheus to."""

import base64
import contextlib
import os
import re
import socket
import ssl
import subprocess
import sys
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import bcrypt
import pytest
import yaml

from gpu_enricher.cli.settings import parse_config
from gpu_enricher.web.config import parse_web_config
from gpu_enricher.web.security import load_web_security
from tests.app.test_process import free_port
from tests.chart.test_chart import (
    CHART,
    CUSTOM_RESOURCES,
    NAMESPACE,
    RELEASE,
    Rendered,
    helm_template,
    kubeval_python,
    write_values,
)
from tests.conftest import ROOT, require_tool
from tests.pki import SecretVolume, make_ca, make_leaf
from tests.sim.test_simulate_cleanup import spawned as spawned  # the fixture

SERVICE_DNS = f"{RELEASE}-gpu-enricher.{NAMESPACE}.svc"  # the default serverName
WEB_CONFIG_SECRET = f"{RELEASE}-gpu-enricher-web-config"
SERVER_TLS = "gpu-enricher-tls"  # kubernetes.io/tls with ca.crt, as cert-manager writes it
CLIENT_CA = "prometheus-client-ca"  # a CA of its own for Prometheus' client certificate
CLIENT_TLS = "prometheus-client-tls"  # signed by CLIENT_CA
CLIENT_TLS_SERVER_CA = "prometheus-client-tls-server-ca"  # signed by the server's CA
BASIC_AUTH = "prometheus-basic-auth"
OWN_FILE = "own-web-config"
PROMETHEUS_PASSWORD = "scrape-s3cret"
PROBE_PASSWORD = "probe-s3cret"
# Cost 4, the lowest the exporter accepts: these tests are not about bcrypt's cost.
PROMETHEUS_HASH = bcrypt.hashpw(PROMETHEUS_PASSWORD.encode(), bcrypt.gensalt(4)).decode()
PROBE_HASH = bcrypt.hashpw(PROBE_PASSWORD.encode(), bcrypt.gensalt(4)).decode()
HSTS = "max-age=31536000"

SERVICE_MONITOR_BASIC_AUTH = {"username": {"name": BASIC_AUTH, "key": "username"},
                              "password": {"name": BASIC_AUTH, "key": "password"}}
CLIENT_CERT = {"cert": {"secret": {"name": CLIENT_TLS, "key": "tls.crt"}},
               "keySecret": {"name": CLIENT_TLS, "key": "tls.key"}}
# The operator's own file, naming the certificate where values.yaml says it is mounted.
OWN_WEB_CONFIG = ("tls_server_config:\n"
                  "  cert_file: /etc/gpu-enricher-web/tls/tls.crt\n"
                  "  key_file: /etc/gpu-enricher-web/tls/tls.key\n"
                  f"basic_auth_users:\n  prometheus: {PROMETHEUS_HASH}\n")

# name → values. The ServiceMonitor is forced on everywhere.
COMBINATIONS: dict[str, dict[str, Any]] = {
    "tls": {"webConfig": {"enabled": True, "tls": {"existingSecret": SERVER_TLS}}},
    "tls-basic-auth-probe-user": {
        "webConfig": {"enabled": True, "tls": {"existingSecret": SERVER_TLS},
                      "basicAuthUsers": {"prometheus": PROMETHEUS_HASH, "probe": PROBE_HASH},
                      "headers": {"Strict-Transport-Security": HSTS,
                                  "X-Content-Type-Options": "nosniff"},
                      "probeBasicAuth": {"username": "probe", "password": PROBE_PASSWORD}},
        "serviceMonitor": {"basicAuth": SERVICE_MONITOR_BASIC_AUTH}},
    "mutual-tls": {
        "webConfig": {"enabled": True,
                      "tls": {"existingSecret": SERVER_TLS, "minVersion": "TLS13",
                              "clientAuthType": "RequireAndVerifyClientCert",
                              "clientCASecret": CLIENT_CA},
                      "basicAuthUsers": {"prometheus": PROMETHEUS_HASH}},
        "serviceMonitor": {"tlsConfig": CLIENT_CERT, "basicAuth": SERVICE_MONITOR_BASIC_AUTH}},
    "client-cert-if-given": {
        "webConfig": {"enabled": True,
                      "tls": {"existingSecret": SERVER_TLS,
                              "clientAuthType": "VerifyClientCertIfGiven"}},
        "serviceMonitor": {"tlsConfig": {
            "cert": {"secret": {"name": CLIENT_TLS_SERVER_CA, "key": "tls.crt"}},
            "keySecret": {"name": CLIENT_TLS_SERVER_CA, "key": "tls.key"}}}},
    "basic-auth-without-tls": {
        "webConfig": {"enabled": True, "basicAuthUsers": {"prometheus": PROMETHEUS_HASH}},
        "serviceMonitor": {"basicAuth": SERVICE_MONITOR_BASIC_AUTH}},
    "own-file": {
        "webConfig": {"enabled": True, "existingSecret": OWN_FILE,
                      "tls": {"existingSecret": SERVER_TLS}},
        "serviceMonitor": {"basicAuth": SERVICE_MONITOR_BASIC_AUTH}},
    "insecure-skip-verify": {
        "webConfig": {"enabled": True, "tls": {"existingSecret": SERVER_TLS}},
        "serviceMonitor": {"tlsConfig": {"insecureSkipVerify": True,
                                         "serverName": "gpu.example.com"}}},
}


@dataclass(frozen=True)
class Expected:
    tls: bool
    probe: str  # "httpGet" or "tcpSocket"
    probe_user: str | None = None
    basic_auth: bool = False  # whether a request needs credentials
    client_cert: str | None = None  # the Secret of Prometheus' client certificate
    requires_cert: bool = False  # RequireAndVerifyClientCert


EXPECTED = {
    "tls": Expected(tls=True, probe="httpGet"),
    "tls-basic-auth-probe-user": Expected(tls=True, probe="httpGet", probe_user="probe",
                                          basic_auth=True),
    "mutual-tls": Expected(tls=True, probe="tcpSocket", basic_auth=True, client_cert=CLIENT_TLS,
                           requires_cert=True),
    "client-cert-if-given": Expected(tls=True, probe="httpGet",
                                     client_cert=CLIENT_TLS_SERVER_CA),
    "basic-auth-without-tls": Expected(tls=False, probe="tcpSocket", basic_auth=True),
    "own-file": Expected(tls=True, probe="tcpSocket", basic_auth=True),
    "insecure-skip-verify": Expected(tls=True, probe="httpGet"),
}


def with_service_monitor(values: dict[str, Any]) -> dict[str, Any]:
    return {**values, "serviceMonitor": {"enabled": True, **values.get("serviceMonitor", {})}}


@pytest.fixture(scope="module")
def helm() -> str:
    return require_tool("helm")


@pytest.fixture(scope="module")
def rendered(helm: str, tmp_path_factory: pytest.TempPathFactory) -> dict[str, Rendered]:
    directory = tmp_path_factory.mktemp("values")
    out: dict[str, Rendered] = {}
    for name, values in COMBINATIONS.items():
        values = with_service_monitor(values)
        text = helm_template(helm, CHART, write_values(directory, name, values)).stdout
        out[name] = Rendered(values, text, [d for d in yaml.safe_load_all(text) if d])
    return out


def web_config_text(r: Rendered) -> str:
    secret = next(s for s in r.all("Secret") if s["metadata"]["name"] == WEB_CONFIG_SECRET)
    return base64.b64decode(secret["data"]["web-config.yml"]).decode()


def web_config_arg(r: Rendered) -> str:
    (arg,) = [a for a in r.container["args"] if a.startswith("--web-config-file")]
    return arg.split("=", 1)[1]


def endpoint(r: Rendered) -> dict[str, Any]:
    (found,) = r.one("ServiceMonitor")["spec"]["endpoints"]
    return found  # type: ignore[no-any-return]


# What renders.

@pytest.mark.parametrize("name", list(COMBINATIONS))
def test_manifests_validate(name: str, helm: str, tmp_path: Path) -> None:
    values = write_values(tmp_path, name, with_service_monitor(COMBINATIONS[name]))
    manifest = tmp_path / "manifest.yaml"
    manifest.write_text(helm_template(helm, CHART, values).stdout)
    result = subprocess.run([kubeval_python(), "-m", "kubernetes_validate", "--strict", "-k",
                             "1.29.0", str(manifest)], capture_output=True, text=True,
                            timeout=120, check=False)
    output = result.stdout + result.stderr
    assert result.returncode == 0, output
    for line in output.splitlines():
        assert line.startswith("INFO") or any(f"kind {k} " in line for k in CUSTOM_RESOURCES)


def test_lint_strict(helm: str, tmp_path: Path) -> None:
    values = with_service_monitor(COMBINATIONS["mutual-tls"])
    result = subprocess.run([helm, "lint", "--strict", str(CHART), "--values",
                             str(write_values(tmp_path, "v", values))],
                            capture_output=True, text=True, timeout=60, check=False)
    assert result.returncode == 0, result.stdout + result.stderr
    assert "[WARNING]" not in result.stdout and "[ERROR]" not in result.stdout, result.stdout


@pytest.mark.parametrize("name", list(COMBINATIONS))
def test_secrets_mounted_as_read_only_directories(name: str,
                                                  rendered: dict[str, Rendered]) -> None:
    """Each Secret is a whole-directory mount (no subPath: the kubelet then swaps its files
    when the Secret changes), read-only, its files readable by the owner and group only; the
    exporter's parser takes --web-config-file, which lies in the web-config mount."""
    r = rendered[name]
    values = r.values["webConfig"]
    volumes = {v["name"]: v for v in r.pod["volumes"]}
    mounts = {m["name"]: m for m in r.container["volumeMounts"]}
    secrets = {name: v["secret"]["secretName"] for name, v in volumes.items() if "secret" in v}
    expected = {"web-config": values.get("existingSecret", WEB_CONFIG_SECRET)}
    if EXPECTED[name].tls:
        expected["web-tls"] = SERVER_TLS
    if values.get("tls", {}).get("clientCASecret"):
        expected["web-client-ca"] = CLIENT_CA
    assert secrets == expected
    for volume in secrets:
        assert volumes[volume]["secret"]["defaultMode"] == 0o440
        assert set(mounts[volume]) == {"name", "mountPath", "readOnly"}  # no subPath
        assert mounts[volume]["readOnly"] is True
    # Siblings outside the counters' read-only mount, which could not hold mount points.
    paths = sorted(mounts[v]["mountPath"] for v in secrets)
    assert not any(p.startswith(mounts["counters"]["mountPath"] + "/") for p in paths)
    assert not any(a.startswith(b + "/") for a in paths for b in paths)
    path = web_config_arg(r)
    assert path == f"{mounts['web-config']['mountPath']}/web-config.yml"
    config, warnings = parse_config(r.container["args"], r.env())
    assert str(config.web_config_file) == path and warnings == []
    # The chart writes a file only when it is not the operator's.
    assert (WEB_CONFIG_SECRET in [s["metadata"]["name"] for s in r.all("Secret")]) is (
        "existingSecret" not in values)


@pytest.mark.parametrize("name", [n for n in COMBINATIONS if n != "own-file"])
def test_the_file_the_chart_writes(name: str, rendered: dict[str, Rendered]) -> None:
    """The exporter's own checker accepts the file; it names the certificate, key and client CA
    where the pod mounts them, and carries the users and headers of the values."""
    r = rendered[name]
    values = r.values["webConfig"]
    config = parse_web_config(web_config_text(r), web_config_arg(r))
    mounts = {m["name"]: m["mountPath"] for m in r.container["volumeMounts"]}
    assert dict(config.users) == values.get("basicAuthUsers", {})
    assert dict(config.headers) == values.get("headers", {})
    tls = values.get("tls", {})
    if not EXPECTED[name].tls:
        assert config.tls is None
        return
    assert config.tls is not None
    assert str(config.tls.cert_file) == f"{mounts['web-tls']}/tls.crt"
    assert str(config.tls.key_file) == f"{mounts['web-tls']}/tls.key"
    assert config.tls.min_version == tls.get("minVersion", "TLS12")
    assert config.tls.client_auth_type == tls.get("clientAuthType", "NoClientCert")
    if config.tls.client_auth_type == "NoClientCert":
        assert config.tls.client_ca_file is None
    else:  # its own Secret, else the ca.crt beside the server's certificate
        ca_mount = mounts["web-client-ca" if tls.get("clientCASecret") else "web-tls"]
        assert str(config.tls.client_ca_file) == f"{ca_mount}/ca.crt"


@pytest.mark.parametrize("name", list(COMBINATIONS))
def test_probes(name: str, rendered: dict[str, Rendered]) -> None:
    """httpGet over HTTPS with TLS (the kubelet does not verify the certificate), with an
    Authorization header for probeBasicAuth; tcpSocket where the kubelet cannot get through:
    a required client certificate, basic auth without probeBasicAuth, a file the chart cannot
    read. The probes' timings stay the values'."""
    r = rendered[name]
    expected = EXPECTED[name]
    for probe, path in (("livenessProbe", "/health"), ("readinessProbe", "/ready")):
        action = r.container[probe]
        assert action["periodSeconds"] == 10 and action["failureThreshold"] == 3
        if expected.probe == "tcpSocket":
            assert "httpGet" not in action and action["tcpSocket"] == {"port": "metrics"}
            continue
        get = action["httpGet"]
        assert "tcpSocket" not in action
        assert (get["path"], get["port"]) == (path, "metrics")
        assert get.get("scheme", "HTTP") == ("HTTPS" if expected.tls else "HTTP")
        headers = get.get("httpHeaders", [])
        if expected.probe_user is None:
            assert headers == []
        else:
            (header,) = headers
            assert header["name"] == "Authorization"
            credentials = base64.b64decode(header["value"].removeprefix("Basic ")).decode()
            assert credentials == f"{expected.probe_user}:{PROBE_PASSWORD}"


@pytest.mark.parametrize("name", list(COMBINATIONS))
def test_servicemonitor(name: str, rendered: dict[str, Rendered]) -> None:
    """https with TLS; the CA from the server certificate's Secret (ca.crt) unless given or
    verification is skipped; the Service's DNS name as serverName; the client certificate only
    where the exporter asks for one; basicAuth as given."""
    r = rendered[name]
    expected = EXPECTED[name]
    found = endpoint(r)
    options = r.values["serviceMonitor"]
    assert found["honorLabels"] is True and found["port"] == "metrics"
    if not expected.tls:
        assert "scheme" not in found and "tlsConfig" not in found
    else:
        assert found["scheme"] == "https"
        tls = found["tlsConfig"]
        skip = options.get("tlsConfig", {}).get("insecureSkipVerify", False)
        assert tls.get("insecureSkipVerify", False) is skip
        assert tls["serverName"] == options.get("tlsConfig", {}).get("serverName", SERVICE_DNS)
        if skip:
            assert "ca" not in tls
        else:
            assert tls["ca"] == {"secret": {"name": SERVER_TLS, "key": "ca.crt"}}
        if expected.client_cert is None:
            assert "cert" not in tls and "keySecret" not in tls
        else:
            assert tls["cert"] == {"secret": {"name": expected.client_cert, "key": "tls.crt"}}
            assert tls["keySecret"] == {"name": expected.client_cert, "key": "tls.key"}
    assert found.get("basicAuth") == options.get("basicAuth")


def test_ca_from_a_config_map(helm: str, tmp_path: Path) -> None:
    """A CA bundle of its own (e.g. trust-manager's ConfigMap) replaces the default."""
    ca = {"configMap": {"name": "trust-bundle", "key": "ca.crt"}}
    values = with_service_monitor({**COMBINATIONS["tls"],
                                   "serviceMonitor": {"tlsConfig": {"ca": ca}}})
    text = helm_template(helm, CHART, write_values(tmp_path, "v", values)).stdout
    monitor = next(d for d in yaml.safe_load_all(text) if d and d["kind"] == "ServiceMonitor")
    assert monitor["spec"]["endpoints"][0]["tlsConfig"]["ca"] == ca


def test_tls_settings_that_need_a_restart_roll_the_pods(helm: str, tmp_path: Path) -> None:
    """The exporter re-reads certificates, users and headers, but not the TLS versions or the
    client-certificate mode: changing those changes the pod template, the others do not."""
    def annotations(values: dict[str, Any]) -> dict[str, str]:
        text = helm_template(helm, CHART, write_values(tmp_path, "v", values)).stdout
        daemonset = next(d for d in yaml.safe_load_all(text) if d and d["kind"] == "DaemonSet")
        return daemonset["spec"]["template"]["metadata"]["annotations"]  # type: ignore[no-any-return]

    base = {"webConfig": {"enabled": True, "tls": {"existingSecret": SERVER_TLS}}}
    first = annotations(base)
    users = annotations({"webConfig": {**base["webConfig"],
                                       "basicAuthUsers": {"probe": PROBE_HASH},
                                       "headers": {"Strict-Transport-Security": HSTS}}})
    tls13 = annotations({"webConfig": {**base["webConfig"], "tls": {
        "existingSecret": SERVER_TLS, "minVersion": "TLS13"}}})
    mutual = annotations({"webConfig": {**base["webConfig"], "tls": {
        "existingSecret": SERVER_TLS, "clientAuthType": "RequireAndVerifyClientCert"}}})
    assert users == first
    key = "checksum/web-tls-settings"
    assert len({first[key], tls13[key], mutual[key]}) == 3
    assert tls13["checksum/counters"] == first["checksum/counters"]
    assert key not in annotations({}) and key not in annotations(COMBINATIONS["own-file"])


@pytest.mark.parametrize(("values", "message"), [
    ({"webConfig": {"enabled": True}},
     "webConfig.enabled: set webConfig.tls.existingSecret"),
    ({"webConfig": {"enabled": True, "tls": {"clientAuthType": "VerifyClientCertIfGiven"},
                    "headers": {"X-Frame-Options": "deny"}}},
     "client certificates need TLS"),
    ({"webConfig": {"enabled": True, "basicAuthUsers": {"probe": PROBE_HASH},
                    "probeBasicAuth": {"username": "probe"}}},
     "webConfig.probeBasicAuth: set both username and password"),
    ({"webConfig": {"enabled": True, "basicAuthUsers": {"prometheus": PROMETHEUS_HASH},
                    "probeBasicAuth": {"username": "probe", "password": PROBE_PASSWORD}}},
     "webConfig.probeBasicAuth.username probe is not in webConfig.basicAuthUsers"),
    ({"webConfig": {"enabled": True, "basicAuthUsers": {"prometheus": PROMETHEUS_HASH}},
      "serviceMonitor": {"enabled": True}},
     "Prometheus needs serviceMonitor.basicAuth"),
    ({"webConfig": {"enabled": True, "tls": {"existingSecret": SERVER_TLS,
                                             "clientAuthType": "RequireAndVerifyClientCert"}},
      "serviceMonitor": {"enabled": True}},
     "Prometheus needs a client certificate"),
    ({"webConfig": {"enabled": True, "tls": {"existingSecret": SERVER_TLS,
                                             "clientAuthType": "VerifyClientCertIfGiven"}},
      "serviceMonitor": {"enabled": True, "tlsConfig": {"cert": CLIENT_CERT["cert"]}}},
     "a client certificate needs both cert and keySecret"),
], ids=lambda v: v[:48] if isinstance(v, str) else "values")
def test_values_that_cannot_work_are_refused(helm: str, tmp_path: Path,
                                             values: dict[str, Any], message: str) -> None:
    result = helm_template(helm, CHART, write_values(tmp_path, "bad", values), check=False)
    assert result.returncode != 0 and message in result.stderr, result.stderr


def test_without_the_servicemonitor_nothing_is_asked_of_prometheus(helm: str,
                                                                   tmp_path: Path) -> None:
    """Basic auth and mutual TLS need serviceMonitor settings only when it is rendered."""
    values = {"webConfig": {"enabled": True, "basicAuthUsers": {"prometheus": PROMETHEUS_HASH},
                            "tls": {"existingSecret": SERVER_TLS,
                                    "clientAuthType": "RequireAndVerifyClientCert"}},
              "serviceMonitor": {"enabled": False}}
    text = helm_template(helm, CHART, write_values(tmp_path, "v", values)).stdout
    assert "kind: ServiceMonitor" not in text and "--web-config-file=" in text


# The rendered pod, run.

@pytest.fixture(scope="module")
def cluster_secrets(tmp_path_factory: pytest.TempPathFactory) -> dict[str, dict[str, str]]:
    """The Secrets the values name, as the cluster would hold them: the server's certificate
    as cert-manager writes a CA issuer's (tls.crt, tls.key, ca.crt) for the Service's DNS name
    only, Prometheus' client certificates, its basic-auth credentials, an operator's file."""
    d = tmp_path_factory.mktemp("pki")
    make_ca(d, "server-ca", ".crt")
    make_ca(d, "client-ca", ".crt")
    make_leaf(d, "server", "server-ca", "serverAuth", 1, f"DNS:{SERVICE_DNS}", ".crt")
    make_leaf(d, "client", "client-ca", "clientAuth", 2, "DNS:prometheus", ".crt")
    make_leaf(d, "client-server-ca", "server-ca", "clientAuth", 3, "DNS:prometheus", ".crt")

    def tls(name: str, ca: str) -> dict[str, str]:
        return {"tls.crt": (d / f"{name}.crt").read_text(),
                "tls.key": (d / f"{name}.key").read_text(),
                "ca.crt": (d / f"{ca}.crt").read_text()}
    return {
        SERVER_TLS: tls("server", "server-ca"),
        CLIENT_CA: {"ca.crt": (d / "client-ca.crt").read_text()},
        CLIENT_TLS: tls("client", "client-ca"),
        CLIENT_TLS_SERVER_CA: tls("client-server-ca", "server-ca"),
        BASIC_AUTH: {"username": "prometheus", "password": PROMETHEUS_PASSWORD},
        OWN_FILE: {"web-config.yml": OWN_WEB_CONFIG},
    }


@dataclass
class Pod:
    port: int
    r: Rendered
    secrets: dict[str, dict[str, str]]
    files: Path

    def file(self, secret: str, key: str) -> Path:
        path = self.files / f"{secret}-{key}"
        path.write_text(self.secrets[secret][key])
        return path


def run_pod(r: Rendered, secrets: dict[str, dict[str, str]], root: Path) -> tuple[
        subprocess.Popen[str], Pod]:
    """The exporter with the rendered args, its ConfigMap and Secret volumes laid out under
    root (each mount path prefixed with root, in the args and in the web-config file too),
    --simulate for a node (it brings its own kubelet), listening on 127.0.0.1."""
    configmaps = {c["metadata"]["name"]: c["data"] for c in r.all("ConfigMap")}
    generated = {s["metadata"]["name"]: {k: base64.b64decode(v).decode()
                                         for k, v in s["data"].items()} for s in r.all("Secret")}
    mounts = {m["name"]: m["mountPath"] for m in r.container["volumeMounts"]}
    files_from = {v["name"] for v in r.pod["volumes"] if "configMap" in v or "secret" in v}
    # One pass, each path where a path starts: the mounts' paths are not rewritten twice.
    mounted = re.compile("(?<![^ =:\n])(" + "|".join(
        re.escape(mounts[v]) for v in sorted(files_from, key=lambda v: -len(mounts[v]))) + ")/")

    def relocate(text: str) -> str:
        return mounted.sub(lambda m: f"{root}{m[1]}/", text)

    for volume in r.pod["volumes"]:
        if "configMap" in volume:
            files = configmaps[volume["configMap"]["name"]]
        elif "secret" in volume:
            name = volume["secret"]["secretName"]
            files = {k: relocate(v) if k == "web-config.yml" else v
                     for k, v in {**secrets, **generated}[name].items()}
        else:
            continue  # hostPath (the simulated node has its own kubelet), emptyDir
        SecretVolume(Path(f"{root}{mounts[volume['name']]}")).publish(files)
    port = free_port()
    args = [f"--address=127.0.0.1:{port}" if a.startswith("--address=") else relocate(a)
            for a in r.container["args"]]
    env = {k: v for k, v in os.environ.items() if not k.startswith(("FAKE_NVML_",
                                                                     "GPU_ENRICHER_"))}
    env.update(r.env())
    proc = subprocess.Popen([sys.executable, "-m", "gpu_enricher", *args, "--simulate"],
                            env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                            cwd=ROOT)
    files = root / "prometheus"
    files.mkdir()
    return proc, Pod(port, r, secrets, files)


def request(port: int, path: str, context: ssl.SSLContext | None, server_name: str | None,
            headers: dict[str, str]) -> tuple[int, str]:
    """One HTTP/1.0 GET to 127.0.0.1:port, over TLS with this SNI and verified name when a
    context is given: (status, body)."""
    lines = [f"GET {path} HTTP/1.0", "Host: gpu-enricher",
             *(f"{k}: {v}" for k, v in headers.items())]
    with contextlib.ExitStack() as stack:
        conn = stack.enter_context(socket.create_connection(("127.0.0.1", port), timeout=5))
        if context is not None:
            conn = stack.enter_context(context.wrap_socket(conn, server_hostname=server_name))
        conn.sendall(("\r\n".join(lines) + "\r\n\r\n").encode())
        data = b""
        while chunk := conn.recv(65536):
            data += chunk
    if not data:
        raise ConnectionError("closed without an answer")  # e.g. a refused client certificate
    head, _, body = data.partition(b"\r\n\r\n")
    return int(head.split()[1]), body.decode()


def kubelet_probe(pod: Pod, probe: dict[str, Any]) -> int:
    """What the kubelet does: tcpSocket connects and closes (0 when it connects); httpGet
    sends the probe's headers, and over HTTPS trusts any certificate, sending no client
    certificate."""
    if "tcpSocket" in probe:
        socket.create_connection(("127.0.0.1", pod.port), timeout=5).close()
        return 0
    get = probe["httpGet"]
    context = None
    if get.get("scheme") == "HTTPS":
        context = ssl.SSLContext(ssl.PROTOCOL_TLS_CLIENT)
        context.check_hostname = False
        context.verify_mode = ssl.CERT_NONE
    headers = {h["name"]: h["value"] for h in get.get("httpHeaders", [])}
    return request(pod.port, get["path"], context, None, headers)[0]


def prometheus_scrape(pod: Pod, omit: str | None = None,
                      server_name: str | None = None) -> tuple[int, str]:
    """What Prometheus does with the ServiceMonitor's endpoint, reading the Secrets it names;
    `omit`: "basicAuth" or "cert" to leave that out."""
    found = endpoint(pod.r)
    context = None
    name = None
    if found.get("scheme") == "https":
        tls = found["tlsConfig"]
        context = ssl.SSLContext(ssl.PROTOCOL_TLS_CLIENT)
        if tls.get("insecureSkipVerify"):
            context.check_hostname = False
            context.verify_mode = ssl.CERT_NONE
        else:
            ca = tls["ca"]["secret"]
            context.load_verify_locations(cafile=pod.file(ca["name"], ca["key"]))
        if "cert" in tls and omit != "cert":
            cert, key = tls["cert"]["secret"], tls["keySecret"]
            context.load_cert_chain(pod.file(cert["name"], cert["key"]),
                                    pod.file(key["name"], key["key"]))
        name = server_name or tls["serverName"]
    headers = {}
    if "basicAuth" in found and omit != "basicAuth":
        user, password = (found["basicAuth"][k] for k in ("username", "password"))
        credentials = (f"{pod.secrets[user['name']][user['key']]}:"
                       f"{pod.secrets[password['name']][password['key']]}")
        headers["Authorization"] = "Basic " + base64.b64encode(credentials.encode()).decode()
    return request(pod.port, found["path"], context, name, headers)


@pytest.mark.parametrize("name", ["tls-basic-auth-probe-user", "mutual-tls",
                                  "basic-auth-without-tls", "own-file",
                                  "client-cert-if-given", "insecure-skip-verify"])
def test_the_rendered_pod_serves_its_probes_and_prometheus(
        name: str, rendered: dict[str, Rendered], cluster_secrets: dict[str, dict[str, str]],
        spawned: list[subprocess.Popen[str]], tmp_path: Path) -> None:
    r = rendered[name]
    expected = EXPECTED[name]
    proc, pod = run_pod(r, cluster_secrets, tmp_path)
    spawned.append(proc)  # killed at the end if still running
    # The exporter's loader accepts the file as mounted, certificates included.
    web_config = Path(f"{tmp_path}{web_config_arg(r)}")
    assert web_config.is_symlink()
    security = load_web_security(web_config)
    assert (security.ssl_context is not None) is expected.tls
    assert (security.auth is not None) is expected.basic_auth
    deadline = time.monotonic() + 30
    while True:  # until a pass is rendered
        assert proc.poll() is None, proc.communicate()
        try:
            status, body = prometheus_scrape(pod)
            if status == 200 and 'DCGM_FI_DEV_GPU_UTIL{gpu="0",' in body:
                break
        except OSError as exc:  # not listening yet
            status, body = 0, repr(exc)
        if time.monotonic() > deadline:
            proc.kill()
            raise AssertionError(f"never served Prometheus: {status} {body[:200]}\n"
                                 f"{proc.communicate()[1][-2000:]}")
        time.sleep(0.1)
    for probe in ("livenessProbe", "readinessProbe"):
        answer = kubelet_probe(pod, r.container[probe])
        assert answer == (0 if expected.probe == "tcpSocket" else 200), probe
    # What an httpGet probe would have met where the chart renders tcpSocket.
    bare_get = {"httpGet": {"path": "/health", "scheme": "HTTPS" if expected.tls else "HTTP"}}
    if expected.basic_auth:
        assert prometheus_scrape(pod, omit="basicAuth")[0] == 401
        if expected.probe == "tcpSocket" and not expected.requires_cert:
            assert kubelet_probe(pod, bare_get) == 401
    if expected.requires_cert:
        for attempt in (lambda: prometheus_scrape(pod, omit="cert"),
                        lambda: kubelet_probe(pod, bare_get)):
            with pytest.raises(OSError):  # ssl.SSLError or a reset, as TLS 1.3 has it
                attempt()
    if expected.tls and not endpoint(r)["tlsConfig"].get("insecureSkipVerify"):
        # The certificate names the Service, not the pod IP Prometheus connects to: the
        # serverName is what makes verification pass.
        with pytest.raises(ssl.SSLCertVerificationError):
            prometheus_scrape(pod, server_name="10.0.0.7")
    assert proc.poll() is None
