"""YAML without what a small config file never needs and an attacker would use (files.py says
why): `StrictLoader` refuses anchors, aliases and deep nesting and keeps date-like scalars text;
`PositionedLoader` decodes to files.YamlMap/YamlSeq and scalars. PyYAML is imported only by a
configuration that reads a YAML file (issue 33: a process that reads none does not load it).
"""

from collections.abc import Callable
from typing import Any, ClassVar, Final

import yaml
from yaml.composer import ComposerError
from yaml.constructor import ConstructorError
from yaml.nodes import MappingNode, Node, ScalarNode, SequenceNode

from .files import YamlMap, YamlSeq, text_position

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
