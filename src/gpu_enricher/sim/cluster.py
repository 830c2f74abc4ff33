"""The simulated node's cluster side: the kubelet, the Kubernetes API and the /proc tree its
processes live in, so `--simulate` runs the same attribution code as a real node.

`SimulatedCluster` starts the fakes (a kubelet on a private socket, an API server on loopback)
and writes the /proc tree and the kubelet log names (`cluster_state.py` derives them all from
the scenario) into one temporary directory, removed on every way out: stop or close, an
exception (KeyboardInterrupt included) that ends the process, SIGTERM before the event loop
handles it. With churn (`churn.py`), its tick shows each new generation of pods in the fakes.
"""

import asyncio
import collections
import contextlib
import dataclasses
import logging
import shutil
import signal
import tempfile
import threading
import time
import weakref
from collections.abc import Mapping, Sequence
from pathlib import Path
from types import FrameType
from typing import TYPE_CHECKING

from ..config import Config
from .churn import HISTORY_TICKS, TICK_SECONDS, churned, pod_keys
from .cluster_state import (
    DRA_DRIVER,
    claim_allocations,
    claimed_devices,
    job_files,
    log_names,
    pod_metas,
    proc_files,
    slice_devices,
)
from .node import Scenario

if TYPE_CHECKING:
    from .fake_api.server import FakeKubeApi
    from .fake_containerd import FakeContainerd
    from .fake_engine import FakeEngine

log = logging.getLogger(__name__)


# --- the directory: written whole at start, synced on each churn tick -------------------------


def _sync_files(root: Path, old: Mapping[str, str], new: Mapping[str, str]) -> None:
    """The /proc tree from `old` to `new`: departed pids' directories go, new ones appear."""
    for pid in {f.split("/")[0] for f in old} - {f.split("/")[0] for f in new}:
        shutil.rmtree(root / pid, ignore_errors=True)
    for relative, text in new.items():
        if old.get(relative) != text:
            path = root / relative
            path.parent.mkdir(parents=True, exist_ok=True)
            path.write_text(text, encoding="utf-8")


def _sync_log_names(root: Path, old: Sequence[str], new: Sequence[str]) -> None:
    for name in set(old) - set(new):
        path = root / name
        if name.startswith("pods/"):
            shutil.rmtree(path, ignore_errors=True)
        else:
            path.unlink(missing_ok=True)
    for name in set(new) - set(old):
        path = root / name
        path.parent.mkdir(parents=True, exist_ok=True)
        if name.startswith("pods/"):
            path.mkdir(exist_ok=True)
        else:
            path.touch()


def write_proc_root(scenario: Scenario, root: Path) -> Path:
    root.mkdir(parents=True, exist_ok=True)  # a scenario without processes: an empty /proc
    _sync_files(root, {}, proc_files(scenario))
    return root


