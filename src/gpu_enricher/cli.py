"""Command line and environment → Config; logging; exit codes.

Flag names follow dcgm-exporter so copied DaemonSet manifests keep working. Each flag reads,
in order: the command line, `GPU_ENRICHER_<FLAG_NAME>`, dcgm-exporter's own variable(s).
dcgm-exporter flags we do not implement yet are accepted and log one warning when set.
"""

import argparse
import difflib
import json
import logging
import os
import re
import shutil
import socket
import sys
import textwrap
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from importlib import resources
from pathlib import Path
from typing import Any, Final, NoReturn

from . import __version__
from .config import BUILTIN_SCENARIO, DEFAULT_KUBELET_SOCKET, Config
from .dcgm_flags import DCGM_EXPORTER_FLAGS, DcgmFlag

log = logging.getLogger("gpu_enricher")

EXIT_USAGE: Final = 2
DEFAULT_ADDRESS: Final = ":9400"
DEFAULT_INTERVAL_MS: Final = 5000
MIN_INTERVAL_MS: Final = 100
_TRUE: Final = frozenset({"1", "true", "yes", "on"})
_FALSE: Final = frozenset({"0", "false", "no", "off", ""})


class UsageError(Exception):
    pass


class ArgumentsError(UsageError):
    """The command line itself is wrong (unknown flag, missing value): usage follows."""


def default_counters_path() -> Path:
    return Path(str(resources.files("gpu_enricher").joinpath("default-counters.csv")))


def parse_address(text: str) -> tuple[str | None, int]:
    """`:9400`, `0.0.0.0:9400`, `[::1]:9400`, `localhost:9400` → (host or None, port)."""
    host, sep, port_text = text.strip().rpartition(":")
    if not sep or not port_text.isdigit() or not 0 < int(port_text) < 65536:
        raise UsageError(f"invalid address {text!r}: expected [HOST]:PORT, e.g. :9400")
    host = host.strip("[]")
    return (host or None), int(port_text)


def parse_interval(text: str) -> int:
    try:
        value = int(text)
    except ValueError:
        raise UsageError(f"invalid collect interval {text!r}: expected milliseconds") from None
    if value < MIN_INTERVAL_MS:
        raise UsageError(f"collect interval {value} ms is below the minimum {MIN_INTERVAL_MS} ms")
    return value


def parse_bool(text: str) -> bool:
    lowered = text.strip().lower()
    if lowered in _TRUE:
        return True
    if lowered in _FALSE:
        return False
    raise UsageError(f"invalid boolean {text!r}: expected true or false")


def parse_gpu_id_type(text: str) -> str:
    if text not in ("uid", "device-name"):
        raise UsageError(f"invalid kubernetes GPU id type {text!r}: expected uid or device-name")
    return text


def parse_names(text: str) -> frozenset[str]:
    return frozenset(name.strip() for name in text.split(",") if name.strip())


def parse_log_format(text: str) -> str:
    if text not in ("text", "json"):
        raise UsageError(f"invalid log format {text!r}: expected text or json")
    return text


@dataclass(frozen=True, slots=True)
class Option:
    """A flag gpu-enricher implements."""

    long: str
    short: str | None
    parse: Callable[[str], Any] | None  # None: a boolean switch
    help: str
    metavar: str | None = None


def _dcgm(long: str) -> DcgmFlag | None:
    return next((f for f in DCGM_EXPORTER_FLAGS if f.long == long), None)


OPTIONS: Final = (
    Option("address", "a", parse_address, f"address to serve on (default {DEFAULT_ADDRESS})",
           "[HOST]:PORT"),
    Option("collectors", "f", Path,
           "counters CSV in dcgm-exporter's syntax (default: the bundled default-counters.csv)",
           "PATH"),
    Option("collect-interval", "c", parse_interval,
           f"collection interval in milliseconds (default {DEFAULT_INTERVAL_MS})", "MS"),
    Option("no-hostname", "n", None, "omit the Hostname label"),
    Option("log-format", None, parse_log_format, "log format: text (default) or json",
           "text|json"),
    Option("debug", None, None, "log at debug level"),
    Option("kubernetes", "k", None,
           "add container, namespace and pod labels from the kubelet's pod-resources API"),
    Option("pod-resources-kubelet-socket", None, Path,
           "the kubelet's pod-resources socket (default "
           "/var/lib/kubelet/pod-resources/kubelet.sock); it may appear after start", "PATH"),
    Option("kubernetes-gpu-id-type", None, parse_gpu_id_type,
           "uid (default) or device-name (GKE); both device-ID families are recognised "
           "whatever this says", "uid|device-name"),
    Option("nvidia-resource-names", None, parse_names,
           "extra resource names to attribute besides nvidia.com/gpu and nvidia.com/mig-*, "
           "comma-separated (e.g. nvidia.com/gpu.shared)", "NAMES"),
    Option("kubernetes-virtual-gpus", None, None,
           "repeat a shared GPU's series for each pod holding a replica, with a vgpu label"),
)
IMPLEMENTED_LONG: Final = frozenset(o.long for o in OPTIONS) | {"simulate"}


