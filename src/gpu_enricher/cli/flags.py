"""gpu-enricher's flags: what each one parses, and the argparse parser over them and over
dcgm-exporter's flags (accepted for compatibility, listed compactly in --help).

Pure: no environment, no I/O; the CLI (cli/main.py) applies environment variables and defaults.
"""

import argparse
import difflib
import re
import shutil
import textwrap
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Final, NoReturn

from .. import __version__
from ..config import BUILTIN_SCENARIO, KUBELET_LIST_MAX_WAIT_SECONDS
from .dcgm_flags import DCGM_EXPORTER_FLAGS, DcgmFlag
from .flag_values import (
    DEFAULT_ADDRESS,
    DEFAULT_IDLE_TIMEOUT_MS,
    DEFAULT_INTERVAL_MS,
    DEFAULT_KUBELET_LIST_CPU_BUDGET_PERCENT,
    DEFAULT_MAX_CONNECTIONS,
    DEFAULT_READ_HEADER_TIMEOUT_MS,
    ArgumentsError,
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
    parse_log_format,
    parse_max_connections,
    parse_max_scrapes,
    parse_names,
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


def _dcgm(long: str) -> DcgmFlag | None:
    return next((f for f in DCGM_EXPORTER_FLAGS if f.long == long), None)


OPTIONS: Final = (
    Option("address", "a", parse_address, f"address to serve on (default {DEFAULT_ADDRESS})",
           "[HOST]:PORT"),
    Option("collectors", "f", Path,
           "counters CSV in dcgm-exporter's syntax (default: the config file's metrics, else "
           "/etc/dcgm-exporter/default-counters.csv when it exists, else the bundled list)",
           "PATH"),
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
    Option("no-hostname", "n", None, "omit the Hostname label"),
    Option("hostname-label-name", None, parse_hostname_label_name,
           "the host label's name: Hostname (default, as dcgm-exporter's releases) or hostname "
           "(as dcgm-exporter's main branch since #655), on every series that has it",
           "Hostname|hostname"),
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
    Option("kubeconfig", None, Path,
           "kubeconfig for the Kubernetes API outside a cluster (default: in-cluster, else "
           "$KUBECONFIG)", "PATH"),
    Option("web-config-file", None, parse_optional_path,
           "Prometheus exporter-toolkit web config (YAML): TLS, client certificates, basic "
           "auth, extra response headers; a bad file exits 2 at start; reloaded like -f",
           "PATH"),
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
IMPLEMENTED_LONG: Final = frozenset(o.long for o in OPTIONS) | {"simulate"}


# Variables the GPU Operator sets besides dcgm-exporter's own (its DRA switch).
OPERATOR_ENV: Final = {"kubernetes-enable-dra": ("DCGM_EXPORTER_KUBERNETES_ENABLE_DRA",)}


def env_names(long: str) -> tuple[str, ...]:
    own = "GPU_ENRICHER_" + long.upper().replace("-", "_")
    dcgm = _dcgm(long)
    return (own, *(dcgm.env if dcgm else ()), *OPERATOR_ENV.get(long, ()))


def _env_help(long: str) -> str:
    return " [env " + ", ".join(env_names(long)) + "]"


SHORT_USAGE: Final = ("gpu-enricher [-a [HOST]:PORT] [-f PATH] [-k] "
                      "[--simulate [SCENARIO.yaml]] [OPTION ...]")


class _Parser(argparse.ArgumentParser):
    """argparse, but a usage error is one short line (with "did you mean" where a flag is
    close), raised as UsageError instead of 30 lines of usage and a SystemExit."""

    def error(self, message: str) -> NoReturn:
        raise ArgumentsError(message + _suggestion(self, message))


def _suggestion(parser: argparse.ArgumentParser, message: str) -> str:
    if message.startswith("ambiguous option"):  # argparse already lists the candidates
        return ""
    known = [s for action in parser._actions for s in action.option_strings]
    hints = []
    for token in re.findall(r"(?<![\w-])(--?[\w-]+)", message.partition(":")[2]):
        close = difflib.get_close_matches(token, known, n=1, cutoff=0.75)
        if token not in known and close:
            hints.append((token, close[0]))
    if len(hints) == 1:
        return f"; did you mean {hints[0][1]}?"
    return "".join(f"; {token}: did you mean {close}?" for token, close in hints)


# dcgm-exporter flags that configure DCGM itself (its host engine, its library, its entities):
# gpu-enricher reads NVML in its own process, so with them nothing is missing, only nothing to
# configure. Set, each logs one INFO line with its reason (cli/main.py).
NEEDS_HOST_ENGINE: Final = {
    "remote-hostengine-info": "the nv-hostengine to connect to (the GPU Operator's standalone "
                              "DCGM); gpu-enricher reads NVML in its own process, no host "
                              "engine in between",
    "enable-dcgm-log": "the DCGM library's own log; there is no DCGM library here",
    "dcgm-log-level": "the DCGM library's log level; there is no DCGM library here",
    "watch-max-keep-age": "how long DCGM's field watches keep samples; gpu-enricher keeps none, "
                          "it reads each value once per pass",
    "watch-max-keep-samples": "how many samples DCGM's field watches keep; gpu-enricher keeps "
                              "none, it reads each value once per pass",
    "fake-gpus": "DCGM's injected fake GPUs; here --simulate is the fake node",
    "cpu-devices": "chooses the Grace CPUs and cores to watch: DCGM entities (its sysmon "
                   "module) that NVML does not have",
    "switch-devices": "chooses the NVSwitches and links to watch: DCGM entities (its NVSwitch "
                      "module) that NVML does not have",
    "disable-startup-validate": "skips dcgm-exporter's check that libdcgm is installed and its "
                                "exit when a DCGM collector cannot start; neither exists here",
}


# dcgm-exporter flags whose job gpu-enricher does another way, always: one INFO line when set.
SERVED_OTHERWISE: Final = {
    "enable-gpu-bind-unbind-watch": "always on here: the nvidia driver's sysfs directory is "
                                    "listed (a few µs) every --gpu-bind-unbind-poll-interval "
                                    "and every pass, and NVML restarts when a GPU was bound or "
                                    "unbound (docs/flags.md)",
}

# dcgm-exporter flags gpu-enricher does not implement, and why: a warning when set.
NOT_IMPLEMENTED: Final = {
    "enable-pprof": "Go's profiler endpoints; gpu-enricher is Python (attach py-spy to the "
                    "process instead)",
    "container-labels": "container-runtime labels for hosts without Kubernetes (dcgm-exporter "
                        "ignores them with --kubernetes); gpu-enricher names workloads through "
                        "the kubelet (--kubernetes) or /proc (--process-metrics)",
    "container-runtime-socket": "the container runtime that --container-labels asks",
}


def compat_flags() -> list[DcgmFlag]:
    return [f for f in DCGM_EXPORTER_FLAGS
            if f.long not in IMPLEMENTED_LONG and f.long not in ("help", "version")]


def _names(flag: DcgmFlag) -> str:
    return (f"-{flag.short}/" if flag.short else "") + f"--{flag.long}"


def _compat_epilog(width: int) -> str:
    """dcgm-exporter's flags that gpu-enricher accepts and does not implement, each with its
    reason: those that need a DCGM host engine; those served another way; those not
    implemented (tests/cli holds that every such flag is in one of the three)."""
    wrap = textwrap.TextWrapper(width=width, initial_indent="  ", subsequent_indent="  ",
                                break_on_hyphens=False, break_long_words=False)
    hanging = textwrap.TextWrapper(width=width, initial_indent="  ", subsequent_indent="      ",
                                   break_on_hyphens=False, break_long_words=False)

    def reasons(why: dict[str, str]) -> list[str]:
        return [hanging.fill(f"{_names(f)}: {why[f.long]}") for f in compat_flags()
                if f.long in why]

    engine = ("Accepted so that dcgm-exporter manifests keep working, from the command line or "
              "dcgm-exporter's environment variables. These configure DCGM itself (its host "
              "engine, library or entities); gpu-enricher reads NVML in its own process, so one "
              "that is set logs one INFO line and changes nothing "
              f"({len(NEEDS_HOST_ENGINE)} flags):")
    environment = ("Every flag above also reads the environment when not given: "
                   "GPU_ENRICHER_<FLAG_NAME> first, then dcgm-exporter's variable (shown in "
                   "brackets); NODE_NAME sets the Hostname label. A bad value prints one line and "
                   "exits with status 2.")
    return "\n".join([
        *textwrap.wrap(environment, width),
        "",
        "dcgm-exporter compatibility (accepted, ignored):",
        wrap.fill(engine),
        *reasons(NEEDS_HOST_ENGINE),
        "",
        "dcgm-exporter flags served another way (accepted; one INFO line when set):",
        *reasons(SERVED_OTHERWISE),
        "",
        "dcgm-exporter flags not implemented (accepted; a warning when set):",
        *reasons(NOT_IMPLEMENTED),
    ])


def build_parser() -> argparse.ArgumentParser:
    width = max(60, min(100, shutil.get_terminal_size().columns)) - 2
    parser = _Parser(
        prog="gpu-enricher",
        usage=SHORT_USAGE,
        description="NVIDIA GPU metrics in dcgm-exporter's format, with Kubernetes pod labels.\n"
                    "`gpu-enricher inspect [--url URL] [--namespace NS] [--pod POD]` prints "
                    "who holds and who uses\neach GPU, from a running exporter's /api/v1/gpus.",
        epilog=_compat_epilog(width),
        formatter_class=argparse.RawDescriptionHelpFormatter,
        # dcgm-exporter (urfave/cli) takes no abbreviations: `--coll` must not silently mean
        # `--collectors` here and be an error there.
        allow_abbrev=False,
    )
    parser.add_argument("--version", action="version", version=f"gpu-enricher {__version__}")
    for opt in OPTIONS:
        names = [f"-{opt.short}"] if opt.short else []
        names.append(f"--{opt.long}")
        if opt.parse is None:
            # `--kubernetes` or `--kubernetes=true|false`, as dcgm-exporter's CLI accepts.
            parser.add_argument(*names, nargs="?", const="true", default=None,
                                metavar="true|false", help=opt.help + _env_help(opt.long))
        else:
            parser.add_argument(*names, default=None, metavar=opt.metavar,
                                help=opt.help + _env_help(opt.long))
    parser.add_argument(
        "--simulate", nargs="?", const=BUILTIN_SCENARIO, default=None, metavar="SCENARIO.yaml",
        help="run on a simulated node: the built-in one, or one described by a YAML file "
             "(docs/simulate.md), with a fake kubelet, Kubernetes API and /proc; it turns on "
             "--process-metrics and --kubernetes-enable-dra unless they are set; only this flag "
             "ever simulates"
             + _env_help("simulate"))
    for flag in compat_flags():
        # Multi-letter single-dash names only where dcgm-exporter has them (-rbmn).
        names = ([f"-{flag.short}"] if flag.short else []) + [f"--{flag.long}"]
        if flag.takes_value:
            parser.add_argument(*names, default=None, help=argparse.SUPPRESS)
        else:
            parser.add_argument(*names, nargs="?", const="true", default=None,
                                help=argparse.SUPPRESS)
    return parser


def go_style_flags(parser: argparse.ArgumentParser, argv: Sequence[str]) -> list[str]:
    """dcgm-exporter's CLI (urfave/cli over Go's flag package) takes `-collectors x` and
    `-kubernetes` like `--collectors x`; argparse would read `-kubernetes` as `-k ubernetes`
    and `-debug` as `-d ebug`. Such tokens become their `--` form."""
    strings = {s for action in parser._actions for s in action.option_strings}
    rewritten: list[str] = []
    for n, token in enumerate(argv):
        if token == "--":
            return rewritten + list(argv[n:])
        name = token[1:].partition("=")[0]
        if (token.startswith("-") and not token.startswith("--") and token not in strings
                and f"-{name}" not in strings and f"--{name}" in strings):
            token = "-" + token
        rewritten.append(token)
    return rewritten
