"""What a web config is (exporter-toolkit's vocabulary, in gpu-enricher's terms): the names it
accepts and the checked result. Data only; web/config.py checks a file against it."""

import re
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Final


class WebConfigError(ValueError):
    """A web config file that cannot be used; the message is one line naming the file. Here,
    not beside the YAML reader, so that catching it loads no PyYAML (cli/main.py)."""


CLIENT_AUTH_TYPES: Final = ("NoClientCert", "RequestClientCert", "RequireAnyClientCert",
                            "VerifyClientCertIfGiven", "RequireAndVerifyClientCert")
TLS_VERSIONS: Final = {"TLS10": 0x0301, "TLS11": 0x0302, "TLS12": 0x0303, "TLS13": 0x0304}
CURVES: Final = {"CurveP256": "prime256v1", "CurveP384": "secp384r1", "CurveP521": "secp521r1",
                 "X25519": "X25519"}
"""exporter-toolkit's curve names → OpenSSL's."""

TLS13_CIPHERS: Final = frozenset({"TLS_AES_128_GCM_SHA256", "TLS_AES_256_GCM_SHA384",
                                  "TLS_CHACHA20_POLY1305_SHA256"})
"""Accepted, and (as in Go) not configurable: OpenSSL's TLS 1.3 defaults stay."""
CIPHERS: Final = {
    # Go's tls.CipherSuites(), TLS 1.0-1.2 → OpenSSL's name.
    "TLS_ECDHE_ECDSA_WITH_AES_128_CBC_SHA": "ECDHE-ECDSA-AES128-SHA",
    "TLS_ECDHE_ECDSA_WITH_AES_256_CBC_SHA": "ECDHE-ECDSA-AES256-SHA",
    "TLS_ECDHE_RSA_WITH_AES_128_CBC_SHA": "ECDHE-RSA-AES128-SHA",
    "TLS_ECDHE_RSA_WITH_AES_256_CBC_SHA": "ECDHE-RSA-AES256-SHA",
    "TLS_ECDHE_ECDSA_WITH_AES_128_GCM_SHA256": "ECDHE-ECDSA-AES128-GCM-SHA256",
    "TLS_ECDHE_ECDSA_WITH_AES_256_GCM_SHA384": "ECDHE-ECDSA-AES256-GCM-SHA384",
    "TLS_ECDHE_RSA_WITH_AES_128_GCM_SHA256": "ECDHE-RSA-AES128-GCM-SHA256",
    "TLS_ECDHE_RSA_WITH_AES_256_GCM_SHA384": "ECDHE-RSA-AES256-GCM-SHA384",
    "TLS_ECDHE_RSA_WITH_CHACHA20_POLY1305_SHA256": "ECDHE-RSA-CHACHA20-POLY1305",
    "TLS_ECDHE_ECDSA_WITH_CHACHA20_POLY1305_SHA256": "ECDHE-ECDSA-CHACHA20-POLY1305",
    # Go 1.13's names of the two above.
    "TLS_ECDHE_RSA_WITH_CHACHA20_POLY1305": "ECDHE-RSA-CHACHA20-POLY1305",
    "TLS_ECDHE_ECDSA_WITH_CHACHA20_POLY1305": "ECDHE-ECDSA-CHACHA20-POLY1305",
    # RSA key exchange (no forward secrecy): in Go's CipherSuites() until recent releases
    # moved them to InsecureCipherSuites; accepted so older files keep working.
    "TLS_RSA_WITH_AES_128_CBC_SHA": "AES128-SHA",
    "TLS_RSA_WITH_AES_256_CBC_SHA": "AES256-SHA",
    "TLS_RSA_WITH_AES_128_GCM_SHA256": "AES128-GCM-SHA256",
    "TLS_RSA_WITH_AES_256_GCM_SHA384": "AES256-GCM-SHA384",
}
INSECURE_CIPHERS: Final = frozenset({
    "TLS_RSA_WITH_RC4_128_SHA", "TLS_RSA_WITH_3DES_EDE_CBC_SHA",
    "TLS_RSA_WITH_AES_128_CBC_SHA256", "TLS_ECDHE_ECDSA_WITH_RC4_128_SHA",
    "TLS_ECDHE_RSA_WITH_RC4_128_SHA", "TLS_ECDHE_RSA_WITH_3DES_EDE_CBC_SHA",
    "TLS_ECDHE_ECDSA_WITH_AES_128_CBC_SHA256", "TLS_ECDHE_RSA_WITH_AES_128_CBC_SHA256"})

HEADERS: Final[Mapping[str, tuple[str, ...]]] = {
    # exporter-toolkit's extraHTTPHeaders: only these, and for two of them only these values.
    "Strict-Transport-Security": (),
    "X-Content-Type-Options": ("nosniff",),
    "X-Frame-Options": ("deny", "sameorigin"),
    "X-XSS-Protection": (),
    "Content-Security-Policy": (),
}

BCRYPT_HASH: Final = re.compile(r"\$2[aby]\$(0[4-9]|[12][0-9]|3[01])\$[./A-Za-z0-9]{53}")
"""A bcrypt hash as htpasswd -B and Python's bcrypt write it, cost 4 to 31."""


@dataclass(frozen=True, slots=True)
class TlsSettings:
    """tls_server_config, checked. Files are absolute or relative to the web config's
    directory, as exporter-toolkit resolves them."""

    cert_file: Path | None = None
    key_file: Path | None = None
    cert: str | None = None  # inline PEM
    key: str | None = None
    client_ca_file: Path | None = None
    client_ca: str | None = None
    client_auth_type: str = "NoClientCert"
    min_version: str = "TLS12"
    max_version: str = "TLS13"
    ciphers: tuple[str, ...] = ()  # OpenSSL names, in the file's order
    prefer_server_cipher_suites: bool = True
    curves: tuple[str, ...] = ()  # OpenSSL names


@dataclass(frozen=True, slots=True)
class WebConfig:
    path: str
    tls: TlsSettings | None = None  # None: plain HTTP
    headers: tuple[tuple[str, str], ...] = ()
    users: tuple[tuple[str, str], ...] = ()  # (user, bcrypt hash); empty: no basic auth
    notes: tuple[str, ...] = field(default=())  # warnings to log at start

    def where(self, key: str) -> str:
        return f"{self.path}: {key}"
