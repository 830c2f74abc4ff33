"""`--web-config-file` at work: the checked file (web/config.py) turned into an ssl.SSLContext, a
basic-auth checker and the extra response headers (web/server.py installs the last two).

A missing or unreadable file, a key that does not match its certificate, a cipher this OpenSSL
lacks: one line naming the file and the key (WebConfigError: exit status 2 at start; at a
reload the running configuration is kept, see web/live_security.py and reload.py).
"""

import asyncio
import base64
import binascii
import contextlib
import functools
import hashlib
import hmac
import logging
import os
import secrets
import ssl
from collections import OrderedDict
from collections.abc import Iterator, Sequence
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from pathlib import Path
from typing import Final

from .config import CIPHERS, TlsSettings, WebConfig, WebConfigError, load_web_config

log = logging.getLogger(__name__)

_VERSIONS: Final = {"TLS12": ssl.TLSVersion.TLSv1_2, "TLS13": ssl.TLSVersion.TLSv1_3}
_VERIFY: Final = {
    "NoClientCert": ssl.CERT_NONE,
    # Python's ssl cannot ask for a certificate without verifying it; exporter-toolkit never
    # uses an unverified one, so not asking lets in exactly the same clients.
    "RequestClientCert": ssl.CERT_NONE,
    "VerifyClientCertIfGiven": ssl.CERT_OPTIONAL,
    "RequireAndVerifyClientCert": ssl.CERT_REQUIRED,
}
_MAX_PEM_BYTES: Final = 1 << 20


# --- TLS --------------------------------------------------------------------------------------


def _read(path: Path, where: str) -> None:
    """Whether the file can be read, for a message better than OpenSSL's."""
    try:
        with open(path, "rb") as file:
            file.read(_MAX_PEM_BYTES)
    except OSError as exc:
        raise WebConfigError(f"{where}: cannot read {path}: {exc.strerror}") from None


@contextlib.contextmanager
def _pem_path(text: str | None, path: Path | None) -> Iterator[str]:
    """A path OpenSSL can read: the file, or inline PEM in an anonymous memory file (never on
    disk: it may be a private key)."""
    if text is None:
        assert path is not None
        yield str(path)
        return
    fd = os.memfd_create("gpu-enricher-pem", os.MFD_CLOEXEC)
    try:
        data = memoryview(text.encode("utf-8"))
        while data:
            data = data[os.write(fd, data):]
        yield f"/proc/self/fd/{fd}"
    finally:
        os.close(fd)


def _no_password() -> bytes:
    # Without a callback OpenSSL would prompt on the terminal for an encrypted key.
    raise ValueError("encrypted")


def _load_chain(context: ssl.SSLContext, tls: TlsSettings, config: WebConfig) -> None:
    cert_key = "tls_server_config.cert_file" if tls.cert is None else "tls_server_config.cert"
    key_key = "tls_server_config.key_file" if tls.key is None else "tls_server_config.key"
    for path, key in ((tls.cert_file, cert_key), (tls.key_file, key_key)):
        if path is not None:
            _read(path, config.where(key))
    with _pem_path(tls.cert, tls.cert_file) as cert, _pem_path(tls.key, tls.key_file) as key:
        try:
            context.load_cert_chain(cert, key, password=_no_password)
            return
        except (ssl.SSLError, ValueError) as exc:
            error = exc
        probe = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
        try:  # a file with a PEM certificate loads as a CA list
            probe.load_verify_locations(cafile=cert)
        except (ssl.SSLError, OSError):
            raise WebConfigError(config.where(f"{cert_key}: no PEM certificate in "
                                              f"{tls.cert_file or 'the inline cert'}")) from None
    reason = getattr(error, "reason", None)
    if reason == "KEY_VALUES_MISMATCH":
        raise WebConfigError(config.where(f"{key_key}: the private key does not match the "
                                          "certificate"))
    detail = ("encrypted (a key with a passphrase cannot be used)"
              if isinstance(error, ValueError)
              else "no usable PEM private key" + (f" ({reason})" if reason else ""))
    raise WebConfigError(config.where(f"{key_key}: {detail}"))


