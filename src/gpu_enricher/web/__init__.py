"""HTTP: the aiohttp server, whose `/metrics` and query API hand out the bytes the collector
rendered last and never wait on a source (`server.py`); the connection guard against idle and
slow clients (`connguard.py`); systemd's sockets (`activation.py`); and `--web-config-file`,
exporter-toolkit's TLS and basic auth, read (`config_yaml.py`), checked (`config.py`, its
vocabulary in `config_model.py`), put to work (`security.py`) and swapped whole on a reload
(`live_security.py`).

May import: `strict_yaml`, `exposition`, `collector` (the bytes it serves). Imported by: `app`,
`reload`, `cli`.
"""
