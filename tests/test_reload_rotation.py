"""A rotated web config applies to the very next request (issue 26, item 5), against the real
process over real HTTPS: a new password in `basic_auth_users`, written in place, renamed over the
file or swapped in by a Kubernetes Secret volume, is taken and the old one refused by the first
request after the write, on a connection kept alive across it and on a new one, with no wait for
the file check (set to 10 minutes here, so it can never be what applied it); the old password,
remembered by the bcrypt cache before the rotation, gets no further; an inline certificate
changed in the same file is served to the next handshake; the log line names the file whose
bytes changed. A request that meets the file half-written waits until it holds still rather
than finding the server open; a broken counters file does not hold back a rotation."""

import asyncio
import contextlib
import http.client
import logging
import os
import ssl
from collections.abc import Callable, Iterator
from pathlib import Path

import bcrypt
import pytest

from gpu_enricher.fields.collection import CountersSources, load_collection
from gpu_enricher.reload import ConfigReloader
from gpu_enricher.web.live_security import LiveWebSecurity
from gpu_enricher.web.security import WebSecurity, load_web_security
from tests.app.test_process import Exporter
from tests.app.test_process import exporters as exporters  # the fixture
from tests.pki import SecretVolume
from tests.test_reload import OLD, der, served_certificate, wait_for
from tests.test_reload import second_server as second_server  # the fixture
from tests.test_reload_collection import Recorder
from tests.web.test_security import PASSWORD, Pki, basic, client_context
from tests.web.test_security import pki as pki  # the fixture

NEW_PASSWORD = "r0tated-s3cret"
CHECK_MS = "600000"
"""--config-check-interval: the file check runs every 10 minutes, never within a test."""


def bcrypt_hash(password: str) -> str:
    return bcrypt.hashpw(password.encode(), bcrypt.gensalt(4)).decode()


def users(password_hash: str) -> str:
    return f"basic_auth_users:\n  prometheus: {password_hash}\n"


def tls_users(pki: Pki, password_hash: str) -> str:
    return (f"tls_server_config:\n  cert_file: {pki.server_cert}\n  key_file: {pki.server_key}\n"
            f"basic_auth_users:\n  prometheus: {password_hash}\n")


def rename_over(path: Path, text: str) -> None:
    staged = path.with_name(path.name + ".new")
    staged.write_text(text)
    os.replace(staged, path)


class Client:
    """HTTPS to the exporter: one connection kept alive, and a new one per `fresh` request."""

    def __init__(self, port: int, context: ssl.SSLContext) -> None:
        self.port, self.context = port, context
        self.kept = self._connect()

    def _connect(self) -> http.client.HTTPSConnection:
        return http.client.HTTPSConnection("127.0.0.1", self.port, context=self.context,
                                           timeout=10)

    @staticmethod
    def _status(connection: http.client.HTTPSConnection, password: str) -> int:
        connection.request("GET", "/metrics", headers=basic("prometheus", password))
        answer = connection.getresponse()
        answer.read()
        return answer.status

    def kept_alive(self, password: str) -> int:
        return self._status(self.kept, password)

    def fresh(self, password: str) -> int:
        connection = self._connect()
        try:
            return self._status(connection, password)
        finally:
            connection.close()


def start(exporters: list[Exporter], counters: Path, web: Path) -> Exporter:
    exp = Exporter(["--simulate", "-c", "200", "-f", str(counters), "--web-config-file",
                    str(web), "--config-check-interval", CHECK_MS], {})
    exporters.append(exp)
    return exp


def wait_serving(exp: Exporter, pki: Pki) -> Client:
    context = client_context(pki)

    def serving() -> bool:
        try:
            return Client(exp.port, context).fresh(PASSWORD) == 200
        except OSError:
            return False

    wait_for("serving https", serving, 20)
    return Client(exp.port, context)


def reload_lines(err: str) -> list[str]:
    return [line.split(" INFO gpu_enricher.reload: ", 1)[1] for line in err.splitlines()
            if " INFO gpu_enricher.reload: " in line]


def in_place(path: Path, text: str) -> None:
    path.write_text(text)


@pytest.mark.parametrize("write", [in_place, rename_over], ids=["in place", "renamed over"])
def test_a_rotated_password_applies_to_the_very_next_request(
        exporters: list[Exporter], tmp_path: Path, pki: Pki,
        write: Callable[[Path, str], None]) -> None:
    counters = tmp_path / "counters.csv"
    counters.write_text(OLD)
    web = tmp_path / "web.yml"
    web.write_text(tls_users(pki, bcrypt_hash(PASSWORD)))
    exp = start(exporters, counters, web)
    client = wait_serving(exp, pki)
    # The old password checked once, then remembered: these answers come from the cache.
    assert [client.kept_alive(PASSWORD) for _ in range(3)] == [200, 200, 200]

    write(web, tls_users(pki, bcrypt_hash(NEW_PASSWORD)))
    # No sleep: the first request after the write meets the new users.
    assert client.kept_alive(PASSWORD) == 401
    assert client.kept_alive(NEW_PASSWORD) == 200
    assert client.fresh(PASSWORD) == 401
    assert client.fresh(NEW_PASSWORD) == 200

    write(web, tls_users(pki, bcrypt_hash(PASSWORD)))  # and back, at once
    assert client.kept_alive(NEW_PASSWORD) == 401
    assert client.kept_alive(PASSWORD) == 200
    client.kept.close()
    code, err = exp.stop()
    assert code == 0, err
    assert reload_lines(err) == [f"configuration reloaded ({web} changed): web config"] * 2, err


