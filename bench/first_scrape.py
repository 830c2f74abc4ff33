"""From process start to the first scrape with every holder labelled (issue 32), this tree
against a baseline commit (today's behaviour before issue 32), per kind of holding and interval.

    .venv/bin/python bench/first_scrape.py                          # 3 runs, -c 1000,5000,30000
    .venv/bin/python bench/first_scrape.py --runs 1 --intervals 5000
    .venv/bin/python bench/first_scrape.py --baseline HEAD~3

Each run starts `python -m gpu_enricher --simulate [FILE] -c N` (the tree's own sources on
PYTHONPATH, this venv's packages), polls /ready every 10 ms, then /metrics every 50 ms until
every holder of the kind in question is labelled (tests/holders.py reads who holds what from the
scenario file, not from the exporter), or the interval + 10 s pass. Kinds: the device plugin
(the built-in node's whole H100), MIG (bench/scenarios/mig-8x7-110pods.yaml: 56 instances),
time-sliced replicas (4 H100s, --kubernetes-virtual-gpus), MPS (the built-in node's A100 and its
clients' processes) and DRA (the built-in node's claimed L4 and MIG instance). The baseline
tree is a `git worktree` of --baseline, removed at the end. Prints a markdown table on stdout:
medians of the runs, and how many first scrapes after /ready were whole.
"""

from __future__ import annotations

import argparse
import shlex
import statistics
import subprocess
import sys
import tempfile
import time
from dataclasses import dataclass
from pathlib import Path

import yaml
from _common import PYTHON, ROOT, baseline_tree, free_port, http_get

sys.path.insert(0, str(ROOT))
from tests.holders import Expected, builtin_scenario, expected, unlabelled

BASELINE = "f16ed69"
"""The last commit before issue 32 (issue 31's docs): today's behaviour."""
MIG_FILE = ROOT / "bench" / "scenarios" / "mig-8x7-110pods.yaml"
DRA_DEVICES = ((3, None), (2, 2))
"""The built-in node's devices held through DRA claims: the L4, the 2g.20gb instance."""


@dataclass(frozen=True)
class Kind:
    name: str
    args: tuple[str, ...]
    want: Expected


def kinds(tmp: Path) -> list[Kind]:
    builtin = expected(builtin_scenario())
    sliced = {"seed": 5, "gpus": [{"model": "NVIDIA H100 80GB HBM3", "processes": [
        {"pid": 100 + 10 * g + n, "used_memory_mib": 512, "pod": f"serve/r-{g}-{n}"}
        for n in range(2)]} for g in range(4)],
        "pods": [{"namespace": "serve", "pod": f"r-{g}-{n}", "container": "main",
                  "gpus": [g], "replica": n} for g in range(4) for n in range(2)]}
    sliced_file = tmp / "time-sliced.yaml"
    sliced_file.write_text(yaml.safe_dump(sliced), encoding="utf-8")
    return [
        Kind("device plugin (built-in H100)", ("--simulate",),
             builtin.only(lambda k: k == (0, None))),
        Kind("MIG (8 x 7, 110 pods)", ("--simulate", str(MIG_FILE)),
             expected(yaml.safe_load(MIG_FILE.read_text(encoding="utf-8")))),
        Kind("time-sliced (4 x 2, virtual GPUs)",
             ("--simulate", str(sliced_file), "--kubernetes-virtual-gpus"),
             expected(sliced, virtual_gpus=True)),
        Kind("MPS (built-in A100)", ("--simulate",), builtin.only(lambda k: k == (1, None))),
        Kind("DRA (built-in L4, MIG slice)", ("--simulate",),
             builtin.only(lambda k: k in DRA_DEVICES)),
    ]


@dataclass
class Run:
    ready: float
    first_whole: bool
    whole: float | None  # None: not within the time allowed


def one_run(tree: Path, kind: Kind, interval: int) -> Run:
    port = free_port()
    env = {"PYTHONPATH": str(tree / "src"), "NODE_NAME": "node-a", "PATH": "/usr/bin:/bin"}
    started = time.monotonic()
    proc = subprocess.Popen([PYTHON, "-m", "gpu_enricher", *kind.args, "-c", str(interval),
                             "-a", f"127.0.0.1:{port}"], env=env, cwd=tree,
                            stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    base = f"http://127.0.0.1:{port}"
    try:
        while True:
            try:
                if http_get(base + "/ready")[0] == 200:
                    break
            except OSError:
                pass
            if proc.poll() is not None:
                raise RuntimeError(f"{shlex.join(kind.args)} exited")
            time.sleep(0.01)
        ready = time.monotonic() - started
        first = True
        deadline = started + interval / 1000 + 10
        while time.monotonic() < deadline:
            body = http_get(base + "/metrics")[2].decode()
            if not unlabelled(body, kind.want):
                return Run(ready, first, time.monotonic() - started)
            first = False
            time.sleep(0.05)
        return Run(ready, False, None)
    finally:
        proc.terminate()
        proc.wait(timeout=15)


def median(values: list[float]) -> str:
    return f"{statistics.median(values):.2f}" if values else "-"


def summary(runs: list[Run]) -> tuple[str, str, str]:
    whole = [r.whole for r in runs if r.whole is not None]
    labelled = median(whole) + ("" if len(whole) == len(runs)
                                else f" ({len(runs) - len(whole)} never)")
    return (median([r.ready for r in runs]), f"{sum(r.first_whole for r in runs)}/{len(runs)}",
            labelled)


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--runs", type=int, default=3)
    parser.add_argument("--intervals", default="1000,5000,30000", help="-c values, ms")
    parser.add_argument("--baseline", default=BASELINE, help=f"git ref (default {BASELINE})")
    args = parser.parse_args()
    intervals = [int(i) for i in args.intervals.split(",")]
    print(f"# {shlex.join(['.venv/bin/python', 'bench/first_scrape.py', *sys.argv[1:]])}\n")
    with (tempfile.TemporaryDirectory(prefix="gpu-enricher-first-scrape-") as tmp_name,
          baseline_tree(args.baseline) as baseline):
        tmp = Path(tmp_name)
        rows = []
        for kind in kinds(tmp):
            for interval in intervals:
                results = {}
                for label, tree in (("baseline", baseline), ("this tree", ROOT)):
                    runs = [one_run(tree, kind, interval) for _ in range(args.runs)]
                    results[label] = summary(runs)
                    print(f"{kind.name} -c {interval} {label}: {results[label]}",
                          file=sys.stderr)
                rows.append((kind.name, interval, results))
    print(f"Seconds from process start (medians of {args.runs} runs): /ready; first scrape "
          f"after /ready whole (of {args.runs}); every holder labelled. Baseline "
          f"{args.baseline}.\n")
    print("| holding | -c ms | ready, before | ready, now | first scrape whole, before | now "
          "| all labelled, before | now |")
    print("|---|---:|---:|---:|---:|---:|---:|---:|")
    for name, interval, results in rows:
        (b_ready, b_first, b_whole), (n_ready, n_first, n_whole) = (
            results["baseline"], results["this tree"])
        print(f"| {name} | {interval} | {b_ready} | {n_ready} | {b_first} | {n_first} "
              f"| {b_whole} | {n_whole} |")
    return 0


if __name__ == "__main__":
    sys.exit(main())
