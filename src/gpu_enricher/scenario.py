"""The simulated node's description: the built-in demo node and `--simulate FILE.yaml`.

Parsing is pure (`parse_scenario` takes the decoded YAML); errors name the file, the line where
the YAML was read from a file, and the key: `node.yaml:4: gpus[0].utilization: …`. Types are
strict (a string is not a number, a boolean not a number, a number not a string), and nothing
may appear twice where it would give two series one identity. The format is documented in
docs/simulate.md.
"""

import difflib
import math
import os
import re
import stat
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from importlib import resources
from pathlib import Path
from typing import Any, Final, TypeVar

import yaml
from yaml.composer import ComposerError
from yaml.constructor import ConstructorError
from yaml.nodes import MappingNode, Node, ScalarNode, SequenceNode

from .model import PodAssignment
from .sim_model import (
    MIG_COMPUTE_SLICES,
    PID_MAX,
    Range,
    Scenario,
    SimGpu,
    SimInstance,
    SimPod,
    SimProcess,
    default_uuid,
    has_gpm,
    mig_uuid,
    pod_uid,
)

MAX_BYTES: Final = 1 << 20
"""A scenario file's size limit: a real one is a few KiB."""
MAX_DEPTH: Final = 16
"""Nesting limit: the format nests 6 deep; the limit keeps the composer's recursion shallow."""
LARGEST: Final = 10**15
"""Upper bound of every number: far above any real reading, and finite in every sum the
simulated node makes of them."""

T = TypeVar("T")


class ScenarioError(ValueError):
    pass


# --- reading the file -------------------------------------------------------------------------

_TAG = "tag:yaml.org,2002:"
_SCALAR_TAGS: Final = frozenset(_TAG + t for t in ("str", "int", "float", "bool", "null"))


class _Map(dict[str, Any]):
    """A decoded mapping that remembers its line and each key's and value's line."""

    line: int
    lines: dict[str, tuple[int, int]]


class _Seq(list[Any]):
    """A decoded sequence that remembers its line and each item's line."""

    line: int
    lines: list[int]


class _Loader(yaml.SafeLoader):
    """PyYAML's safe loader without what a scenario never needs and an attacker would use:
    anchors and aliases (a billion laughs expands 9 aliases per level into gigabytes), tags,
    deep nesting (the composer recurses per level). It decodes to `_Map`/`_Seq`, which keep
    their lines for the error messages, and refuses duplicate keys (PyYAML keeps the last)."""

    def __init__(self, stream: str) -> None:
        super().__init__(stream)
        self._depth = 0

    def compose_node(self, parent: Node | None, index: int) -> Node | None:
        # The pure-Python parser's events (with yaml.error.Mark marks); untyped in the stubs.
        event: Any = self.peek_event()  # type: ignore[no-untyped-call]
        if isinstance(event, yaml.AliasEvent) or getattr(event, "anchor", None) is not None:
            raise ComposerError(None, None, "anchors and aliases are not allowed in a scenario",
                                event.start_mark)
        if self._depth >= MAX_DEPTH:
            raise ComposerError(None, None, f"nested more than {MAX_DEPTH} levels deep",
                                event.start_mark)
        self._depth += 1
        try:
            return super().compose_node(parent, index)
        finally:
            self._depth -= 1

    def decode(self, node: Node) -> Any:
        """The node as plain data: str, int, float, bool, None, `_Map` and `_Seq`."""
        if isinstance(node, ScalarNode):
            return self._scalar(node)
        if isinstance(node, SequenceNode) and node.tag == _TAG + "seq":
            seq = _Seq(self.decode(item) for item in node.value)
            seq.line, seq.lines = _line(node), [_line(item) for item in node.value]
            return seq
        if isinstance(node, MappingNode) and node.tag == _TAG + "map":
            return self._mapping(node)
        raise ConstructorError(None, None, f"tag {_short_tag(node.tag)!r} is not allowed in a "
                               "scenario", node.start_mark)

    def _mapping(self, node: MappingNode) -> _Map:
        result = _Map()
        result.line, result.lines = _line(node), {}
        for key_node, value_node in node.value:
            # A key is its text: YAML 1.1 would make `on:` a boolean and `1:` an integer.
            if not isinstance(key_node, ScalarNode) or key_node.tag not in _SCALAR_TAGS | {
                    _TAG + "merge"}:
                raise ConstructorError(None, None, "a key must be plain text",
                                       key_node.start_mark)
            key = str(key_node.value)
            if key in result:
                raise ConstructorError(None, None, f"duplicate key {key!r} (first on line "
                                       f"{result.lines[key][0]})", key_node.start_mark)
            result[key] = self.decode(value_node)
            result.lines[key] = (_line(key_node), _line(value_node))
        return result

    def _scalar(self, node: ScalarNode) -> Any:
        if node.tag not in _SCALAR_TAGS:
            raise ConstructorError(None, None, f"tag {_short_tag(node.tag)!r} is not allowed in "
                                   "a scenario", node.start_mark)
        kind = node.tag.removeprefix(_TAG)
        try:
            return self.yaml_constructors[node.tag](self, node)
        # PyYAML's constructors raise these on explicitly tagged junk (`!!int ""`, `!!bool x`)
        # and on integers longer than Python converts (4300 digits).
        except (ValueError, OverflowError, LookupError, TypeError):
            raise ConstructorError(None, None, f"cannot read {_show(node.value)} as {kind}",
                                   node.start_mark) from None


