"""Frozen, typed settings, built by the CLI from flags and environment variables."""

from dataclasses import dataclass
from pathlib import Path
from typing import Final

BUILTIN_SCENARIO: Final = "builtin"
DEFAULT_KUBELET_SOCKET: Final = Path("/var/lib/kubelet/pod-resources/kubelet.sock")
DEFAULT_RUNTIME_SOCKET: Final = "/var/run/docker.sock"  # Docker's; podman-docker links Podman's
DEFAULT_PROC_ROOT: Final = Path("/proc")
DEFAULT_KUBELET_LOG_ROOT: Final = Path("/var/log")
KUBELET_LIST_MAX_WAIT_SECONDS: Final = 60.0
"""The longest --kubelet-list-cpu-budget makes a List wait: pod labels are never older."""


@dataclass(frozen=True, slots=True)
class Config:
    host: str | None  # None: every interface
    port: int
    collectors: Path
    collect_interval_ms: int
    hostname: str | None  # None with --no-hostname; a names.Hostname carries the label names
    log_format: str = "text"
    debug: bool = False
    simulate: str | None = None  # None: real NVML; BUILTIN_SCENARIO or a YAML path
    kubernetes: bool = False  # pod labels from the kubelet's pod-resources API
    kubelet_socket: Path = DEFAULT_KUBELET_SOCKET
    kubelet_list_cpu_budget: float = 0.02  # of one core; 0: a List every pass
    gpu_id_type: str = "uid"  # dcgm-exporter's flag; both ID families are recognised anyway
    extra_resources: frozenset[str] = frozenset()  # --nvidia-resource-names
    virtual_gpus: bool = False
    process_metrics: bool = False  # per-process GPU metrics, attributed to pods via /proc
    proc_root: Path = DEFAULT_PROC_ROOT  # the host's /proc (hostPID, or mounted read-only)
    kubelet_log_root: Path = DEFAULT_KUBELET_LOG_ROOT  # names without the API server
    pod_labels: bool = False  # --kubernetes-enable-pod-labels
    pod_label_allowlist: tuple[str, ...] = ()  # regexes; empty: every label
    pod_uid: bool = False  # --kubernetes-enable-pod-uid
    kubeconfig: Path | None = None  # else in-cluster, else $KUBECONFIG
    kubernetes_api: bool = True  # False: never call the API server (no RBAC granted)
    slow_fields_interval_ms: int = 30000  # costly cumulative counters and the MIG mode
    xid_window_ms: int = 300000  # DCGM_EXP_XID_ERRORS_COUNT's window (dcgm-exporter's -x)
    clock_events_window_ms: int = 300000  # DCGM_EXP_CLOCK_EVENTS_COUNT's window
    dra: bool = False  # --kubernetes-enable-dra: devices held through ResourceClaims
    dra_drivers: frozenset[str] = frozenset({"gpu.nvidia.com"})
    node_name: str = ""  # this node, for the Kubernetes API's field selector
    web_config_file: Path | None = None  # exporter-toolkit's web config: TLS, basic auth
    config_check_interval_ms: int = 5000  # watched files' check; 0: reload on SIGHUP only
    web_read_header_timeout_ms: int = 10000  # a request head (and a TLS handshake) is due
    web_idle_timeout_ms: int = 120000  # keep-alive between requests
    web_max_connections: int = 1024  # more are refused at once
    drop_labels: frozenset[str] = frozenset()  # left off the DCGM and process series
    own_pod: tuple[str, str] | None = None  # (POD_NAMESPACE, POD_NAME): never a GPU's holder
    devices: str = "f"  # -d, dcgm-exporter's syntax (exposition/shape.py), checked by the CLI
    replace_blanks_in_model_name: bool = False  # -rbmn
    use_old_namespace: bool = False  # -o: 1.x names of the UUID and pod labels
    hpc_job_mapping_dir: Path | None = None  # Slurm prolog's job files; None: no hpc_job
    collectors_origin: str = ""  # what set `collectors` (`-f/--collectors`, a variable); "": unset
    config_file: Path | None = None  # dcgm-exporter's --config-file (YAML, schema v1)
    collect_interval_given: bool = False  # -c or its variable set: beats collection.interval
    dcgm_exporter_dir: Path = Path("/etc/dcgm-exporter")  # GPU_ENRICHER_DCGM_EXPORTER_DIR
    configmap: tuple[str, str] | None = None  # -m NAMESPACE:NAME: counters from its `metrics`
    web_read_timeout_seconds: float = 10.0  # a whole request is due (Go's ReadTimeout); 0: none
    web_write_timeout_seconds: float = 30.0  # a response is taken (Go's WriteTimeout); 0: none
    health_require_gpus: bool = False  # /health fails while the last pass found no GPU
    web_systemd_socket: bool = False  # serve on systemd's sockets, not on host:port
    dump_enabled: bool = False  # each pass's readings written to files (debug dumps)
    dump_directory: Path = Path("/tmp/dcgm-exporter-debug")  # dcgm-exporter's default
    dump_retention_hours: int = 24  # older dump files removed hourly; 0: kept
    dump_compression: bool = True  # .json.gz
    gpu_bind_unbind_poll_seconds: float = 1.0  # between passes, binds and unbinds looked for
    exporter_metrics: bool = False  # HTTP requests counted by handler and code
    max_concurrent_scrapes: int = 16  # /metrics answers in flight; more get 503
    naming: str = "classic"  # --naming: the bundled list's names, classic or dcgm-exporter 4.9's
    startup_label_wait_ms: int = 2000  # the first picture waits for the labelling sources
    container_labels: bool = False  # --container-labels: series copied per runtime container
    container_runtime_socket: str = DEFAULT_RUNTIME_SOCKET  # an Engine API's, or containerd's

    @property
    def kube_api(self) -> bool:
        """Whether pod metadata is read from the Kubernetes API."""
        return self.kubernetes_api and (self.process_metrics or self.pod_labels or self.pod_uid
                                        or self.reads_slices)

    @property
    def reads_pods(self) -> bool:
        """This node's pods from the Kubernetes API (DRA alone needs only ResourceSlices)."""
        return self.kubernetes_api and (self.process_metrics or self.pod_labels or self.pod_uid)

    @property
    def reads_slices(self) -> bool:
        """DRA: the kubelet's claims are resolved through this node's ResourceSlices."""
        return self.dra and self.kubernetes and self.kubernetes_api

    @property
    def reads_proc(self) -> bool:
        """Per-process attribution: for process metrics, for splitting a shared GPU's
        memory and utilisation per pod (virtual GPUs), and for the containers found using a
        GPU through their processes (`--container-labels`)."""
        return (self.process_metrics or (self.virtual_gpus and self.kubernetes)
                or self.container_labels)

    @property
    def interval_seconds(self) -> float:
        return self.collect_interval_ms / 1000.0
