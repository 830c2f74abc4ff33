"""Reading a scenario file: a regular file of at most MAX_BYTES, UTF-8, and one YAML document
through a safe loader that keeps each value's line for the error messages (`_Map`/`_Seq`).
"""

from pathlib import Path
from typing import Any, Final

import yaml
from yaml.constructor import ConstructorError
from yaml.nodes import MappingNode, Node, ScalarNode, SequenceNode

from ..files import SCALAR_TAGS, TAG, FileReadError, StrictLoader, read_regular_file
from .scenario_values import ScenarioError, show

MAX_BYTES: Final = 1 << 20
"""A scenario file's size limit: a real one is a few KiB."""
MAX_DEPTH: Final = 16
"""Nesting limit: the format nests 6 deep; the limit keeps the composer's recursion shallow."""




class _Map(dict[str, Any]):
    """A decoded mapping that remembers its line and each key's and value's line."""

    line: int
    lines: dict[str, tuple[int, int]]


class _Seq(list[Any]):
    """A decoded sequence that remembers its line and each item's line."""

    line: int
    lines: list[int]


class _Loader(StrictLoader):
    """The strict safe loader, decoding to `_Map`/`_Seq`, which keep their lines for the error
    messages, without tags, and refusing duplicate keys (PyYAML keeps the last)."""

    max_depth = MAX_DEPTH
    alias_problem = "anchors and aliases are not allowed in a scenario"
    depth_problem = "nested more than {} levels deep"

    def decode(self, node: Node) -> Any:
        """The node as plain data: str, int, float, bool, None, `_Map` and `_Seq`."""
        if isinstance(node, ScalarNode):
            return self._scalar(node)
        if isinstance(node, SequenceNode) and node.tag == TAG + "seq":
            seq = _Seq(self.decode(item) for item in node.value)
            seq.line, seq.lines = _line(node), [_line(item) for item in node.value]
            return seq
        if isinstance(node, MappingNode) and node.tag == TAG + "map":
            return self._mapping(node)
        raise ConstructorError(None, None, f"tag {_short_tag(node.tag)!r} is not allowed in a "
                               "scenario", node.start_mark)

    def _mapping(self, node: MappingNode) -> _Map:
        result = _Map()
        result.line, result.lines = _line(node), {}
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
            result.lines[key] = (_line(key_node), _line(value_node))
        return result

    def _scalar(self, node: ScalarNode) -> Any:
        if node.tag not in SCALAR_TAGS:
            raise ConstructorError(None, None, f"tag {_short_tag(node.tag)!r} is not allowed in "
                                   "a scenario", node.start_mark)
        kind = node.tag.removeprefix(TAG)
        try:
            return self.yaml_constructors[node.tag](self, node)
        # PyYAML's constructors raise these on explicitly tagged junk (`!!int ""`, `!!bool x`)
        # and on integers longer than Python converts (4300 digits).
        except (ValueError, OverflowError, LookupError, TypeError):
            raise ConstructorError(None, None, f"cannot read {show(node.value)} as {kind}",
                                   node.start_mark) from None


def _line(node: Node) -> int:
    return int(node.start_mark.line) + 1


def _short_tag(tag: str) -> str:
    return "!!" + tag.removeprefix(TAG) if tag.startswith(TAG) else tag


def _position(text: str, index: int) -> tuple[int, int]:
    """1-based line and column of text[index], with the line breaks PyYAML counts."""
    line, start = 1, 0
    for i in range(min(index, len(text))):
        char = text[i]
        if char in "\n\x85\u2028\u2029" or (char == "\r" and text[i + 1:i + 2] != "\n"):
            line, start = line + 1, i + 1
    return line, index - start + 1


def _read(path: Path) -> bytes:
    """The file's bytes: a regular file of at most MAX_BYTES, read without blocking."""
    try:
        return read_regular_file(path, MAX_BYTES, "scenario")
    except FileReadError as exc:
        raise ScenarioError(str(exc)) from None


def read_text(path: Path) -> str:
    """The file's text: `_read`'s bytes as UTF-8, a ScenarioError at the first bad byte."""
    data = _read(path)
    try:
        return data.decode("utf-8")
    except UnicodeDecodeError as exc:
        before = data[:exc.start].decode("utf-8")  # valid up to the bad byte
        line, column = _position(before, len(before))
        raise ScenarioError(f"{path}:{line}:{column}: invalid YAML: not UTF-8 text "
                            f"(byte 0x{data[exc.start]:02x})") from None


def _yaml_problem(exc: yaml.MarkedYAMLError) -> str:
    problem = str(exc.problem or exc.context or "parse error")
    if exc.context and problem.startswith("but "):  # "expected a single document …, but found"
        problem = f"{exc.context}, {problem}"
    return " ".join(problem.split())


def decode_yaml(text: str, name: str) -> Any:
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

