"""PyYAML's safe loader without what an operator's small config file never needs and an attacker
would use: anchors and aliases (a billion laughs expands 9 aliases per level into gigabytes) and
deep nesting (the composer recurses per level); a date-like plain scalar stays a string (the
files have no dates, and PyYAML's timestamp constructor raises on 2001-02-30). The scenario and
web-config loaders build on it, each decoding the nodes its own way."""

from typing import Any, ClassVar, Final

import yaml
from yaml.composer import ComposerError
from yaml.nodes import Node

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