# --- the cluster ----------------------------------------------------------------------------


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
        from .fake_api.objects import pod_object
        from .fake_api.server import FakeKubeApi
        from .fake_api.slices import slice_object
        from .fake_kubelet.server import FakeKubelet

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
            _set_claims(self.api, scenario, node_name)
            devices = slice_devices(scenario, node_name)
            if devices:  # the simulated DRA driver's one slice: its pool is the node
                self.api.set_slices([slice_object(node_name, DRA_DRIVER, node_name,
                                                  list(devices))])
            self.proc_root = write_proc_root(scenario, self.directory / "proc")
            self.log_root = self.directory / "log"
            (self.log_root / "pods").mkdir(parents=True)  # as a node's, even without pods
            _sync_log_names(self.log_root, (), log_names(scenario))
            self.engine: FakeEngine | FakeContainerd | None = None
            if any(c.namespace is not None for c in scenario.containers):  # containerd's API
                from .fake_containerd import FakeContainerd as Containerd

                pids: dict[str, int] = {}  # a container's task: its first GPU process
                for gpu in scenario.gpus:
                    for process in gpu.processes:
                        if process.docker is not None:
                            pids.setdefault(process.docker, process.pid)
                self.engine = Containerd(self.directory / "containerd.sock",
                                         scenario.containers, pids)
            elif scenario.containers:  # a Docker host: its Engine API, for --container-labels
                from .fake_engine import FakeEngine as Engine

                self.engine = Engine(self.directory / "docker.sock", scenario.containers)
            self.job_root = self.directory / "job-mapping"
            self.job_root.mkdir()
            for name, text in job_files(scenario).items():
                (self.job_root / name).write_text(text, encoding="utf-8")
        except BaseException:
            self.close()
            raise

    def configure(self, config: Config) -> Config:
        """Point the exporter at the fakes; at the simulated job mapping unless
        --hpc-job-mapping-dir names one (to try a prolog's files by hand). With -m, the fake
        API serves that ConfigMap, its `metrics` the bundled counters, and the exporter watches
        it there."""
        if config.configmap is not None:
            from ..fields.collection import default_counters_path
            from .fake_api.objects import config_map_object

            namespace, name = config.configmap
            counters = default_counters_path(config.naming).read_text(encoding="utf-8")
            self.api.upsert_config_map(config_map_object(namespace, name, {"metrics": counters}))
        if self.engine is not None:
            config = dataclasses.replace(config, container_labels=True,
                                         container_runtime_socket=str(self.engine.socket_path))
        return dataclasses.replace(config, proc_root=self.proc_root,
                                   kubelet_log_root=self.log_root,
                                   hpc_job_mapping_dir=config.hpc_job_mapping_dir
                                   or self.job_root)

    async def start(self) -> None:
        await self.kubelet.start()
        await self.api.start()
        if self.engine is not None:
            await self.engine.start()
        if self.scenario.churn_pods_per_second:
            self._churn = asyncio.create_task(run_churn(self, self.scenario), name="sim-churn")

    async def stop(self) -> None:
        try:
            if self._churn is not None:
                self._churn.cancel()
                with contextlib.suppress(asyncio.CancelledError):
                    await self._churn
            await self.api.stop()
            await self.kubelet.stop()
            if self.engine is not None:
                await self.engine.stop()
        finally:
            self.close()

    def close(self) -> None:
        """Remove the directory and give SIGTERM back to its default; idempotent, so that
        stop() and the exporter's own exit path may both call it."""
        self._remove()
        if self._owns_sigterm and signal.getsignal(signal.SIGTERM) is _exit_on_sigterm:
            signal.signal(signal.SIGTERM, signal.SIG_DFL)
        self._owns_sigterm = False


# --- churn: apply each tick to the fakes ---------------------------------------------------


def _set_claims(api: "FakeKubeApi", scenario: Scenario, node_name: str) -> None:
    from .fake_api.claims import StoredClaim

    api.claims.set_claims(StoredClaim(namespace, name, devices, admin)
                          for (namespace, name), (devices, admin)
                          in claimed_devices(scenario, node_name).items())


def apply(cluster: "SimulatedCluster", old: Scenario, new: Scenario) -> None:
    """Show `new` in the cluster's fakes: only the departed and new pods change in the API (a
    DELETED and an ADDED event each, as a rollout gives a watch)."""
    from .fake_api.objects import pod_object

    cluster.kubelet.set_assignments(new.pods)
    cluster.kubelet.set_claims(claim_allocations(new, cluster.node_name))
    _set_claims(cluster.api, new, cluster.node_name)
    before = set(cluster.api.pods)  # what the API holds, whatever a failed tick left
    after = {m.uid: m for m in pod_metas(new)}
    for uid in before - set(after):
        cluster.api.delete_pod(uid)
    for uid in set(after) - before:
        cluster.api.upsert_pod(pod_object(after[uid], cluster.node_name))
    _sync_files(cluster.proc_root, proc_files(old), proc_files(new))
    _sync_log_names(cluster.log_root, log_names(old), log_names(new))


async def run_churn(cluster: "SimulatedCluster", scenario: Scenario) -> None:
    """Tick once a second (on a fixed schedule: a late tick catches up at once rather than
    drifting), replacing the pods in the fakes first, then advancing the scenario's clock."""
    clock = scenario.churn_clock
    shown = churned(scenario, clock.generation)
    versions: collections.deque[int] = collections.deque(maxlen=HISTORY_TICKS)
    started = time.monotonic() - clock.generation * TICK_SECONDS
    log.info("simulated churn: %d pod(s) replaced every second, of %d",
             scenario.churn_pods_per_second, len(pod_keys(scenario)))
    while True:
        due = started + (clock.generation + 1) * TICK_SECONDS
        await asyncio.sleep(max(0.0, due - time.monotonic()))
        generation = int((time.monotonic() - started) / TICK_SECONDS)
        if generation <= clock.generation:
            continue
        node = churned(scenario, generation)
        try:
            apply(cluster, shown, node)
        except OSError as err:  # the /proc tree or log names (a full disk): the next tick again
            log.warning("simulated churn: %s", err)
            await asyncio.sleep(TICK_SECONDS)
            continue
        shown = node
        clock.generation = generation
        if len(versions) == versions.maxlen:
            cluster.api.compact(through=versions[0])
        versions.append(cluster.api.version)
