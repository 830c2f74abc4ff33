"""A standalone fake kubelet: pod-resources gRPC on a unix socket for a dense MIG node.

Serves `gpu_enricher.sim.fake_kubelet.server.FakeKubelet` with a node of 8 GPUs x 7 `1g.10gb`
MIG instances (the fake NVML library's UUIDs) and 110 pods (the kubelet's default max-pods):
56 pods each holding one MIG instance (`nvidia.com/mig-1g.10gb`, device id = the MIG device
UUID), some with a sidecar container, and 54 pods without GPUs (daemonsets and services with
1-3 containers; a few hold `example.com/rdma` devices).

`--gpu-devices ID,...` (with `--gpu-resource`, default `nvidia.com/gpu`): the GPU-holding pods
hold these devices instead, one pod each (a real node's GPU UUIDs; the rest of the 110 pods
as before).

`--churn N`: after every v1 `List` answer, N of the GPU-holding pods are replaced by pods of
new names holding the same devices (one churn event = one pod gone + one new pod), so pod
names never repeat. The replacement runs right after the answer is handed to gRPC (the
answer object is never mutated: `set_assignments` builds new messages).

Prints `ready <socket>` on stdout once serving, and on SIGTERM/SIGINT one JSON line with
`list_calls`, `churn_events`, `pod_names` (distinct pod names ever served) and `calls`.
See bench/README.md.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import signal
import sys
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from gpu_enricher.model import AllocatableDevices, PodAssignment
from gpu_enricher.sim.fake_kubelet.server import FakeKubelet

GPUS = 8
MIG_PER_GPU = 7
MIG_PROFILE_ID = 19  # 1g.10gb in tests/fake_nvml
MIG_RESOURCE = "nvidia.com/mig-1g.10gb"
RDMA_RESOURCE = "example.com/rdma"
RDMA_DEVICES = 16
MAX_PODS = 110
# Kubernetes' random-suffix alphabet (k8s.io/apimachinery/pkg/util/rand): no vowels, no 0/1/3.
_ALPHABET = "bcdfghjklmnpqrstvwxz2456789"


def fake_nvml_mig_env(gpus: int = GPUS, per_gpu: int = MIG_PER_GPU) -> str:
    """`FAKE_NVML_MIG` for `gpus` GPUs with `per_gpu` 1g.10gb instances (GI ids 1..per_gpu)."""
    spec = ",".join(f"{gi}:{MIG_PROFILE_ID}" for gi in range(1, per_gpu + 1))
    return ";".join(f"{i}={spec}" for i in range(gpus))


def mig_uuid(gpu: int, gi: int) -> str:
    return f"MIG-fa4e{gpu:04x}-{gi:04x}-5000-8000-000000000000"


def suffix(n: int, width: int = 5) -> str:
    """The n-th pod-name suffix: distinct for n < 27**width, looks like the kubelet's."""
    chars = []
    for _ in range(width):
        n, r = divmod(n, len(_ALPHABET))
        chars.append(_ALPHABET[r])
    return "".join(reversed(chars))


# (namespace, name prefix, containers with (name, devices of RDMA_RESOURCE)): non-GPU pods.
_SYSTEM_PODS: tuple[tuple[str, str, tuple[tuple[str, int], ...]], ...] = (
    ("kube-system", "kube-proxy", (("kube-proxy", 0),)),
    ("kube-system", "calico-node", (("calico-node", 0), ("install-cni", 0))),
    ("kube-system", "ebs-csi-node", (("ebs-plugin", 0), ("node-driver-registrar", 0),
                                     ("liveness-probe", 0))),
    ("kube-system", "coredns", (("coredns", 0),)),
    ("monitoring", "node-exporter", (("node-exporter", 0), ("kube-rbac-proxy", 0))),
    ("monitoring", "dcgm-exporter", (("exporter", 0),)),
    ("logging", "fluent-bit", (("fluent-bit", 0),)),
    ("gpu-operator", "nvidia-device-plugin-daemonset", (("nvidia-device-plugin", 0),
                                                        ("config-manager", 0))),
    ("gpu-operator", "nvidia-mig-manager", (("nvidia-mig-manager", 0),)),
    ("network-operator", "rdma-shared-dp-ds", (("rdma-shared-dp", 0),)),
)
_SERVICE_PODS: tuple[tuple[str, str, tuple[tuple[str, int], ...]], ...] = (
    ("data", "feature-store", (("server", 0), ("istio-proxy", 0))),
    ("data", "etl-worker", (("worker", 1), ("istio-proxy", 0))),
    ("web", "api-gateway", (("gateway", 0), ("istio-proxy", 0), ("otel-collector", 0))),
    ("ml-platform", "dataset-cache", (("cache", 1),)),
    ("ml-platform", "notebook-proxy", (("proxy", 0),)),
    ("batch", "report-job", (("job", 0),)),
)
_GPU_WORKLOADS: tuple[tuple[str, str, str | None], ...] = (
    # namespace, deployment/job name, sidecar container (or None)
    ("ml-training", "llama-finetune-worker", None),
    ("ml-training", "bert-pretrain", "log-shipper"),
    ("inference", "triton-resnet50", "istio-proxy"),
    ("inference", "vllm-mistral-7b", "istio-proxy"),
    ("research", "jupyter-gpu", None),
    ("research", "rl-sweep-trial", None),
    ("ml-platform", "embedding-batch", "metrics-agent"),
)


def _rs_hash(i: int) -> str:
    """A ReplicaSet-like hash, fixed per workload."""
    return f"{0x5D8F7B9C6D + 7919 * i:010x}"