# A date-like plain scalar stays a string: the format has no dates, and PyYAML's timestamp
# constructor raises ValueError on one like 2001-02-30. (Set on the class, as PyYAML's own
# add_implicit_resolver does.)
_Loader.yaml_implicit_resolvers = {
    first: [(tag, regexp) for tag, regexp in resolvers if tag != _TAG + "timestamp"]
    for first, resolvers in yaml.SafeLoader.yaml_implicit_resolvers.items()
}


def _line(node: Node) -> int:
    return int(node.start_mark.line) + 1


def _short_tag(tag: str) -> str:
    return "!!" + tag.removeprefix(_TAG) if tag.startswith(_TAG) else tag


def _position(text: str, index: int) -> tuple[int, int]:
    """1-based line and column of text[index], with the line breaks PyYAML counts."""
    line, start = 1, 0
    for i in range(min(index, len(text))):
        char = text[i]
        if char in "\n\x85\u2028\u2029" or (char == "\r" and text[i + 1:i + 2] != "\n"):
            line, start = line + 1, i + 1
    return line, index - start + 1


def _read(path: Path) -> bytes:
    """The file's bytes: a regular file (a FIFO would block the start, a device never end) of at
    most MAX_BYTES."""
    try:
        # O_NONBLOCK: opening a FIFO for reading would otherwise wait for a writer.
        fd = os.open(path, os.O_RDONLY | os.O_NONBLOCK | os.O_CLOEXEC)
    except OSError as exc:
        raise ScenarioError(f"{path}: cannot read scenario: {exc.strerror}") from None
    try:
        if not stat.S_ISREG(os.fstat(fd).st_mode):
            raise ScenarioError(f"{path}: not a regular file")
        with open(fd, "rb", closefd=False) as file:
            data = file.read(MAX_BYTES + 1)  # +1: the file may have grown since it was opened
    except OSError as exc:
        raise ScenarioError(f"{path}: cannot read scenario: {exc.strerror}") from None
    finally:
        os.close(fd)
    if len(data) > MAX_BYTES:
        raise ScenarioError(f"{path}: larger than {MAX_BYTES >> 20} MiB")
    return data


def _yaml_problem(exc: yaml.MarkedYAMLError) -> str:
    problem = str(exc.problem or exc.context or "parse error")
    if exc.context and problem.startswith("but "):  # "expected a single document …, but found"
        problem = f"{exc.context}, {problem}"
    return " ".join(problem.split())


def _decode_yaml(text: str, name: str) -> Any:
    """The text's one document as `_Map`/`_Seq`/scalars; a ScenarioError with its position."""
    try:
        loader = _Loader(text)
    except yaml.reader.ReaderError as exc:  # the reader checks every character up front
        line, column = _position(text, exc.position)
        raise ScenarioError(f"{name}:{line}:{column}: invalid YAML: unacceptable character "
                            f"#x{exc.character:04x}: {exc.reason}") from None
    try:
        node = loader.get_single_node()
        return None if node is None else loader.decode(node)
    except yaml.MarkedYAMLError as exc:
        mark = exc.problem_mark
        where = f"{name}:{mark.line + 1}:{mark.column + 1}" if mark is not None else name
        raise ScenarioError(f"{where}: invalid YAML: {_yaml_problem(exc)}") from None
    except yaml.YAMLError as exc:
        raise ScenarioError(f"{name}: invalid YAML: {' '.join(str(exc).split())}") from None
    finally:
        loader.dispose()