def env_names(long: str) -> tuple[str, ...]:
    own = "GPU_ENRICHER_" + long.upper().replace("-", "_")
    dcgm = _dcgm(long)
    return (own, *(dcgm.env if dcgm else ()))


def _env_help(long: str) -> str:
    return " [env " + ", ".join(env_names(long)) + "]"


SHORT_USAGE: Final = ("gpu-enricher [-a [HOST]:PORT] [-f PATH] [-c MS] [-k] "
                      "[--simulate [FILE]] [OPTION ...]")


class _Parser(argparse.ArgumentParser):
    """argparse, but a usage error is one short line (with "did you mean" where a flag is
    close), raised as UsageError instead of 30 lines of usage and a SystemExit."""

    def error(self, message: str) -> NoReturn:
        raise ArgumentsError(message + _suggestion(self, message))


def _suggestion(parser: argparse.ArgumentParser, message: str) -> str:
    known = [s for action in parser._actions for s in action.option_strings]
    hints = []
    for token in re.findall(r"(?<![\w-])(--?[\w-]+)", message.partition(":")[2]):
        close = difflib.get_close_matches(token, known, n=1, cutoff=0.75)
        if token not in known and close:
            hints.append((token, close[0]))
    if len(hints) == 1:
        return f"; did you mean {hints[0][1]}?"
    return "".join(f"; {token}: did you mean {close}?" for token, close in hints)


def _compat_flags() -> list[DcgmFlag]:
    return [f for f in DCGM_EXPORTER_FLAGS
            if f.long not in IMPLEMENTED_LONG and f.long not in ("help", "version")]


def _compat_epilog(width: int) -> str:
    """The dcgm-exporter flags we accept but do not implement, listed compactly: their own
    descriptions would read as if they worked."""
    flags = ", ".join((f"-{f.short}/" if f.short else "") + f"--{f.long}" for f in _compat_flags())
    wrap = textwrap.TextWrapper(width=width, initial_indent="  ", subsequent_indent="  ",
                                break_on_hyphens=False, break_long_words=False)
    intro = (f"Accepted so that dcgm-exporter manifests keep working, from the command line or "
             f"dcgm-exporter's environment variables; not implemented: one that is set logs a "
             f"warning and changes nothing ({len(_compat_flags())} flags):")
    environment = ("Every flag above also reads the environment when not given: "
                   "GPU_ENRICHER_<FLAG_NAME> first, then dcgm-exporter's variable (shown in "
                   "brackets); NODE_NAME sets the Hostname label. A bad value prints one line and "
                   "exits with status 2.")
    return "\n".join([
        *textwrap.wrap(environment, width),
        "",
        "dcgm-exporter compatibility (accepted, ignored):",
        wrap.fill(intro),
        wrap.fill(flags),
    ])


def build_parser() -> argparse.ArgumentParser:
    width = max(60, min(100, shutil.get_terminal_size().columns)) - 2
    parser = _Parser(
        prog="gpu-enricher",
        usage=SHORT_USAGE,
        description="NVIDIA GPU metrics in dcgm-exporter's format, with Kubernetes pod labels.",
        epilog=_compat_epilog(width),
        formatter_class=argparse.RawDescriptionHelpFormatter,
        # dcgm-exporter (urfave/cli) takes no abbreviations: `--coll` must not silently mean
        # `--collectors` here and be an error there.
        allow_abbrev=False,
    )
    parser.add_argument("--version", action="version", version=f"gpu-enricher {__version__}")
    for opt in OPTIONS:
        names = [f"-{opt.short}"] if opt.short else []
        names.append(f"--{opt.long}")
        if opt.parse is None:
            # `--kubernetes` or `--kubernetes=true|false`, as dcgm-exporter's CLI accepts.
            parser.add_argument(*names, nargs="?", const="true", default=None,
                                metavar="true|false", help=opt.help + _env_help(opt.long))
        else:
            parser.add_argument(*names, default=None, metavar=opt.metavar,
                                help=opt.help + _env_help(opt.long))
    parser.add_argument(
        "--simulate", nargs="?", const=BUILTIN_SCENARIO, default=None, metavar="SCENARIO.yaml",
        help="run on a simulated node: the built-in one, or one described by a YAML file "
             "(docs/simulate.md); only this flag ever simulates" + _env_help("simulate"))
    for flag in _compat_flags():
        # Multi-letter single-dash names only where dcgm-exporter has them (-rbmn).
        names = ([f"-{flag.short}"] if flag.short else []) + [f"--{flag.long}"]
        if flag.takes_value:
            parser.add_argument(*names, default=None, help=argparse.SUPPRESS)
        else:
            parser.add_argument(*names, nargs="?", const="true", default=None,
                                help=argparse.SUPPRESS)
    return parser


