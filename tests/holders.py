"""Who holds and who uses each device of a `--simulate` scenario, read from the scenario file
itself (not from the exporter), and what a scrape shows of them: issue 32's test and
`bench/first_scrape.py` judge "every holder labelled" by it."""

from collections.abc import Callable, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import yaml
from prometheus_client.parser import text_string_to_metric_families

DeviceKey = tuple[int, int | None]  # (GPU index, GPU instance ID or None)
Pod = tuple[str, str]  # (namespace, pod)
DEVICE_FAMILY = "DCGM_FI_DEV_FB_USED"  # every GPU and MIG instance has it in the bundled list
PROCESS_FAMILY = "gpu_enricher_process_memory_used_bytes"


@dataclass(frozen=True)
class Expected:
    holders: Mapping[DeviceKey, frozenset[Pod]]
    """Held devices: the pods the kubelet says hold each (admin-access claims excluded)."""
    processes: Mapping[tuple[int, int], Pod]
    """(GPU index, PID) → the pod its process runs in (processes in no pod left out)."""
    virtual_gpus: bool = False
    """--kubernetes-virtual-gpus: a shared device's series carry every holder, not one."""

    def only(self, keep: Callable[[DeviceKey], bool]) -> "Expected":
        """The devices `keep` selects, and the processes on their GPUs."""
        return Expected({k: v for k, v in self.holders.items() if keep(k)},
                        {k: v for k, v in self.processes.items()
                         if any(keep(d) and d[0] == k[0] for d in self.holders)},
                        self.virtual_gpus)


def _pod(text: str) -> Pod:
    namespace, _, name = text.partition("/")
    return namespace, name


def expected(scenario: Mapping[str, Any], virtual_gpus: bool = False) -> Expected:
    holders: dict[DeviceKey, set[Pod]] = {}
    for entry in scenario.get("pods", ()):
        if entry.get("admin_access"):
            continue
        pod = (entry["namespace"], entry["pod"])
        for gpu in entry.get("gpus", ()):
            holders.setdefault((gpu, None), set()).add(pod)
        for gpu, gi in entry.get("mig", ()):
            holders.setdefault((gpu, gi), set()).add(pod)
    processes = {(index, proc["pid"]): _pod(proc["pod"])
                 for index, gpu in enumerate(scenario["gpus"])
                 for proc in gpu.get("processes", ()) if proc.get("pod")}
    return Expected({k: frozenset(v) for k, v in holders.items()}, processes, virtual_gpus)


def builtin_scenario() -> Mapping[str, Any]:
    path = Path(__file__).parents[1] / "src" / "gpu_enricher" / "sim" / "builtin-scenario.yaml"
    document: Mapping[str, Any] = yaml.safe_load(path.read_text(encoding="utf-8"))
    return document


def unlabelled(body: str, want: Expected, processes: bool = True) -> list[str]:
    """What a scrape shows without its holder: held devices whose series carry none of their
    pods (with virtual GPUs: not every one), and pods' processes without their pod. [] when
    the picture is whole."""
    pods_on: dict[DeviceKey, set[Pod]] = {}
    process_pod: dict[tuple[int, int], Pod | None] = {}
    for family in text_string_to_metric_families(body):
        for sample in family.samples:
            labels = sample.labels
            if family.name == DEVICE_FAMILY:
                gi = labels.get("GPU_I_ID")
                key = (int(labels["gpu"]), int(gi) if gi else None)
                pods = pods_on.setdefault(key, set())
                if "pod" in labels:
                    pods.add((labels["namespace"], labels["pod"]))
            elif family.name == PROCESS_FAMILY:
                process_pod[(int(labels["gpu"]), int(labels["pid"]))] = (
                    (labels["namespace"], labels["pod"]) if "pod" in labels else None)
    missing = []
    for key, holders in sorted(want.holders.items(), key=str):
        shown = pods_on.get(key, set())
        whole = holders <= shown if want.virtual_gpus else bool(holders & shown)
        if not whole:
            missing.append(f"device {key} held by {sorted(holders)} shows {sorted(shown)}")
    if processes:
        for (gpu, pid), pod in sorted(want.processes.items()):
            if process_pod.get((gpu, pid)) != pod:
                missing.append(f"process {pid} on GPU {gpu} of {pod} shows "
                               f"{process_pod.get((gpu, pid), 'no series')}")
    return missing
