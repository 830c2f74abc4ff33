"""Command line and environment → Config: `parse_config` and the warnings it gives.

Flag names follow dcgm-exporter so copied DaemonSet manifests keep working. Each flag reads,
in order: the command line, `GPU_ENRICHER_<FLAG_NAME>`, dcgm-exporter's own variable(s).
dcgm-exporter flags we do not implement yet are accepted and log one warning when set; those
that configure a DCGM host engine log one INFO line saying why nothing changes.
The flags themselves are in cli/options.py and cli/dcgm_flags.py, their values' parsing in
cli/flag_values.py; cli/main.py logs and runs.
"""

import argparse
import socket
from collections.abc import Callable, Mapping, Sequence
from pathlib import Path
from typing import Any, Final

from ..config import (
    BUILTIN_SCENARIO,
    DEFAULT_KUBELET_LOG_ROOT,
    DEFAULT_KUBELET_SOCKET,
    DEFAULT_PROC_ROOT,
    DEFAULT_RUNTIME_SOCKET,
    Config,
)
from ..exposition.label_drop import unknown_warning
from ..fields.collection import DCGM_IMAGE_DIR, default_counters_path
from ..fields.names import HOSTNAME_LABEL_NAMES, Hostname
from .compat import NEEDS_HOST_ENGINE, NOT_IMPLEMENTED, SERVED_OTHERWISE
from .flag_values import (
    DEFAULT_IDLE_TIMEOUT_MS,
    DEFAULT_INTERVAL_MS,
    DEFAULT_KUBELET_LIST_CPU_BUDGET_PERCENT,
    DEFAULT_LABEL_WAIT_MS,
    DEFAULT_MAX_CONCURRENT_SCRAPES,
    DEFAULT_MAX_CONNECTIONS,
    DEFAULT_READ_HEADER_TIMEOUT_MS,
    DEFAULT_READ_TIMEOUT_SECONDS,
    DEFAULT_WRITE_TIMEOUT_SECONDS,
    FALSE_WORDS,
    TRUE_WORDS,
    UsageError,
    parse_bool,
)
from .flags import build_parser, compat_flags, env_names, go_style_flags
from .options import PARSERS

DCGM_EXPORTER_DIR_ENV: Final = "GPU_ENRICHER_DCGM_EXPORTER_DIR"


def _value(args: argparse.Namespace, long: str, env: Mapping[str, str]) -> tuple[str | None, str]:
    """The raw text of a flag and where it came from."""
    given = getattr(args, long.replace("-", "_"))
    if given is not None:
        return given, f"--{long}"
    for name in env_names(long):
        if name in env:
            return env[name], name
    return None, ""


def _parsed(raw: str, origin: str, parse: Callable[[str], Any]) -> Any:
    """A value parsed, its error naming where it came from: `GPU_ENRICHER_X=abc: …`."""
    try:
        return parse(raw)
    except UsageError as exc:
        raise UsageError(f"{origin}={raw}: {exc}") from None


class Note(str):
    """A line of parse_config's warnings that is logged at INFO: a setting that changes
    nothing here for a good reason (a DCGM host engine's), not a problem to fix."""


def _unimplemented_warnings(args: argparse.Namespace, env: Mapping[str, str]) -> list[str]:
    warnings: list[str] = []
    for flag in compat_flags():
        raw, origin = _value(args, flag.long, env)
        if raw is None:
            continue
        if not flag.takes_value and not _parsed(raw, origin, parse_bool):
            continue
        if flag.takes_value and raw == flag.default:
            continue
        if flag.long in NEEDS_HOST_ENGINE:
            # The GPU Operator's standalone DCGM renders DCGM_REMOTE_HOSTENGINE_INFO into the
            # exporter's DaemonSet: expected, and nothing is lost, so not a warning.
            warnings.append(Note(f"{origin}={raw!r} configures a DCGM host engine, which "
                                 "gpu-enricher does not use: "
                                 f"{NEEDS_HOST_ENGINE[flag.long]}; nothing changes"))
        elif flag.long in SERVED_OTHERWISE:
            warnings.append(Note(f"{origin}={raw!r}: {SERVED_OTHERWISE[flag.long]}; nothing "
                                 "changes"))
        else:  # NOT_IMPLEMENTED (tests/cli: every such flag is in one of the three)
            warnings.append(f"{origin}={raw!r} is a dcgm-exporter option that gpu-enricher "
                            f"does not implement ({NOT_IMPLEMENTED[flag.long]}); ignored")
    return warnings


