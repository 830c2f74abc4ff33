"""Series per node from real expositions: the simulated node at bench sizes, scraped once.

    .venv/bin/python bench/series.py                    # 3 nodes x process metrics off/on
    .venv/bin/python bench/series.py --drop-labels UUID,pci_bus_id,device,modelName
    .venv/bin/python bench/series.py --drop-labels hostname     # what the second host label costs
    .venv/bin/python bench/series.py --naming 4.9               # dcgm-exporter 4.9's names

For each node (bench/scenarios.py builds its scenario file: 8 H100s; 8 H100s x 7 `1g.10gb` MIG
instances; 8 H100s time-sliced 4 ways with --kubernetes-virtual-gpus; 110 pods on each, one GPU
process per holding pod) and each of --process-metrics off and on, it starts
`python -m gpu_enricher --simulate FILE -c 500` (the bundled default counters of --naming),
waits until the pods are attributed and the series count is steady, scrapes /metrics once
plain and once with gzip, and counts the series by family. With --drop-labels it runs each
again with that flag and checks that the series count is the same, no series is duplicated
and the dropped labels are gone from the DCGM and process series. Prints markdown tables (per
node; per family; the fleet at --nodes and --scrape-interval) on stdout, progress on stderr.
See docs/scale.md.
"""

from __future__ import annotations

import argparse
import os
import shlex
import sys
import tempfile
import time
from collections import Counter
from dataclasses import dataclass, field
from pathlib import Path

from _common import ROOT, Server, exporter_argv, free_port, http_get
from prometheus_client.parser import text_string_to_metric_families
from scenarios import build, dump

PROCESS_FAMILIES = ("gpu_enricher_process_", "gpu_enricher_pod_",
                    "gpu_enricher_unallocated_process_info")
BYTES_PER_SERIES = 3000
"""Prometheus head memory per active series, rule of thumb (Robust Perception, "Why does
Prometheus use so much RAM?", Prometheus >= 2.20: ~3 kB per series in the head)."""


@dataclass(frozen=True)
class Node:
    name: str
    gpus: int
    mig: int
    gpu_pods: int | None  # None: one per device
    flags: tuple[str, ...] = ()


NODES = (
    Node("8 GPUs", 8, 0, None),
    Node("8 GPUs x 7 MIG", 8, 7, None),
    Node("8 GPUs x 4 time-sliced, virtual GPUs", 8, 0, 32, ("--kubernetes-virtual-gpus",)),
)


@dataclass
class Scrape:
    families: Counter[str] = field(default_factory=Counter)
    plain: int = 0
    gzipped: int = 0
    duplicates: int = 0
    leftover: int = 0  # DCGM / process series still carrying a dropped label

    def total(self, kind: str | None = None) -> int:
        return sum(n for name, n in self.families.items() if kind is None or kind_of(name) == kind)


def kind_of(family: str) -> str:
    if family.startswith(("DCGM_", "dcgm_")):
        return "dcgm"
    if family.startswith(PROCESS_FAMILIES):
        return "process"
    return "own"


def count(body: str, drop: frozenset[str]) -> Scrape:
    """Series by family as Prometheus reads them (labels sorted, escapes undone)."""
    result = Scrape()
    seen: set[tuple[str, frozenset[tuple[str, str]]]] = set()
    for family in text_string_to_metric_families(body):
        for sample in family.samples:
            key = (sample.name, frozenset(sample.labels.items()))
            result.duplicates += key in seen
            seen.add(key)
            result.families[family.name] += 1
            if kind_of(family.name) != "own" and drop & sample.labels.keys():
                result.leftover += 1
    return result


def _value(body: str, name: str) -> float | None:
    for line in body.splitlines():
        if line.startswith(name + " "):
            return float(line.split()[1])
    return None


def settled_body(server: Server, process_metrics: bool, timeout: float = 60.0) -> str:
    """The first body once the kubelet answered, the pod watch synced (process metrics) and
    three scrapes in a row, 0.4 s apart (a pass is 0.5 s), have the same series count."""
    deadline = time.monotonic() + timeout
    counts: list[int] = []
    while time.monotonic() < deadline:
        body = http_get(server.base + "/metrics")[2].decode()
        ready = _value(body, "gpu_enricher_kubelet_up") == 1 and (
            not process_metrics or _value(body, "gpu_enricher_kubernetes_synced") == 1)
        lines = sum(1 for line in body.splitlines() if line and not line.startswith("#"))
        counts = [*counts[-2:], lines] if ready else []
        if len(counts) == 3 and len(set(counts)) == 1:
            return body
        time.sleep(0.4)
    raise RuntimeError(f"{server.name}: the exposition never settled ({counts})")


