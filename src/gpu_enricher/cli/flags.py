"""The argparse parser over gpu-enricher's flags (cli/options.py) and over dcgm-exporter's
(accepted for compatibility; those not implemented listed with their reasons, cli/compat.py).

Pure: no environment, no I/O; the CLI (cli/main.py) applies environment variables and defaults.
"""

import argparse
import difflib
import re
import shutil
from collections.abc import Sequence
from typing import Final, NoReturn

from .. import __version__
from ..config import BUILTIN_SCENARIO
from .compat import compat_epilog
from .dcgm_flags import DCGM_EXPORTER_FLAGS, DcgmFlag
from .flag_values import ArgumentsError
from .options import OPTIONS


def _dcgm(long: str) -> DcgmFlag | None:
    return next((f for f in DCGM_EXPORTER_FLAGS if f.long == long), None)


IMPLEMENTED_LONG: Final = frozenset(o.long for o in OPTIONS) | {"simulate"}


# Variables the GPU Operator sets besides dcgm-exporter's own (its DRA switch).
OPERATOR_ENV: Final = {"kubernetes-enable-dra": ("DCGM_EXPORTER_KUBERNETES_ENABLE_DRA",)}


def env_names(long: str) -> tuple[str, ...]:
    own = "GPU_ENRICHER_" + long.upper().replace("-", "_")
    dcgm = _dcgm(long)
    return (own, *(dcgm.env if dcgm else ()), *OPERATOR_ENV.get(long, ()))


def _env_help(long: str) -> str:
    return " [env " + ", ".join(env_names(long)) + "]"


SHORT_USAGE: Final = ("gpu-enricher [-a [HOST]:PORT] [-f PATH] [-k] "
                      "[--simulate [SCENARIO.yaml]] [OPTION ...]")


class _Parser(argparse.ArgumentParser):
    """argparse, but a usage error is one short line (with "did you mean" where a flag is
    close), raised as UsageError instead of 30 lines of usage and a SystemExit."""

    def error(self, message: str) -> NoReturn:
        raise ArgumentsError(message + _suggestion(self, message))


def _suggestion(parser: argparse.ArgumentParser, message: str) -> str:
    if message.startswith("ambiguous option"):  # argparse already lists the candidates
        return ""
    known = [s for action in parser._actions for s in action.option_strings]
    hints = []
    for token in re.findall(r"(?<![\w-])(--?[\w-]+)", message.partition(":")[2]):
        close = difflib.get_close_matches(token, known, n=1, cutoff=0.75)
        if token not in known and close:
            hints.append((token, close[0]))
    if len(hints) == 1:
        return f"; did you mean {hints[0][1]}?"
    return "".join(f"; {token}: did you mean {close}?" for token, close in hints)


def compat_flags() -> list[DcgmFlag]:
    return [f for f in DCGM_EXPORTER_FLAGS
            if f.long not in IMPLEMENTED_LONG and f.long not in ("help", "version")]


def build_parser() -> argparse.ArgumentParser:
    width = max(60, min(100, shutil.get_terminal_size().columns)) - 2
    parser = _Parser(
        prog="gpu-enricher",
        usage=SHORT_USAGE,
        description="NVIDIA GPU metrics in dcgm-exporter's format, with Kubernetes pod labels.\n"
                    "`gpu-enricher inspect [--url URL] [--namespace NS] [--pod POD]` prints "
                    "who holds and who uses\neach GPU, from a running exporter's /api/v1/gpus.",
        epilog=compat_epilog(compat_flags(), width),
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
             "(docs/simulate.md), with a fake kubelet, Kubernetes API and /proc; it turns on "
             "--process-metrics and --kubernetes-enable-dra unless they are set; only this flag "
             "ever simulates"
             + _env_help("simulate"))
    for flag in compat_flags():
        # Multi-letter single-dash names only where dcgm-exporter has them (-rbmn).
        names = ([f"-{flag.short}"] if flag.short else []) + [f"--{flag.long}"]
        if flag.takes_value:
            parser.add_argument(*names, default=None, help=argparse.SUPPRESS)
        else:
            parser.add_argument(*names, nargs="?", const="true", default=None,
                                help=argparse.SUPPRESS)
    return parser


def go_style_flags(parser: argparse.ArgumentParser, argv: Sequence[str]) -> list[str]:
    """dcgm-exporter's CLI (urfave/cli over Go's flag package) takes `-collectors x` and
    `-kubernetes` like `--collectors x`; argparse would read `-kubernetes` as `-k ubernetes`
    and `-debug` as `-d ebug`. Such tokens become their `--` form."""
    strings = {s for action in parser._actions for s in action.option_strings}
    rewritten: list[str] = []
    for n, token in enumerate(argv):
        if token == "--":
            return rewritten + list(argv[n:])
        name = token[1:].partition("=")[0]
        if (token.startswith("-") and not token.startswith("--") and token not in strings
                and f"-{name}" not in strings and f"--{name}" in strings):
            token = "-" + token
        rewritten.append(token)
    return rewritten