# --- where a value was written ----------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class _At:
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

    def _named(self, suffix: str, line: int | None) -> "_At":
        key = f"{self.key}{suffix}" if self.key or not suffix.startswith(".") else suffix[1:]
        return _At(self.file, key, self.line if line is None else line)

    def field(self, spec: Mapping[str, Any], name: str) -> "_At":
        """spec[name], at the value's line (the mapping's when the key is absent)."""
        lines = getattr(spec, "lines", {})
        return self._named(f".{name}", lines[name][1] if name in lines else None)

    def item(self, seq: Sequence[Any], n: int) -> "_At":
        lines = getattr(seq, "lines", ())
        return self._named(f"[{n}]", lines[n] if n < len(lines) else None)

    def entry(self, spec: Mapping[str, Any], name: str) -> "_At":
        """A free-form key (a label), quoted."""
        lines = getattr(spec, "lines", {})
        return self._named(f"[{name!r}]", lines[name][1] if name in lines else None)


def _line_of(raw: Any) -> int | None:
    line = getattr(raw, "line", None)
    return line if isinstance(line, int) else None


# --- values -----------------------------------------------------------------------------------


def _show(raw: Any) -> str:
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
    return "a number" if isinstance(raw, int | float) and not isinstance(raw, bool) else _show(raw)


def _is_number(raw: Any) -> bool:
    return (isinstance(raw, int | float) and not isinstance(raw, bool)
            and math.isfinite(raw) and 0 <= raw <= LARGEST)


def _range(raw: Any, at: _At) -> Range:
    if _is_number(raw):
        return (float(raw), float(raw))
    if isinstance(raw, list) and len(raw) == 2 and all(_is_number(v) for v in raw):
        low, high = float(raw[0]), float(raw[1])
        if low <= high:
            return (low, high)
    raise at.error("expected a number or [low, high] with low <= high (from 0 to "
                   f"{LARGEST:.0e}), got {_show(raw)}")


def _number(raw: Any, at: _At) -> float:
    if _is_number(raw):
        return float(raw)
    raise at.error(f"expected a number from 0 to {LARGEST:.0e}, got {_show(raw)}")


def _int(raw: Any, at: _At, high: int = LARGEST) -> int:
    if not isinstance(raw, int) or isinstance(raw, bool) or raw < 0:
        raise at.error(f"expected a non-negative integer, got {_show(raw)}")
    if raw > high:
        raise at.error(f"{_show(raw)} is too large (at most {high})")
    return raw


def _bool(raw: Any, at: _At) -> bool:
    if isinstance(raw, bool):
        return raw
    raise at.error(f"expected true or false, got {_show(raw)}")


def _text(raw: Any, at: _At, *, empty: bool = False) -> str:
    if not isinstance(raw, str):
        # YAML reads 550.120 as the number 550.12: quoting keeps what was written.
        hint = " (quote it)" if isinstance(raw, int | float) else ""
        raise at.error(f"expected a string, got {_show(raw)}{hint}")
    if not raw and not empty:
        raise at.error("expected a non-empty string")
    return raw


def _list(raw: Any, at: _At) -> Sequence[Any]:
    """A list; an absent (or empty, `mig:`) one is empty."""
    if raw is None:
        return ()
    if isinstance(raw, list):
        return raw
    raise at.error(f"expected a list, got {_show(raw)}")


def _mapping(raw: Any, at: _At) -> Mapping[str, Any]:
    if not isinstance(raw, Mapping):
        raise at.error(f"expected a mapping, got {_kind(raw)}")
    return raw


def _opt(spec: Mapping[str, Any], at: _At, name: str, default: T,
         read: Callable[[Any, _At], T]) -> T:
    """spec[name] read by `read`; `default` when absent or null (`key:` with no value)."""
    raw = spec.get(name)
    return default if raw is None else read(raw, at.field(spec, name))


