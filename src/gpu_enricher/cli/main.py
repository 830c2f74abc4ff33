"""The command: flags and environment → Config (cli/settings.py), logging, exit codes, run.

`gpu-enricher inspect` goes to cli/inspect.py; everything else is the exporter.
"""

import dataclasses
import json
import logging
import os
import sys
from collections.abc import Sequence
from typing import Final

from .flag_values import ArgumentsError, UsageError
from .flags import SHORT_USAGE
from .settings import Note, parse_config

log = logging.getLogger("gpu_enricher")

EXIT_USAGE: Final = 2


class JsonFormatter(logging.Formatter):
    def format(self, record: logging.LogRecord) -> str:
        entry = {
            "time": self.formatTime(record, "%Y-%m-%dT%H:%M:%S%z"),
            "level": record.levelname.lower(),
            "logger": record.name,
            "msg": record.getMessage(),
        }
        if record.exc_info:
            entry["error"] = self.formatException(record.exc_info)
        return json.dumps(entry)


def setup_logging(log_format: str, debug: bool) -> None:
    handler = logging.StreamHandler(sys.stderr)
    if log_format == "json":
        handler.setFormatter(JsonFormatter())
    else:
        handler.setFormatter(logging.Formatter("%(asctime)s %(levelname)s %(name)s: %(message)s"))
    root = logging.getLogger()
    root.handlers[:] = [handler]
    root.setLevel(logging.DEBUG if debug else logging.INFO)
    logging.getLogger("aiohttp.access").setLevel(logging.WARNING)


def main(argv: Sequence[str] | None = None) -> int:
    from ..fields.collection import load_collection
    from ..fields.counters import CountersFileError
    from ..sim.scenario_values import ScenarioError  # not ..sim.scenario: it loads PyYAML
    from ..web.config_model import WebConfigError  # not ..web.config: it loads PyYAML

    args = sys.argv[1:] if argv is None else argv
    if args and args[0] == "inspect":
        from .inspect import main as inspect_main

        return inspect_main(args[1:])
    try:
        config, warnings = parse_config(args, os.environ)
    except UsageError as exc:
        print(f"gpu-enricher: error: {exc}", file=sys.stderr)
        if isinstance(exc, ArgumentsError):
            print(f"usage: {SHORT_USAGE}  (--help lists every flag)", file=sys.stderr)
        return EXIT_USAGE
    setup_logging(config.log_format, config.debug)
    for warning in warnings:
        log.log(logging.INFO if isinstance(warning, Note) else logging.WARNING, "%s", warning)
    try:
        from ..assembly import counters_sources, read_counters_config_map

        collection = load_collection(counters_sources(config, read_counters_config_map(config)))
        if collection.interval_ms is not None and not config.collect_interval_given:
            config = dataclasses.replace(config, collect_interval_ms=collection.interval_ms)
        security = None
        if config.web_config_file is not None:  # before NVML: a bad file fails fast
            from ..web.security import load_web_security

            security = load_web_security(config.web_config_file)
        from ..app import run
        from ..assembly import make_backend

        backend = make_backend(config)
    except (CountersFileError, ScenarioError, WebConfigError) as exc:
        print(f"gpu-enricher: error: {exc}", file=sys.stderr)
        return EXIT_USAGE
    # argv None: the process itself (not a caller in-process), which ends once serving has.
    return run(config, collection, backend, security, exit_process=argv is None)
