"""The values gpu-enricher's flags take: one parser each, raising UsageError with a message
that says what was expected. Pure: no environment, no I/O."""

import re
from collections.abc import Callable
from pathlib import Path
from typing import Final

from ..exposition.label_drop import refusal
from ..exposition.shape import DeviceOptionError, parse_selection
from ..fields.collection import NAMINGS
from ..fields.exporter_config import MIN_INTERVAL_MS
from ..fields.names import HOSTNAME_LABEL_NAMES

DEFAULT_ADDRESS: Final = ":9400"
DEFAULT_INTERVAL_MS: Final = 5000
# Go's strconv.ParseBool spellings (dcgm-exporter's) plus yes/no/on/off; compared lowercased.
TRUE_WORDS: Final = frozenset({"1", "t", "true", "yes", "on"})
FALSE_WORDS: Final = frozenset({"0", "f", "false", "no", "off", ""})


class UsageError(Exception):
    pass


class ArgumentsError(UsageError):
    """The command line itself is wrong (unknown flag, missing value): usage follows."""


def _split_host_port(text: str) -> tuple[str, str]:
    """HOST and PORT as Go's net.SplitHostPort splits them (dcgm-exporter listens through it):
    the port after the last colon; an IPv6 host in brackets, `[::1]:9400`; a colon left in the
    host, a bracket out of place or unbalanced, is refused. Raises UsageError saying which."""
    colon = text.rfind(":")
    if colon < 0:
        raise UsageError("missing port")
    inner_start = inner_end = 0  # a bracket may appear only as the host's own brackets
    if text.startswith("["):
        close = text.find("]")
        if close < 0:
            raise UsageError("missing ']'")
        if close + 1 != colon:
            raise UsageError("too many colons after ']'" if text[close + 1:close + 2] == ":"
                             else "missing port after ']'")
        host, inner_start, inner_end = text[1:close], 1, close + 1
    else:
        host = text[:colon]
        if ":" in host:
            raise UsageError("too many colons (an IPv6 address goes in brackets: [::1]:9400)")
    if "[" in text[inner_start:]:
        raise UsageError("unexpected '['")
    if "]" in text[inner_end:]:
        raise UsageError("unexpected ']'")
    return host, text[colon + 1:]


def parse_address(text: str) -> tuple[str | None, int]:
    """`:9400`, `0.0.0.0:9400`, `[::1]:9400`, `localhost:9400` → (host or None, port). What
    Go's net.SplitHostPort refuses (`[::1`, `:9400:9400`, `::1:9400`) is a usage error, never
    a host name that fails to resolve (issue 26); the port is a number from 1 to 65535."""
    try:
        host, port_text = _split_host_port(text.strip())
    except UsageError as exc:
        raise UsageError(f"invalid address {text!r}: {exc}; expected [HOST]:PORT, e.g. :9400 "
                         "or [::1]:9400") from None
    if not (port_text.isascii() and port_text.isdigit()) or not 0 < int(port_text) < 65536:
        raise UsageError(f"invalid address {text!r}: expected [HOST]:PORT with a port from 1 "
                         "to 65535, e.g. :9400")
    return (host or None), int(port_text)


def whole_number(what: str, minimum: int, unit: str = "ms") -> Callable[[str], int]:
    """A parser of a whole number of `unit` ("ms" or none) from `minimum` up; `what` names the
    flag's meaning in its errors."""
    expected = "milliseconds" if unit == "ms" else "a whole number"
    suffix = f" {unit}" if unit else ""
    why = ("is negative" if minimum == 0 else "must be positive" if minimum == 1
           else f"is below the minimum {minimum}{suffix}")

    def parse(text: str) -> int:
        try:
            value = int(text)
        except ValueError:
            raise UsageError(f"invalid {what} {text!r}: expected {expected}") from None
        if value < minimum:
            raise UsageError(f"{what} {value}{suffix} {why}")
        return value

    return parse