def _check_keys(spec: Mapping[str, Any], allowed: frozenset[str], at: _At) -> None:
    """Name every unknown key, with the known one it was probably meant to be, at the line of
    the first."""
    unknown = sorted(str(k) for k in set(spec) - allowed)
    if not unknown:
        return
    hints = [f"{k!r} (did you mean {close[0]!r}?)" if close else repr(k)
             for k in unknown for close in [difflib.get_close_matches(k, allowed, n=1)]]
    lines = getattr(spec, "lines", {})
    key_lines = [lines[k][0] for k in unknown if k in lines]
    where = _At(at.file, at.key, min(key_lines) if key_lines else at.line)
    raise where.error(f"unknown key{'s' if len(unknown) > 1 else ''} "
                      f"{', '.join(hints)}; known: {', '.join(sorted(allowed))}")


# --- the format -------------------------------------------------------------------------------

_GPU_KEYS: Final = frozenset({
    "model", "uuid", "pci_bus_id", "memory_mib", "utilization", "memory_used_mib",
    "power_watts", "temperature", "sm_clock_mhz", "mem_clock_mhz", "lost", "mig", "processes",
    "gpm", "xids",
})
_POD_KEYS: Final = frozenset({
    "namespace", "pod", "container", "resource", "gpus", "replica", "mig", "device_ids", "uid",
    "labels", "claim",
})
_INSTANCE_KEYS: Final = frozenset({"gi", "profile", "memory_mib", "memory_used_mib", "activity"})
_PROCESS_KEYS: Final = frozenset({"pid", "used_memory_mib", "gi", "name", "pod", "container",
                                  "sm_utilization"})
_TOP_KEYS: Final = frozenset({"seed", "gpus", "driver_version", "period_seconds", "pods"})

# A GPU instance profile: compute slices, then memory (1g.10gb, 1g.10gb+me, 3g.40gb).
_PROFILE = re.compile(r"([1-9])g\.[0-9]+gb\S*")


def _ratio(raw: Any, at: _At) -> Range:
    value = _range(raw, at)
    if value[1] > 1:
        raise at.error(f"a ratio from 0 to 1, got {value[1]}")
    return value


def _percent(raw: Any, at: _At) -> Range:
    value = _range(raw, at)
    if value[1] > 100:
        raise at.error(f"a percentage from 0 to 100, got {value[1]}")
    return value


def _gpu(raw: Any, index: int, seed: int, at: _At) -> tuple[SimGpu, tuple[_At, ...]]:
    """The GPU and where each of its processes was written."""
    spec = _mapping(raw, at)
    _check_keys(spec, _GPU_KEYS, at)
    model = _opt(spec, at, "model", "NVIDIA H100 80GB HBM3", _text)
    memory = _opt(spec, at, "memory_mib", 81559, _int)
    instances = _instances(spec, at, memory)
    processes, process_ats = _processes(spec, at, instances)
    xids_at = at.field(spec, "xids")
    xids = _list(spec.get("xids"), xids_at)
    gpu = SimGpu(
        index=index,
        model=model,
        uuid=_opt(spec, at, "uuid", default_uuid(seed, index), _text),
        pci_bus_id=_opt(spec, at, "pci_bus_id", f"00000000:{0x18 + 0x10 * index:02X}:00.0",
                        _text),
        memory_mib=memory,
        utilization=_opt(spec, at, "utilization", (0.0, 0.0), _percent),
        memory_used_mib=_opt(spec, at, "memory_used_mib", (0.0, 0.0), _range),
        power_watts=_opt(spec, at, "power_watts", (60.0, 70.0), _range),
        temperature=_opt(spec, at, "temperature", (30.0, 35.0), _range),
        sm_clock_mhz=_opt(spec, at, "sm_clock_mhz", (1410.0, 1410.0), _range),
        mem_clock_mhz=_opt(spec, at, "mem_clock_mhz", 2619, _int),
        lost=_opt(spec, at, "lost", False, _bool),
        instances=instances,
        processes=processes,
        gpm=_opt(spec, at, "gpm", has_gpm(model), _bool),
        xids=tuple(_int(x, xids_at.item(xids, n)) for n, x in enumerate(xids)),
    )
    return gpu, process_ats


