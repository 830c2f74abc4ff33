"""The flags gpu-enricher implements, as data: name, short alias, parser, help (`--help`
shows them in this order). cli/flags.py builds the parser over them and over dcgm-exporter's
flags; cli/main.py reads each from the command line and the environment.
"""

from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Final

from ..config import DEFAULT_RUNTIME_SOCKET, KUBELET_LIST_MAX_WAIT_SECONDS
from .flag_values import (
    DEFAULT_ADDRESS,
    DEFAULT_IDLE_TIMEOUT_MS,
    DEFAULT_INTERVAL_MS,
    DEFAULT_KUBELET_LIST_CPU_BUDGET_PERCENT,
    DEFAULT_LABEL_WAIT_MS,
    DEFAULT_MAX_CONNECTIONS,
    DEFAULT_READ_HEADER_TIMEOUT_MS,
    parse_address,
    parse_bool,
    parse_config_check_interval,
    parse_configmap_ref,
    parse_cpu_budget,
    parse_devices,
    parse_driver_names,
    parse_drop_labels,
    parse_dump_retention,
    parse_gpu_id_type,
    parse_hostname_label_name,
    parse_idle_timeout,
    parse_interval,
    parse_label_wait,
    parse_log_format,
    parse_max_connections,
    parse_max_scrapes,
    parse_names,
    parse_naming,
    parse_optional_path,
    parse_poll_interval,
    parse_read_header_timeout,
    parse_read_timeout,
    parse_regexes,
    parse_slow_interval,
    parse_window,
    parse_write_timeout,
)


@dataclass(frozen=True, slots=True)
class Option:
    """A flag gpu-enricher implements."""

    long: str
    short: str | None
    parse: Callable[[str], Any] | None  # None: a boolean switch
    help: str
    metavar: str | None = None


