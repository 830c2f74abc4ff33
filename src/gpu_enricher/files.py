"""Reading a configuration file an operator points us at (counters, scenario, web config): a
regular file of bounded size, read without ever blocking, and YAML without what a small config
file never needs and an attacker would use.

A FIFO would hang the start until a writer came, `/dev/zero` would read without end (issue 13,
defect 8). PyYAML's safe loader still takes anchors and aliases (a billion laughs expands 9
aliases per level into gigabytes) and deep nesting (the composer recurses per level), and reads
a date-like plain scalar as a date (the files have no dates, and PyYAML's timestamp constructor
raises on 2001-02-30): `StrictLoader` refuses the first two and keeps the third a string. The
web-config loader builds on it; `PositionedLoader` decodes to plain values that remember where
they were written (the scenario and dcgm-exporter's config file name `FILE:LINE…` in errors).
`stamp` and `fingerprint` tell when such a file changed (reload.py)."""

import hashlib
import os
import stat
from collections.abc import Callable
from pathlib import Path
from typing import Any, ClassVar, Final

import yaml
from yaml.composer import ComposerError
from yaml.constructor import ConstructorError
from yaml.nodes import MappingNode, Node, ScalarNode, SequenceNode


class FileReadError(ValueError):
    """The file cannot be used; the message starts with its path."""


def _kind(mode: int) -> str | None:
    """What a non-regular file is, for the message; None for a regular file."""
    for test, kind in ((stat.S_ISREG, None), (stat.S_ISDIR, "directory"),
                       (stat.S_ISFIFO, "FIFO (named pipe)"), (stat.S_ISCHR, "character device"),
                       (stat.S_ISBLK, "block device"), (stat.S_ISSOCK, "socket")):
        if test(mode):
            return kind
    return "special file"


def _check_regular(path: Path, mode: int) -> None:
    kind = _kind(mode)
    if kind is not None:
        raise FileReadError(f"{path}: not a regular file but a {kind}")


def read_regular_file(path: Path, limit: int, what: str) -> bytes:
    """The file's bytes, at most `limit` (symlinks followed, as a ConfigMap mount needs);
    `what` names the file in messages ("counters file")."""
    def too_large(size: str) -> FileReadError:
        return FileReadError(
            f"{path}: {what} larger than the {limit / (1 << 20):g} MiB limit ({limit} bytes): "
            f"{size}")

    try:
        # stat first: a device or FIFO is refused without being opened at all.
        _check_regular(path, os.stat(path).st_mode)
        # O_NONBLOCK in case it was swapped for a FIFO since; fstat checks what was opened.
        fd = os.open(path, os.O_RDONLY | os.O_NONBLOCK | os.O_CLOEXEC)
    except OSError as exc:
        raise FileReadError(f"{path}: cannot read {what}: {exc.strerror}") from None
    chunks: list[bytes] = []
    try:
        st = os.fstat(fd)
        _check_regular(path, st.st_mode)
        if st.st_size > limit:
            raise too_large(f"{st.st_size} bytes")
        # At most limit + 1 bytes, whatever st_size said: the file may grow, and files such as
        # /proc's report size 0.
        left = limit + 1
        while left > 0:
            chunk = os.read(fd, left)
            if not chunk:
                break
            chunks.append(chunk)
            left -= len(chunk)
    except OSError as exc:
        raise FileReadError(f"{path}: cannot read {what}: {exc.strerror}") from None
    finally:
        os.close(fd)
    data = b"".join(chunks)
    if len(data) > limit:
        raise too_large(f"more than {limit} bytes read")
    return data


# --- what tells a changed file (the reloader's watch) -------------------------------------------


Stamp = tuple[int, int, int, int, int] | None

MAX_FINGERPRINT_BYTES: Final = 4 << 20
"""Every watched file is far smaller (counters and config files 1 MiB at most, PEM files)."""


def stamp(path: Path) -> Stamp:
    """What changes when the file is replaced or rewritten (symlinks followed: a Kubernetes
    volume swaps its `..data` link); None when it cannot be read."""
    try:
        st = os.stat(path)
    except OSError:
        return None
    return (st.st_dev, st.st_ino, st.st_size, st.st_mtime_ns, st.st_ctime_ns)