def _instances(spec: Mapping[str, Any], at: _At, gpu_memory: int) -> tuple[SimInstance, ...]:
    """The GPU instances: distinct ids (two with one id would be two series of one instance),
    and together no more compute slices or memory than the GPU has."""
    mig_at = at.field(spec, "mig")
    mig = _list(spec.get("mig"), mig_at)
    instances: list[SimInstance] = []
    first: dict[int, str] = {}
    for n, raw in enumerate(mig):
        item_at = mig_at.item(mig, n)
        inst = _instance(raw, item_at)
        if inst.gpu_instance_id in first:
            raise item_at.field(raw, "gi").error(
                f"GPU instance {inst.gpu_instance_id} is already {first[inst.gpu_instance_id]}")
        first[inst.gpu_instance_id] = item_at.key
        instances.append(inst)
    slices = sum(_slices(inst.profile) for inst in instances)
    if slices > MIG_COMPUTE_SLICES:
        raise mig_at.error(f"the GPU instances take {slices} compute slices; a GPU has "
                           f"{MIG_COMPUTE_SLICES}")
    memory = sum(inst.memory_mib for inst in instances)
    if memory > gpu_memory:
        raise mig_at.error(f"the GPU instances hold {memory} MiB; the GPU has {gpu_memory}")
    return tuple(instances)


def _slices(profile: str) -> int:
    """The profile's compute slices: the 3 of 3g.40gb (parse_scenario checked the form)."""
    match = _PROFILE.fullmatch(profile)
    return int(match.group(1)) if match else 0


def _instance(raw: Any, at: _At) -> SimInstance:
    spec = _mapping(raw, at)
    _check_keys(spec, _INSTANCE_KEYS, at)
    profile_at = at.field(spec, "profile")
    profile = spec.get("profile")
    if profile is None:
        raise profile_at.error("required (e.g. 1g.10gb)")
    if not isinstance(profile, str) or not _PROFILE.fullmatch(profile):
        raise profile_at.error(f"expected a MIG profile such as 1g.10gb, got {_show(profile)}")
    return SimInstance(
        gpu_instance_id=_int(spec.get("gi"), at.field(spec, "gi")),
        profile=profile,
        memory_mib=_opt(spec, at, "memory_mib", 9984, _int),
        memory_used_mib=_opt(spec, at, "memory_used_mib", (0.0, 0.0), _range),
        activity=_opt(spec, at, "activity", (0.0, 0.0), _ratio),
    )


def _processes(spec: Mapping[str, Any], at: _At, instances: tuple[SimInstance, ...]
               ) -> tuple[tuple[SimProcess, ...], tuple[_At, ...]]:
    """The GPU's processes (one entry per pid: NVML lists a process once per GPU), each on one
    of its GPU instances when the GPU is in MIG mode, and where each was written."""
    list_at = at.field(spec, "processes")
    raws = _list(spec.get("processes"), list_at)
    gis = {inst.gpu_instance_id for inst in instances}
    processes: list[SimProcess] = []
    ats: list[_At] = []
    first: dict[int, str] = {}
    for n, raw in enumerate(raws):
        item_at = list_at.item(raws, n)
        proc = _process(raw, item_at)
        gi_at = item_at.field(raw, "gi")
        if proc.pid in first:
            raise item_at.field(raw, "pid").error(f"pid {proc.pid} is already {first[proc.pid]}")
        if proc.gpu_instance_id is None and gis:
            raise gi_at.error("required on a GPU in MIG mode")
        if proc.gpu_instance_id is not None and proc.gpu_instance_id not in gis:
            raise gi_at.error(f"no GPU instance {proc.gpu_instance_id} on this GPU"
                              + ("" if gis else " (it is not in MIG mode)"))
        first[proc.pid] = item_at.key
        processes.append(proc)
        ats.append(item_at)
    return tuple(processes), tuple(ats)


def _pod_ref(raw: Any, at: _At) -> tuple[str, str]:
    namespace, slash, name = _text(raw, at).partition("/")
    if not slash or not namespace or not name:
        raise at.error(f"expected NAMESPACE/POD, got {_show(raw)}")
    return (namespace, name)


def _process(raw: Any, at: _At) -> SimProcess:
    spec = _mapping(raw, at)
    _check_keys(spec, _PROCESS_KEYS, at)
    gi = spec.get("gi")
    return SimProcess(
        pid=_int(spec.get("pid"), at.field(spec, "pid"), PID_MAX),
        used_memory_mib=_opt(spec, at, "used_memory_mib", 0, _int),
        gpu_instance_id=None if gi is None else _int(gi, at.field(spec, "gi")),
        name=_opt(spec, at, "name", "python", _text)[:15],  # comm holds 15 characters
        pod=_opt(spec, at, "pod", None, _pod_ref),
        container=_opt(spec, at, "container", None, _text),
        sm_utilization=_opt(spec, at, "sm_utilization", (0.0, 0.0), _ratio),
    )


