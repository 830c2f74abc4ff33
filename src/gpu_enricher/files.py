"""Reading a configuration file an operator points us at (counters, scenario, web config): a
regular file of bounded size, read without ever blocking, and YAML without what a small config
file never needs and an attacker would use.

A FIFO would hang the start until a writer came, `/dev/zero` would read without end (issue 13,
defect 8). PyYAML's safe loader still takes anchors and aliases (a billion laughs expands 9
aliases per level into gigabytes) and deep nesting (the composer recurses per level), and reads
a date-like plain scalar as a date (the files have no dates, and PyYAML's timestamp constructor
raises on 2001-02-30): `StrictLoader` refuses the first two and keeps the third a string. The
scenario and web-config loaders build on it, each decoding the nodes its own way."""

import os
import stat
from pathlib import Path
from typing import Any, ClassVar, Final

import yaml
from yaml.composer import ComposerError
from yaml.nodes import Node


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