OPTIONS: Final = (
    Option("address", "a", parse_address, f"address to serve on (default {DEFAULT_ADDRESS})",
           "[HOST]:PORT"),
    Option("collectors", "f", Path,
           "counters CSV in dcgm-exporter's syntax (default: the config file's metrics, else "
           "/etc/dcgm-exporter/default-counters.csv when it exists, else the bundled list of "
           "--naming)",
           "PATH"),
    Option("naming", None, parse_naming,
           "the bundled counters' names when no file is given (or a file of dcgm-exporter's "
           "image is absent): classic (default: dcgm-exporter up to 4.8) or 4.9 (dcgm-exporter "
           "4.9's: DCGM 4.7 names, eleven in base units: Hz, J, ratio, bytes, bytes/s; "
           "docs/namings.md); a counters file is served under the names it writes either way",
           "classic|4.9"),
    Option("config-file", None, parse_optional_path,
           "dcgm-exporter 4.8.3's YAML configuration (version: 1; metrics.file or "
           "metrics.fields; collection.interval; collection.watchGroups, read at their own "
           "interval); -f, -c and their variables, when set, win over it; a wrong file exits 2 "
           "at start; reloaded like -f (docs/counters.md)", "PATH"),
    Option("configmap-data", "m", parse_configmap_ref,
           "read the counters from the key `metrics` of this ConfigMap through the Kubernetes "
           "API instead of -f (Role: get, list, watch configmaps in NAMESPACE), and watch it: a "
           "change reloads them without a restart; missing at start exits 2, later the last "
           "good list stays; `none`: off (docs/counters.md)", "NAMESPACE:NAME"),
    Option("collect-interval", "c", parse_interval,
           f"collection interval in milliseconds (default {DEFAULT_INTERVAL_MS})", "MS"),
    Option("slow-fields-interval", None, parse_slow_interval,
           "read the costly, slowly changing readings (energy, PCIe replay, ECC and remapped-row "
           "counters, the MIG mode) every MS only, repeating them exactly in between; 0: every "
           "pass (default 30000)", "MS"),
    Option("xid-count-window-size", "x", parse_window,
           "window of DCGM_EXP_XID_ERRORS_COUNT in milliseconds (default 300000)", "MS"),
    Option("clock-events-count-window-size", None, parse_window,
           "window of DCGM_EXP_CLOCK_EVENTS_COUNT in milliseconds (default 300000)", "MS"),
    Option("no-hostname", "n", None, "omit the host label (Hostname and hostname)"),
    Option("hostname-label-name", None, parse_hostname_label_name,
           "the host label's name on every series that has it: both (default: Hostname and "
           "hostname, so queries written for dcgm-exporter up to 4.8.2 and from 4.8.3 on both "
           "work), Hostname (up to 4.8.2) or hostname (4.8.3 and later, #655)",
           "both|Hostname|hostname"),
    Option("devices", "d", parse_devices,
           "which GPUs and MIG GPU instances get series, as dcgm-exporter: f (default: the GPU "
           "instances of a GPU that has some, every other GPU whole), g[:IDS] (GPUs by index, "
           "a MIG GPU whole), i[:IDS] (GPU instances by DCGM entity id), g[:IDS]+i[:IDS] both; "
           "IDS like 0,2-4 (docs/collection.md)", "SELECTOR"),
    Option("replace-blanks-in-model-name", "rbmn", None,
           "runs of blanks in the modelName label become one dash (NVIDIA-H100-80GB-HBM3)"),
    Option("use-old-namespace", "o", None,
           "dcgm-exporter 1.x label names on the DCGM series: uuid, pod_name, pod_namespace, "
           "container_name"),
    Option("drop-labels", None, parse_drop_labels,
           "leave these labels off every DCGM and per-process series, comma-separated, to cut "
           "scrape bytes: only labels that add no series (UUID, pci_bus_id, device, "
           "modelName, GPU_I_PROFILE, Hostname, label-type fields, pod_uid, a pod's own labels, "
           "...; docs/scale.md); one that tells series apart (gpu, pod, ...) is refused",
           "NAMES"),
    Option("log-format", None, parse_log_format, "log format: text (default) or json",
           "text|json"),
    Option("debug", None, None, "log at debug level"),
    Option("kubernetes", "k", None,
           "add container, namespace and pod labels from the kubelet's pod-resources API"),
    Option("pod-resources-kubelet-socket", None, Path,
           "the kubelet's pod-resources socket (default "
           "/var/lib/kubelet/pod-resources/kubelet.sock); it may appear after start", "PATH"),
    Option("kubelet-list-cpu-budget", None, parse_cpu_budget,
           "the most CPU the kubelet's List may take, as a percentage of one core over time: "
           "when one List's receive and parse cost C seconds, the next waits C/budget (at "
           f"most {KUBELET_LIST_MAX_WAIT_SECONDS:.0f} s; the last answer is used meanwhile); "
           "only answers of tens of MB (tens of thousands of pods) reach it; 0: a List every "
           f"pass (default {DEFAULT_KUBELET_LIST_CPU_BUDGET_PERCENT:g})", "PERCENT"),
    Option("kubernetes-gpu-id-type", None, parse_gpu_id_type,
           "uid (default) or device-name (GKE); both device-ID families are recognised "
           "whatever this says", "uid|device-name"),
    Option("nvidia-resource-names", None, parse_names,
           "extra resource names to attribute besides nvidia.com/gpu and nvidia.com/mig-*, "
           "comma-separated (e.g. nvidia.com/gpu.shared)", "NAMES"),
    Option("kubernetes-virtual-gpus", None, None,
           "repeat a shared GPU's series for each pod holding a replica, with a vgpu label; "
           "its FB_USED and GPU_UTIL then come from that pod's processes (reads --proc-root)"),
    Option("kubernetes-enable-dra", None, None,
           "attribute GPUs and MIG slices held through DRA ResourceClaims (the kubelet's "
           "dynamic_resources, resolved by this node's ResourceSlices: Kubernetes API, "
           "get/list/watch resource.k8s.io resourceslices); adds dra_* labels (with "
           "--kubernetes-virtual-gpus a claim's share id is its vgpu label)"),
    Option("kubernetes-dra-driver-names", None, parse_driver_names,
           "DRA drivers whose claims count, comma-separated; replaces the default "
           "gpu.nvidia.com (list it too to keep it)", "NAMES"),
    Option("kubernetes-enable-pod-labels", None, None,
           "add each pod's Kubernetes labels to its series (Kubernetes API: get/list/watch "
           "pods)"),
    Option("kubernetes-pod-label-allowlist-regex", None, parse_regexes,
           "comma-separated regexes: only pod labels whose name matches one are added "
           "(default: all)", "REGEX,..."),
    Option("kubernetes-enable-pod-uid", None, None,
           "add a pod_uid label (Kubernetes API: get/list/watch pods)"),
    Option("process-metrics", None, None,
           "per-process GPU memory and SM utilisation with each process's pod and container "
           "(gpu_enricher_process_*, gpu_enricher_pod_*, gpu_enricher_unallocated_process_info); "
           "needs the host's /proc (--proc-root) and, for names, the Kubernetes API or "
           "--kubelet-log-root"),
    Option("proc-root", None, Path,
           "the host's /proc: hostPID, or the host's /proc mounted read-only (default /proc)",
           "PATH"),
    Option("kubelet-log-root", None, Path,
           "the host's /var/log (its pods/ and containers/ name pods when the Kubernetes API "
           "cannot; default /var/log)", "PATH"),
    Option("kubernetes-api", None, parse_bool,
           "read pods from the Kubernetes API when a feature needs them (default true); false: "
           "never call it (no RBAC needed): process names from --kubelet-log-root, no pod labels "
           "or UIDs", "true|false"),
    Option("hpc-job-mapping-dir", None, parse_optional_path,
           "label each GPU's series with the HPC jobs (hpc_job) that files named <gpu> or "
           "<gpu>.<gpu instance> in DIR list, one job ID per line, re-read when they change "
           "(docs/hpc.md); empty: off", "DIR"),
    Option("container-labels", None, None,
           "on hosts without Kubernetes: copy each series of a GPU (or MIG instance) that a "
           "running container was given explicitly (by UUID, index or MIG ID, or all) with "
           "container=\"<name>\", as dcgm-exporter 4.8.3 does; also for each container, and "
           "each person (user=\"<name>\"), whose processes use it (their cgroups, the host's "
           "passwd: --proc-root); a series whose pod names its container (-k) is left alone "
           "(docs/containers.md)"),
    Option("container-runtime-socket", None, str,
           "the container runtime --container-labels asks, whichever answers there: a "
           "Docker-compatible Engine API (Docker, Podman's service socket) or containerd's "
           "gRPC API (/run/containerd/containerd.sock: every namespace); only reads "
           f"(default {DEFAULT_RUNTIME_SOCKET})", "PATH"),
    Option("kubeconfig", None, Path,
           "kubeconfig for the Kubernetes API outside a cluster (default: in-cluster, else "
           "$KUBECONFIG)", "PATH"),
    Option("web-config-file", None, parse_optional_path,
           "Prometheus exporter-toolkit web config (YAML): TLS, client certificates, basic "
           "auth, extra response headers; a bad file exits 2 at start; reloaded like -f",
           "PATH"),
    Option("startup-label-wait", None, parse_label_wait,
           "at start, how long the first picture (and /ready) waits for the sources that "
           "label series: the kubelet's first List, the pod and ResourceSlice lists of the "
           "Kubernetes API, the DRA claims they name; a source that answers nothing delays it "
           f"by MS at most; 0: render right after the first NVML pass (default "
           f"{DEFAULT_LABEL_WAIT_MS}, docs/pods.md)", "MS"),
    Option("config-check-interval", None, parse_config_check_interval,
           "check the counters file, the config file, the web config and its certificate, key "
           "and CA files for "
           "changes every MS and reload them; SIGHUP reloads at once; a wrong file keeps the "
           "running configuration; 0: on SIGHUP only (default 5000)", "MS"),
    Option("web-read-header-timeout", None, parse_read_header_timeout,
           "close a connection that has not sent a complete request head MS after connecting "
           "or after its request's first byte, and one whose TLS handshake takes longer "
           f"(default {DEFAULT_READ_HEADER_TIMEOUT_MS})", "MS"),
    Option("web-idle-timeout", None, parse_idle_timeout,
           "close a keep-alive connection idle between requests for MS "
           f"(default {DEFAULT_IDLE_TIMEOUT_MS}: a 60 s scrape interval keeps its connection)",
           "MS"),
    Option("web-read-timeout", None, parse_read_timeout,
           "close a connection whose whole request (head and body) has not arrived this long "
           "after connecting or after its request's first byte, as Go's ReadTimeout; 0: no "
           "limit (default 10s)", "DURATION"),
    Option("web-write-timeout", None, parse_write_timeout,
           "close a connection whose response is still unsent this long after its request's "
           "head arrived (a client not reading), as Go's WriteTimeout; 0: no limit "
           "(default 30s)", "DURATION"),
    Option("health-require-gpus", None, None,
           "make /health answer 503 while the last pass found no GPU (or before the first): "
           "a liveness probe then restarts an exporter that came up before the driver showed "
           "its GPUs; off by default, so a node without GPUs passes"),
    Option("web-systemd-socket", None, None,
           "serve on the listening TCP sockets systemd passes (socket activation: LISTEN_FDS, "
           "LISTEN_PID) instead of binding -a/--address"),
    Option("dump-enabled", None, None,
           "write each pass's readings (every GPU's identity, values, MIG instances, processes) "
           "to metrics-GPU-<time>-<id>.json and its devices to deviceinfo-GPU-…, as "
           "dcgm-exporter's troubleshooting dumps (it writes them per scrape)"),
    Option("dump-directory", None, Path, "where --dump-enabled writes (default "
           "/tmp/dcgm-exporter-debug)", "PATH"),
    Option("dump-retention", None, parse_dump_retention,
           "hours dump files are kept: older ones are removed every hour; 0: kept (default 24)",
           "HOURS"),
    Option("dump-compression", None, None, "gzip the dump files (.json.gz; default true)"),
    Option("gpu-bind-unbind-poll-interval", None, parse_poll_interval,
           "how often the nvidia driver's sysfs directory is listed between passes: a GPU "
           "bound or unbound there starts a pass at once, which restarts NVML so the GPU "
           "appears, or its unbind can finish (default 1s)", "DURATION"),
    Option("enable-exporter-metrics", None, None,
           "also count HTTP requests by handler and status code "
           "(gpu_enricher_http_requests_total); the process's own metrics (process_*, "
           "python_*) and the HTTP server's connection counts are always there"),
    Option("max-concurrent-scrapes", None, parse_max_scrapes,
           "answer /metrics 503 while N answers are still being sent (clients slow to take "
           "them); every scrape shares the bytes the last pass rendered (default 16)", "N"),
    Option("web-max-connections", None, parse_max_connections,
           "refuse (close at once) a connection while N are open; the soft open-file limit "
           f"is raised to N + 256 when lower (default {DEFAULT_MAX_CONNECTIONS})", "N"),
)
PARSERS: Final = {option.long: option.parse for option in OPTIONS if option.parse is not None}
"""Each flag's parser, as parse_config (cli/settings.py) reads its value."""
