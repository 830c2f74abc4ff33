"""dcgm-exporter's --web-systemd-socket (exporter-toolkit's): serve on the listening sockets
systemd hands over (socket activation, sd_listen_fds(3)) instead of binding the address.

systemd passes them as descriptors 3, 4, … with LISTEN_FDS (how many) and LISTEN_PID (the
process they are for; a child that inherited the variables must not take them). As go-systemd's
`activation.Listeners`, which exporter-toolkit uses, the variables are removed once read, and
the listen address is not used. Only TCP listening sockets are served (the exposition's URL
names a host and a port); another descriptor is left alone and said so.
"""

import os
import socket
from collections.abc import MutableMapping
from typing import Final

FIRST_FD: Final = 3  # SD_LISTEN_FDS_START
_VARIABLES: Final = ("LISTEN_PID", "LISTEN_FDS", "LISTEN_FDNAMES")


class ActivationError(OSError):
    """No socket to serve on: the line to log."""


def activated_sockets(environ: MutableMapping[str, str]) -> list[socket.socket]:
    """The listening TCP sockets systemd passed to this process, non-blocking and not
    inherited by children. Raises ActivationError when there is none."""
    pid, count = environ.get("LISTEN_PID", ""), environ.get("LISTEN_FDS", "")
    for name in _VARIABLES:
        environ.pop(name, None)
    if pid != str(os.getpid()) or not count.isdigit() or int(count) < 1:
        raise ActivationError(
            "--web-systemd-socket: systemd passed no socket to this process (LISTEN_FDS "
            f"{count or 'unset'}, LISTEN_PID {pid or 'unset'}, this process {os.getpid()})")
    sockets, skipped = [], []
    for fd in range(FIRST_FD, FIRST_FD + int(count)):
        try:
            sock = socket.socket(fileno=fd)
        except OSError:  # not a socket
            skipped.append(str(fd))
            continue
        listening = sock.getsockopt(socket.SOL_SOCKET, socket.SO_ACCEPTCONN)
        if (sock.family not in (socket.AF_INET, socket.AF_INET6)
                or sock.type != socket.SOCK_STREAM or not listening):
            sock.detach()  # not ours to close
            skipped.append(str(fd))
            continue
        sock.set_inheritable(False)
        sock.setblocking(False)
        sockets.append(sock)
    if not sockets:
        raise ActivationError(f"--web-systemd-socket: none of the descriptors systemd passed "
                              f"({', '.join(skipped)}) is a listening TCP socket")
    return sockets


def socket_names(sockets: list[socket.socket]) -> str:
    """Where the sockets listen, for the "serving" line."""
    return ", ".join(f"[{h}]:{p}" if ":" in h else f"{h}:{p}"
                     for h, p, *_ in (s.getsockname() for s in sockets))