def fingerprint(path: Path) -> bytes | None:
    """A digest of the file's bytes; None when it cannot be read. A Kubernetes volume swaps
    every key's file at once: the digest tells the file that changed from those replaced by the
    same bytes (issue 26)."""
    try:
        return hashlib.sha256(read_regular_file(path, MAX_FINGERPRINT_BYTES, "file")).digest()
    except FileReadError:
        return None


def fingerprints(paths: tuple[Path, ...]) -> dict[Path, bytes | None]:
    return {path: fingerprint(path) for path in paths}


# --- YAML ------------------------------------------------------------------------------

TAG: Final = "tag:yaml.org,2002:"
SCALAR_TAGS: Final = frozenset(TAG + t for t in ("str", "int", "float", "bool", "null"))


class StrictLoader(yaml.SafeLoader):
    max_depth: ClassVar[int] = 16
    alias_problem: ClassVar[str] = "anchors and aliases are not allowed"
    depth_problem: ClassVar[str] = "nested more than {} levels"

    def __init__(self, stream: str) -> None:
        super().__init__(stream)
        self._depth = 0

    def compose_node(self, parent: Node | None, index: int) -> Node | None:
        # The pure-Python parser's events (with yaml.error.Mark marks); untyped in the stubs.
        event: Any = self.peek_event()  # type: ignore[no-untyped-call]
        if isinstance(event, yaml.AliasEvent) or getattr(event, "anchor", None) is not None:
            raise ComposerError(None, None, self.alias_problem, event.start_mark)
        if self._depth >= self.max_depth:
            raise ComposerError(None, None, self.depth_problem.format(self.max_depth),
                                event.start_mark)
        self._depth += 1
        try:
            return super().compose_node(parent, index)
        finally:
            self._depth -= 1


# Set on the class, as PyYAML's own add_implicit_resolver does.
StrictLoader.yaml_implicit_resolvers = {
    first: [(tag, regexp) for tag, regexp in resolvers if tag != TAG + "timestamp"]
    for first, resolvers in yaml.SafeLoader.yaml_implicit_resolvers.items()
}


# --- decoded YAML that remembers where each value was written ------------------------------


class YamlMap(dict[str, Any]):
    """A decoded mapping: its own (line, column) and each key's and value's, 1-based."""

    line: int
    column: int
    lines: dict[str, tuple[int, int]]  # key → (the key's line, the value's line)
    marks: dict[str, tuple[tuple[int, int], tuple[int, int]]]  # key → (key's, value's)


class YamlSeq(list[Any]):
    """A decoded sequence: its own (line, column) and each item's."""

    line: int
    column: int
    lines: list[int]
    marks: list[tuple[int, int]]


def _mark(node: Node) -> tuple[int, int]:
    return int(node.start_mark.line) + 1, int(node.start_mark.column) + 1


def short_tag(tag: str) -> str:
    return "!!" + tag.removeprefix(TAG) if tag.startswith(TAG) else tag


