"""Every command-line flag of NVIDIA dcgm-exporter, as data.

Data only. The facts (long name, one short alias, environment variables, whether a value
is taken, default) follow the urfave/cli v2 flag list in ``pkg/cmd/app.go`` of
NVIDIA/dcgm-exporter 4.8.4 (commit fafd151148052628061a80450b4ee037a5fa0c3c, whose
``hack/versions.env`` pins EXPORTER_VERSION=4.8.4 and DCGM_VERSION=4.6.1), plus the one
flag found only in a newer snapshot of main (``health-require-gpus``). Defaults that the
Go code takes from constants are spelled out as text the way the CLI prints them: Go
durations in ``time.Duration.String()`` form (``10m0s``), booleans as ``true``/``false``,
and list flags (comma-separated string slices) with an empty default as ``""``.

Help strings are paraphrases, not copies of the upstream usage text. The urfave/cli
built-ins ``--help``/``-h`` and ``--version``/``-v`` are listed last.

Boolean switches take no value (``--kubernetes``); urfave/cli also accepts
``--kubernetes=false``. For every flag the command line wins over the environment.
"""

from dataclasses import dataclass
from typing import Final

__all__ = ["DCGM_EXPORTER_FLAGS", "DcgmFlag"]


@dataclass(frozen=True, slots=True)
class DcgmFlag:
    """One dcgm-exporter command-line flag."""

    long: str  # long name without the leading dashes
    short: str | None  # the single alias upstream defines (may be longer than one letter)
    env: tuple[str, ...]  # every environment variable the flag reads
    takes_value: bool  # False for boolean switches
    default: str  # default as text, "" when there is none
    help: str  # one line, our own words


