"""The simulated node's cluster side: the kubelet, the Kubernetes API and the /proc tree its
processes live in, so `--simulate` runs the same attribution code as a real node.

The pure half builds pod objects and file contents; `SimulatedCluster` starts the fakes (a
kubelet on a private socket, an API server on loopback) and writes the /proc tree and the
kubelet log names into one temporary directory, removed on every way out: stop or close, an
exception (KeyboardInterrupt included) that ends the process, SIGTERM before the event loop
handles it.
"""

import asyncio
import contextlib
import dataclasses
import hashlib
import shutil
import signal
import tempfile
import threading
import weakref
from collections.abc import Mapping
from pathlib import Path
from types import FrameType

from .config import Config
from .model import ClaimAllocation, PodMeta, SliceDevice
from .sim_model import Scenario, SimProcess, mig_uuid

BOOT_TICKS = 4_200_000  # a start time far after boot, the same every run


def container_id(namespace: str, pod: str, container: str) -> str:
    """A simulated container's 64-hex runtime ID, stable across runs."""
    return hashlib.sha256(f"ctr:{namespace}/{pod}/{container}".encode()).hexdigest()


def pod_metas(scenario: Scenario) -> tuple[PodMeta, ...]:
    """Every pod of the scenario as the Kubernetes API would list it (Running)."""
    merged: dict[tuple[str, str], PodMeta] = {}
    for spec in scenario.pod_specs:
        key = (spec.namespace, spec.pod)
        known = merged.get(key)
        containers = dict(known.containers) if known is not None else {}
        containers[container_id(spec.namespace, spec.pod, spec.container)] = spec.container
        labels = {**(known.labels if known is not None else {}), **spec.labels}
        merged[key] = PodMeta(spec.uid, spec.namespace, spec.pod, labels, "Running", containers)
    return tuple(merged.values())


DRA_DRIVER = "gpu.nvidia.com"


def dra_device_name(gpu_index: int, gpu_instance: int | None) -> str:
    """Device names in the style of NVIDIA's DRA driver: `gpu-0`, `gpu-2-mig-2`."""
    return f"gpu-{gpu_index}" if gpu_instance is None else f"gpu-{gpu_index}-mig-{gpu_instance}"


def claim_allocations(scenario: Scenario, pool: str) -> tuple[ClaimAllocation, ...]:
    """What the kubelet lists under `dynamic_resources` for the scenario's claims."""
    return tuple(
        ClaimAllocation(spec.namespace, spec.pod, spec.container, spec.claim, spec.namespace,
                        DRA_DRIVER, pool, dra_device_name(*device))
        for spec in scenario.pod_specs if spec.claim is not None
        for device in spec.claim_devices)


def slice_devices(scenario: Scenario, pool: str) -> tuple[SliceDevice, ...]:
    """The devices the simulated DRA driver publishes: the claimed ones."""
    gpus = {gpu.index: gpu for gpu in scenario.gpus}
    devices: dict[str, SliceDevice] = {}
    for spec in scenario.pod_specs:
        for index, gi in spec.claim_devices:
            gpu = gpus[index]
            name = dra_device_name(index, gi)
            if gi is None:
                devices[name] = SliceDevice(DRA_DRIVER, pool, name, gpu.uuid, "gpu")
            else:
                profile = next(i.profile for i in gpu.instances if i.gpu_instance_id == gi)
                devices[name] = SliceDevice(DRA_DRIVER, pool, name, mig_uuid(gpu.uuid, gi), "mig",
                                            gpu.uuid, profile)
    return tuple(devices.values())


def _cgroup_line(process: SimProcess, pods: Mapping[tuple[str, str], PodMeta]) -> str:
    """containerd with the systemd driver on cgroup v2, as on EKS (cgroup-paths.md)."""
    meta = pods.get(process.pod) if process.pod is not None else None
    if meta is None:
        return "0::/system.slice/gpu-burn.service\n"
    name = process.container or next(iter(meta.containers.values()))
    cid = container_id(meta.namespace, meta.name, name)
    uid = meta.uid.replace("-", "_")
    return ("0::/kubepods.slice/kubepods-burstable.slice/kubepods-burstable-pod"
            f"{uid}.slice/cri-containerd-{cid}.scope\n")


def proc_files(scenario: Scenario) -> dict[str, str]:
    """`<pid>/stat`, `<pid>/comm`, `<pid>/cgroup` for every simulated GPU process."""
    pods = {(p.namespace, p.name): p for p in pod_metas(scenario)}
    files: dict[str, str] = {}
    for gpu in scenario.gpus:
        for proc in gpu.processes:
            # Field 22 (start time) after the command in parentheses, as the kernel writes it.
            start = str(BOOT_TICKS + proc.pid)
            fields = ["S", "1", str(proc.pid), str(proc.pid), *["0"] * 15, start]
            files[f"{proc.pid}/stat"] = f"{proc.pid} ({proc.name}) {' '.join(fields)} 0 0\n"
            files[f"{proc.pid}/comm"] = proc.name + "\n"
            files[f"{proc.pid}/cgroup"] = _cgroup_line(proc, pods)
    return files