def test_a_secret_volume_swap_names_the_file_whose_bytes_changed(
        exporters: list[Exporter], tmp_path: Path, pki: Pki) -> None:
    """The kubelet swaps every key of a Secret or ConfigMap volume at once: the counters file
    beside the web config is replaced too, with the same bytes."""
    volume = SecretVolume(tmp_path / "volume")
    volume.publish({"counters.csv": OLD, "web.yml": tls_users(pki, bcrypt_hash(PASSWORD))})
    exp = start(exporters, volume.root / "counters.csv", volume.root / "web.yml")
    client = wait_serving(exp, pki)
    assert client.kept_alive(PASSWORD) == 200

    volume.publish({"counters.csv": OLD, "web.yml": tls_users(pki, bcrypt_hash(NEW_PASSWORD))})
    assert client.kept_alive(PASSWORD) == 401
    assert client.fresh(NEW_PASSWORD) == 200
    client.kept.close()
    code, err = exp.stop()
    assert code == 0, err
    assert reload_lines(err) == [
        f"configuration reloaded ({volume.root}/web.yml changed): web config"], err


def test_an_inline_certificate_changed_in_the_file_is_served_to_the_next_handshake(
        exporters: list[Exporter], tmp_path: Path, pki: Pki,
        second_server: tuple[bytes, bytes]) -> None:
    def inline(cert: bytes, key: bytes, password_hash: str) -> str:
        def block(pem: bytes) -> str:
            return "".join(f"    {line}\n" for line in pem.decode().strip().splitlines())
        return (f"tls_server_config:\n  cert: |\n{block(cert)}  key: |\n{block(key)}"
                f"basic_auth_users:\n  prometheus: {password_hash}\n")

    counters = tmp_path / "counters.csv"
    counters.write_text(OLD)
    web = tmp_path / "web.yml"
    first = (pki.server_cert.read_bytes(), pki.server_key.read_bytes())
    web.write_text(inline(*first, bcrypt_hash(PASSWORD)))
    exp = start(exporters, counters, web)
    client = wait_serving(exp, pki)
    context = client_context(pki)
    assert served_certificate(exp.port, context) == der(first[0])

    rename_over(web, inline(*second_server, bcrypt_hash(PASSWORD)))
    # The request that follows the write puts the file in force, certificate and users alike.
    assert client.kept_alive(PASSWORD) == 200
    assert served_certificate(exp.port, context) == der(second_server[0])
    client.kept.close()
    code, err = exp.stop()
    assert code == 0, err


@contextlib.contextmanager
def reload_log() -> Iterator["LogLines"]:
    """The reloader's INFO lines while the block runs."""
    logger, seen = logging.getLogger("gpu_enricher.reload"), LogLines()
    level = logger.level
    logger.setLevel(logging.INFO)
    logger.addHandler(seen)
    try:
        yield seen
    finally:
        logger.removeHandler(seen)
        logger.setLevel(level)


class LogLines(logging.Handler):
    """The lines of one logger, and an event set at each (the reloader logs on the loop)."""

    def __init__(self) -> None:
        super().__init__(logging.INFO)
        self.lines: list[str] = []
        self.logged = asyncio.Event()

    def emit(self, record: logging.LogRecord) -> None:
        self.lines.append(record.getMessage())
        self.logged.set()


async def test_the_file_check_names_the_file_whose_bytes_changed(tmp_path: Path) -> None:
    """The same swap met by the file check rather than a request (ConfigReloader.run against
    the real files): it named the first watched file whose stamp changed, the counters file
    ("…/counters.csv changed): web config")."""
    volume = SecretVolume(tmp_path / "volume")
    volume.publish({"counters.csv": OLD, "web.yml": users(bcrypt_hash(PASSWORD))})
    sources = CountersSources(collectors=volume.root / "counters.csv", image_dir=tmp_path)
    live = LiveWebSecurity(load_web_security(volume.root / "web.yml"))
    reloader = ConfigReloader(Recorder(), sources, load_collection(sources),  # type: ignore[arg-type]
                              live, 0.05)
    with reload_log() as seen:
        checking = asyncio.create_task(reloader.run())
        try:
            volume.publish({"counters.csv": OLD, "web.yml": users(bcrypt_hash(NEW_PASSWORD))})
            await asyncio.wait_for(seen.logged.wait(), 10)
        finally:
            checking.cancel()
    assert seen.lines == [f"configuration reloaded ({volume.root}/web.yml changed): web config"]
    auth = live.current.auth
    assert auth is not None
    assert await auth.check(basic("prometheus", NEW_PASSWORD)["Authorization"]) is None
    assert await auth.check(basic("prometheus", PASSWORD)["Authorization"]) == "wrong"
    live.close()