class PositionedLoader(StrictLoader):
    """The strict safe loader, decoding to `YamlMap`/`YamlSeq` and scalars, without tags, and
    refusing duplicate keys (PyYAML keeps the last; Go's strict decoder refuses them).
    `document` names the format in messages ("a scenario")."""

    document: ClassVar[str] = "this file"

    def decode(self, node: Node) -> Any:
        if isinstance(node, ScalarNode):
            return self._scalar(node)
        if isinstance(node, SequenceNode) and node.tag == TAG + "seq":
            seq = YamlSeq(self.decode(item) for item in node.value)
            (seq.line, seq.column), seq.marks = _mark(node), [_mark(i) for i in node.value]
            seq.lines = [line for line, _ in seq.marks]
            return seq
        if isinstance(node, MappingNode) and node.tag == TAG + "map":
            return self._mapping(node)
        raise ConstructorError(None, None, f"tag {short_tag(node.tag)!r} is not allowed in "
                               f"{self.document}", node.start_mark)

    def _mapping(self, node: MappingNode) -> YamlMap:
        result = YamlMap()
        (result.line, result.column), result.lines, result.marks = _mark(node), {}, {}
        for key_node, value_node in node.value:
            # A key is its text: YAML 1.1 would make `on:` a boolean and `1:` an integer.
            if not isinstance(key_node, ScalarNode) or key_node.tag not in SCALAR_TAGS | {
                    TAG + "merge"}:
                raise ConstructorError(None, None, "a key must be plain text",
                                       key_node.start_mark)
            key = str(key_node.value)
            if key in result:
                raise ConstructorError(None, None, f"duplicate key {key!r} (first on line "
                                       f"{result.lines[key][0]})", key_node.start_mark)
            result[key] = self.decode(value_node)
            result.marks[key] = (_mark(key_node), _mark(value_node))
            result.lines[key] = (result.marks[key][0][0], result.marks[key][1][0])
        return result

    def _scalar(self, node: ScalarNode) -> Any:
        if node.tag not in SCALAR_TAGS:
            raise ConstructorError(None, None, f"tag {short_tag(node.tag)!r} is not allowed in "
                                   f"{self.document}", node.start_mark)
        kind = node.tag.removeprefix(TAG)
        try:
            return self.yaml_constructors[node.tag](self, node)
        # PyYAML's constructors raise these on explicitly tagged junk (`!!int ""`, `!!bool x`)
        # and on integers longer than Python converts (4300 digits).
        except (ValueError, OverflowError, LookupError, TypeError):
            raise ConstructorError(None, None, f"cannot read {_shown(node.value)} as {kind}",
                                   node.start_mark) from None


def _shown(raw: str) -> str:
    return repr(raw) if len(raw) <= 60 else repr(raw[:59]) + "…"


def text_position(text: str, index: int) -> tuple[int, int]:
    """1-based line and column of text[index], with the line breaks PyYAML counts."""
    line, start = 1, 0
    for i in range(min(index, len(text))):
        char = text[i]
        if char in "\n\x85\u2028\u2029" or (char == "\r" and text[i + 1:i + 2] != "\n"):
            line, start = line + 1, i + 1
    return line, index - start + 1


def utf8_text(data: bytes, name: str, error: Callable[[str], Exception]) -> str:
    """UTF-8 text; `error("FILE:LINE:COLUMN: invalid YAML: not UTF-8 text (byte 0x..)")`."""
    try:
        return data.decode("utf-8")
    except UnicodeDecodeError as exc:
        before = data[:exc.start].decode("utf-8")  # valid up to the bad byte
        line, column = text_position(before, len(before))
        raise error(f"{name}:{line}:{column}: invalid YAML: not UTF-8 text "
                    f"(byte 0x{data[exc.start]:02x})") from None


def _yaml_problem(exc: yaml.MarkedYAMLError) -> str:
    problem = str(exc.problem or exc.context or "parse error")
    if exc.context and problem.startswith("but "):  # "expected a single document …, but found"
        problem = f"{exc.context}, {problem}"
    return " ".join(problem.split())


def decode_positioned(text: str, name: str, loader: type[PositionedLoader],
                      error: Callable[[str], Exception]) -> Any:
    """The text's one document as `YamlMap`/`YamlSeq`/scalars; `error(message)` with the
    position (`name:LINE:COLUMN: invalid YAML: …`) of what YAML or the loader refused."""
    try:
        instance = loader(text)
    except yaml.reader.ReaderError as exc:  # the reader checks every character up front
        line, column = text_position(text, exc.position)
        raise error(f"{name}:{line}:{column}: invalid YAML: unacceptable character "
                    f"#x{exc.character:04x}: {exc.reason}") from None
    try:
        node = instance.get_single_node()
        return None if node is None else instance.decode(node)
    except yaml.MarkedYAMLError as exc:
        mark = exc.problem_mark
        where = f"{name}:{mark.line + 1}:{mark.column + 1}" if mark is not None else name
        raise error(f"{where}: invalid YAML: {_yaml_problem(exc)}") from None
    except yaml.YAMLError as exc:
        raise error(f"{name}: invalid YAML: {' '.join(str(exc).split())}") from None
    finally:
        instance.dispose()
