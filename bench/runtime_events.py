"""How soon a container that starts or stops shows in /metrics (issue 34): the exporter as a
process over the fake libnvidia-ml, `--container-labels` against a real dockerd or containerd,
passes every `--interval-ms` (30 s by default, so a pass cannot be what shows it: the runtime's
events do). Each round starts container `c<N>` given GPU 0, polls /metrics every 10 ms until a
DCGM series carries `container="c<N>"`, removes it, and polls until none does.

    .venv/bin/python bench/runtime_events.py --runtime docker --rounds 10
    .venv/bin/python bench/runtime_events.py --runtime containerd --rounds 10

Times run from the runtime's answer that the container runs (or is gone) to the first scrape
that shows it; medians and the largest. Needs root. Prints a markdown row on stdout.
"""

from __future__ import annotations

import argparse
import sys
import time

from _common import Server, build_fake_nvml, exporter_argv, fake_env, free_port, http_get, median
from runtimes import Runtime


def _shown(server: Server, name: str) -> bool:
    body = http_get(server.base + "/metrics")[2].decode()
    return any(line.startswith("DCGM_") and f'container="{name}"' in line
               for line in body.splitlines())


def _until(server: Server, name: str, shown: bool, timeout: float) -> float:
    started = time.monotonic()
    while _shown(server, name) != shown:
        if time.monotonic() - started > timeout:
            raise RuntimeError(f"{name} not {'shown' if shown else 'gone'} in {timeout:g}s")
        time.sleep(0.01)
    return time.monotonic() - started


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--runtime", choices=("docker", "containerd"), default="docker")
    parser.add_argument("--rounds", type=int, default=10)
    parser.add_argument("--interval-ms", type=int, default=30_000)
    args = parser.parse_args()
    runtime = Runtime(args.runtime)
    port = free_port()
    server = Server("exporter", exporter_argv(port, args.interval_ms, [
        "--container-labels", "--container-runtime-socket", str(runtime.socket)]),
        fake_env(build_fake_nvml(), gpus=2), port)
    starts: list[float] = []
    stops: list[float] = []
    try:
        runtime.start()
        server.start()
        server.wait_status("/ready")
        for number in range(args.rounds):
            runtime.run(number, gpus=1)
            starts.append(_until(server, f"c{number}", True, args.interval_ms / 1000))
            runtime.remove(number)
            stops.append(_until(server, f"c{number}", False, args.interval_ms / 1000))
            print(f"c{number}: shown {starts[-1] * 1000:.0f} ms, gone {stops[-1] * 1000:.0f} ms",
                  file=sys.stderr)
    finally:
        server.stop()
        runtime.stop()
    print("| runtime | pass interval | started → shown, median (max) | stopped → gone, median "
          "(max) |")
    print("|---|---:|---:|---:|")
    print(f"| {args.runtime} | {args.interval_ms / 1000:g} s | {median(starts) * 1000:.0f} ms "
          f"({max(starts) * 1000:.0f}) | {median(stops) * 1000:.0f} ms "
          f"({max(stops) * 1000:.0f}) |")
    return 0


if __name__ == "__main__":
    sys.exit(main())
