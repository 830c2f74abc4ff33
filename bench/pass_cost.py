"""What one collection pass costs beyond the NVML calls, stage by stage, and how long it holds
the event loop: this tree against a baseline commit, in one run (issue 33).

    .venv/bin/python bench/pass_cost.py --baseline 3adab78 --rounds 3 --passes 150

Each run is the exporter as shipped, `--simulate` on a scenario with every feature on (its fake
kubelet, Kubernetes API, /proc and HPC job files: `-k`, `--process-metrics`, DRA, MPS, the per-pod
GPU-time and energy accounts, job mapping), at `-c 100`, in a child process that wraps the
painting's stages with timers (`time.thread_time`: the CPU of the thread that paints, wherever it
runs) and runs `collector/lag.py`'s probe through every pass (the longest wait of a callback
posted to the loop). The scenarios: `gpus-8` (8 whole H100s, 8 pods), `mig` (8 x 7 MIG
instances, 110 pods), `builtin` (the built-in node: MPS clients, DRA claims, energy). The trees
are run in alternation, `--rounds` times each; the report is the median over passes of each
round, then the median over rounds. The stages (whichever of them a tree has):

  compose        cycle.compose: attribution, the DCGM/event/process families, the document
  accounts       the per-pod GPU-time and energy ledgers and their families
  own            the exporter's own metrics rendered (prometheus_client before issue 33)
  render         the DCGM families rendered, both formats
  document       the query API's JSON document encoded
  gzip           the bodies scrapers asked for compressed (a gzip scrape of the text format
                 every 50 ms here; before issue 33 on the loop at the first gzip scrape of a
                 picture, measured here once per paint)
  paint          everything the painting does, the stages above included
  inputs         the sources' snapshots and health gathered on the loop before painting

Prints a markdown table on stdout; progress on stderr.
"""

from __future__ import annotations

import argparse
import contextlib
import gzip
import importlib.util
import json
import os
import subprocess
import sys
import tempfile
import threading
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

from _common import (
    DEFAULT_BUILD_DIR,
    PYTHON,
    ROOT,
    baseline_tree,
    build_fake_nvml,
    free_port,
    median,
)
from kubelet_node import KubeletProc, Node

SCENARIOS = {
    "gpus-8": ROOT / "bench" / "scenarios" / "gpus-8-8pods.yaml",
    "mig": ROOT / "bench" / "scenarios" / "mig-8x7-110pods.yaml",
    "builtin": None,
    "mig-nvml": None,
}
"""`mig-nvml`: no simulated node but the fake libnvidia-ml with 8 x 7 MIG instances and a fake
kubelet of 110 pods in a process of its own (bench/kubelet_node.py), `-k --process-metrics`:
the loop of an exporter as deployed, with no fake server sharing its process."""
STAGES = ("compose", "accounts", "own", "render", "document", "gzip", "paint", "inputs")
LAG_PROBE = ROOT / "src" / "gpu_enricher" / "collector" / "lag.py"
SCRAPER = """
import os, sys, time, urllib.request
parent = os.getppid()
while os.getppid() == parent:
    try:
        urllib.request.urlopen(urllib.request.Request(
            sys.argv[1], headers={"Accept-Encoding": "gzip"}), timeout=5).read()
    except OSError:
        pass
    time.sleep(0.05)
"""


# -- the child: one exporter, its painting timed --------------------------------------------

def _timed(record: dict[str, list[float]], stage: str,
           fn: Callable[..., Any]) -> Callable[..., Any]:
    def wrapper(*args: Any, **kwargs: Any) -> Any:
        started = time.thread_time()
        try:
            return fn(*args, **kwargs)
        finally:
            record[stage].append(time.thread_time() - started)
    return wrapper