def _gpu_index(raw: Any, gpus: tuple[SimGpu, ...], at: _At) -> int:
    if isinstance(raw, int) and not isinstance(raw, bool) and 0 <= raw < len(gpus):
        return raw
    raise at.error(f"no GPU {_show(raw)} in this scenario")


def _mig_pair(raw: Any, gpus: tuple[SimGpu, ...], at: _At) -> tuple[int, int]:
    if isinstance(raw, list) and len(raw) == 2 and all(
            isinstance(v, int) and not isinstance(v, bool) for v in raw):
        index, gi = raw
        if 0 <= index < len(gpus) and gi in {i.gpu_instance_id for i in gpus[index].instances}:
            return (index, gi)
    raise at.error(f"no GPU instance {_show(raw)} in this scenario")


def _labels(raw: Any, at: _At) -> dict[str, str]:
    spec = _mapping(raw, at)
    labels: dict[str, str] = {}
    for name, value in spec.items():
        if not isinstance(name, str):
            raise at.error(f"a label name is a string, got {_show(name)}")
        labels[name] = _text(value, at.entry(spec, name), empty=True)
    return labels


def _pod(raw: Any, gpus: tuple[SimGpu, ...], at: _At) -> tuple[PodAssignment, SimPod]:
    """A container holding devices: `gpus: [0]` (with `replica: N` for time-slicing),
    `mig: [[gpu, gi]]`, or literal `device_ids` as a kubelet would report them; and the pod as
    the Kubernetes API describes it."""
    spec = _mapping(raw, at)
    _check_keys(spec, _POD_KEYS, at)
    namespace, pod, container = (_opt(spec, at, key, "", _text) for key in (
        "namespace", "pod", "container"))
    for key, value in (("namespace", namespace), ("pod", pod), ("container", container)):
        if not value:
            raise at.field(spec, key).error("required")
    replica = _opt(spec, at, "replica", None, _int)
    suffix = "" if replica is None else f"::{replica}"
    ids_at, gpus_at, mig_at = (at.field(spec, k) for k in ("device_ids", "gpus", "mig"))
    ids, indices, pairs = (_list(spec.get(k), a) for k, a in (
        ("device_ids", ids_at), ("gpus", gpus_at), ("mig", mig_at)))
    device_ids = [_text(d, ids_at.item(ids, n)) for n, d in enumerate(ids)]
    held = [_gpu_index(i, gpus, gpus_at.item(indices, n)) for n, i in enumerate(indices)]
    slices = [_mig_pair(p, gpus, mig_at.item(pairs, n)) for n, p in enumerate(pairs)]
    device_ids += [gpus[i].uuid + suffix for i in held]
    device_ids += [mig_uuid(gpus[g].uuid, gi) + suffix for g, gi in slices]
    default_resource = "nvidia.com/gpu"
    if slices and not held:
        g, gi = slices[0]
        profile = next(i.profile for i in gpus[g].instances if i.gpu_instance_id == gi)
        default_resource = f"nvidia.com/mig-{profile}"
    claim = spec.get("claim")
    if claim is not None and (not isinstance(claim, str) or not claim or ids):
        raise at.field(spec, "claim").error("a claim name, with gpus or mig (not device_ids)")
    devices: tuple[tuple[int, int | None], ...] = (
        () if claim is None else (*((i, None) for i in held), *slices))
    assignment = PodAssignment(namespace, pod, container,
                               _opt(spec, at, "resource", default_resource, _text),
                               tuple(device_ids))
    return assignment, SimPod(namespace, pod, container,
                              _opt(spec, at, "uid", pod_uid(namespace, pod), _text),
                              _opt(spec, at, "labels", {}, _labels), claim, devices)


def _check_gpus(gpus: tuple[SimGpu, ...], ats: list[_At], specs: Sequence[Any]) -> None:
    """One GPU per UUID and per bus id: the UUID is the kubelet's device id and a label."""
    uuids: dict[str, str] = {}
    buses: dict[str, str] = {}
    for gpu, at, spec in zip(gpus, ats, specs, strict=True):
        for seen, value, key in ((uuids, gpu.uuid, "uuid"), (buses, gpu.pci_bus_id, "pci_bus_id")):
            if value in seen:
                raise at.field(spec, key).error(f"{value!r} is already {seen[value]}")
            seen[value] = at.key


