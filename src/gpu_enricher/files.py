"""Reading a configuration file an operator points us at (counters, scenario): a regular file
of bounded size, read without ever blocking. A FIFO would hang the start until a writer came,
`/dev/zero` would read without end (issue 13, defect 8)."""

import os
import stat
from pathlib import Path


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