def _patch(record: dict[str, list[float]]) -> None:
    """Timers around whichever stages this tree has, by the names both trees use."""
    import gpu_enricher.collector.accounts as accounts
    import gpu_enricher.collector.loop as loop
    import gpu_enricher.collector.picture as picture

    def wrap(owner: Any, name: str, stage: str) -> None:
        if hasattr(owner, name):
            setattr(owner, name, _timed(record, stage, getattr(owner, name)))

    wrap(picture, "compose", "compose")
    wrap(accounts.PodAccounts, "families", "accounts")
    wrap(picture.Painter, "paint", "paint")
    wrap(picture, "encode", "document")
    wrap(picture.OwnMetrics, "render", "own")
    wrap(picture.Exposition, "from_families", "render")
    wrap(picture.Exposition, "compress", "gzip")  # this tree: both bodies, in the painter
    wrap(loop.Collector, "_inputs", "inputs")
    wrap(loop.Collector, "_sitting", "inputs")
    if not hasattr(picture.Exposition, "compress"):  # the baseline: once per paint, text only
        paint = picture.Painter.paint

        def paint_then_gzip(self: Any, *args: Any, **kwargs: Any) -> Any:
            made = paint(self, *args, **kwargs)
            started = time.thread_time()
            gzip.compress(made.exposition.text, compresslevel=6, mtime=0)
            record["gzip"].append(time.thread_time() - started)
            return made
        picture.Painter.paint = paint_then_gzip


def _probe_passes(record: dict[str, list[float]]) -> None:
    """The loop's longest lag through each pass, by this tree's probe loaded into any tree."""
    import asyncio

    import gpu_enricher.collector.loop as loop

    spec = importlib.util.spec_from_file_location("bench_lag_probe", LAG_PROBE)
    assert spec is not None and spec.loader is not None
    lag = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(lag)
    collect_once = loop.Collector.collect_once
    probes: dict[int, Any] = {}

    async def probed(self: Any) -> None:
        probe = probes.get(id(self))
        if probe is None:
            probe = probes[id(self)] = lag.LoopLagProbe(asyncio.get_running_loop())
        probe.start()
        try:
            await collect_once(self)
        finally:
            record["lag"].append(probe.stop())
    loop.Collector.collect_once = probed


def _design(name: str) -> None:
    """This tree painted as another design would: `thread` (as shipped: its own thread and
    painting.SWITCH_INTERVAL_SECONDS), `thread-<ms>` (that switch interval instead; 5 is
    CPython's own), `loop` (on the loop)."""
    if name == "thread":
        return
    import gpu_enricher.collector.loop as loop
    import gpu_enricher.collector.painting as painting

    if name.startswith("thread-") and name.endswith("ms"):
        interval = float(name.removeprefix("thread-").removesuffix("ms")) / 1000
        loop.prefer_the_loop = lambda: sys.setswitchinterval(interval)  # type: ignore[attr-defined]
    elif name == "loop":
        async def on_the_loop(self: Any, *args: Any, **kwargs: Any) -> Any:
            return self.paint_here(*args, **kwargs)

        painting.PaintingThread.paint = on_the_loop  # type: ignore[method-assign]
    else:
        raise SystemExit(f"unknown design {name!r}")


def child(args: argparse.Namespace) -> None:
    record: dict[str, list[float]] = {stage: [] for stage in (*STAGES, "lag")}
    if args.design:
        _design(args.design)
    _patch(record)
    _probe_passes(record)
    from gpu_enricher.cli.main import main

    def finish() -> None:
        while len(record["lag"]) < args.warmup + args.passes:
            time.sleep(0.05)
        out = {stage: values[args.warmup:] if stage != "inputs" else values[-args.passes:]
               for stage, values in record.items()}
        Path(args.out).write_text(json.dumps(out))
        os._exit(0)

    threading.Thread(target=finish, daemon=True).start()
    port = free_port()
    # As Prometheus does: a gzip scrape, every 50 ms here, so the bodies asked for are made.
    subprocess.Popen([PYTHON, "-c", SCRAPER, f"http://127.0.0.1:{port}/metrics"])
    argv = ["-a", f"127.0.0.1:{port}", "-c", str(args.interval_ms)]
    if args.kubelet_socket:
        argv += ["-k", "--pod-resources-kubelet-socket", args.kubelet_socket,
                 "--process-metrics"]
    else:
        argv.append("--simulate")
        if args.scenario_file:
            argv.append(args.scenario_file)
    sys.exit(main(argv))


# -- the parent: trees and scenarios in alternation --------------------------------------------

