"""Reload without a gap (issue 13), against the real process on the simulated node: SIGHUP and
a changed file re-read the counters file and the web config; every scrape across a reload is the
whole old or the whole new set; a wrong file keeps the running configuration, is logged once and
counted; renewed certificates, keys, client CAs and users take effect without a restart, as a
Kubernetes Secret volume swaps them (its `..data` link)."""

import http.client
import os
import signal
import socket
import ssl
import threading
import time
from collections.abc import Callable, Iterator
from pathlib import Path

import bcrypt
import pytest

from tests.app.test_process import Exporter, get
from tests.app.test_process import exporters as exporters  # the fixture
from tests.pki import SecretVolume, make_leaf
from tests.samples import value
from tests.web.test_security import (
    PASSWORD,
    Pki,
    basic,
    client_context,
    https_get,
)
from tests.web.test_security import pki as pki  # the fixture

OLD = ("DCGM_FI_DEV_GPU_TEMP, gauge, GPU temperature (in C).\n"
       "DCGM_FI_DEV_POWER_USAGE, gauge, Power draw (in W).\n")
NEW = OLD + "DCGM_FI_DEV_SM_CLOCK, gauge, SM clock frequency (in MHz).\n"


def dcgm_families(body: str) -> frozenset[str]:
    return frozenset(line.split()[2] for line in body.splitlines()
                     if line.startswith("# TYPE DCGM_FI_"))


def wait_for(what: str, check: Callable[[], bool], seconds: float = 15) -> None:
    deadline = time.monotonic() + seconds
    while not check():
        assert time.monotonic() < deadline, f"never: {what}"
        time.sleep(0.05)


def metric(exp: Exporter, name: str, **labels: str) -> float | None:
    return value(get(exp.base + "/metrics")[1], name, **labels)


def errors(err: str) -> list[str]:
    return [line for line in err.splitlines() if " ERROR " in line]


class Scraper(threading.Thread):
    """Scrapes /metrics back to back on one keep-alive connection, as Prometheus does, and
    keeps the DCGM families of every answer."""

    def __init__(self, port: int) -> None:
        super().__init__(daemon=True)
        self.port = port
        self.seen: list[frozenset[str]] = []
        self.failures: list[str] = []
        self.stop = threading.Event()

    def run(self) -> None:
        connection = http.client.HTTPConnection("127.0.0.1", self.port, timeout=5)
        while not self.stop.is_set():
            try:
                connection.request("GET", "/metrics")
                answer = connection.getresponse()
                body = answer.read().decode()
            except (OSError, http.client.HTTPException) as exc:
                self.failures.append(repr(exc))
                connection.close()
                continue
            if answer.status != 200:
                self.failures.append(f"status {answer.status}")
            self.seen.append(dcgm_families(body))
        connection.close()


@pytest.fixture
def counters(tmp_path: Path) -> Path:
    path = tmp_path / "counters.csv"
    path.write_text(OLD)
    return path


def start(exporters: list[Exporter], counters: Path, *args: str) -> Exporter:
    exp = Exporter(["--simulate", "-c", "200", "-f", str(counters), *args], {})
    exporters.append(exp)
    exp.wait_ready()
    return exp


def replace(path: Path, text: str) -> None:
    """As a ConfigMap update or an editor's save: a new file renamed over the old one."""
    new = path.with_name(path.name + ".new")
    new.write_text(text)
    os.replace(new, path)


def test_sighup_reloads_the_counters_and_every_scrape_is_a_whole_set(
        exporters: list[Exporter], counters: Path) -> None:
    exp = start(exporters, counters, "--config-check-interval", "0")
    loaded = metric(exp, "gpu_enricher_config_last_reload_success_timestamp_seconds")
    assert loaded is not None and abs(loaded - time.time()) < 60
    assert metric(exp, "gpu_enricher_config_reload_success") == 1
    scraper = Scraper(exp.port)
    scraper.start()
    wait_for("scrapes before the reload", lambda: len(scraper.seen) >= 20)
    counters.write_text(NEW)  # in place: with the check off, only SIGHUP reloads
    exp.proc.send_signal(signal.SIGHUP)
    wait_for("the new field", lambda: "DCGM_FI_DEV_SM_CLOCK" in scraper.seen[-1])
    after = len(scraper.seen)
    wait_for("scrapes after the reload", lambda: len(scraper.seen) >= after + 20)
    scraper.stop.set()
    scraper.join(10)
    assert not scraper.failures, scraper.failures[:3]
    old = frozenset({"DCGM_FI_DEV_GPU_TEMP", "DCGM_FI_DEV_POWER_USAGE"})
    new = old | {"DCGM_FI_DEV_SM_CLOCK"}
    kinds = set(scraper.seen)
    assert kinds == {old, new}, kinds  # never empty, never partial
    switched = scraper.seen.index(new)
    assert all(families == new for families in scraper.seen[switched:])
    reloaded = metric(exp, "gpu_enricher_config_last_reload_success_timestamp_seconds")
    assert reloaded is not None and reloaded > loaded
    code, err = exp.stop()
    assert code == 0, err
    assert "configuration reloaded (SIGHUP): 3 counter line(s)" in err
    assert not errors(err) and "Traceback" not in err, err