def _check_processes(gpus: tuple[SimGpu, ...], process_ats: list[tuple[_At, ...]],
                     pods: tuple[SimPod, ...]) -> None:
    """A process names a pod (and container) of `pods:`; a pid on several GPUs is one process."""
    containers: dict[tuple[str, str], list[str]] = {}
    for spec in pods:
        containers.setdefault((spec.namespace, spec.pod), []).append(spec.container)
    first: dict[int, tuple[SimProcess, str]] = {}
    for gpu, ats in zip(gpus, process_ats, strict=True):
        for proc, at in zip(gpu.processes, ats, strict=True):
            identity = (proc.name, proc.pod, proc.container)
            if proc.pid in first and identity != (
                    (seen := first[proc.pid][0]).name, seen.pod, seen.container):
                raise at.error(f"pid {proc.pid} is {first[proc.pid][1]} with another name or pod")
            first.setdefault(proc.pid, (proc, at.key))
            if proc.pod is None:
                continue
            known = containers.get(proc.pod)
            if known is None:
                raise at.error(f"pod: no pod {'/'.join(proc.pod)} in pods:")
            if proc.container is not None and proc.container not in known:
                raise at.error(f"container: pod {'/'.join(proc.pod)} has no container "
                               f"{proc.container!r}; it has {', '.join(known)}")


def parse_scenario(raw: Any, path: str) -> Scenario:
    """The scenario of decoded YAML (`_Map`/`_Seq` from a file carry lines for the errors)."""
    at = _At(path, "", _line_of(raw))
    top = _mapping(raw, at)
    _check_keys(top, _TOP_KEYS, at)  # first: a misspelt `gpus` is named, not "missing"
    seed = _opt(top, at, "seed", 1, _int)
    gpus_at = at.field(top, "gpus")
    gpus_raw = top.get("gpus")
    if not isinstance(gpus_raw, list) or not gpus_raw:
        raise gpus_at.error("expected a non-empty list")
    gpu_ats = [gpus_at.item(gpus_raw, i) for i in range(len(gpus_raw))]
    parsed = [_gpu(g, i, seed, gpu_ats[i]) for i, g in enumerate(gpus_raw)]
    gpus = tuple(gpu for gpu, _ in parsed)
    _check_gpus(gpus, gpu_ats, gpus_raw)
    period = _opt(top, at, "period_seconds", 120.0, _number)
    if period < 1:
        raise at.field(top, "period_seconds").error(f"at least 1 (seconds), got {period}")
    pods_at = at.field(top, "pods")
    pods_raw = _list(top.get("pods"), pods_at)
    pods = [_pod(p, gpus, pods_at.item(pods_raw, i)) for i, p in enumerate(pods_raw)]
    specs = tuple(spec for _, spec in pods)
    _check_processes(gpus, [ats for _, ats in parsed], specs)
    return Scenario(
        gpus=gpus,
        seed=seed,
        driver_version=_opt(top, at, "driver_version", "580.105.08", _text),
        period_seconds=period,
        # The kubelet lists device-plugin devices; claimed ones come as dynamic_resources.
        pods=tuple(p for p, spec in pods if p.device_ids and spec.claim is None),
        pod_specs=specs,
    )


def load_scenario(path: Path) -> Scenario:
    """The scenario file's node; every problem is one ScenarioError line naming the file."""
    data = _read(path)
    try:
        text = data.decode("utf-8")
    except UnicodeDecodeError as exc:
        before = data[:exc.start].decode("utf-8")  # valid up to the bad byte
        line, column = _position(before, len(before))
        raise ScenarioError(f"{path}:{line}:{column}: invalid YAML: not UTF-8 text "
                            f"(byte 0x{data[exc.start]:02x})") from None
    return parse_scenario(_decode_yaml(text, str(path)), str(path))


def builtin_scenario() -> Scenario:
    text = resources.files("gpu_enricher").joinpath("builtin-scenario.yaml").read_text("utf-8")
    return parse_scenario(_decode_yaml(text, "<built-in scenario>"), "<built-in scenario>")