def scrape(node: Node, scenario: Path, process_metrics: bool, drop: str | None,
           naming: str) -> Scrape:
    flags = [*node.flags, f"--process-metrics={'true' if process_metrics else 'false'}",
             f"--naming={naming}"]
    if drop:
        flags += ["--drop-labels", drop]
    port = free_port()
    env = {k: v for k, v in os.environ.items()
           if not k.startswith(("GPU_ENRICHER_", "DCGM_EXPORTER_", "FAKE_NVML_"))}
    env["NODE_NAME"] = "gpu-node-0001"  # a realistic host name: bytes count
    server = Server(node.name, exporter_argv(port, 500, ["--simulate", str(scenario), *flags]),
                    env, port)
    print(f"{node.name}: {shlex.join(flags)}", file=sys.stderr)
    server.start()
    try:
        server.wait_status("/ready", timeout=60)
        body = settled_body(server, process_metrics)
        gz = http_get(server.base + "/metrics", {"Accept-Encoding": "gzip"})[2]
    finally:
        server.stop()
    result = count(body, frozenset(drop.split(",")) if drop else frozenset())
    result.plain, result.gzipped = len(body.encode()), len(gz)
    return result


def fleet_lines(rows: list[tuple[Node, bool, Scrape]], nodes: int, interval: float) -> list[str]:
    out = [f"\nFleet of {nodes:,} such nodes, scraped every {interval:g} s (memory: "
           f"{BYTES_PER_SERIES} B per head series, a rule of thumb):\n",
           "| node | process metrics | series per node | series | samples/s | head memory |",
           "|---|---|---:|---:|---:|---:|"]
    for node, procs, s in rows:
        total = s.total() * nodes
        out.append(f"| {node.name} | {'on' if procs else 'off'} | {s.total():,} | {total:,} "
                   f"| {total / interval:,.0f} | {total * BYTES_PER_SERIES / 2**30:.1f} GiB |")
    return out


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--pods", type=int, default=110, help="pods per node (default 110)")
    parser.add_argument("--drop-labels", default=None,
                        help="also run each with --drop-labels NAMES and compare")
    parser.add_argument("--naming", choices=("classic", "4.9"), default="classic",
                        help="the bundled counters' names (default classic)")
    parser.add_argument("--nodes", type=int, default=1000, help="fleet size (default 1000)")
    parser.add_argument("--scrape-interval", type=float, default=15.0,
                        help="seconds (default 15)")
    parser.add_argument("--families", action="store_true",
                        help="also print every family (default: DCGM and process ones)")
    args = parser.parse_args()
    print(f"# {shlex.join(['.venv/bin/python', 'bench/series.py', *sys.argv[1:]])}\n")

    rows: list[tuple[Node, bool, Scrape]] = []
    dropped: list[Scrape] = []
    with tempfile.TemporaryDirectory(prefix="gpu-enricher-series-") as tmp:
        for node in NODES:
            scenario = Path(tmp) / f"{node.gpus}x{node.mig}-{node.gpu_pods}.yaml"
            scenario.write_text(dump(build(node.gpus, node.mig, args.pods, node.gpu_pods, 1, 0),
                                     "bench/series.py"))
            for procs in (False, True):
                rows.append((node, procs, scrape(node, scenario, procs, None, args.naming)))
                if args.drop_labels:
                    dropped.append(scrape(node, scenario, procs, args.drop_labels,
                                          args.naming))

    head = ("| node | process metrics | DCGM | process/pod | exporter's own | total "
            "| plain B | gzip B | B per series |")
    rule = "|---|---|---:|---:|---:|---:|---:|---:|---:|"
    if dropped:
        head += " with --drop-labels: plain B | gzip B | plain saved |"
        rule += "---:|---:|---:|"
    bundled = "default-counters.csv" if args.naming == "classic" else "default-counters-4.9.csv"
    print(f"Series per node, {args.pods} pods, bundled default counters "
          f"({ROOT.name}/src/gpu_enricher/fields/{bundled}):\n\n{head}\n{rule}")
    for n, (node, procs, s) in enumerate(rows):
        line = (f"| {node.name} | {'on' if procs else 'off'} | {s.total('dcgm'):,} "
                f"| {s.total('process'):,} | {s.total('own'):,} | {s.total():,} "
                f"| {s.plain:,} | {s.gzipped:,} | {s.plain / s.total():.0f} |")
        if dropped:
            d = dropped[n]
            assert d.total() == s.total(), (node.name, procs, d.total(), s.total())
            assert d.duplicates == 0 and d.leftover == 0, (node.name, d.duplicates, d.leftover)
            line += f" {d.plain:,} | {d.gzipped:,} | {1 - d.plain / s.plain:.0%} |"
        assert s.duplicates == 0, (node.name, s.duplicates)
        print(line)
    if dropped:
        print(f"\n--drop-labels {args.drop_labels}: same series count in every run, no "
              "duplicate series, no DCGM or process series left with a dropped label.")

    names = sorted({f for _, _, s in rows for f in s.families},
                   key=lambda f: (kind_of(f) != "dcgm", kind_of(f) != "process", f))
    if not args.families:
        names = [f for f in names if kind_of(f) != "own"] + ["(exporter's own, all)"]
    print("\nSeries per family:\n")
    print("| family | " + " | ".join(f"{node.name}, process metrics {'on' if p else 'off'}"
                                      for node, p, _ in rows) + " |")
    print("|---|" + "---:|" * len(rows))
    for name in names:
        cells = [s.total("own") if name.startswith("(") else s.families.get(name, 0)
                 for _, _, s in rows]
        print(f"| {name} | " + " | ".join(f"{c:,}" for c in cells) + " |")
    print("\n".join(fleet_lines(rows, args.nodes, args.scrape_interval)))
    return 0


if __name__ == "__main__":
    sys.exit(main())