# A request that meets the file half-written (truncated for an in-place write, not yet valid)
# must neither find the server open nor log a refusal: such a read waits, as the file check
# does, until the files hold still, then reads again.

HALF_WRITTEN = {"truncated": "", "users still empty": "basic_auth_users:\n",
                "not yet YAML": "basic_auth_users:\n  prometheus: ["}


@pytest.mark.parametrize("half", HALF_WRITTEN.values(), ids=HALF_WRITTEN.keys())
async def test_a_request_meeting_a_half_written_file_waits_for_the_whole(
        tmp_path: Path, half: str) -> None:
    web = tmp_path / "web.yml"
    web.write_text(users(bcrypt_hash(PASSWORD)))
    sources = CountersSources(image_dir=tmp_path)
    live = LiveWebSecurity(load_web_security(web))
    reloader = ConfigReloader(Recorder(), sources, load_collection(sources),  # type: ignore[arg-type]
                              live, 600.0)
    in_force: list[bool] = []  # whether basic auth was on, at each replace
    replace = live.replace

    def recorded(new: WebSecurity) -> None:
        in_force.append(new.auth is not None)
        replace(new)

    live.replace = recorded  # type: ignore[method-assign]
    web.write_text(half)
    whole = users(bcrypt_hash(NEW_PASSWORD))
    finish = asyncio.get_running_loop().call_later(0.3, web.write_text, whole)
    with reload_log() as seen:
        try:
            await reloader.web_config_in_force()
        finally:
            finish.cancel()
    assert in_force == [True]
    assert seen.lines == [f"configuration reloaded ({web} changed): web config"]
    auth = live.current.auth
    assert auth is not None
    assert await auth.check(basic("prometheus", NEW_PASSWORD)["Authorization"]) is None
    assert await auth.check(basic("prometheus", PASSWORD)["Authorization"]) == "wrong"
    live.close()


async def test_basic_auth_turned_off_applies_once_the_file_holds_still(tmp_path: Path) -> None:
    web = tmp_path / "web.yml"
    web.write_text(users(bcrypt_hash(PASSWORD)))
    sources = CountersSources(image_dir=tmp_path)
    live = LiveWebSecurity(load_web_security(web))
    reloader = ConfigReloader(Recorder(), sources, load_collection(sources),  # type: ignore[arg-type]
                              live, 600.0)
    web.write_text("basic_auth_users:\n")
    await reloader.web_config_in_force()
    assert live.current.auth is None and live.current.config.users == ()
    live.close()


async def test_a_broken_counters_file_does_not_hold_back_a_rotated_password(
        tmp_path: Path) -> None:
    """Each part on its own: the counters stay as they ran (refused, logged once, counted), the
    rotated web config is put in force. Before, a wrong file kept the whole configuration, so
    a counters file broken earlier kept the old password working for good."""
    counters = tmp_path / "counters.csv"
    counters.write_text(OLD)
    web = tmp_path / "web.yml"
    web.write_text(users(bcrypt_hash(PASSWORD)))
    sources = CountersSources(collectors=counters, image_dir=tmp_path)
    live = LiveWebSecurity(load_web_security(web))
    recorder = Recorder()
    reloader = ConfigReloader(recorder, sources, load_collection(sources),  # type: ignore[arg-type]
                              live, 600.0)
    with reload_log() as seen:
        counters.write_text("DCGM_FI_DEV_GPU_TEMP, gauge\n")
        await reloader.reload(None)  # the file check: refused, the running counters kept
        rename_over(web, users(bcrypt_hash(NEW_PASSWORD)))
        await reloader.web_config_in_force()
    assert seen.lines == [
        f"reload ({counters} changed) refused, keeping the running configuration: {counters}:1: "
        "expected 3 comma-separated values 'FIELD, type, help', got 2: 'DCGM_FI_DEV_GPU_TEMP, "
        "gauge' (quote a help text that contains a comma)",
        f"configuration reloaded in part ({web} changed): web config"]
    assert recorder.used == []
    auth = live.current.auth
    assert auth is not None
    assert await auth.check(basic("prometheus", NEW_PASSWORD)["Authorization"]) is None
    assert await auth.check(basic("prometheus", PASSWORD)["Authorization"]) == "wrong"
    live.close()
