"""Reading a scenario file: a regular file of at most MAX_BYTES, UTF-8, and one YAML document
through strict_yaml.PositionedLoader, which keeps each value's line for the error messages.
"""

from pathlib import Path
from typing import Any, Final

from ..files import FileReadError, read_regular_file, utf8_text
from ..strict_yaml import PositionedLoader, decode_positioned
from .scenario_values import ScenarioError

MAX_BYTES: Final = 1 << 20
"""A scenario file's size limit: a real one is a few KiB."""
MAX_DEPTH: Final = 16
"""Nesting limit: the format nests 6 deep; the limit keeps the composer's recursion shallow."""


class _Loader(PositionedLoader):
    max_depth = MAX_DEPTH
    alias_problem = "anchors and aliases are not allowed in a scenario"
    depth_problem = "nested more than {} levels deep"
    document = "a scenario"


def read_text(path: Path) -> str:
    """The file's text: a regular file of at most MAX_BYTES read without blocking, UTF-8; a
    ScenarioError at the first bad byte."""
    try:
        data = read_regular_file(path, MAX_BYTES, "scenario")
    except FileReadError as exc:
        raise ScenarioError(str(exc)) from None
    return utf8_text(data, str(path), ScenarioError)


def decode_yaml(text: str, name: str) -> Any:
    """The text's one document as files.YamlMap/YamlSeq/scalars; a ScenarioError with its
    position."""
    return decode_positioned(text, name, _Loader, ScenarioError)