def parse_config(argv: Sequence[str], env: Mapping[str, str]) -> tuple[Config, list[str]]:
    """Flags + environment → Config and the warnings to log. Raises UsageError."""
    parser = build_parser()
    args = parser.parse_args(go_style_flags(parser, argv))

    def get(long: str, default: Any) -> Any:
        raw, origin = _value(args, long, env)
        return default if raw is None else _parsed(raw, origin, PARSERS[long])

    def switch(long: str, default: bool = False) -> bool:
        raw, origin = _value(args, long, env)
        return default if raw is None else bool(_parsed(raw, origin, parse_bool))

    host, port = get("address", (None, 9400))
    no_hostname = switch("no-hostname")
    drop_labels = get("drop-labels", frozenset())
    # Both names by default (#655 renamed it in 4.8.3); dropping every name chosen is -n.
    host_labels = tuple(name for name in get("hostname-label-name", HOSTNAME_LABEL_NAMES)
                        if name not in drop_labels)
    hostname = (None if no_hostname or not host_labels
                else Hostname(env.get("NODE_NAME") or socket.gethostname(), host_labels))
    simulate, _ = _value(args, "simulate", env)
    if simulate is not None and simulate.strip().lower() in TRUE_WORDS:  # ..._SIMULATE=true
        simulate = BUILTIN_SCENARIO
    elif simulate is not None and simulate.strip().lower() in FALSE_WORDS:
        simulate = None
    kubernetes = switch("kubernetes")
    naming = get("naming", "classic")
    config = Config(
        kubernetes=kubernetes or simulate is not None,
        kubelet_socket=get("pod-resources-kubelet-socket", DEFAULT_KUBELET_SOCKET),
        kubelet_list_cpu_budget=get("kubelet-list-cpu-budget",
                                    DEFAULT_KUBELET_LIST_CPU_BUDGET_PERCENT / 100),
        gpu_id_type=get("kubernetes-gpu-id-type", "uid"),
        extra_resources=get("nvidia-resource-names", frozenset()),
        virtual_gpus=switch("kubernetes-virtual-gpus"),
        host=host,
        port=port,
        collectors=get("collectors", default_counters_path(naming)),
        collectors_origin=_value(args, "collectors", env)[1],
        config_file=get("config-file", None),
        configmap=get("configmap-data", None),
        collect_interval_given=_value(args, "collect-interval", env)[0] is not None,
        # Where dcgm-exporter's /etc/dcgm-exporter is: the tests map it into a temporary folder.
        dcgm_exporter_dir=Path(env.get(DCGM_EXPORTER_DIR_ENV) or DCGM_IMAGE_DIR),
        collect_interval_ms=get("collect-interval", DEFAULT_INTERVAL_MS),
        slow_fields_interval_ms=get("slow-fields-interval", 30000),
        xid_window_ms=get("xid-count-window-size", 300000),
        clock_events_window_ms=get("clock-events-count-window-size", 300000),
        hostname=hostname,
        log_format=get("log-format", "text"),
        debug=switch("debug"),
        simulate=simulate or None,
        # The simulated node shows every capability: process metrics unless switched off.
        process_metrics=(switch("process-metrics")
                         if _value(args, "process-metrics", env)[0] is not None
                         else simulate is not None),
        proc_root=get("proc-root", DEFAULT_PROC_ROOT),
        kubelet_log_root=get("kubelet-log-root", DEFAULT_KUBELET_LOG_ROOT),
        pod_labels=switch("kubernetes-enable-pod-labels"),
        pod_label_allowlist=get("kubernetes-pod-label-allowlist-regex", ()),
        pod_uid=switch("kubernetes-enable-pod-uid"),
        kubeconfig=get("kubeconfig", None),
        kubernetes_api=get("kubernetes-api", True),
        dra=(switch("kubernetes-enable-dra")
             if _value(args, "kubernetes-enable-dra", env)[0] is not None
             else simulate is not None),
        dra_drivers=get("kubernetes-dra-driver-names", frozenset({"gpu.nvidia.com"})),
        node_name=env.get("NODE_NAME") or socket.gethostname(),
        web_config_file=get("web-config-file", None),
        config_check_interval_ms=get("config-check-interval", 5000),
        web_read_header_timeout_ms=get("web-read-header-timeout", DEFAULT_READ_HEADER_TIMEOUT_MS),
        web_idle_timeout_ms=get("web-idle-timeout", DEFAULT_IDLE_TIMEOUT_MS),
        web_max_connections=get("web-max-connections", DEFAULT_MAX_CONNECTIONS),
        drop_labels=drop_labels,
        # Downward-API variables (our chart sets them; the GPU Operator does not).
        own_pod=((env["POD_NAMESPACE"], env["POD_NAME"])
                 if env.get("POD_NAMESPACE") and env.get("POD_NAME") else None),
        devices=get("devices", "f"),
        replace_blanks_in_model_name=switch("replace-blanks-in-model-name"),
        use_old_namespace=switch("use-old-namespace"),
        hpc_job_mapping_dir=get("hpc-job-mapping-dir", None),
        web_read_timeout_seconds=get("web-read-timeout", DEFAULT_READ_TIMEOUT_SECONDS),
        web_write_timeout_seconds=get("web-write-timeout", DEFAULT_WRITE_TIMEOUT_SECONDS),
        health_require_gpus=switch("health-require-gpus"),
        web_systemd_socket=switch("web-systemd-socket"),
        dump_enabled=switch("dump-enabled"),
        dump_directory=get("dump-directory", Path("/tmp/dcgm-exporter-debug")),
        dump_retention_hours=get("dump-retention", 24),
        dump_compression=switch("dump-compression", default=True),
        gpu_bind_unbind_poll_seconds=get("gpu-bind-unbind-poll-interval", 1.0),
        exporter_metrics=switch("enable-exporter-metrics"),
        max_concurrent_scrapes=get("max-concurrent-scrapes", DEFAULT_MAX_CONCURRENT_SCRAPES),
        naming=naming,
        startup_label_wait_ms=get("startup-label-wait", DEFAULT_LABEL_WAIT_MS),
        container_labels=switch("container-labels"),
        container_runtime_socket=get("container-runtime-socket", "") or DEFAULT_RUNTIME_SOCKET,
    )
    warnings = _unimplemented_warnings(args, env)
    if (unknown := unknown_warning(config.drop_labels, config.pod_labels)) is not None:
        warnings.append(unknown)
    asked_dra = _value(args, "kubernetes-enable-dra", env)[0] is not None
    if config.dra and not config.reads_slices and asked_dra:
        warnings.append("--kubernetes-enable-dra needs -k/--kubernetes (the kubelet's claims) and "
                        "the Kubernetes API (ResourceSlices): DRA labels off")
    if config.kube_api and not env.get("NODE_NAME") and simulate is None:
        warnings.append(f"NODE_NAME is not set: asking the Kubernetes API for the pods of node "
                        f"{config.node_name!r} (this host's name; in a pod that is the pod's "
                        "name, which matches no node): set NODE_NAME from spec.nodeName")
    if not config.kubernetes_api and (config.pod_labels or config.pod_uid):
        warnings.append("--kubernetes-enable-pod-labels and --kubernetes-enable-pod-uid need the "
                        "Kubernetes API, which --kubernetes-api=false switches off: no pod labels "
                        "or UIDs")
    return config, warnings
