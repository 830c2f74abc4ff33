"""`--web-config-file`: Prometheus exporter-toolkit's web configuration (TLS, basic auth, extra
response headers), checked. Pure: web/config_yaml.py reads the file and its YAML,
web/security.py turns the result into an ssl.SSLContext and a basic-auth checker.

The keys and their meaning are exporter-toolkit's (docs/web-configuration.md), so the file a
dcgm-exporter DaemonSet mounts works unchanged, with these differences, each one line at start:

- `client_auth_type: RequireAnyClientCert` (and its old name `RequireClientCert`): Python's ssl
  cannot ask for a certificate that it then does not verify: an error (use
  `RequireAndVerifyClientCert` with `client_ca_file`). `RequestClientCert` asks for nothing
  (OpenSSL could only verify what it asks for); exporter-toolkit never looks at an unverified
  certificate, so who gets in is the same.
- `min_version: TLS10|TLS11`: OpenSSL 3 refuses TLS 1.0 and 1.1 at Python's security level:
  TLS 1.2 is the minimum (a warning); `max_version` below TLS12 is an error.
- `curve_preferences`: one curve is honoured exactly; with several (Python's ssl sets one
  group only) the list is ignored with a warning and OpenSSL's default groups apply.
- `cipher_suites`: Go's names, mapped to OpenSSL's; TLS 1.3 suites are accepted and, as in Go,
  not configurable; insecure suites (Go's InsecureCipherSuites: RC4, 3DES, CBC-SHA256) are
  refused as exporter-toolkit refuses them.
- `http_server_config.http2` is accepted; the server speaks HTTP/1.1 only.
- `client_allowed_sans` and `rate_limit` are exporter-toolkit keys gpu-enricher does not
  implement: an error, never silently less protection than the file asks for.

Every problem is one line naming the file and the key:
`web.yml: tls_server_config.cert_fil: unknown key (did you mean cert_file?)`.
"""

import difflib
from collections.abc import Mapping
from pathlib import Path
from typing import Any, Final, TypeVar

from .config_model import (
    BCRYPT_HASH,
    CIPHERS,
    CLIENT_AUTH_TYPES,
    CURVES,
    HEADERS,
    INSECURE_CIPHERS,
    TLS13_CIPHERS,
    TLS_VERSIONS,
    TlsSettings,
    WebConfig,
    WebConfigError,
)
from .config_yaml import Scalar, decode_yaml, join_key, read_web_config_text

__all__ = ["BCRYPT_HASH", "CIPHERS", "CLIENT_AUTH_TYPES", "CURVES", "HEADERS", "INSECURE_CIPHERS",
           "TLS13_CIPHERS", "TLS_VERSIONS", "TlsSettings", "WebConfig", "WebConfigError",
           "load_web_config", "parse_web_config"]

_TOP_KEYS: Final = ("tls_server_config", "http_server_config", "basic_auth_users")
_TLS_KEYS: Final = ("cert_file", "key_file", "cert", "key", "client_ca_file", "client_ca",
                    "client_auth_type", "min_version", "max_version", "cipher_suites",
                    "prefer_server_cipher_suites", "curve_preferences")
_HTTP_KEYS: Final = ("http2", "headers")
_NOT_IMPLEMENTED: Final = {
    "rate_limit": "exporter-toolkit's rate limiter is not implemented by gpu-enricher",
    "tls_server_config.client_allowed_sans": "matching client certificate SANs is not "
    "implemented by gpu-enricher; issue client certificates from a CA of their own instead",
}

T = TypeVar("T")


# --- checking ---------------------------------------------------------------------------------


