"""A scenario's values: where each was written (`At`, for the error messages) and the strict
checkers that read them (a string is not a number, a boolean not a number, a number not a
string). Pure; sim/scenario.py builds the format from them.
"""

import difflib
import math
import re
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any, Final, TypeVar

from .node import Range

LARGEST: Final = 10**15
"""Upper bound of every number: far above any real reading, and finite in every sum the
simulated node makes of them."""

NO_TEXT: Final = "expected a string, got nothing (null, ~ or no value)"
"""A text value that is YAML's null."""

T = TypeVar("T")


class ScenarioError(ValueError):
    pass


# --- where a value was written ----------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class At:
    """A place in the scenario, `node.yaml:4: gpus[0].utilization` (no line for data that did
    not come from a file)."""

    file: str
    key: str = ""
    line: int | None = None

    def __str__(self) -> str:
        head = self.file if self.line is None else f"{self.file}:{self.line}"
        return f"{head}: {self.key}" if self.key else head

    def error(self, problem: str) -> ScenarioError:
        return ScenarioError(f"{self}: {problem}")

    def _named(self, suffix: str, line: int | None) -> "At":
        key = f"{self.key}{suffix}" if self.key or not suffix.startswith(".") else suffix[1:]
        return At(self.file, key, self.line if line is None else line)

    def field(self, spec: Mapping[str, Any], name: str) -> "At":
        """spec[name], at the value's line (the mapping's when the key is absent)."""
        lines = getattr(spec, "lines", {})
        return self._named(f".{name}", lines[name][1] if name in lines else None)

    def item(self, seq: Sequence[Any], n: int) -> "At":
        lines = getattr(seq, "lines", ())
        return self._named(f"[{n}]", lines[n] if n < len(lines) else None)

    def entry(self, spec: Mapping[str, Any], name: str) -> "At":
        """A free-form key (a label), quoted."""
        lines = getattr(spec, "lines", {})
        return self._named(f"[{name!r}]", lines[name][1] if name in lines else None)


def line_of(raw: Any) -> int | None:
    line = getattr(raw, "line", None)
    return line if isinstance(line, int) else None


# --- values -----------------------------------------------------------------------------------


def show(raw: Any) -> str:
    """The value for a message, short: a list may be long, and repr of an integer of more
    than 4300 digits raises."""
    try:
        text = repr(raw)
    except ValueError:
        return f"a very long {type(raw).__name__}"
    return text if len(text) <= 60 else text[:59] + "…"


def _kind(raw: Any) -> str:
    if raw is None:
        return "nothing"
    if isinstance(raw, list):
        return "a list"
    if isinstance(raw, str):
        return "a string"
    return "a number" if isinstance(raw, int | float) and not isinstance(raw, bool) else show(raw)


def _is_number(raw: Any) -> bool:
    return (isinstance(raw, int | float) and not isinstance(raw, bool)
            and math.isfinite(raw) and 0 <= raw <= LARGEST)


def as_range(raw: Any, at: At) -> Range:
    if _is_number(raw):
        return (float(raw), float(raw))
    if isinstance(raw, list) and len(raw) == 2 and all(_is_number(v) for v in raw):
        low, high = float(raw[0]), float(raw[1])
        if low <= high:
            return (low, high)
    raise at.error("expected a number or [low, high] with low <= high (from 0 to "
                   f"{LARGEST:.0e}), got {show(raw)}")


def as_ratio(raw: Any, at: At) -> Range:
    value = as_range(raw, at)
    if value[1] > 1:
        raise at.error(f"a ratio from 0 to 1, got {value[1]}")
    return value


def as_percent(raw: Any, at: At) -> Range:
    value = as_range(raw, at)
    if value[1] > 100:
        raise at.error(f"a percentage from 0 to 100, got {value[1]}")
    return value


def as_number(raw: Any, at: At) -> float:
    if _is_number(raw):
        return float(raw)
    raise at.error(f"expected a number from 0 to {LARGEST:.0e}, got {show(raw)}")


