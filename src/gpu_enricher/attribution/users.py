"""Who runs a GPU process that no pod or container holds, on a machine people share: the real UID
`/proc/<pid>/status` gives, named by the host's passwd (issue 34). The parse half is pure; the
reader runs on the /proc reader's thread.

The host's passwd is read through the host's root as its /proc shows it, `<proc root>/1/root/
etc/passwd` (the exporter in a container with the host's /proc), else, with `--proc-root` at
/proc, this system's own /etc/passwd (the exporter on the host; in a container whose runtime
denies it the host's root, an image's passwd names only the system users it shares with the
host). A user neither lists is named by the number: `user="1000"`. Re-read only when it changes.
"""

import os
from pathlib import Path
from typing import Final

MAX_PASSWD_BYTES: Final = 4 << 20


def parse_uid(status_text: str) -> int | None:
    """The real UID of `/proc/<pid>/status` (`Uid:\\treal\\teffective\\tsaved\\tfs`)."""
    for line in status_text.splitlines():
        if line.startswith("Uid:"):
            fields = line.split()
            if len(fields) > 1 and fields[1].isdigit() and len(fields[1]) <= 10:
                return int(fields[1])
            return None
    return None


def parse_passwd(text: str) -> dict[int, str]:
    """UID → the first name passwd gives it; malformed lines and `+`/`-` NIS entries skipped."""
    names: dict[int, str] = {}
    for line in text.splitlines():
        fields = line.split(":")
        if len(fields) < 7 or not fields[0] or fields[0][0] in "+-#" or not fields[2].isdigit():
            continue
        names.setdefault(int(fields[2]), fields[0])
    return names


class UserNames:
    """The host's passwd, re-read when its size, inode or modification time change."""

    def __init__(self, proc_root: Path) -> None:
        self.paths = [proc_root / "1" / "root" / "etc" / "passwd"]
        if proc_root == Path("/proc"):
            self.paths.append(Path("/etc/passwd"))
        self.path: Path | None = None  # the one read last
        self._stamp: tuple[int, int, int] | None = None
        self._names: dict[int, str] = {}

    def refresh(self) -> None:
        for path in self.paths:
            try:
                found = os.stat(path)
                stamp = (found.st_ino, found.st_size, found.st_mtime_ns)
                if stamp != self._stamp or path != self.path:
                    with open(path, "rb") as passwd:
                        text = passwd.read(MAX_PASSWD_BYTES).decode("utf-8", "replace")
                    self._names, self._stamp, self.path = parse_passwd(text), stamp, path
                return
            except OSError:
                continue
        self._names, self._stamp, self.path = {}, None, None

    def name(self, uid: int) -> str:
        return self._names.get(uid, str(uid))