parse_interval = whole_number("collect interval", MIN_INTERVAL_MS)
parse_slow_interval = whole_number("slow-fields interval", 0)
parse_config_check_interval = whole_number("config check interval", 0)
parse_label_wait = whole_number("startup label wait", 0)
DEFAULT_LABEL_WAIT_MS: Final = 2000
parse_window = whole_number("window", 1)
"""A count window, as dcgm-exporter's -x and clock-events window."""


DEFAULT_KUBELET_LIST_CPU_BUDGET_PERCENT: Final = 2.0


def parse_cpu_budget(text: str) -> float:
    """A share of one core in percent (`2`, `0.5`), from 0 (no limit) to 100; the fraction."""
    try:
        value = float(text.strip().removesuffix("%"))
    except ValueError:
        raise UsageError(f"invalid CPU budget {text!r}: expected a percentage of one core, "
                         "e.g. 2") from None
    if not 0 <= value <= 100:  # also NaN
        raise UsageError(f"CPU budget {text.strip()} is not between 0 and 100 percent")
    return value / 100


def parse_bool(text: str) -> bool:
    lowered = text.strip().lower()
    if lowered in TRUE_WORDS:
        return True
    if lowered in FALSE_WORDS:
        return False
    raise UsageError(f"invalid boolean {text!r}: expected true or false")


def parse_gpu_id_type(text: str) -> str:
    if text not in ("uid", "device-name"):
        raise UsageError(f"invalid kubernetes GPU id type {text!r}: expected uid or device-name")
    return text


def parse_names(text: str) -> frozenset[str]:
    return frozenset(name.strip() for name in text.split(",") if name.strip())


def parse_driver_names(text: str) -> frozenset[str]:
    names = parse_names(text)
    if not names:
        raise UsageError("no DRA driver names: give at least one, e.g. gpu.nvidia.com")
    return names


def parse_drop_labels(text: str) -> frozenset[str]:
    """Label names to leave off every series; one that tells series apart is refused
    (exposition/label_drop.py says which and why)."""
    labels = parse_names(text)
    for name in sorted(labels):
        why = refusal(name)
        if why is not None:
            raise UsageError(f"label {name!r} cannot be dropped: {why}")
    return labels


def parse_devices(text: str) -> str:
    """dcgm-exporter's `-d` (`f`, `g[:IDS]`, `i[:IDS]`, `g[:IDS]+i[:IDS]`), refused with its
    own message; the text itself is kept (the collector reads it)."""
    try:
        parse_selection(text)
    except DeviceOptionError as exc:
        raise UsageError(str(exc)) from None
    return text


def parse_regexes(text: str) -> tuple[str, ...]:
    """dcgm-exporter's comma-separated allowlist; each must compile."""
    patterns = tuple(p.strip() for p in text.split(",") if p.strip())
    for pattern in patterns:
        try:
            re.compile(pattern)
        except re.error as exc:
            raise UsageError(f"invalid regular expression {pattern!r}: {exc}") from None
    return patterns


def parse_hostname_label_name(text: str) -> tuple[str, ...]:
    """The host label's names: `both` (the default: `Hostname` and `hostname`), `Hostname`
    (dcgm-exporter up to 4.8.2) or `hostname` (from 4.6.0-4.8.3 on, #655)."""
    if text == "both":
        return HOSTNAME_LABEL_NAMES
    if text not in HOSTNAME_LABEL_NAMES:
        raise UsageError(f"invalid hostname label name {text!r}: expected both, Hostname or "
                         "hostname")
    return (text,)


def parse_naming(text: str) -> str:
    """`--naming`: classic or 4.9 (fields/collection.py's NAMINGS)."""
    if text not in NAMINGS:
        raise UsageError(f"invalid naming {text!r}: expected {' or '.join(NAMINGS)}")
    return text


def parse_log_format(text: str) -> str:
    if text not in ("text", "json"):
        raise UsageError(f"invalid log format {text!r}: expected text or json")
    return text


def parse_optional_path(text: str) -> Path | None:
    """A path; empty (dcgm-exporter's default for --web-config-file) is none."""
    return Path(text) if text.strip() else None


