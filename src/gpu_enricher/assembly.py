"""What a configuration is made of: the GPU backend and every source it asks for, each
imported only when asked for (grpc with `-k`, kubernetes_asyncio with the API), and the
collector over them. app.py serves what this builds."""

import logging
from collections.abc import Callable, Coroutine
from pathlib import Path
from typing import TYPE_CHECKING, Any

from .attribution.podlabels import PodLabelPolicy
from .backend import GpuBackend
from .collector.dump import DumpSettings, PassDump
from .collector.loop import Collector, CollectorOptions
from .config import BUILTIN_SCENARIO, KUBELET_LIST_MAX_WAIT_SECONDS, Config
from .fields.counters import CounterLine

log = logging.getLogger(__name__)

if TYPE_CHECKING:
    from .attribution.podlogs import LogNameSource
    from .attribution.proc_source import ProcessSource
    from .health.xid import XidSnapshot
    from .kubelet.source import KubeletSource
    from .model import PodDirectory, SliceDirectory
    from .sim.cluster import SimulatedCluster
    from .sources import Source


def make_backend(config: Config) -> GpuBackend:
    if config.simulate is None:
        from .nvml.backend import NvmlBackend

        return NvmlBackend(slow_interval_seconds=config.slow_fields_interval_ms / 1000)
    from .sim.backend import SimulatedBackend
    from .sim.scenario import builtin_scenario, load_scenario

    scenario = (
        builtin_scenario() if config.simulate == BUILTIN_SCENARIO
        else load_scenario(Path(config.simulate))
    )
    return SimulatedBackend(scenario)


def make_assignments(config: Config, socket: Path | None = None) -> "KubeletSource | None":
    """The kubelet source with `-k` (grpc is imported only then)."""
    if not config.kubernetes:
        return None
    from .kubelet.client import PodResourcesClient
    from .kubelet.source import KubeletOptions, KubeletSource

    interval = config.interval_seconds
    timeout = max(0.5, min(5.0, interval / 2))  # a slow kubelet never delays a pass for long
    return KubeletSource(
        PodResourcesClient(socket or config.kubelet_socket, timeout),
        KubeletOptions(max_age_seconds=max(3 * interval, 2 * timeout),
                       extra_resources=config.extra_resources,
                       list_cpu_budget=config.kubelet_list_cpu_budget,
                       list_max_wait_seconds=KUBELET_LIST_MAX_WAIT_SECONDS),
    )


def make_collector(config: Config, counters: tuple[CounterLine, ...],
                   backend: GpuBackend | None = None,
                   assignments: "KubeletSource | None" = None,
                   api_url: Callable[[], str] | None = None) -> Collector:
    """The collector with every source the configuration asks for."""
    logs, processes = make_process_sources(config)
    backend = backend if backend is not None else make_backend(config)
    return Collector(
        backend,
        CollectorOptions(
            interval_seconds=config.interval_seconds,
            hostname=config.hostname,
            counters=counters,
            virtual_gpus=config.virtual_gpus,
            extra_resources=config.extra_resources,
            process_metrics=config.process_metrics,
            pod_policy=PodLabelPolicy(config.pod_labels, config.pod_uid,
                                      config.pod_label_allowlist),
            dra_drivers=config.dra_drivers if config.reads_slices else frozenset(),
            xid_window_ms=config.xid_window_ms,
            clock_events_window_ms=config.clock_events_window_ms,
            drop_labels=config.drop_labels,
        ),
        assignments=assignments,
        pods=make_pod_source(config, api_url),
        logs=logs,
        processes=processes,
        slices=make_slice_source(config, api_url),
        xids=make_xid_source(config, backend),
        dump=make_dump(config),
    )


def make_binding_watch(config: Config,
                       collector: Collector) -> Callable[[], Coroutine[Any, Any, None]] | None:
    """NVML's: between passes, a GPU bound or unbound asks for a pass at once."""
    if collector.backend.name != "nvml":
        return None
    from .nvml.binding import NVIDIA_DRIVER_DIR, watch_bindings

    return lambda: watch_bindings(NVIDIA_DRIVER_DIR, config.gpu_bind_unbind_poll_seconds,
                                  collector.request_pass)


def make_dump(config: Config) -> PassDump | None:
    """--dump-enabled: each pass's readings in files, as dcgm-exporter's debug dumps."""
    if not config.dump_enabled:
        return None
    kept = (f"files older than {config.dump_retention_hours} h removed every hour"
            if config.dump_retention_hours else "files kept for good")
    log.info("writing each pass's readings to %s (--dump-enabled; %s)", config.dump_directory,
             kept)
    return PassDump(DumpSettings(config.dump_directory, config.dump_retention_hours,
                                 config.dump_compression))


def simulated_cluster(backend: GpuBackend, config: Config) -> "SimulatedCluster | None":
    """The simulated node's kubelet, Kubernetes API and /proc, in a private temporary
    directory."""
    from .sim.backend import SimulatedBackend

    if not isinstance(backend, SimulatedBackend):
        return None
    from .sim.cluster import SimulatedCluster

    return SimulatedCluster(backend.scenario, config.node_name)


def make_pod_source(config: Config,
                    api_url: Callable[[], str] | None = None) -> "Source[PodDirectory] | None":
    """The Kubernetes API's pods of this node, when a feature needs them."""
    if not config.reads_pods:
        return None
    from .kube.config import plan_from_environment
    from .kube.source import PodWatchOptions, PodWatchSource

    options = PodWatchOptions(node_name=config.node_name,
                              kubeconfig=str(config.kubeconfig) if config.kubeconfig else None)
    if api_url is None:
        return PodWatchSource(options)
    return PodWatchSource(options, plan=lambda: plan_from_environment(api_url(), None))


def make_slice_source(config: Config,
                      api_url: Callable[[], str] | None = None) -> "Source[SliceDirectory] | None":
    """DRA: this node's ResourceSlices, when claims are to be resolved."""
    if not config.reads_slices:
        return None
    from .kube.config import plan_from_environment
    from .kube.slice_source import ResourceSliceOptions, ResourceSliceSource

    options = ResourceSliceOptions(node_name=config.node_name, drivers=config.dra_drivers,
                                   kubeconfig=str(config.kubeconfig) if config.kubeconfig
                                   else None)
    if api_url is None:
        return ResourceSliceSource(options)
    return ResourceSliceSource(options, plan=lambda: plan_from_environment(api_url(), None))


def make_xid_source(config: Config, backend: GpuBackend) -> "Source[XidSnapshot]":
    """XID events: NVML's event thread, or the simulated node's scripted XIDs."""
    from .sim.backend import SimulatedBackend

    if isinstance(backend, SimulatedBackend):
        from .sim.xids import SimulatedXids

        return SimulatedXids(backend.scenario)
    from .nvml.events import XidSource

    return XidSource(window_seconds=config.xid_window_ms / 1000)


def make_process_sources(config: Config) -> "tuple[LogNameSource | None, ProcessSource | None]":
    if not config.reads_proc:
        return None, None
    from .attribution.podlogs import LogNameSource
    from .attribution.proc_source import ProcessSource

    return LogNameSource(config.kubelet_log_root), ProcessSource(config.proc_root)