def test_a_wrong_counters_file_keeps_the_running_set_logged_once_and_counted(
        exporters: list[Exporter], counters: Path) -> None:
    exp = start(exporters, counters, "--config-check-interval", "0")
    before = dcgm_families(get(exp.base + "/metrics")[1])
    counters.write_text(OLD + "DCGM_FI_DEV_SM_CLOCK, gauge\n")  # line 3: no help text

    def refused() -> float | None:
        return metric(exp, "gpu_enricher_config_reload_failures_total", file="counters")

    exp.proc.send_signal(signal.SIGHUP)
    wait_for("the failure counted", lambda: refused() == 1)
    exp.proc.send_signal(signal.SIGHUP)  # the same wrong file again: counted, not logged
    wait_for("the second failure counted", lambda: refused() == 2)
    body = get(exp.base + "/metrics")[1]
    assert value(body, "gpu_enricher_config_reload_success") == 0
    assert value(body, "gpu_enricher_config_reload_failures_total", file="web_config") == 0
    assert dcgm_families(body) == before  # the running set, whole
    counters.write_text(NEW)
    exp.proc.send_signal(signal.SIGHUP)
    wait_for("reload success", lambda: metric(exp, "gpu_enricher_config_reload_success") == 1)
    wait_for("the new field", lambda: "DCGM_FI_DEV_SM_CLOCK" in dcgm_families(
        get(exp.base + "/metrics")[1]))
    code, err = exp.stop()
    assert code == 0, err
    [error] = errors(err)
    assert f"reload (SIGHUP) refused, keeping the running configuration: {counters}:3:" in error
    assert "Traceback" not in err


def test_a_changed_counters_file_is_reloaded_without_a_signal(
        exporters: list[Exporter], counters: Path) -> None:
    exp = start(exporters, counters, "--config-check-interval", "100")
    replace(counters, NEW)
    wait_for("the new field", lambda: "DCGM_FI_DEV_SM_CLOCK" in dcgm_families(
        get(exp.base + "/metrics")[1]))
    code, err = exp.stop()
    assert code == 0, err
    assert f"configuration reloaded ({counters} changed): 3 counter line(s)" in err


def test_sighup_with_nothing_changed_is_a_reload_not_an_exit(
        exporters: list[Exporter], counters: Path) -> None:
    """It used to kill the process with 129 (issue 13, defect 5)."""
    exp = start(exporters, counters)
    for _ in range(3):
        exp.proc.send_signal(signal.SIGHUP)
        time.sleep(0.1)
    assert get(exp.base + "/metrics")[0] == 200
    code, err = exp.stop()
    assert code == 0, err
    assert err.count("configuration reloaded (SIGHUP): unchanged") >= 1


# --- the web config: certificates, keys, client CAs and users -----------------------------------


@pytest.fixture(scope="module")
def second_server(pki: Pki) -> tuple[bytes, bytes]:
    """Another certificate for the same names, from the same CA (a renewal)."""
    make_leaf(pki.dir, "renewed", "ca", "serverAuth", 40)
    return (pki.dir / "renewed.pem").read_bytes(), (pki.dir / "renewed.key").read_bytes()


def served_certificate(port: int, context: ssl.SSLContext) -> bytes:
    """The certificate a new connection is served (DER)."""
    with socket.create_connection(("127.0.0.1", port), timeout=5) as raw, \
            context.wrap_socket(raw, server_hostname="127.0.0.1") as tls:
        der = tls.getpeercert(binary_form=True)
    assert der is not None
    return der


def der(pem: bytes) -> bytes:
    return ssl.PEM_cert_to_DER_cert(pem.decode())


@pytest.fixture
def web_volume(tmp_path: Path, pki: Pki) -> Iterator[tuple[SecretVolume, Path]]:
    volume = SecretVolume(tmp_path / "tls")
    volume.publish({"tls.crt": pki.server_cert.read_bytes(),
                    "tls.key": pki.server_key.read_bytes(), "ca.crt": pki.ca.read_bytes()})
    yield volume, tmp_path / "web.yml"


