"""Go's syntax in dcgm-exporter's config file: time.ParseDuration's durations and path.Match's
globs, read as Go reads them. Pure."""

import math
import re
from typing import Final

# Go's time.ParseDuration: one or more decimal numbers, each with a unit.
_DURATION_PART: Final = re.compile(r"([0-9]*(?:\.[0-9]*)?)(ns|us|µs|μs|ms|s|m|h)")
_NS_PER_UNIT: Final = {"ns": 1, "us": 10**3, "µs": 10**3, "μs": 10**3, "ms": 10**6,
                       "s": 10**9, "m": 60 * 10**9, "h": 3600 * 10**9}


def parse_duration_ms(text: str) -> int | None:
    """A Go duration (`30s`, `1m30s`, `500ms`) in whole positive milliseconds; None when it is
    not one."""
    body = text.strip()
    if not body or body[0] in "+-":
        return None  # a negative or signed interval is never meant
    total, at = 0.0, 0
    for match in _DURATION_PART.finditer(body):
        if match.start() != at or match.group(1) in ("", "."):
            return None
        total += float(match.group(1)) * _NS_PER_UNIT[match.group(2)]
        at = match.end()
    if at != len(body):
        return None
    ms = total / 10**6
    return int(ms) if ms >= 1 and math.isclose(ms, round(ms), abs_tol=1e-9) else None


def glob_regex(glob: str) -> "re.Pattern[str] | None":
    """Go's path.Match pattern as a regex: `*`, `?`, `[...]` with `^` and ranges, `\\`
    escapes; None for a malformed pattern (path.ErrBadPattern)."""
    out, i = [], 0
    while i < len(glob):
        char = glob[i]
        if char == "*":
            out.append("[^/]*")
        elif char == "?":
            out.append("[^/]")
        elif char == "\\":
            if i + 1 == len(glob):
                return None
            i += 1
            out.append(re.escape(glob[i]))
        elif char == "[":
            end = glob.find("]", i + 2 if glob[i + 1:i + 2] == "^" else i + 1)
            body = glob[i + 1:end] if end != -1 else ""
            negate = body.startswith("^")
            body = body[1:] if negate else body
            if end == -1 or not body or body.startswith("-") or body.endswith("-"):
                return None
            escaped = "".join("\\" + c if c in "\\[]^" else c for c in body)
            out.append(f"[{'^' if negate else ''}{escaped}]")
            i = end
        else:
            out.append(re.escape(char))
        i += 1
    try:
        return re.compile("".join(out))
    except re.error:  # a range out of order, as Go refuses it
        return None