def _client_auth(context: ssl.SSLContext, tls: TlsSettings, config: WebConfig) -> None:
    context.verify_mode = _VERIFY[tls.client_auth_type]
    if context.verify_mode == ssl.CERT_NONE:
        return
    try:
        if tls.client_ca_file is not None:
            where = "tls_server_config.client_ca_file"
            _read(tls.client_ca_file, config.where(where))
            context.load_verify_locations(cafile=tls.client_ca_file)
        elif tls.client_ca is not None:
            where = "tls_server_config.client_ca"
            context.load_verify_locations(cadata=tls.client_ca)
        else:
            # Go verifies against the system's roots when no client CA is given.
            context.load_default_certs(ssl.Purpose.CLIENT_AUTH)
    except ssl.SSLError as exc:
        raise WebConfigError(config.where(f"{where}: no PEM certificate ({exc.reason})")) from None


def ssl_context(config: WebConfig) -> ssl.SSLContext:
    """The server's SSLContext for config.tls. Raises WebConfigError."""
    tls = config.tls
    assert tls is not None
    context = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
    context.minimum_version = _VERSIONS[tls.min_version]
    context.maximum_version = _VERSIONS[tls.max_version]
    context.set_alpn_protocols(["http/1.1"])  # no HTTP/2 (http_server_config.http2)
    if tls.ciphers:
        go_names = {openssl: go for go, openssl in CIPHERS.items()}
        for name in tls.ciphers:
            try:
                ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER).set_ciphers(name)
            except ssl.SSLError:
                raise WebConfigError(config.where(
                    f"tls_server_config.cipher_suites: {go_names[name]} (OpenSSL {name}) is "
                    f"not available in {ssl.OPENSSL_VERSION}")) from None
        context.set_ciphers(":".join(tls.ciphers))
    if not tls.prefer_server_cipher_suites:
        context.options &= ~ssl.OP_CIPHER_SERVER_PREFERENCE
    if tls.curves:
        try:
            context.set_ecdh_curve(tls.curves[0])
        except (ValueError, ssl.SSLError):
            raise WebConfigError(config.where(f"tls_server_config.curve_preferences: "
                                              f"{tls.curves[0]} is not available")) from None
    _load_chain(context, tls, config)
    _client_auth(context, tls, config)
    return context


# --- basic auth -------------------------------------------------------------------------------


def basic_credentials(header: str | None) -> tuple[bytes, bytes] | None:
    """(user, password) of an `Authorization: Basic …` header, as Go's Request.BasicAuth reads
    it; None when absent or malformed."""
    if header is None or header[:6].lower() != "basic ":
        return None
    try:
        decoded = base64.b64decode(header[6:], validate=True)
    except (binascii.Error, ValueError):
        return None
    user, colon, password = decoded.partition(b":")
    return (user, password) if colon else None