DCGM_EXPORTER_FLAGS: Final[tuple[DcgmFlag, ...]] = (
    DcgmFlag(
        long="collectors",
        short="f",
        env=("DCGM_EXPORTER_COLLECTORS",),
        takes_value=True,
        default="/etc/dcgm-exporter/default-counters.csv",
        help="Path of the counters CSV listing the fields to export.",
    ),
    DcgmFlag(
        long="config-file",
        short=None,
        env=("DCGM_EXPORTER_CONFIG_FILE",),
        takes_value=True,
        default="",
        help="YAML configuration file; flags and env vars that are set explicitly override it.",
    ),
    DcgmFlag(
        long="address",
        short="a",
        env=("DCGM_EXPORTER_LISTEN",),
        takes_value=True,
        default=":9400",
        help="Listen address as HOST:PORT (IPv6 as [ADDR]:PORT).",
    ),
    DcgmFlag(
        long="web-read-timeout",
        short=None,
        env=("DCGM_EXPORTER_WEB_READ_TIMEOUT",),
        takes_value=True,
        default="10s",
        help="Longest time allowed for reading an HTTP request (Go duration).",
    ),
    DcgmFlag(
        long="web-write-timeout",
        short=None,
        env=("DCGM_EXPORTER_WEB_WRITE_TIMEOUT",),
        takes_value=True,
        default="30s",
        help="Longest time allowed for producing and writing an HTTP response (Go duration).",
    ),
    DcgmFlag(
        long="max-concurrent-scrapes",
        short=None,
        env=("DCGM_EXPORTER_MAX_CONCURRENT_SCRAPES",),
        takes_value=True,
        default="16",
        help="Cap on simultaneous scrapes; extra ones get HTTP 503, overlapping ones share work.",
    ),
    DcgmFlag(
        long="enable-exporter-metrics",
        short=None,
        env=("DCGM_EXPORTER_ENABLE_EXPORTER_METRICS",),
        takes_value=False,
        default="false",
        help="Also expose runtime, process and HTTP metrics about the exporter itself.",
    ),
    DcgmFlag(
        long="collect-interval",
        short="c",
        env=("DCGM_EXPORTER_INTERVAL",),
        takes_value=True,
        default="30000",
        help="How often metrics are collected, in milliseconds.",
    ),
    DcgmFlag(
        long="watch-max-keep-age",
        short=None,
        env=("DCGM_EXPORTER_WATCH_MAX_KEEP_AGE",),
        takes_value=True,
        default="10m0s",
        help="Oldest sample DCGM field watches retain (Go duration; 0s means no age limit).",
    ),
    DcgmFlag(
        long="watch-max-keep-samples",
        short=None,
        env=("DCGM_EXPORTER_WATCH_MAX_KEEP_SAMPLES",),
        takes_value=True,
        default="0",
        help="Number of samples DCGM field watches retain (0 means no count limit).",
    ),
    DcgmFlag(
        long="kubernetes",
        short="k",
        env=("DCGM_EXPORTER_KUBERNETES",),
        takes_value=False,
        default="false",
        help="Attribute metrics to the Kubernetes pods using each GPU.",
    ),
    DcgmFlag(
        long="use-old-namespace",
        short="o",
        env=("DCGM_EXPORTER_USE_OLD_NAMESPACE",),
        takes_value=False,
        default="false",
        help="Use the label names of the 1.x exporter.",
    ),
    DcgmFlag(
        long="cpu-devices",
        short="p",
        env=("DCGM_EXPORTER_CPU_DEVICES_STR",),
        takes_value=True,
        default="f",
        help="CPUs/cores to monitor: f, g[:ids], i[:ids] or g[:ids]+i[:ids].",
    ),
    DcgmFlag(
        long="configmap-data",
        short="m",
        env=("DCGM_EXPORTER_CONFIGMAP_DATA",),
        takes_value=True,
        default="none",
        help="Read the counters list from a ConfigMap given as NAMESPACE:NAME.",
    ),
    DcgmFlag(
        long="remote-hostengine-info",
        short="r",
        env=("DCGM_REMOTE_HOSTENGINE_INFO",),
        takes_value=True,
        default="localhost:5555",
        help="Remote nv-hostengine as HOST:PORT or a tcp://, unix:// or vsock:// URI.",
    ),
    DcgmFlag(
        long="kubernetes-enable-pod-labels",
        short=None,
        env=("DCGM_EXPORTER_KUBERNETES_ENABLE_POD_LABELS",),
        takes_value=False,
        default="false",
        help="Add the pod's Kubernetes labels to metrics (needs --kubernetes).",
    ),
    DcgmFlag(
        long="kubernetes-enable-pod-uid",
        short=None,
        env=("DCGM_EXPORTER_KUBERNETES_ENABLE_POD_UID",),
        takes_value=False,
        default="false",
        help="Add the pod UID to metrics (needs --kubernetes).",
    ),
    DcgmFlag(
        long="kubernetes-gpu-id-type",
        short=None,
        env=("DCGM_EXPORTER_KUBERNETES_GPU_ID_TYPE",),
        takes_value=True,
        default="uid",
        help="GPU identifier used to match kubelet device ids to GPUs: uid or device-name.",
    ),
    DcgmFlag(
        long="kubernetes-pod-label-allowlist-regex",
        short=None,
        env=("DCGM_EXPORTER_KUBERNETES_POD_LABEL_ALLOWLIST_REGEX",),
        takes_value=True,
        default="",
        help="Comma-separated regexes selecting which pod labels to export (empty: all).",
    ),
    DcgmFlag(
        long="devices",
        short="d",
        env=("DCGM_EXPORTER_DEVICES_STR",),
        takes_value=True,
        default="f",
        help="GPUs/GPU instances to monitor: f, g[:ids], i[:ids] or g[:ids]+i[:ids].",
    ),
    DcgmFlag(
        long="no-hostname",
        short="n",
        env=("DCGM_EXPORTER_NO_HOSTNAME",),
        takes_value=False,
        default="false",
        help="Leave the Hostname label off the output, as older versions did.",
    ),
    # Present only in the newest snapshot of upstream main, after 4.8.4.
    DcgmFlag(
        long="health-require-gpus",
        short=None,
        env=("DCGM_EXPORTER_HEALTH_REQUIRE_GPUS",),
        takes_value=False,
        default="false",
        help="Make /health fail when no GPU collector is registered.",
    ),
    DcgmFlag(
        long="switch-devices",
        short="s",
        env=("DCGM_EXPORTER_OTHER_DEVICES_STR",),
        takes_value=True,
        default="f",
        help="NVSwitches/NVLinks to monitor: f, g[:ids], i[:ids] or g[:ids]+i[:ids].",
    ),
    DcgmFlag(
        long="fake-gpus",
        short=None,
        env=("DCGM_EXPORTER_USE_FAKE_GPUS",),
        takes_value=False,
        default="false",
        help="Accept fake (injected) GPUs; for tests only.",
    ),
    DcgmFlag(
        long="web-config-file",
        short=None,
        env=("DCGM_EXPORTER_WEB_CONFIG_FILE",),
        takes_value=True,
        default="",
        help="Prometheus exporter-toolkit web config file (TLS, basic auth).",
    ),
    DcgmFlag(
        long="xid-count-window-size",
        short="x",
        env=("DCGM_EXPORTER_XID_COUNT_WINDOW_SIZE",),
        takes_value=True,
        default="300000",
        help="Window, in milliseconds, over which DCGM_EXP_XID_ERRORS_COUNT counts XIDs.",
    ),
    DcgmFlag(
        long="replace-blanks-in-model-name",
        short="rbmn",
        env=("DCGM_EXPORTER_REPLACE_BLANKS_IN_MODEL_NAME",),
        takes_value=False,
        default="false",
        help="Replace spaces in the GPU model name label with dashes.",
    ),
    DcgmFlag(
        long="debug",
        short=None,
        env=("DCGM_EXPORTER_DEBUG",),
        takes_value=False,
        default="false",
        help="Log at debug level.",
    ),
    DcgmFlag(
        long="clock-events-count-window-size",
        short=None,
        env=("DCGM_EXPORTER_CLOCK_EVENTS_COUNT_WINDOW_SIZE",),
        takes_value=True,
        default="300000",
        help="Window, in milliseconds, over which DCGM_EXP_CLOCK_EVENTS_COUNT counts events.",
    ),
    DcgmFlag(
        long="enable-dcgm-log",
        short=None,
        env=("DCGM_EXPORTER_ENABLE_DCGM_LOG",),
        takes_value=False,
        default="false",
        help="Send the DCGM library's own log to standard output.",
    ),
    DcgmFlag(
        long="dcgm-log-level",
        short=None,
        env=("DCGM_EXPORTER_DCGM_LOG_LEVEL",),
        takes_value=True,
        default="NONE",
        help="DCGM library log level (NONE, FATAL, ERROR, WARN, INFO, DEBUG, VERB).",
    ),
    DcgmFlag(
        long="log-format",
        short=None,
        env=("DCGM_EXPORTER_LOG_FORMAT",),
        takes_value=True,
        default="text",
        help="Exporter log format: text or json.",
    ),
    DcgmFlag(
        long="pod-resources-kubelet-socket",
        short=None,
        env=("DCGM_POD_RESOURCES_KUBELET_SOCKET",),
        takes_value=True,
        default="/var/lib/kubelet/pod-resources/kubelet.sock",
        help="Path of the kubelet pod-resources gRPC socket.",
    ),
    DcgmFlag(
        long="hpc-job-mapping-dir",
        short=None,
        env=("DCGM_HPC_JOB_MAPPING_DIR",),
        takes_value=True,
        default="",
        help="Directory of HPC job mapping files used to label GPUs with job ids.",
    ),
    DcgmFlag(
        long="container-labels",
        short=None,
        env=("DCGM_EXPORTER_CONTAINER_LABELS",),
        takes_value=False,
        default="false",
        help="Add container-runtime container labels to metrics.",
    ),
    DcgmFlag(
        long="container-runtime-socket",
        short=None,
        env=("DCGM_CONTAINER_RUNTIME_SOCKET",),
        takes_value=True,
        default="",
        help="Container runtime socket queried for container labels.",
    ),
    DcgmFlag(
        long="nvidia-resource-names",
        short=None,
        env=("NVIDIA_RESOURCE_NAMES",),
        takes_value=True,
        default="",
        help="Comma-separated extra GPU resource names (e.g. nvidia.com/a100) to attribute.",
    ),
    DcgmFlag(
        long="kubernetes-virtual-gpus",
        short=None,
        env=("KUBERNETES_VIRTUAL_GPUS",),
        takes_value=False,
        default="false",
        help="Attribute shared GPUs (time-slicing, MPS) through their virtual device ids.",
    ),
    DcgmFlag(
        long="dump-enabled",
        short=None,
        env=("DCGM_EXPORTER_DUMP_ENABLED",),
        takes_value=False,
        default="false",
        help="Write troubleshooting dump files.",
    ),
    DcgmFlag(
        long="dump-directory",
        short=None,
        env=("DCGM_EXPORTER_DUMP_DIRECTORY",),
        takes_value=True,
        default="/tmp/dcgm-exporter-debug",
        help="Directory for troubleshooting dump files.",
    ),
    DcgmFlag(
        long="dump-retention",
        short=None,
        env=("DCGM_EXPORTER_DUMP_RETENTION",),
        takes_value=True,
        default="24",
        help="Hours to keep dump files (0 disables clean-up).",
    ),
    DcgmFlag(
        long="dump-compression",
        short=None,
        env=("DCGM_EXPORTER_DUMP_COMPRESSION",),
        takes_value=False,
        default="true",
        help="Gzip the dump files.",
    ),
    DcgmFlag(
        long="kubernetes-enable-dra",
        short=None,
        env=("KUBERNETES_ENABLE_DRA",),
        takes_value=False,
        default="false",
        help="Attribute GPUs allocated through Kubernetes Dynamic Resource Allocation.",
    ),
    DcgmFlag(
        long="disable-startup-validate",
        short=None,
        env=("DISABLE_STARTUP_VALIDATE",),
        takes_value=False,
        default="false",
        help="Skip the start-up environment checks.",
    ),
    DcgmFlag(
        long="enable-gpu-bind-unbind-watch",
        short=None,
        env=("DCGM_EXPORTER_ENABLE_GPU_BIND_UNBIND_WATCH",),
        takes_value=False,
        default="false",
        help="Reload automatically when GPUs are bound or unbound (DCGM 4.5 or newer).",
    ),
    DcgmFlag(
        long="gpu-bind-unbind-poll-interval",
        short=None,
        env=("DCGM_EXPORTER_GPU_BIND_UNBIND_POLL_INTERVAL",),
        takes_value=True,
        default="1s",
        help="Poll period for GPU bind/unbind events (Go duration).",
    ),
    DcgmFlag(
        long="enable-pprof",
        short=None,
        env=("DCGM_EXPORTER_ENABLE_PPROF",),
        takes_value=False,
        default="false",
        help="Serve Go pprof profiling endpoints under /debug/pprof/.",
    ),
    # Registered upstream only when running on Linux (the only supported platform).
    DcgmFlag(
        long="web-systemd-socket",
        short=None,
        env=("DCGM_EXPORTER_SYSTEMD_SOCKET",),
        takes_value=False,
        default="false",
        help="Listen on systemd-activated sockets instead of opening a port.",
    ),
    # urfave/cli built-ins.
    DcgmFlag(
        long="help",
        short="h",
        env=(),
        takes_value=False,
        default="false",
        help="Print usage and exit.",
    ),
    DcgmFlag(
        long="version",
        short="v",
        env=(),
        takes_value=False,
        default="false",
        help="Print the version and exit.",
    ),
)