def write_proc_root(scenario: Scenario, root: Path) -> Path:
    for relative, text in proc_files(scenario).items():
        path = root / relative
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(text, encoding="utf-8")
    return root


def log_names(scenario: Scenario) -> list[str]:
    """`pods/<ns>_<pod>_<uid>` and `containers/<pod>_<ns>_<container>-<id>.log` entries."""
    names: list[str] = []
    for meta in pod_metas(scenario):
        names.append(f"pods/{meta.namespace}_{meta.name}_{meta.uid}")
        names += [f"containers/{meta.name}_{meta.namespace}_{container}-{cid}.log"
                  for cid, container in meta.containers.items()]
    return names


def _exit_on_sigterm(signum: int, _frame: FrameType | None) -> None:
    """SIGTERM before the event loop takes it over (`app.serve`): unwind, so that finally
    blocks and exit handlers remove the directory, instead of dying where we stand."""
    raise SystemExit(128 + signum)


def _take_sigterm() -> bool:
    """Install `_exit_on_sigterm` where SIGTERM would kill us outright (the main thread, the
    default disposition); whether it was installed."""
    if (threading.current_thread() is not threading.main_thread()
            or signal.getsignal(signal.SIGTERM) is not signal.SIG_DFL):
        return False
    signal.signal(signal.SIGTERM, _exit_on_sigterm)
    return True


class SimulatedCluster:
    """What a real node would offer around the simulated GPUs."""

    def __init__(self, scenario: Scenario, node_name: str) -> None:
        from .kube.fake_objects import pod_object
        from .kube.fake_server import FakeKubeApi
        from .kube.fake_slices import slice_object
        from .kubelet.fake_server import FakeKubelet

        self.scenario, self.node_name = scenario, node_name
        self._churn: asyncio.Task[None] | None = None
        # SIGTERM is ours before the directory exists, and held off until its removal is
        # registered: one arriving in between would leave it behind (seen ~1 in 30 starts).
        self._owns_sigterm = _take_sigterm()
        held = signal.pthread_sigmask(signal.SIG_BLOCK, {signal.SIGTERM, signal.SIGINT})
        try:
            self.directory = Path(tempfile.mkdtemp(prefix="gpu-enricher-sim-"))
            # Runs once: from close(), or at interpreter exit when an exception ended the
            # process before anyone could call close().
            self._remove = weakref.finalize(self, shutil.rmtree, self.directory,
                                            ignore_errors=True)
        finally:
            signal.pthread_sigmask(signal.SIG_SETMASK, held)
        try:
            self.kubelet: FakeKubelet = FakeKubelet(self.directory / "kubelet.sock")
            self.kubelet.set_assignments(scenario.pods)
            self.kubelet.set_claims(claim_allocations(scenario, node_name))
            self.kubelet.set_allocatable(scenario.allocatable())
            self.api: FakeKubeApi = FakeKubeApi()
            self.api.set_pods(pod_object(meta, node_name) for meta in pod_metas(scenario))
            devices = slice_devices(scenario, node_name)
            if devices:  # the simulated DRA driver's one slice: its pool is the node
                self.api.set_slices([slice_object(node_name, DRA_DRIVER, node_name,
                                                  list(devices))])
            self.proc_root = write_proc_root(scenario, self.directory / "proc")
            self.log_root = self.directory / "log"
            for name in log_names(scenario):
                path = self.log_root / name
                path.parent.mkdir(parents=True, exist_ok=True)
                if name.startswith("pods/"):
                    path.mkdir(exist_ok=True)
                else:
                    path.touch()
        except BaseException:
            self.close()
            raise

    def configure(self, config: Config) -> Config:
        """Point the exporter at the fakes."""
        return dataclasses.replace(config, proc_root=self.proc_root,
                                   kubelet_log_root=self.log_root)

    async def start(self) -> None:
        await self.kubelet.start()
        await self.api.start()
        if self.scenario.churn_pods_per_second:
            from .sim_churn import run_churn

            self._churn = asyncio.create_task(run_churn(self, self.scenario), name="sim-churn")

    async def stop(self) -> None:
        try:
            if self._churn is not None:
                self._churn.cancel()
                with contextlib.suppress(asyncio.CancelledError):
                    await self._churn
            await self.api.stop()
            await self.kubelet.stop()
        finally:
            self.close()

    def close(self) -> None:
        """Remove the directory and give SIGTERM back to its default; idempotent, so that
        stop() and the exporter's own exit path may both call it."""
        self._remove()
        if self._owns_sigterm and signal.getsignal(signal.SIGTERM) is _exit_on_sigterm:
            signal.signal(signal.SIGTERM, signal.SIG_DFL)
        self._owns_sigterm = False