DEFAULT_READ_HEADER_TIMEOUT_MS: Final = 10_000
DEFAULT_IDLE_TIMEOUT_MS: Final = 120_000  # a 60 s scrape interval keeps its connection
DEFAULT_MAX_CONNECTIONS: Final = 1024


# The web server's bounds: 0 would switch a protection off, which is not offered (a large
# value loosens one).
parse_read_header_timeout = whole_number("read-header timeout", 1)
parse_idle_timeout = whole_number("idle timeout", 1)
parse_max_connections = whole_number("connection limit", 1, unit="")


_DNS_LABEL = re.compile(r"[a-z0-9]([-a-z0-9]{0,61}[a-z0-9])?")
_DNS_SUBDOMAIN = re.compile(r"[a-z0-9]([-a-z0-9.]{0,251}[a-z0-9])?")


def parse_configmap_ref(text: str) -> tuple[str, str] | None:
    """`-m NAMESPACE:NAME` (dcgm-exporter's syntax); `none` (its default) or empty: off."""
    value = text.strip()
    if value in ("", "none"):
        return None
    namespace, sep, name = value.partition(":")
    if not sep or not _DNS_LABEL.fullmatch(namespace) or not _DNS_SUBDOMAIN.fullmatch(name):
        raise UsageError(f"invalid ConfigMap {text!r}: expected NAMESPACE:NAME, e.g. "
                         "gpu-operator:dcgm-metrics")
    return namespace, name
_GO_UNITS: Final = {"ns": 1e-9, "us": 1e-6, "µs": 1e-6, "μs": 1e-6, "ms": 1e-3, "s": 1.0,
                    "m": 60.0, "h": 3600.0}
_GO_TERM: Final = re.compile(r"(\d+\.?\d*|\.\d+)(ns|us|µs|μs|ms|s|m|h)")


def parse_go_duration(text: str) -> float:
    """Seconds from a Go duration as time.ParseDuration reads it (dcgm-exporter's duration
    flags): `10s`, `1m30s`, `1.5h`, `300ms`, `0`; a sign may lead; every term needs its unit."""
    body = text.strip()
    sign = -1.0 if body[:1] == "-" else 1.0
    if body[:1] in ("+", "-"):
        body = body[1:]
    if body == "0":
        return 0.0
    terms = _GO_TERM.findall(body)
    if not body or "".join(n + u for n, u in terms) != body:
        raise UsageError(f"invalid duration {text!r}: expected a Go duration, e.g. 10s, 1m30s "
                         "or 500ms")
    return sign * sum(float(number) * _GO_UNITS[unit] for number, unit in terms)


def go_duration(what: str, zero: bool = True) -> Callable[[str], float]:
    """A parser of a Go duration in seconds, from 0 (which, as in Go's net/http, means no
    limit) up, or above 0 when not `zero`; `what` names the flag's meaning in its errors."""

    def parse(text: str) -> float:
        seconds = parse_go_duration(text)
        if seconds < 0 or (seconds == 0 and not zero):
            raise UsageError(f"{what} {text.strip()} is "
                             f"{'negative' if seconds < 0 else 'not positive'}")
        return seconds

    return parse


DEFAULT_READ_TIMEOUT_SECONDS: Final = 10.0  # dcgm-exporter's default and its chart's value
DEFAULT_WRITE_TIMEOUT_SECONDS: Final = 30.0
parse_read_timeout = go_duration("read timeout")
parse_write_timeout = go_duration("write timeout")

parse_dump_retention = whole_number("dump retention", 0, unit="h")
"""Hours dump files are kept, as dcgm-exporter's --dump-retention; 0: kept for good."""
parse_poll_interval = go_duration("poll interval", zero=False)
"""--gpu-bind-unbind-poll-interval (Go's ticker refuses 0, as dcgm-exporter would panic)."""
parse_max_scrapes = whole_number("scrape limit", 1, unit="")
DEFAULT_MAX_CONCURRENT_SCRAPES: Final = 16  # dcgm-exporter's
