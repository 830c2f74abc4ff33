"""Reading a web config file (web/config.py): a regular file of at most MAX_BYTES, UTF-8, one
YAML document through a safe loader without anchors, aliases, tags or deep nesting; errors are
one line naming the file (and, for syntax, the line and column).
"""

import os
import stat
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Final

import yaml
from yaml.nodes import MappingNode, Node, ScalarNode, SequenceNode

from ..strict_yaml import SCALAR_TAGS, TAG, StrictLoader
from .config_model import WebConfigError

MAX_BYTES: Final = 1 << 20
MAX_DEPTH: Final = 8
"""The format nests 3 deep; the limit keeps PyYAML's recursive composer shallow."""


class _Loader(StrictLoader):
    max_depth = MAX_DEPTH
    depth_problem = "nested more than {} levels"




@dataclass(frozen=True, slots=True)
class Scalar:
    """A scalar that is not a string: its value, and its text, which a string key takes, as
    Go's YAML decoder does (`X-XSS-Protection: 0` is the text "0")."""

    value: Any
    text: str


def _decode(loader: _Loader, node: Node, where: Callable[[str], str], key: str) -> Any:
    """dict, list, str or Scalar, with duplicate keys refused."""
    if isinstance(node, MappingNode) and node.tag == TAG + "map":
        result: dict[str, Any] = {}
        for key_node, value_node in node.value:
            # A key is its text, as Go reads `1:` or `yes:` into a string key.
            if not isinstance(key_node, ScalarNode) or key_node.tag not in SCALAR_TAGS - {
                    TAG + "null"}:
                raise WebConfigError(where(f"{key or 'document'}: a key must be plain text"))
            name = str(key_node.value)
            if name in result:
                raise WebConfigError(where(f"{join_key(key, name)}: duplicate key"))
            result[name] = _decode(loader, value_node, where, join_key(key, name))
        return result
    if isinstance(node, SequenceNode) and node.tag == TAG + "seq":
        return [_decode(loader, item, where, f"{key}[{n}]") for n, item in enumerate(node.value)]
    if isinstance(node, ScalarNode) and node.tag in SCALAR_TAGS:
        if node.tag == TAG + "str":
            return str(node.value)
        # PyYAML's constructors raise on explicitly tagged junk (`!!int x`) and huge integers.
        try:
            value = loader.yaml_constructors[node.tag](loader, node)
        except (ValueError, OverflowError, TypeError, LookupError):
            raise WebConfigError(where(f"{key or 'document'}: cannot read "
                                       f"{str(node.value)[:40]!r}")) from None
        return Scalar(value, str(node.value))
    tag = str(getattr(node, "tag", "?")).removeprefix(TAG)
    raise WebConfigError(where(f"{key or 'document'}: YAML tag {tag[:40]!r} is not allowed"))


def join_key(key: str, name: str) -> str:
    """`key.name` for the messages: a name that is not plain printable text is quoted."""
    if not (name.isprintable() and name.strip() == name and 0 < len(name) <= 64):
        name = repr(name[:64])
    return f"{key}.{name}" if key else name


def decode_yaml(text: str, path: str) -> Any:
    """The document as dict/list/str/Scalar; a WebConfigError with the position of a syntax
    error."""
    try:
        loader = _Loader(text)
    except yaml.YAMLError as exc:  # the reader refuses a control character up front
        raise WebConfigError(f"{path}: invalid YAML: {' '.join(str(exc).split())}") from None
    try:
        node = loader.get_single_node()
        return None if node is None else _decode(loader, node, lambda t: f"{path}: {t}", "")
    except yaml.MarkedYAMLError as exc:
        mark = exc.problem_mark
        where = f"{path}:{mark.line + 1}:{mark.column + 1}" if mark is not None else path
        problem = " ".join(str(exc.problem or exc.context or "parse error").split())
        raise WebConfigError(f"{where}: invalid YAML: {problem}") from None
    except yaml.YAMLError as exc:
        raise WebConfigError(f"{path}: invalid YAML: {' '.join(str(exc).split())}") from None
    finally:
        loader.dispose()


def read_web_config_text(path: Path) -> str:
    """The file's text: a regular file of at most MAX_BYTES (a FIFO would block the start),
    UTF-8."""
    try:
        fd = os.open(path, os.O_RDONLY | os.O_NONBLOCK | os.O_CLOEXEC)
    except OSError as exc:
        raise WebConfigError(f"{path}: cannot read web config: {exc.strerror}") from None
    try:
        if not stat.S_ISREG(os.fstat(fd).st_mode):
            raise WebConfigError(f"{path}: not a regular file")
        with open(fd, "rb", closefd=False) as file:
            data = file.read(MAX_BYTES + 1)
    except OSError as exc:
        raise WebConfigError(f"{path}: cannot read web config: {exc.strerror}") from None
    finally:
        os.close(fd)
    if len(data) > MAX_BYTES:
        raise WebConfigError(f"{path}: larger than {MAX_BYTES >> 20} MiB")
    try:
        return data.decode("utf-8")
    except UnicodeDecodeError as exc:
        line = data.count(b"\n", 0, exc.start) + 1
        raise WebConfigError(f"{path}:{line}: not UTF-8 text (byte "
                             f"0x{data[exc.start]:02x})") from None