class _Section:
    """A mapping of the file, its known keys (None: any), and one-line errors naming file and
    key."""

    def __init__(self, path: str, key: str, value: Any, known: tuple[str, ...] | None) -> None:
        self.path, self.key = path, key
        if value is None or (isinstance(value, Scalar) and value.value is None):
            value = {}  # `tls_server_config:` with nothing under it
        if not isinstance(value, dict):
            raise self.error(key or "document", f"expected a mapping, got {_kind(value)}")
        self.data: dict[str, Any] = value
        for name in value:
            full = join_key(key, name)
            if full in _NOT_IMPLEMENTED:
                raise self.error(full, f"not supported: {_NOT_IMPLEMENTED[full]}")
            if known is not None and name not in known:
                close = difflib.get_close_matches(name, known, n=1, cutoff=0.6)
                hint = f" (did you mean {close[0]}?)" if close else ""
                raise self.error(full, f"unknown key{hint}")

    def error(self, key: str, problem: str) -> WebConfigError:
        return WebConfigError(f"{self.path}: {key}: {problem}")

    def _value(self, name: str, value: Any, kind: type[T], default: T) -> T:
        if isinstance(value, Scalar):
            if value.value is None:  # `key:` or `key: null`: Go's zero value, the default here
                return default
            if kind is str:
                return value.text  # type: ignore[return-value]  # Go: a string key takes the text
            value = value.value
        if value is None:
            return default
        if not isinstance(value, kind) or (kind is not bool and isinstance(value, bool)):
            raise self.error(name, f"expected {_KIND_NAMES.get(kind, kind.__name__)}, "
                             f"got {_kind(value)}")
        return value

    def get(self, name: str, kind: type[T], default: T) -> T:
        return self._value(join_key(self.key, name), self.data.get(name), kind, default)

    def text(self, name: str) -> str | None:
        return self.get(name, str, "") or None

    def choice(self, name: str, choices: tuple[str, ...] | Mapping[str, Any],
               default: str) -> str:
        value = self.get(name, str, "") or default
        if value not in choices:
            raise self.error(join_key(self.key, name),
                             f"{value[:40]!r} is not one of {', '.join(choices)}")
        return value

    def strings(self, name: str) -> list[str]:
        values = self.get(name, list, [])
        where = join_key(self.key, name)
        return [self._value(f"{where}[{n}]", value, str, "") for n, value in enumerate(values)]


_KIND_NAMES: Final = {str: "a string", bool: "a boolean (true or false)", list: "a list",
                      dict: "a mapping"}


def _kind(value: Any) -> str:
    if isinstance(value, Scalar):
        value = value.value
    if value is None:
        return "nothing"
    names = {bool: "a boolean", int: "a number", float: "a number", str: "a string",
             list: "a list", dict: "a mapping"}
    return names.get(type(value), type(value).__name__)


def _file(base: Path, name: str | None) -> Path | None:
    return None if name is None else base / name  # an absolute name replaces base


def _tls(path: str, value: Any, notes: list[str]) -> TlsSettings | None:
    section = _Section(path, "tls_server_config", value, _TLS_KEYS)
    base = Path(path).parent
    cert_file, key_file = _file(base, section.text("cert_file")), _file(base,
                                                                        section.text("key_file"))
    cert, key = section.text("cert"), section.text("key")
    ca_file, ca = _file(base, section.text("client_ca_file")), section.text("client_ca")
    auth = section.choice("client_auth_type", (*CLIENT_AUTH_TYPES, "RequireClientCert"),
                          "NoClientCert")
    min_version = section.choice("min_version", TLS_VERSIONS, "TLS12")
    max_version = section.choice("max_version", TLS_VERSIONS, "TLS13")
    ciphers = _ciphers(section, section.strings("cipher_suites"))
    prefer = section.get("prefer_server_cipher_suites", bool, True)
    curve_notes: list[str] = []
    curves = _curves(section, section.strings("curve_preferences"), curve_notes)
    # exporter-toolkit: TLS is on when any of these is set (then a certificate and key are
    # needed); the other keys alone leave plain HTTP.
    if not any((cert_file, key_file, cert, key, ca_file, ca, section.text("client_auth_type"))):
        return None
    notes.extend(curve_notes)
    for file_key, inline_key, file_value, inline_value, what in (
            ("cert_file", "cert", cert_file, cert, "a certificate"),
            ("key_file", "key", key_file, key, "a private key")):
        if file_value is None and inline_value is None:
            raise section.error(f"tls_server_config.{file_key}",
                                f"missing: TLS needs {what} ({file_key} or {inline_key})")
        if file_value is not None and inline_value is not None:
            raise section.error(f"tls_server_config.{inline_key}",
                                f"set either {file_key} or {inline_key}, not both")
    if ca_file is not None and ca is not None:
        raise section.error("tls_server_config.client_ca",
                            "set either client_ca_file or client_ca, not both")
    where = "tls_server_config.client_auth_type"
    if auth in ("RequireAnyClientCert", "RequireClientCert"):
        raise section.error(where, f"{auth} (require a certificate but do not verify it) "
                            "cannot be expressed with Python's ssl: use "
                            "RequireAndVerifyClientCert with client_ca_file")
    if (ca_file or ca) and auth == "NoClientCert":
        raise section.error("tls_server_config.client_ca_file",
                            "a client CA without client_auth_type (set "
                            "RequireAndVerifyClientCert to verify client certificates)")
    if auth == "RequestClientCert":
        notes.append(f"{path}: {where}: RequestClientCert: no certificate is requested (Python's "
                     "ssl verifies whatever it requests); access is the same, as an unverified "
                     "certificate is never used")
    if TLS_VERSIONS[max_version] < TLS_VERSIONS["TLS12"]:
        raise section.error("tls_server_config.max_version",
                            f"{max_version}: TLS 1.0 and 1.1 are refused by OpenSSL at Python's "
                            "security level; use TLS12 or TLS13")
    if TLS_VERSIONS[min_version] < TLS_VERSIONS["TLS12"]:
        notes.append(f"{path}: tls_server_config.min_version: {min_version}: OpenSSL refuses "
                     "TLS 1.0 and 1.1 at Python's security level; the minimum is TLS12")
        min_version = "TLS12"
    if TLS_VERSIONS[min_version] > TLS_VERSIONS[max_version]:
        raise section.error("tls_server_config.min_version",
                            f"{min_version} is above max_version {max_version}")
    return TlsSettings(
        cert_file=cert_file, key_file=key_file, cert=cert, key=key, client_ca_file=ca_file,
        client_ca=ca, client_auth_type=auth, min_version=min_version, max_version=max_version,
        ciphers=ciphers, prefer_server_cipher_suites=prefer, curves=curves)