def one_run(tree: Path, scenario: str, args: argparse.Namespace,
            design: str | None) -> dict[str, list[float]]:
    with tempfile.TemporaryDirectory(prefix="gpu-enricher-pass-cost-") as tmp:
        out = Path(tmp) / "record.json"
        file = SCENARIOS[scenario]
        command = [PYTHON, str(Path(__file__).resolve()), "--child", "--out", str(out),
                   "--passes", str(args.passes), "--warmup", str(args.warmup),
                   "--interval-ms", str(args.interval_ms)]
        if file is not None:
            command += ["--scenario-file", str(file)]
        if design is not None:
            command += ["--design", design]
        env = {**os.environ, "PYTHONPATH": f"{tree / 'src'}{os.pathsep}{ROOT / 'bench'}"}
        kubelet = None
        if scenario == "mig-nvml":
            node = Node(build_fake_nvml(DEFAULT_BUILD_DIR), Path(tmp), None, None)
            env.update(node.env)
            kubelet = KubeletProc(node.socket(), churn=0, cpus=None)
            kubelet.start()
            command += ["--kubelet-socket", str(kubelet.socket_path)]
        try:
            subprocess.run(command, env=env, check=True, stdout=subprocess.DEVNULL,
                           stderr=subprocess.DEVNULL,
                           timeout=60 + (args.passes + args.warmup) * args.interval_ms / 500)
        finally:
            if kubelet is not None:
                kubelet.stop()
        recorded: dict[str, list[float]] = json.loads(out.read_text())
        return recorded


def _ms(values: list[float]) -> str:
    return f"{median(values) * 1000:.2f}" if values else "-"


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--baseline", help="a commit to measure against, in the same run")
    parser.add_argument("--scenarios", default=",".join(SCENARIOS))
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--passes", type=int, default=150)
    parser.add_argument("--warmup", type=int, default=20)
    parser.add_argument("--interval-ms", type=int, default=100)
    parser.add_argument("--designs", default="thread",
                        help="this tree's designs to run, comma-separated: thread (as "
                             "shipped), thread-5ms, loop")
    parser.add_argument("--child", action="store_true", help=argparse.SUPPRESS)
    parser.add_argument("--design", help=argparse.SUPPRESS)
    parser.add_argument("--out", help=argparse.SUPPRESS)
    parser.add_argument("--scenario-file", help=argparse.SUPPRESS)
    parser.add_argument("--kubelet-socket", help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.child:
        child(args)
        return 0
    scenarios = args.scenarios.split(",")
    with (baseline_tree(args.baseline) if args.baseline
          else contextlib.nullcontext(None)) as baseline:
        trees: dict[str, tuple[Path, str | None]] = {
            f"this tree, {d}" if d != "thread" else "this tree": (ROOT, d)
            for d in args.designs.split(",")}
        if baseline is not None:
            trees["baseline"] = (baseline, None)
        rounds: dict[tuple[str, str], list[dict[str, list[float]]]] = {}
        for round_ in range(args.rounds):
            for scenario in scenarios:
                for label, (tree, design) in trees.items():
                    recorded = one_run(tree, scenario, args, design)
                    rounds.setdefault((scenario, label), []).append(recorded)
                    print(f"round {round_ + 1} {scenario} {label}: paint "
                          f"{_ms(recorded['paint'])} ms, lag max "
                          f"{max(recorded['lag']) * 1000:.2f} ms", file=sys.stderr)
    print(f"CPU ms per pass (medians over {args.passes} passes, then over {args.rounds} "
          f"rounds); loop lag: the longest wait of a callback posted to the loop during a pass, "
          f"median and worst pass.\n")
    columns = (*STAGES, "lag")
    print("| scenario | tree | " + " | ".join(columns) + " | lag, worst pass |")
    print("|---|---|" + "---:|" * (len(columns) + 1))
    for (scenario, label), runs in sorted(rounds.items()):
        cells = [f"{median([median(r[s]) for r in runs if r[s]]) * 1000:.2f}"
                 if any(r[s] for r in runs) else "-" for s in columns]
        worst = max(max(r["lag"]) for r in runs) * 1000
        print(f"| {scenario} | {label} | " + " | ".join(cells) + f" | {worst:.2f} |")
    return 0


if __name__ == "__main__":
    sys.exit(main())
