"""What a web-config reload may change without a restart (web/live_security.py), and which files
it watches."""

import dataclasses
from pathlib import Path

import pytest

from gpu_enricher.files import stamp
from gpu_enricher.web.config import TlsSettings, WebConfig
from gpu_enricher.web.live_security import fixed_setting_changed, watched_files

TLS = TlsSettings(cert_file=Path("/s/tls.crt"), key_file=Path("/s/tls.key"),
                  client_ca_file=Path("/s/ca.crt"), client_auth_type="RequireAndVerifyClientCert")
RUNNING = WebConfig("/etc/web.yml", TLS, users=(("prometheus", "$2b$..."),))


@pytest.mark.parametrize("change", [
    {"cert_file": Path("/t/tls.crt")}, {"key_file": Path("/t/tls.key")},
    {"cert_file": None, "cert": "-----BEGIN CERTIFICATE-----"},
    {"client_ca_file": None, "client_ca": "-----BEGIN CERTIFICATE-----"},
])
def test_certificate_key_and_client_ca_may_change(change: dict[str, object]) -> None:
    new = dataclasses.replace(RUNNING, tls=dataclasses.replace(TLS, **change))
    assert fixed_setting_changed(RUNNING, new) is None


def test_users_and_headers_may_change() -> None:
    new = dataclasses.replace(RUNNING, users=(), headers=(("X-Frame-Options", "deny"),))
    assert fixed_setting_changed(RUNNING, new) is None


@pytest.mark.parametrize(("change", "key"), [
    ({"client_auth_type": "NoClientCert"}, "client_auth_type"),
    ({"min_version": "TLS13"}, "min_version"),
    ({"max_version": "TLS12"}, "max_version"),
    ({"ciphers": ("ECDHE-RSA-AES128-GCM-SHA256",)}, "cipher_suites"),
    ({"prefer_server_cipher_suites": False}, "prefer_server_cipher_suites"),
    ({"curves": ("secp384r1",)}, "curve_preferences"),
])
def test_settings_fixed_per_listening_socket_need_a_restart(change: dict[str, object],
                                                             key: str) -> None:
    new = dataclasses.replace(RUNNING, tls=dataclasses.replace(TLS, **change))
    assert fixed_setting_changed(RUNNING, new) == (
        f"/etc/web.yml: tls_server_config.{key}: changing it needs a restart")


def test_turning_tls_on_or_off_needs_a_restart() -> None:
    plain = dataclasses.replace(RUNNING, tls=None)
    message = "/etc/web.yml: tls_server_config: turning TLS on or off needs a restart"
    assert fixed_setting_changed(RUNNING, plain) == message
    assert fixed_setting_changed(plain, RUNNING) == message
    assert fixed_setting_changed(plain, dataclasses.replace(plain, users=())) is None


def test_watched_files_are_the_config_and_the_files_it_names() -> None:
    assert watched_files(RUNNING) == (Path("/etc/web.yml"), Path("/s/tls.crt"),
                                      Path("/s/tls.key"), Path("/s/ca.crt"))
    inline = dataclasses.replace(RUNNING, tls=TlsSettings(cert="PEM", key="PEM"))
    assert watched_files(inline) == (Path("/etc/web.yml"),)


def test_a_stamp_changes_with_a_rename_over_the_file_and_follows_links(tmp_path: Path) -> None:
    target = tmp_path / "a"
    target.write_text("one")
    link = tmp_path / "link"
    link.symlink_to(target)
    before = stamp(link)
    assert before is not None and before == stamp(target)
    replacement = tmp_path / "b"
    replacement.write_text("one")  # same size and content: the inode tells
    replacement.replace(target)
    assert stamp(link) != before
    assert stamp(tmp_path / "missing") is None