class BasicAuth:
    """basic_auth_users: bcrypt, off the event loop and one at a time (a bcrypt of cost 10
    takes ~70 ms of CPU), with the right credentials remembered so that a scrape storm costs one
    bcrypt, not one per request.

    Timing-safe: the user is compared with hmac.compare_digest against every configured user,
    and an unknown user's password is checked against a dummy hash of the same cost. Only
    successes are remembered, keyed by an HMAC of the credentials under a per-process random
    key (never the password itself), in a bounded LRU."""

    MAX_REMEMBERED: Final = 256
    MAX_WAITING: Final = 64
    """Checks queued at once; beyond, refused without a bcrypt (reason "busy"): a flood of
    wrong passwords cannot queue unbounded CPU, and remembered credentials still get in."""

    def __init__(self, users: Sequence[tuple[str, str]]) -> None:
        import bcrypt  # here: a web config without basic_auth_users never loads it (issue 33)

        self._hashpw, self._gensalt, self._checkpw = bcrypt.hashpw, bcrypt.gensalt, bcrypt.checkpw
        self._users = tuple((user.encode("utf-8"), hashed.encode("ascii"))
                            for user, hashed in users)
        self._cost = max(int(hashed[4:6]) for _, hashed in self._users)
        self._key = secrets.token_bytes(32)
        self._remembered: OrderedDict[bytes, None] = OrderedDict()
        self._waiting: dict[bytes, asyncio.Future[bool]] = {}
        self._executor: ThreadPoolExecutor | None = None
        self.bcrypt_checks = 0  # for tests and curiosity

    @functools.cached_property
    def _dummy(self) -> bytes:
        """A hash no password matches, made on the first unknown user (in the worker)."""
        return self._hashpw(secrets.token_bytes(16), self._gensalt(self._cost))

    def _verify(self, user: bytes, password: bytes) -> bool:
        """In the worker thread: the bcrypt check, as long for an unknown user."""
        hashed, known = b"", False
        for name, candidate in self._users:  # no early exit
            if hmac.compare_digest(name, user):
                hashed, known = candidate, True
        self.bcrypt_checks += 1
        try:
            # bcrypt reads at most 72 bytes (Go's check too); Python's refuses more.
            ok = self._checkpw(password[:72], hashed if known else self._dummy)
        except ValueError:
            ok = False
        return ok and known

    async def check(self, header: str | None) -> str | None:
        """None when the Authorization header's credentials are right, else why not:
        "missing", "wrong" or "busy"."""
        credentials = basic_credentials(header)
        if credentials is None:
            return "missing"
        user, password = credentials
        key = hmac.new(self._key, user + b":" + password, hashlib.sha256).digest()
        if key in self._remembered:
            self._remembered.move_to_end(key)
            return None
        pending = self._waiting.get(key)
        if pending is None:  # the same credentials at once share one check
            if len(self._waiting) >= self.MAX_WAITING:
                return "busy"
            if self._executor is None:
                self._executor = ThreadPoolExecutor(1, thread_name_prefix="gpu-enricher-bcrypt")
            pending = asyncio.get_running_loop().run_in_executor(self._executor, self._verify,
                                                                 user, password)
            self._waiting[key] = pending
            pending.add_done_callback(lambda _: self._waiting.pop(key, None))
        # shield: a client that goes away does not cancel the check for the others waiting.
        if not await asyncio.shield(pending):
            return "wrong"
        self._remembered[key] = None
        if len(self._remembered) > self.MAX_REMEMBERED:
            self._remembered.popitem(last=False)
        return None

    def close(self) -> None:
        if self._executor is not None:
            self._executor.shutdown(wait=False, cancel_futures=True)
            self._executor = None


@dataclass(frozen=True, slots=True)
class WebSecurity:
    """What web/server.py and app.py apply: TLS on the listening sockets, basic auth and headers on
    every path (as exporter-toolkit wraps every handler)."""

    path: str
    ssl_context: ssl.SSLContext | None
    auth: BasicAuth | None
    headers: tuple[tuple[str, str], ...]
    config: WebConfig


def web_security(config: WebConfig, running: WebSecurity | None = None) -> WebSecurity:
    """`running`: the configuration in force, at a reload; its password checker (and what it
    remembers) is kept while the users stay the same."""
    for note in config.notes:
        log.warning("%s", note)
    context = ssl_context(config) if config.tls is not None else None
    if running is not None and running.config.users == config.users:
        auth = running.auth
    else:
        auth = BasicAuth(config.users) if config.users else None
    tls = config.tls
    log.info("web config %s: TLS %s, basic auth %s, %d extra header(s)", config.path,
             f"on (client certificates: {tls.client_auth_type})" if tls else "off",
             f"on ({len(config.users)} user(s))" if auth else "off", len(config.headers))
    return WebSecurity(config.path, context, auth, config.headers, config)


def load_web_security(path: Path) -> WebSecurity:
    """--web-config-file → WebSecurity. Raises WebConfigError (one line, exit status 2)."""
    return web_security(load_web_config(path))