class Node:
    """The node's pods; `churn(n)` replaces n GPU pods by new names (round robin over slots)."""

    def __init__(self, devices: Sequence[str] = (), resource: str = MIG_RESOURCE) -> None:
        self._names_made = 0
        self.names_seen: set[str] = set()
        self.churn_events = 0
        self._next_slot = 0
        self.resource = resource
        devices = list(devices) or [mig_uuid(g, gi) for g in range(GPUS)
                                    for gi in range(1, MIG_PER_GPU + 1)]
        # One slot per MIG device: (namespace, workload, rs hash, sidecar, device, pod name).
        self._gpu_slots: list[tuple[str, str, str, str | None, str]] = []
        self._gpu_names: list[str] = []
        for k, device in enumerate(devices):
            w = k % len(_GPU_WORKLOADS)
            namespace, workload, sidecar = _GPU_WORKLOADS[w]
            self._gpu_slots.append((namespace, workload, _rs_hash(w), sidecar, device))
            self._gpu_names.append(self._new_name(workload, _rs_hash(w)))
        self._static: list[PodAssignment] = []
        rdma = 0
        count = 0
        templates = _SYSTEM_PODS + _SERVICE_PODS
        n_static = MAX_PODS - len(devices)
        while count < n_static:
            namespace, prefix, containers = templates[count % len(templates)]
            name = self._new_name(prefix, _rs_hash(100 + count % len(templates)))
            for cname, n_rdma in containers:
                ids = tuple(f"rdma-{(rdma + j) % RDMA_DEVICES}" for j in range(n_rdma))
                rdma += n_rdma
                self._static.append(PodAssignment(namespace, name, cname,
                                                  RDMA_RESOURCE if ids else "", ids))
            count += 1

    def _new_name(self, prefix: str, rs_hash: str) -> str:
        name = f"{prefix}-{rs_hash}-{suffix(self._names_made)}"
        self._names_made += 1
        self.names_seen.add(name)
        return name

    @property
    def pods(self) -> int:
        return len(self._gpu_names) + len({(a.namespace, a.pod) for a in self._static})

    def assignments(self) -> list[PodAssignment]:
        result: list[PodAssignment] = []
        for (namespace, _, _, sidecar, device), name in zip(self._gpu_slots, self._gpu_names,
                                                            strict=True):
            main = "main" if sidecar is None else "app"
            result.append(PodAssignment(namespace, name, main, self.resource, (device,)))
            if sidecar is not None:
                result.append(PodAssignment(namespace, name, sidecar, "", ()))
        return result + self._static

    def allocatable(self) -> list[AllocatableDevices]:
        return [
            AllocatableDevices(self.resource, tuple(s[4] for s in self._gpu_slots)),
            AllocatableDevices(RDMA_RESOURCE, tuple(f"rdma-{i}" for i in range(RDMA_DEVICES))),
        ]

    def churn(self, n: int) -> None:
        for _ in range(n):
            slot = self._next_slot
            self._next_slot = (slot + 1) % len(self._gpu_slots)
            _, workload, rs_hash, _, _ = self._gpu_slots[slot]
            self._gpu_names[slot] = self._new_name(workload, rs_hash)
            self.churn_events += 1


class ChurningKubelet(FakeKubelet):
    """FakeKubelet replacing `churn` pods after each v1 `List` answer (its `after_list` hook)."""

    def __init__(self, socket_path: Path, node: Node, churn: int) -> None:
        super().__init__(socket_path)
        self.node = node
        self.churn = churn
        self.set_assignments(node.assignments())
        self.set_allocatable(node.allocatable())
        if churn > 0:
            self.after_list = self._replace

    def _replace(self) -> None:
        self.node.churn(self.churn)
        self.set_assignments(self.node.assignments())


async def serve(socket_path: Path, churn: int, node: Node) -> dict[str, Any]:
    kubelet = ChurningKubelet(socket_path, node, churn)
    stop = asyncio.Event()
    loop = asyncio.get_running_loop()
    for sig in (signal.SIGTERM, signal.SIGINT):
        loop.add_signal_handler(sig, stop.set)
    await kubelet.start()
    print(f"ready {socket_path} pods={node.pods} churn={churn}", flush=True)
    try:
        await stop.wait()
    finally:
        await kubelet.stop(grace=0.5)
    return {"list_calls": kubelet.calls["v1.List"], "churn_events": node.churn_events,
            "pod_names": len(node.names_seen), "calls": dict(kubelet.calls)}


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--socket", type=Path, required=True, help="unix socket path to serve")
    parser.add_argument("--churn", type=int, default=0,
                        help="GPU pods replaced by new names after every List (default 0)")
    parser.add_argument("--gpu-devices", default="",
                        help="comma-separated device IDs the GPU pods hold, one each (default: "
                             "the 56 MIG instances of the fake library's 8 GPUs)")
    parser.add_argument("--gpu-resource", default="nvidia.com/gpu",
                        help="the resource of --gpu-devices (default nvidia.com/gpu)")
    parser.add_argument("--print-mig-env", action="store_true",
                        help="print the FAKE_NVML_MIG value for this node and exit")
    args = parser.parse_args()
    if args.print_mig_env:
        print(fake_nvml_mig_env())
        return 0
    devices = [d.strip() for d in args.gpu_devices.split(",") if d.strip()]
    node = Node(devices, args.gpu_resource) if devices else Node()
    stats = asyncio.run(serve(args.socket, args.churn, node))
    print(json.dumps(stats), flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