def _value(args: argparse.Namespace, long: str, env: Mapping[str, str]) -> tuple[str | None, str]:
    """The raw text of a flag and where it came from."""
    given = getattr(args, long.replace("-", "_"))
    if given is not None:
        return given, f"--{long}"
    for name in env_names(long):
        if name in env:
            return env[name], name
    return None, ""


def _parsed(raw: str, origin: str, parse: Callable[[str], Any]) -> Any:
    """A value parsed, its error naming where it came from: `GPU_ENRICHER_X=abc: …`."""
    try:
        return parse(raw)
    except UsageError as exc:
        raise UsageError(f"{origin}={raw}: {exc}") from None


def _unimplemented_warnings(args: argparse.Namespace, env: Mapping[str, str]) -> list[str]:
    warnings = []
    for flag in _compat_flags():
        raw, origin = _value(args, flag.long, env)
        if raw is None:
            continue
        if not flag.takes_value and not _parsed(raw, origin, parse_bool):
            continue
        if flag.takes_value and raw == flag.default:
            continue
        warnings.append(f"{origin}={raw!r} is a dcgm-exporter option that gpu-enricher does not "
                        "implement yet; ignored")
    return warnings


def parse_config(argv: Sequence[str], env: Mapping[str, str]) -> tuple[Config, list[str]]:
    """Flags + environment → Config and the warnings to log. Raises UsageError."""
    args = build_parser().parse_args(argv)

    def get(long: str, parse: Callable[[str], Any], default: Any) -> Any:
        raw, origin = _value(args, long, env)
        return default if raw is None else _parsed(raw, origin, parse)

    def switch(long: str) -> bool:
        raw, origin = _value(args, long, env)
        return False if raw is None else bool(_parsed(raw, origin, parse_bool))

    host, port = get("address", parse_address, (None, 9400))
    no_hostname = switch("no-hostname")
    hostname = None if no_hostname else (env.get("NODE_NAME") or socket.gethostname())
    simulate, _ = _value(args, "simulate", env)
    if simulate is not None and simulate.strip().lower() in _TRUE:  # GPU_ENRICHER_SIMULATE=true
        simulate = BUILTIN_SCENARIO
    elif simulate is not None and simulate.strip().lower() in _FALSE:
        simulate = None
    kubernetes = switch("kubernetes")
    config = Config(
        kubernetes=kubernetes or simulate is not None,
        kubelet_socket=get("pod-resources-kubelet-socket", Path, DEFAULT_KUBELET_SOCKET),
        gpu_id_type=get("kubernetes-gpu-id-type", parse_gpu_id_type, "uid"),
        extra_resources=get("nvidia-resource-names", parse_names, frozenset()),
        virtual_gpus=switch("kubernetes-virtual-gpus"),
        host=host,
        port=port,
        collectors=get("collectors", Path, default_counters_path()),
        collect_interval_ms=get("collect-interval", parse_interval, DEFAULT_INTERVAL_MS),
        hostname=hostname,
        log_format=get("log-format", parse_log_format, "text"),
        debug=switch("debug"),
        simulate=simulate or None,
    )
    return config, _unimplemented_warnings(args, env)


DCGM_IMAGE_DIR: Final = Path("/etc/dcgm-exporter")


def counters_path(path: Path) -> Path:
    """dcgm-exporter's image ships its counters files in /etc/dcgm-exporter, and copied
    manifests point there (`-f /etc/dcgm-exporter/dcp-metrics-included.csv`): when such a
    file is absent from this image, use the bundled counters instead of crash-looping."""
    if path.parent == DCGM_IMAGE_DIR and not path.exists():
        log.warning("%s is a counters file of dcgm-exporter's image and is not here; using "
                    "gpu-enricher's bundled counters (mount your own file to keep yours)", path)
        return default_counters_path()
    return path


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
    from .counters import CountersFileError, load_counters
    from .scenario import ScenarioError

    args = sys.argv[1:] if argv is None else argv
    try:
        config, warnings = parse_config(args, os.environ)
    except UsageError as exc:
        print(f"gpu-enricher: error: {exc}", file=sys.stderr)
        if isinstance(exc, ArgumentsError):
            print(f"usage: {SHORT_USAGE}  (--help lists every flag)", file=sys.stderr)
        return EXIT_USAGE
    setup_logging(config.log_format, config.debug)
    for warning in warnings:
        log.warning("%s", warning)
    try:
        counters = load_counters(counters_path(config.collectors))
        from .app import make_backend, run

        backend = make_backend(config)
    except (CountersFileError, ScenarioError) as exc:
        print(f"gpu-enricher: error: {exc}", file=sys.stderr)
        return EXIT_USAGE
    return run(config, counters, backend)