def as_int(raw: Any, at: At, high: int = LARGEST) -> int:
    if not isinstance(raw, int) or isinstance(raw, bool) or raw < 0:
        raise at.error(f"expected a non-negative integer, got {show(raw)}")
    if raw > high:
        raise at.error(f"{show(raw)} is too large (at most {high})")
    return raw


def as_bool(raw: Any, at: At) -> bool:
    if isinstance(raw, bool):
        return raw
    raise at.error(f"expected true or false, got {show(raw)}")


def as_text(raw: Any, at: At, *, empty: bool = False) -> str:
    if raw is None:
        raise at.error(NO_TEXT)
    if not isinstance(raw, str):
        # YAML reads 550.120 as the number 550.12: quoting keeps what was written.
        hint = " (quote it)" if isinstance(raw, int | float) else ""
        raise at.error(f"expected a string, got {show(raw)}{hint}")
    if not raw and not empty:
        raise at.error("expected a non-empty string")
    return raw


def as_pod_ref(raw: Any, at: At) -> tuple[str, str]:
    namespace, slash, name = as_text(raw, at).partition("/")
    if not slash or not namespace or not name:
        raise at.error(f"expected NAMESPACE/POD, got {show(raw)}")
    return (namespace, name)


_USER = re.compile(r"[a-z_][a-z0-9_-]{0,31}")


def as_user(raw: Any, at: At) -> str:
    """A Unix user name as useradd takes it (it becomes a passwd line and a label value)."""
    name = as_text(raw, at)
    if not _USER.fullmatch(name):
        raise at.error(f"expected a user name (a-z, 0-9, _ and -), got {show(raw)}")
    return name


def as_list(raw: Any, at: At) -> Sequence[Any]:
    """A list; an absent (or empty, `mig:`) one is empty."""
    if raw is None:
        return ()
    if isinstance(raw, list):
        return raw
    raise at.error(f"expected a list, got {show(raw)}")


def as_mapping(raw: Any, at: At) -> Mapping[str, Any]:
    if not isinstance(raw, Mapping):
        raise at.error(f"expected a mapping, got {_kind(raw)}")
    return raw


def as_labels(raw: Any, at: At) -> dict[str, str]:
    spec = as_mapping(raw, at)
    labels: dict[str, str] = {}
    for name, value in spec.items():
        if not isinstance(name, str):
            raise at.error(f"a label name is a string, got {show(name)}")
        labels[name] = as_text(value, at.entry(spec, name), empty=True)
    return labels


def opt(spec: Mapping[str, Any], at: At, name: str, default: T,
        read: Callable[[Any, At], T]) -> T:
    """spec[name] read by `read`; `default` when absent or null (`key:` with no value)."""
    raw = spec.get(name)
    return default if raw is None else read(raw, at.field(spec, name))


def refuse_null(spec: Mapping[str, Any], at: At, name: str) -> None:
    """A text key written with no value (`model:`, `model: null`, `model: ~`) is refused as any
    other wrong type (issue 26): YAML's null is not text, and taking it for "absent" would
    serve a default that the file seems to replace."""
    if name in spec and spec[name] is None:
        raise at.field(spec, name).error(NO_TEXT)


def opt_text(spec: Mapping[str, Any], at: At, name: str, default: T,
             read: Callable[[Any, At], T]) -> T:
    """A text key read by `read` (as_text, as_pod_ref); `default` only when absent."""
    refuse_null(spec, at, name)
    return opt(spec, at, name, default, read)


def check_keys(spec: Mapping[str, Any], allowed: frozenset[str], at: At) -> None:
    """Name every unknown key, with the known one it was probably meant to be, at the line of
    the first."""
    unknown = sorted(str(k) for k in set(spec) - allowed)
    if not unknown:
        return
    hints = [f"{k!r} (did you mean {close[0]!r}?)" if close else repr(k)
             for k in unknown for close in [difflib.get_close_matches(k, allowed, n=1)]]
    lines = getattr(spec, "lines", {})
    key_lines = [lines[k][0] for k in unknown if k in lines]
    where = At(at.file, at.key, min(key_lines) if key_lines else at.line)
    raise where.error(f"unknown key{'s' if len(unknown) > 1 else ''} "
                      f"{', '.join(hints)}; known: {', '.join(sorted(allowed))}")