def web_config(volume: SecretVolume, password_hash: str, extra: str = "") -> str:
    return (f"tls_server_config:\n  cert_file: {volume.root}/tls.crt\n"
            f"  key_file: {volume.root}/tls.key\n"
            f"  client_auth_type: RequireAndVerifyClientCert\n"
            f"  client_ca_file: {volume.root}/ca.crt\n{extra}"
            f"basic_auth_users:\n  prometheus: {password_hash}\n")


def test_certificates_client_cas_and_users_rotate_without_a_restart(
        exporters: list[Exporter], counters: Path, pki: Pki,
        web_volume: tuple[SecretVolume, Path], second_server: tuple[bytes, bytes]) -> None:
    volume, web = web_volume
    first_hash = bcrypt.hashpw(PASSWORD.encode(), bcrypt.gensalt(4)).decode()
    web.write_text(web_config(volume, first_hash))
    exp = Exporter(["--simulate", "-c", "200", "-f", str(counters), "--web-config-file",
                    str(web), "--config-check-interval", "100"], {})
    exporters.append(exp)
    url = f"https://127.0.0.1:{exp.port}/metrics"
    client = client_context(pki, pki.client_cert, pki.client_key)
    rogue = client_context(pki, pki.rogue_cert, pki.rogue_key)
    auth = basic("prometheus", PASSWORD)

    def answers(context: ssl.SSLContext, headers: dict[str, str]) -> int | None:
        try:
            return https_get(url, context, headers)[0]
        except (OSError, ssl.SSLError):
            return None  # refused in the handshake

    wait_for("serving https", lambda: answers(client, auth) == 200, 20)
    assert served_certificate(exp.port, client) == der(pki.server_cert.read_bytes())
    # A connection kept alive across every rotation below keeps being served.
    kept = http.client.HTTPSConnection("127.0.0.1", exp.port, context=client, timeout=5)

    def kept_alive() -> int:
        kept.request("GET", "/metrics", headers=auth)
        answer = kept.getresponse()
        answer.read()
        return answer.status

    assert kept_alive() == 200

    # 1. The certificate and key renewed (cert-manager → Secret → the kubelet's ..data swap).
    cert, key = second_server
    volume.publish({"tls.crt": cert, "tls.key": key, "ca.crt": pki.ca.read_bytes()})
    wait_for("the renewed certificate",
             lambda: served_certificate(exp.port, client) == der(cert))
    assert kept_alive() == 200

    # 2. The client CA replaced: the other CA's clients get in, the first CA's no longer.
    volume.publish({"tls.crt": cert, "tls.key": key,
                    "ca.crt": (pki.dir / "rogue-ca.pem").read_bytes()})
    wait_for("the new client CA", lambda: answers(rogue, auth) == 200)
    assert answers(client, auth) is None

    # 3. A new password for the user: the old one is refused at once (nothing remembered).
    new_password = "n3w-s3cret"
    new_hash = bcrypt.hashpw(new_password.encode(), bcrypt.gensalt(4)).decode()
    replace(web, web_config(volume, new_hash))
    wait_for("the new password", lambda: answers(rogue, basic("prometheus", new_password)) == 200)
    assert answers(rogue, auth) == 401

    # 4. A key that does not match: the running certificate, key and CA stay; counted.
    volume.publish({"tls.crt": cert, "tls.key": pki.other_key.read_bytes(),
                    "ca.crt": (pki.dir / "rogue-ca.pem").read_bytes()})
    headers = basic("prometheus", new_password)

    def failures() -> float | None:
        return value(https_get(url, rogue, headers)[1], "gpu_enricher_config_reload_failures_total",
                     file="web_config")

    wait_for("the refused key counted", lambda: failures() == 1)
    assert served_certificate(exp.port, rogue) == der(cert)
    assert answers(rogue, headers) == 200
    assert value(https_get(url, rogue, headers)[1], "gpu_enricher_config_reload_success") == 0

    # 5. A setting fixed per listening socket: refused, naming the key.
    replace(web, web_config(volume, new_hash, "  min_version: TLS13\n"))
    wait_for("the fixed setting refused", lambda: failures() == 2)
    assert answers(rogue, headers) == 200
    kept.close()
    code, err = exp.stop()
    assert code == 0, err
    assert (f"refused, keeping the running configuration: {web}: tls_server_config.key_file: "
            "the private key does not match the certificate") in err, err
    assert (f"{web}: tls_server_config.min_version: changing it needs a restart" in err), err
    assert len(errors(err)) == 2 and "Traceback" not in err, err
