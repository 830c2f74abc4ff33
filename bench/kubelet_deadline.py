"""How long a kubelet call takes to give up when the answer keeps streaming past its deadline.

A server process of its own (hand-built HTTP/2 frames on a unix socket) answers the call with
a `--megabytes` message in 16 KiB DATA frames, `--frame-gap-ms` apart (0.3 ms: ~1.6 s for 50 MB,
never a gap long enough for a per-read socket timeout to fire), then its trailers. The client
is `rpc/wire.py`'s `UnaryChannel.call` with a `--deadline` (0.5 s): the seconds from the
call to its return, the outcome, and whether the server saw the client reset the stream
(RST_STREAM), `--runs` times; the median. Issue 24: before the whole call's deadline was kept,
each read had the time left as its socket timeout, and an answer that never paused ran on.

    .venv/bin/python bench/kubelet_deadline.py --runs 7
"""

from __future__ import annotations

import argparse
import multiprocessing
import socket
import statistics
import sys
import tempfile
import time
from multiprocessing.connection import Connection
from pathlib import Path

from hpack import Encoder

from gpu_enricher.rpc.answer import CallError
from gpu_enricher.rpc.wire import UnaryChannel

LIST = "/v1.PodResourcesLister/List"
FRAME = 16_384
RST_STREAM = 0x3


def frame(kind: int, flags: int, stream: int, payload: bytes) -> bytes:
    return len(payload).to_bytes(3, "big") + bytes((kind, flags)) + \
        stream.to_bytes(4, "big") + payload


def client_reset(conn: socket.socket) -> bool:
    """Whether the client's bytes so far (read without waiting) hold an RST_STREAM."""
    conn.setblocking(False)
    received = b""
    try:
        while chunk := conn.recv(65_536):
            received += chunk
    except (BlockingIOError, ConnectionError):
        pass
    conn.setblocking(True)
    at = received.find(b"\r\n\r\nSM\r\n\r\n")
    at = at + 10 if at >= 0 else 0
    while at + 9 <= len(received):
        size = int.from_bytes(received[at:at + 3], "big")
        if received[at + 3] == RST_STREAM:
            return True
        at += 9 + size
    return False


def serve(path: str, megabytes: int, gap: float, ready: Connection) -> None:
    listener = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    listener.bind(path)
    listener.listen()
    ready.send("ready")
    body = b"\x00" + (megabytes << 20).to_bytes(4, "big") + bytes(megabytes << 20)
    while True:
        conn, _ = listener.accept()
        encoder = Encoder()  # a connection's own header table
        conn.recv(65_536)  # the preface, SETTINGS, the request
        conn.sendall(frame(0x4, 0, 0, b"") + frame(0x1, 0x4, 1, encoder.encode(
            [(b":status", b"200"), (b"content-type", b"application/grpc")])))
        sent, reset = 0, False
        try:
            for at in range(0, len(body), FRAME):
                conn.sendall(frame(0x0, 0, 1, body[at:at + FRAME]))
                sent += min(FRAME, len(body) - at)
                time.sleep(gap)
            conn.sendall(frame(0x1, 0x5, 1, encoder.encode([(b"grpc-status", b"0")])))
        except OSError:
            pass
        reset = client_reset(conn)
        conn.close()
        ready.send((sent, reset))


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--runs", type=int, default=5)
    parser.add_argument("--megabytes", type=int, default=50)
    parser.add_argument("--deadline", type=float, default=0.5)
    parser.add_argument("--frame-gap-ms", type=float, default=0.3)
    args = parser.parse_args()
    with tempfile.TemporaryDirectory() as directory:
        path = str(Path(directory) / "kubelet.sock")
        ours, theirs = multiprocessing.Pipe()
        server = multiprocessing.Process(
            target=serve, args=(path, args.megabytes, args.frame_gap_ms / 1000, theirs),
            daemon=True)
        server.start()
        ours.recv()
        channel = UnaryChannel(Path(path), 64 << 20, "the kubelet")
        seconds = []
        print("| run | returned after (s) | outcome | server sent (MB) | stream reset |")
        print("|---|---|---|---|---|")
        for run in range(1, args.runs + 1):
            started = time.monotonic()
            try:
                channel.call(LIST, b"", args.deadline)
                outcome = "OK"
            except CallError as exc:
                outcome = str(exc) if exc.code == "UNAVAILABLE" else exc.code
            seconds.append(time.monotonic() - started)
            sent, reset = ours.recv()
            print(f"| {run} | {seconds[-1]:.3f} | {outcome} | {sent / 1e6:.1f} | "
                  f"{'yes' if reset else 'no'} |")
            sys.stdout.flush()
        print(f"\nmedian {statistics.median(seconds):.3f} s on a {args.deadline:g} s deadline "
              f"({args.megabytes} MiB answer, a 16 KiB frame every {args.frame_gap_ms:g} ms)")
        server.kill()


if __name__ == "__main__":
    main()