def _ciphers(section: _Section, names: list[str]) -> tuple[str, ...]:
    mapped: list[str] = []
    for n, name in enumerate(names):
        where = f"tls_server_config.cipher_suites[{n}]"
        if name in INSECURE_CIPHERS:
            raise section.error(where, f"{name} is insecure (Go's InsecureCipherSuites); "
                                "exporter-toolkit refuses it too")
        if name in TLS13_CIPHERS:
            continue  # not configurable, in Go as in OpenSSL through Python
        if name not in CIPHERS:
            close = difflib.get_close_matches(name, [*CIPHERS, *TLS13_CIPHERS], n=1)
            hint = f" (did you mean {close[0]}?)" if close else ""
            raise section.error(where, f"unknown cipher suite {name!r}{hint}")
        if CIPHERS[name] not in mapped:
            mapped.append(CIPHERS[name])
    return tuple(mapped)


def _curves(section: _Section, names: list[str], notes: list[str]) -> tuple[str, ...]:
    for n, name in enumerate(names):
        if name not in CURVES:
            raise section.error(f"tls_server_config.curve_preferences[{n}]",
                                f"unknown curve {name!r}: one of {', '.join(CURVES)}")
    curves = tuple(dict.fromkeys(CURVES[name] for name in names))
    if len(curves) > 1:
        notes.append(f"{section.path}: tls_server_config.curve_preferences: Python's ssl "
                     "restricts the handshake to one curve only; the list is ignored and "
                     "OpenSSL's default groups apply")
        return ()
    return curves


def _headers(path: str, value: Any, notes: list[str]) -> tuple[tuple[str, str], ...]:
    section = _Section(path, "http_server_config", value, _HTTP_KEYS)
    if section.get("http2", bool, False):
        notes.append(f"{path}: http_server_config.http2: accepted and ignored: gpu-enricher "
                     "speaks HTTP/1.1 only")
    headers = _Section(path, "http_server_config.headers", section.data.get("headers"), None)
    result = []
    for name, text in headers.data.items():
        where = join_key("http_server_config.headers", name)
        if name not in HEADERS:
            raise section.error(where, f"this header cannot be configured (exporter-toolkit "
                                f"allows {', '.join(HEADERS)})")
        text = headers.get(name, str, "")
        if not text:
            continue  # "Unset if blank"
        if any((ord(c) < 0x20 and c != "\t") or ord(c) == 0x7F for c in text):
            raise section.error(where, "a control character in the value")
        allowed = HEADERS[name]
        if allowed and text not in allowed:
            raise section.error(where, f"{text[:40]!r} is not one of {', '.join(allowed)}")
        result.append((name, text))
    return tuple(result)


def _users(path: str, value: Any) -> tuple[tuple[str, str], ...]:
    section = _Section(path, "basic_auth_users", value, None)
    users = []
    for user in section.data:
        hashed = section.get(user, str, "")
        if not BCRYPT_HASH.fullmatch(hashed):
            raise section.error(join_key("basic_auth_users", user),
                                "not a bcrypt hash ($2y$10$… from `htpasswd -nBC 10 \"\"`)")
        if ":" in user:
            raise section.error(join_key("basic_auth_users", user),
                                "a user name cannot contain ':' (basic auth splits on it)")
        users.append((user, hashed))
    return tuple(users)


def parse_web_config(text: str, path: str) -> WebConfig:
    """The file's text → WebConfig. Raises WebConfigError only."""
    notes: list[str] = []
    top = _Section(path, "", decode_yaml(text, path), _TOP_KEYS)
    return WebConfig(
        path=path,
        tls=_tls(path, top.data.get("tls_server_config"), notes),
        headers=_headers(path, top.data.get("http_server_config"), notes),
        users=_users(path, top.data.get("basic_auth_users")),
        notes=tuple(notes),
    )


def load_web_config(path: Path) -> WebConfig:
    return parse_web_config(read_web_config_text(path), str(path))
