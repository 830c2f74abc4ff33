"""Reading a configuration file an operator points us at (counters, scenario, web config): a
regular file of bounded size, read without ever blocking, and the values its YAML decodes to
(`strict_yaml.py` holds the loaders, imported only by a configuration that has a YAML file).

A FIFO would hang the start until a writer came, `/dev/zero` would read without end (issue 13,
defect 8). PyYAML's safe loader still takes anchors and aliases (a billion laughs expands 9
aliases per level into gigabytes) and deep nesting (the composer recurses per level), and reads
a date-like plain scalar as a date (the files have no dates, and PyYAML's timestamp constructor
raises on 2001-02-30): strict_yaml's loaders refuse the first two and keep the third a string,
and decode to `YamlMap`/`YamlSeq`, which remember where each value was written (the scenario and
dcgm-exporter's config file name `FILE:LINE…` in errors). `stamp` and `fingerprint` tell when
such a file changed (reload.py)."""

import hashlib
import os
import stat
from collections.abc import Callable
from pathlib import Path
from typing import Any, Final


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
