"""attribution/users.py: the real UID of /proc/<pid>/status, the host's passwd, re-read when it
changes; and which label names a process no pod holds (attribution/containers.py)."""

import os
from pathlib import Path

from gpu_enricher.attribution.containers import RuntimeContainers, outside_pods
from gpu_enricher.attribution.users import UserNames, parse_passwd, parse_uid
from gpu_enricher.model import ContainerRef, HostProcess, ProcessTable

STATUS = "Name:\tpython\nUmask:\t0022\nState:\tS (sleeping)\nUid:\t1000\t0\t0\t0\nGid:\t100\n"


def test_the_real_uid_is_read() -> None:
    assert parse_uid(STATUS) == 1000
    assert parse_uid("Name:\tx\n") is None
    assert parse_uid("Uid:\tx\t1\n") is None
    assert parse_uid("Uid:\t99999999999\n") is None


def test_passwd_names_each_uid_once() -> None:
    text = ("root:x:0:0:root:/root:/bin/bash\nalice:x:1000:1000::/home/alice:/bin/sh\n"
            "alias:x:1000:1000::/:/bin/sh\n+nis::::::\nbroken:x:abc\n\n")
    assert parse_passwd(text) == {0: "root", 1000: "alice"}


def test_the_host_passwd_is_read_through_the_host_root_and_again_when_it_changes(
        tmp_path: Path) -> None:
    etc = tmp_path / "1" / "root" / "etc"
    etc.mkdir(parents=True)
    (etc / "passwd").write_text("alice:x:1000:1000::/:/bin/sh\n")
    users = UserNames(tmp_path)
    users.refresh()
    assert users.name(1000) == "alice" and users.name(1001) == "1001"
    (etc / "passwd").write_text("bob:x:1001:1001::/:/bin/sh\nalice:x:1000:1000::/:/bin/sh\n")
    os.utime(etc / "passwd", ns=(1, 1))
    users.refresh()
    assert users.name(1001) == "bob"
    (etc / "passwd").unlink()
    users.refresh()
    assert users.name(1000) == "1000", "unreadable: numbers, never a stale name"


def test_a_process_in_no_pod_is_named_by_its_container_else_its_user() -> None:
    table = ProcessTable({
        1: HostProcess(1, 1, "python", ContainerRef("uid", "c" * 64), None, "root"),
        2: HostProcess(2, 1, "python", None, "a" * 64, "root"),
        3: HostProcess(3, 1, "python", None, None, "alice"),
        4: HostProcess(4, 1, "python", None, "b" * 64, "root"),
        5: HostProcess(5, 1, "python", None, None, None),
    })
    found = RuntimeContainers((), {"a" * 64: "trainer"})
    assert outside_pods(found, table) == {2: ("container", "trainer"), 3: ("user", "alice")}, \
        "a pod's process is the pod's; one in a container the runtime does not list is unnamed"
    assert outside_pods(None, table) == {3: ("user", "alice")}
