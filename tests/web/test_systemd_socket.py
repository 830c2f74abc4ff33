"""dcgm-exporter's --web-systemd-socket: the real process serves on a listening socket handed
to it as systemd does (descriptor 3, LISTEN_FDS=1, LISTEN_PID its own pid), not on -a; without
one it says so and exits 1."""

import socket
import sys

from tests.app.fault_helpers import Process
from tests.app.test_process import Exporter, get
from tests.app.test_process import exporters as exporters  # the fixture

# What systemd does between fork and exec: the socket becomes descriptor 3, and LISTEN_PID
# names the pid the exporter runs as (exec keeps it).
EXEC_AS_SYSTEMD = """import os, sys
os.dup2(int(sys.argv[1]), 3)
os.environ.update(LISTEN_PID=str(os.getpid()), LISTEN_FDS="1")
os.execv(sys.executable, [sys.executable, "-m", "gpu_enricher", *sys.argv[2:]])"""


def activated(listener: socket.socket, *flags: str) -> Process:
    """The exporter started the way systemd starts a socket-activated service."""
    return Process(["--simulate", "-c", "100", *flags], {},
                   command=[sys.executable, "-c", EXEC_AS_SYSTEMD, str(listener.fileno())],
                   pass_fds=(listener.fileno(),))


def test_serves_on_the_socket_systemd_passes_and_not_on_the_address(
        exporters: list[Exporter]) -> None:
    with socket.create_server(("127.0.0.1", 0)) as listener:
        # An address no interface has: binding it would fail (exit 1), so it is not bound.
        exp = activated(listener, "--web-systemd-socket", "-a", "192.0.2.1:9400")
        exporters.append(exp)
        exp.base = f"http://127.0.0.1:{listener.getsockname()[1]}"
        exp.wait_ready()
    # The test's copy is closed: the exporter's own copy of the socket serves.
    status, body = get(exp.base + "/metrics")
    assert status == 200 and "DCGM_FI_DEV_GPU_TEMP" in body
    code, err = exp.stop()
    assert code == 0, err
    assert f"serving /metrics on systemd's sockets 127.0.0.1:{exp.base.rsplit(':', 1)[1]}" in err
    assert " WARNING " not in err and " ERROR " not in err, err


def test_without_a_socket_from_systemd_it_says_so_and_exits_1(
        exporters: list[Exporter]) -> None:
    exp = Process(["--simulate", "--web-systemd-socket"], {})
    exporters.append(exp)
    exp.proc.wait(timeout=20)
    code, err = exp.stop()
    assert code == 1, err
    assert "--web-systemd-socket: systemd passed no socket to this process (LISTEN_FDS unset" \
        in err
