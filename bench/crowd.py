"""Clients that scrape nothing: idle keep-alive connections and slowloris connections, held
against one server until SIGTERM (bench/load.py's `--crowd`).

  --idle N   connections that each ask for /health once, read the answer, then stay open
             and silent (a keep-alive client that went quiet);
  --slow M   connections that send a request head one header line a second and never finish
             it; when the server closes one (its header timeout), it is opened again at once.

Prints `ready` once every idle connection has had its answer, and on SIGTERM one JSON line:
how many idle connections are still open, how many slow connections were made and how many
the server closed, and after how long (median seconds).
"""

from __future__ import annotations

import argparse
import asyncio
import json
import signal
import ssl
import statistics
import sys
import time


async def open_connection(host: str, port: int, tls: bool,
                          ) -> tuple[asyncio.StreamReader, asyncio.StreamWriter]:
    context = ssl._create_unverified_context() if tls else None  # our own self-signed cert
    return await asyncio.open_connection(host, port, ssl=context, limit=1 << 20)


async def idle_client(host: str, port: int, tls: bool, open_now: list[int],
                      answered: asyncio.Event, need: int) -> None:
    reader, writer = await open_connection(host, port, tls)
    writer.write(f"GET /health HTTP/1.1\r\nHost: {host}\r\n\r\n".encode())
    head = await reader.readuntil(b"\r\n\r\n")
    length = next((int(line.split(b":", 1)[1]) for line in head.split(b"\r\n")
                   if line.lower().startswith(b"content-length:")), 0)
    await reader.readexactly(length)
    open_now[0] += 1
    if open_now[0] >= need:
        answered.set()
    try:
        await reader.read()  # returns at EOF: the server closed it
    finally:
        open_now[0] -= 1
        writer.close()


async def slow_client(host: str, port: int, tls: bool, stats: dict[str, list[float]]) -> None:
    while True:
        try:
            reader, writer = await open_connection(host, port, tls)
        except OSError:
            await asyncio.sleep(0.1)
            continue
        opened = time.monotonic()
        stats["connects"].append(opened)
        try:
            writer.write(f"GET /metrics HTTP/1.1\r\nHost: {host}\r\n".encode())
            read = asyncio.create_task(reader.read())
            while not read.done():
                writer.write(b"X-Slow: 1\r\n")
                await asyncio.wait({read}, timeout=1.0)
            stats["closed_after"].append(time.monotonic() - opened)
        except (OSError, ssl.SSLError):
            stats["closed_after"].append(time.monotonic() - opened)
        finally:
            writer.close()


async def main(args: argparse.Namespace) -> None:
    stop = asyncio.Event()
    loop = asyncio.get_running_loop()
    loop.add_signal_handler(signal.SIGTERM, stop.set)
    open_now, answered = [0], asyncio.Event()
    idle = []
    for i in range(args.idle):
        idle.append(asyncio.create_task(
            idle_client(args.host, args.port, args.tls, open_now, answered, args.idle)))
        if i % 50 == 49:
            await asyncio.sleep(0.01)  # not a SYN flood: the listen backlog is finite
    if args.idle:
        await answered.wait()
    slow_stats: dict[str, list[float]] = {"connects": [], "closed_after": []}
    slow = [asyncio.create_task(slow_client(args.host, args.port, args.tls, slow_stats))
            for _ in range(args.slow)]
    print("ready", flush=True)
    await stop.wait()
    closed = slow_stats["closed_after"]
    print(json.dumps({"idle_open": open_now[0], "idle": args.idle,
                      "slow_connects": len(slow_stats["connects"]),
                      "slow_closed_by_server": len(closed),
                      "slow_closed_after_s": statistics.median(closed) if closed else None}),
          flush=True)
    for task in [*idle, *slow]:
        task.cancel()
    await asyncio.gather(*idle, *slow, return_exceptions=True)


if __name__ == "__main__":
    parser = argparse.ArgumentParser(description=__doc__,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--host", default="127.0.0.1")
    parser.add_argument("--port", type=int, required=True)
    parser.add_argument("--tls", action="store_true")
    parser.add_argument("--idle", type=int, default=1000)
    parser.add_argument("--slow", type=int, default=10)
    asyncio.run(main(parser.parse_args()))
    sys.exit(0)
