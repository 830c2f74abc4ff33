"""What a configuration is made of: the GPU backend and every source it asks for, each
imported only when asked for (grpc with `-k`, kubernetes_asyncio with the API), and the
collector over them. app.py serves what this builds."""

import logging
from collections.abc import Callable, Coroutine, Mapping, Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any

from .attribution.podlabels import PodLabelPolicy
from .backend import GpuBackend
from .collector.dump import DumpSettings, PassDump
from .collector.loop import Collector, CollectorOptions
from .config import BUILTIN_SCENARIO, KUBELET_LIST_MAX_WAIT_SECONDS, Config
from .fields.collection import CountersSources
from .fields.counters import CounterLine

log = logging.getLogger(__name__)

if TYPE_CHECKING:
    from .attribution.jobmap_source import JobMapSource
    from .attribution.podlogs import LogNameSource
    from .attribution.proc_source import ProcessSource
    from .health.xid import XidSnapshot
    from .kube.configmap_source import ConfigMapSource
    from .kubelet.source import KubeletSource
    from .model import ClaimAccess, ClaimAllocation, PodDirectory, SliceDirectory
    from .runtime.source import ContainerSource
    from .sim.cluster import SimulatedCluster
    from .sources import Source


def make_backend(config: Config) -> GpuBackend:
    if config.simulate is None:
        from .nvml.backend import NvmlBackend

        return NvmlBackend(slow_interval_seconds=config.slow_fields_interval_ms / 1000)
    from .sim.backend import SimulatedBackend
    from .sim.scenario import BUNDLED, builtin_scenario, load_scenario

    scenario = (
        builtin_scenario(config.simulate) if config.simulate in (BUILTIN_SCENARIO, *BUNDLED)
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


def counters_sources(config: Config,
                     config_map: tuple[str, str] | None = None) -> CountersSources:
    """Where the counters may come from (fields/collection.py reads them); `config_map`: -m's
    ConfigMap name and `metrics` text, as read through the API."""
    return CountersSources(
        collectors=config.collectors if config.collectors_origin else None,
        collectors_origin=config.collectors_origin, config_file=config.config_file,
        image_dir=config.dcgm_exporter_dir, config_map=config_map, naming=config.naming)


def read_counters_config_map(config: Config) -> tuple[str, str] | None:
    """-m at start: (`NAMESPACE/NAME`, its `metrics` text), read once through the API; None
    without -m, or on the simulated node (its fake API starts later: the watch reads it)."""
    if config.configmap is None or config.simulate is not None:
        return None
    import asyncio

    from .fields.collection import ConfigMapError
    from .kube.client import KubeError
    from .kube.config import plan_from_environment
    from .kube.configmap_source import read_config_map
    from .kube.configmaps import ConfigMapRef, metrics_text

    ref = ConfigMapRef(*config.configmap)
    try:
        plan = plan_from_environment(None, str(config.kubeconfig) if config.kubeconfig else None)
        found = asyncio.run(read_config_map(plan, ref))
        return str(ref), metrics_text(found, ref)
    except KubeError as exc:
        raise ConfigMapError(f"-m {ref.namespace}:{ref.name}: cannot read the ConfigMap "
                             f"through the Kubernetes API: {exc}") from None
    except ValueError as exc:
        raise ConfigMapError(f"-m {ref.namespace}:{ref.name}: {exc}") from None


def make_config_map_source(config: Config, api_url: Callable[[], str] | None = None
                           ) -> "ConfigMapSource | None":
    """-m: the ConfigMap's watch, whose changes reload the counters (reload.py)."""
    if config.configmap is None:  # asked for by name: whatever --kubernetes-api says
        return None
    from .kube.config import plan_from_environment
    from .kube.configmap_source import ConfigMapOptions, ConfigMapSource
    from .kube.configmaps import ConfigMapRef

    options = ConfigMapOptions(node_name=config.node_name, ref=ConfigMapRef(*config.configmap),
                               kubeconfig=str(config.kubeconfig) if config.kubeconfig else None)
    if api_url is None:
        return ConfigMapSource(options)
    return ConfigMapSource(options, plan=lambda: plan_from_environment(api_url(), None))


def make_collector(config: Config, counters: tuple[CounterLine, ...],
                   backend: GpuBackend | None = None,
                   assignments: "KubeletSource | None" = None,
                   api_url: Callable[[], str] | None = None,
                   field_intervals_ms: Mapping[str, int] | None = None,
                   others: "Sequence[Source[object]]" = ()) -> Collector:
    """The collector with every source the configuration asks for; `others`: sources only
    others read (-m's ConfigMap, for the reloader), for their health and self-metrics."""
    logs, processes = make_process_sources(config)
    backend = backend if backend is not None else make_backend(config)
    return Collector(
        backend,
        CollectorOptions(
            interval_seconds=config.interval_seconds,
            hostname=config.hostname,
            counters=counters,
            field_intervals_ms=field_intervals_ms or {},
            virtual_gpus=config.virtual_gpus,
            extra_resources=config.extra_resources,
            process_metrics=config.process_metrics,
            pod_policy=PodLabelPolicy(config.pod_labels, config.pod_uid,
                                      config.pod_label_allowlist),
            dra_drivers=config.dra_drivers if config.reads_slices else frozenset(),
            xid_window_ms=config.xid_window_ms,
            clock_events_window_ms=config.clock_events_window_ms,
            drop_labels=config.drop_labels,
            own_pod=config.own_pod,
            devices=config.devices,
            dashed_model_names=config.replace_blanks_in_model_name,
            old_namespace=config.use_old_namespace,
            label_wait_seconds=config.startup_label_wait_ms / 1000,
        ),
        assignments=assignments,
        pods=make_pod_source(config, api_url),
        logs=logs,
        processes=processes,
        slices=make_slice_source(config, api_url),
        xids=make_xid_source(config, backend),
        claim_access=make_claim_source(config, assignments, api_url),
        jobs=make_job_source(config),
        containers=make_container_source(config),
        others=others,
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


def make_claim_source(config: Config, assignments: "KubeletSource | None",
                      api_url: Callable[[], str] | None = None) -> "Source[ClaimAccess] | None":
    """DRA: which claims the kubelet reports are admin access (monitors, not holders)."""
    if not config.reads_slices or assignments is None:
        return None
    from .kube.claim_source import ClaimReadOptions, ResourceClaimSource
    from .kube.config import plan_from_environment

    def in_use() -> "tuple[ClaimAllocation, ...]":
        assert assignments is not None
        return assignments.snapshot().claims

    options = ClaimReadOptions(kubeconfig=str(config.kubeconfig) if config.kubeconfig else None)
    if api_url is None:
        return ResourceClaimSource(options, in_use)
    return ResourceClaimSource(options, in_use,
                               plan=lambda: plan_from_environment(api_url(), None))


def make_xid_source(config: Config, backend: GpuBackend) -> "Source[XidSnapshot]":
    """XID events: NVML's event thread, or the simulated node's scripted XIDs."""
    from .sim.backend import SimulatedBackend

    if isinstance(backend, SimulatedBackend):
        from .sim.xids import SimulatedXids

        return SimulatedXids(backend.scenario)
    from .nvml.events import XidSource

    return XidSource(window_seconds=config.xid_window_ms / 1000)


def make_job_source(config: Config) -> "JobMapSource | None":
    """HPC jobs by GPU from `--hpc-job-mapping-dir`'s files."""
    if config.hpc_job_mapping_dir is None:
        return None
    from .attribution.jobmap_source import JobMapSource

    return JobMapSource(config.hpc_job_mapping_dir)


def make_container_source(config: Config) -> "ContainerSource | None":
    """`--container-labels`: the runtime's containers and the GPUs each was given."""
    if not config.container_labels:
        return None
    from .runtime.source import ContainerSource

    # As long as the kubelet's holders are kept (make_kubelet_source): 3 passes, or 4 s.
    return ContainerSource(config.container_runtime_socket,
                           max_age_seconds=max(3 * config.interval_seconds, 4.0))


def make_process_sources(config: Config) -> "tuple[LogNameSource | None, ProcessSource | None]":
    if not config.reads_proc:
        return None, None
    from .attribution.podlogs import LogNameSource
    from .attribution.proc_source import ProcessSource

    return LogNameSource(config.kubelet_log_root), ProcessSource(config.proc_root)
