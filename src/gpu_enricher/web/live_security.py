"""The web config in force, swapped whole when a reload (reload.py) brings a new one: renewed
certificates, keys, client CAs, users and headers take effect without a restart and without
dropping a connection, as exporter-toolkit's re-read on every connection does.

A connection is served by the configuration in force when its TLS handshake starts (the
listening context's SNI callback hands the handshake to the newest context, which OpenSSL calls
whether or not the client sent a server name); a request by the one in force when it arrives,
after `before_request` (reload.py's check of the web config file: a changed file is put in force
first, so that a rotated password applies to the very next request, issue 26).

What OpenSSL fixes per listening socket cannot change this way: TLS on or off, versions,
ciphers, curves and the client-certificate mode. A reload that changes one of them is refused
with a line naming the key; the running configuration stays (restart to change them).
"""

import asyncio
import dataclasses
import logging
import ssl
from collections.abc import Awaitable, Callable
from pathlib import Path
from typing import Final

from .config import TlsSettings, WebConfig, WebConfigError, load_web_config
from .security import WebSecurity, web_security

log = logging.getLogger(__name__)

_MATERIAL: Final = ("cert_file", "key_file", "cert", "key", "client_ca_file", "client_ca")
"""What a TLS reload may change: the certificate, its key and the client CA."""
_RETIRE_AUTH_SECONDS: Final = 30.0
"""A replaced password checker finishes the checks it started before it is closed."""
_KEYS: Final = {"ciphers": "cipher_suites", "curves": "curve_preferences"}
"""TlsSettings' fields named differently from the file's keys."""


def watched_files(config: WebConfig) -> tuple[Path, ...]:
    """The web config and the files it names: a change of any of them is a reload."""
    paths = [Path(config.path)]
    if config.tls is not None:
        tls = config.tls
        paths += [p for p in (tls.cert_file, tls.key_file, tls.client_ca_file) if p is not None]
    return tuple(paths)


def fixed_setting_changed(running: WebConfig, new: WebConfig) -> str | None:
    """Why `new` cannot replace `running` without a restart; None when it can."""
    if (running.tls is None) != (new.tls is None):
        return f"{new.path}: tls_server_config: turning TLS on or off needs a restart"
    if running.tls is None or new.tls is None:
        return None
    for field in dataclasses.fields(TlsSettings):
        name = field.name
        if name not in _MATERIAL and getattr(running.tls, name) != getattr(new.tls, name):
            key = _KEYS.get(name, name)
            return f"{new.path}: tls_server_config.{key}: changing it needs a restart"
    return None


class LiveWebSecurity:
    """Holds the WebSecurity in force; web/server.py reads `current` per request, the listening
    SSLContext per handshake."""

    def __init__(self, security: WebSecurity) -> None:
        self.current = security
        self.before_request: Callable[[], Awaitable[None]] | None = None
        listening = security.ssl_context
        if listening is not None:
            listening.sni_callback = self._handshake_context

    def watched(self) -> tuple[Path, ...]:
        """The files the web config in force names, with the file itself (reload.py)."""
        return watched_files(self.current.config)

    def reread(self) -> WebSecurity | str:
        """The web security its file gives now, or why a reload must refuse it (reload.py)."""
        running = self.current
        try:
            config = load_web_config(Path(running.config.path))
            fixed = fixed_setting_changed(running.config, config)
            return web_security(config, running) if fixed is None else fixed
        except WebConfigError as exc:
            return str(exc)

    def _handshake_context(self, connection: ssl.SSLObject, _server_name: str | None,
                           listening: ssl.SSLContext) -> None:
        current = self.current.ssl_context
        if current is not None and current is not listening:
            connection.context = current  # its certificate, key and client CA from now on

    def replace(self, new: WebSecurity) -> None:
        """Put `new` in force (checked with fixed_setting_changed first)."""
        old, self.current = self.current, new
        if old.auth is not None and old.auth is not new.auth:
            retired = old.auth
            asyncio.get_running_loop().call_later(_RETIRE_AUTH_SECONDS, retired.close)

    def close(self) -> None:
        if self.current.auth is not None:
            self.current.auth.close()
