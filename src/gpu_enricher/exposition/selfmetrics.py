"""The exporter's own metrics (`gpu_enricher_*`) as prometheus_client families. Pure.

These are ordinary exporter metrics, in prometheus_client's format (`ownmetrics.py` collects
them beside its standard `process_*` and `python_*` families, `client_format.py` writes them in
its exact bytes); only the DCGM families have a format of their own.
"""

import platform
from collections.abc import Collection, Iterable, Mapping, Sequence

from prometheus_client.metrics_core import HistogramMetricFamily, Metric

from .. import __version__
from ..attribution.devices import Attribution, ClaimRef, EntityKey, Holder, count_devices
from ..fields import names
from ..model import AssignmentSnapshot, NodeSnapshot, SourceHealth
from .client_format import go_float
from .join import identity_pairs

P = names.SELF_PREFIX
Labels = Iterable[tuple[str, str]]


def _family(name: str, kind: str, help_text: str,
            samples: Iterable[tuple[Labels, float]]) -> Metric:
    """A family; a counter's samples get the `_total` suffix prometheus_client expects."""
    family = Metric(name, help_text, kind)
    sample_name = name + "_total" if kind == "counter" else name
    for labels, value in samples:
        family.add_sample(sample_name, dict(labels), value)
    return family


def _sources(health: Mapping[str, SourceHealth]) -> list[Metric]:
    ordered = sorted(health.items())
    return [
        _family(f"{P}source_up", "gauge",
                "Whether the source answered on its last attempt (1) or not (0).",
                [([("source", s)], 1 if h.up else 0) for s, h in ordered]),
        _family(f"{P}collections", "counter", "Completed collection passes, by source.",
                [([("source", s)], h.collections) for s, h in ordered]),
        _family(f"{P}collection_errors", "counter",
                "Failed queries by source and reason (NVML error name, gRPC code, …).",
                [([("source", s), ("reason", r)], n)
                 for s, h in ordered for r, n in sorted(h.errors.items())]),
        _family(f"{P}last_collection_duration_seconds", "gauge",
                "Wall time of the source's last completed pass.",
                [([("source", s)], h.last_duration_seconds)
                 for s, h in ordered if h.last_duration_seconds is not None]),
        _family(f"{P}last_collection_timestamp_seconds", "gauge",
                "Unix time of the source's last completed pass.",
                [([("source", s)], h.last_success_timestamp)
                 for s, h in ordered if h.last_success_timestamp is not None]),
    ]


def self_families(
    snapshot: NodeSnapshot | None,
    health: Mapping[str, SourceHealth],
    hostname: str | None,
    backend_name: str,
) -> list[Metric]:
    build = [("version", __version__), ("python_version", platform.python_version()),
             ("backend", backend_name)]
    families = [_family(f"{P}build_info", "gauge", "Build information; the value is always 1.",
                        [(build, 1)])]
    if snapshot is not None:
        host = names.hostname_pairs(hostname) if hostname is not None else []
        families.append(_family(
            f"{P}gpu_up", "gauge",
            "Whether the GPU answered its queries in the last pass (1) or failed (0).",
            [([*identity_pairs(g), *host], 1 if g.healthy else 0) for g in snapshot.gpus]))
    families.extend(_sources(health))
    return families


def lag_family(bounds: Sequence[float], counts: Sequence[int], observed: int,
               total: float) -> Metric:
    """The event loop's longest lag per pass, a histogram (issue 33; collector/lag.py)."""
    family = HistogramMetricFamily(
        f"{P}event_loop_lag_seconds",
        "The longest time, per collection pass or repaint, that the event loop took to run a "
        "callback posted to it: what a scrape arriving then waited before its handler ran.")
    family.add_metric([], [*((go_float(b), c) for b, c in zip(bounds, counts,
                                                                      strict=True)),
                           ("+Inf", observed)], total)
    return family


def picture_families(first_wait: float | None, news_renders: int) -> list[Metric]:
    """How the pictures came: the first one's wait for the labelling sources (once it was
    painted), and those painted between passes on a source's news (issue 32)."""
    families = [_family(f"{P}news_renders", "counter",
                        "Pictures rendered between collection passes because a source announced "
                        "a change (a pod or ResourceSlice list or event, the claims' client "
                        "loaded): its labels shown at once, without an NVML pass.",
                        [((), news_renders)])]
    if first_wait is not None:
        families.append(_family(
            f"{P}startup_label_wait_seconds", "gauge",
            "From the first collection pass's start to the first picture (and /ready): the "
            "NVML pass and the wait for the sources that label series, at most "
            "--startup-label-wait.", [((), first_wait)]))
    return families


AUTH_FAILURE_REASONS = ("missing", "wrong", "busy")
"""Why basic auth answered 401: no or malformed credentials; an unknown user or a wrong
password; too many checks already waiting (websecurity.BasicAuth)."""


TIMEOUT_PHASES = ("header", "read", "write")
"""Where a connection ran out of time (connguard): its request head, its whole request, its
response left unread. (A TLS handshake's timeout is the event loop's, which does not say.)"""


def http_families(bad_requests: int, auth_failures: Mapping[str, int], *, connections: int,
                  refused: int, timeouts: Mapping[str, int],
                  requests: Mapping[tuple[str, str], int] | None = None) -> list[Metric]:
    """The HTTP server's own counts (ownmetrics.HTTP); requests by handler and code only once
    some were counted (--enable-exporter-metrics)."""
    families = [_family(f"{P}http_connections", "gauge",
                        "Client connections open (TLS ones once their handshake is done).",
                        [([], connections)]),
                _family(f"{P}http_connections_refused", "counter",
                        "Connections closed at once because --web-max-connections were open.",
                        [([], refused)]),
                _family(f"{P}http_timeouts", "counter",
                        "Connections closed for taking too long, by phase: header (no complete "
                        "request head in time, --web-read-header-timeout), read (no complete "
                        "request, --web-read-timeout), write (a response not taken, "
                        "--web-write-timeout).",
                        [([("phase", p)], n) for p, n in timeouts.items()]),
                _family(f"{P}http_bad_requests", "counter",
                        "Requests refused as malformed or over the request line, header or "
                        "header count limits (answered 400).", [([], bad_requests)]),
                _family(f"{P}http_auth_failures", "counter",
                        "Requests refused by basic auth (--web-config-file), answered 401, by "
                        "reason: missing (no or malformed credentials), wrong (unknown user or "
                        "wrong password), busy (too many password checks waiting).",
                        [([("reason", r)], n) for r, n in auth_failures.items()])]
    if requests:
        families.append(_family(f"{P}http_requests", "counter",
                                "HTTP requests answered, by handler (the route; other: no "
                                "route) and status code (--enable-exporter-metrics).",
                                [([("handler", h), ("code", c)], n)
                                 for (h, c), n in sorted(requests.items())]))
    return families


CONFIG_FILES = ("counters", "config_file", "configmap", "web_config")
"""What a reload re-reads (reload.py): the counters file (-f), --config-file, -m's ConfigMap
and --web-config-file."""


def config_families(reload_ok: bool, last_success: float | None,
                    failures: Mapping[str, int]) -> list[Metric]:
    """Reloads (SIGHUP, or a watched file changing), named and meant as Prometheus's own
    `prometheus_config_last_reload_*`."""
    return [_family(f"{P}config_reload_success", "gauge",
                    "Whether the last configuration reload succeeded (1) or failed and the "
                    "running configuration was kept (0).", [([], 1 if reload_ok else 0)]),
            _family(f"{P}config_last_reload_success_timestamp_seconds", "gauge",
                    "Unix time of the last successful configuration load (the start, or a "
                    "reload).", [] if last_success is None else [([], last_success)]),
            _family(f"{P}config_reload_failures", "counter",
                    "Reloads refused, by the file that was wrong: the running configuration "
                    "was kept.", [([("file", f)], n) for f, n in failures.items()])]


def _per_resource(name: str, help_text: str, counts: Mapping[str, int]) -> Metric:
    return _family(name, "gauge", help_text, [([("resource", r)], n) for r, n in counts.items()])


def kubelet_families(pods: AssignmentSnapshot, extra_resources: Collection[str]) -> list[Metric]:
    families = [
        _family(f"{P}kubelet_up", "gauge",
                "Whether the kubelet's pod-resources API answered the last List (1) or not (0).",
                [([], 1 if pods.up else 0)]),
        _family(f"{P}kubelet_assignments_age_seconds", "gauge",
                "Age of the pod assignments behind the pod labels; absent when none are used.",
                [] if pods.age_seconds is None else [([], pods.age_seconds)]),
        _per_resource(f"{P}kubelet_allocated_devices",
                      "Devices held by pods, by resource, from the kubelet's List.",
                      count_devices(pods.assignments, extra_resources)),
    ]
    if pods.allocatable is not None:
        families.append(_per_resource(
            f"{P}kubelet_allocatable_devices",
            "Devices the kubelet can allocate, by resource, from GetAllocatableResources.",
            count_devices(pods.allocatable, extra_resources)))
    return families


def kubelet_list_families(cpu_seconds: float | None, deferred: int) -> list[Metric]:
    """The List's cost and the passes --kubelet-list-cpu-budget made use the last answer."""
    return [
        _family(f"{P}kubelet_list_cpu_seconds", "gauge",
                "CPU the last kubelet List took to receive and parse (the client's thread).",
                [] if cpu_seconds is None else [([], cpu_seconds)]),
        _family(f"{P}kubelet_lists_deferred", "counter",
                "Passes that used the last List answer to stay within "
                "--kubelet-list-cpu-budget.", [([], deferred)]),
    ]


def unmatched_family(listed: int | None, allocatable: int | None) -> Metric:
    """Device IDs of GPU resources in the kubelet's last answers that name no GPU or MIG
    instance of this node: dropped on the client's thread, never joined (issue 26)."""
    return _family(f"{P}kubelet_unmatched_device_ids", "gauge",
                   "Device IDs of GPU resources in the kubelet's last answer, by call, that "
                   "name no GPU or MIG instance of this node (dropped).",
                   [([("call", call)], count) for call, count in
                    (("List", listed), ("GetAllocatableResources", allocatable))
                    if count is not None])


def allocation_family(snapshot: NodeSnapshot, attribution: Attribution,
                      monitors: Mapping[EntityKey, tuple[Holder, ...]] | None = None) -> Metric:
    """Every holder of every device, whatever the series show (shared devices included), and
    the pods that claim one with admin access (`monitors`: they label no series)."""
    by_index = {g.identity.index: g for g in snapshot.gpus}
    samples: list[tuple[Labels, float]] = []
    everyone: dict[EntityKey, tuple[Holder, ...]] = dict(attribution.holders)
    for key, watching in (monitors or {}).items():
        everyone[key] = (*everyone.get(key, ()), *watching)
    for (index, gi), holders in sorted(everyone.items(),
                                       key=lambda item: (item[0][0], item[0][1] or -1)):
        gpu = by_index.get(index)
        if gpu is None:
            continue
        ident = [(names.LABEL_GPU, str(index)), (names.LABEL_UUID, gpu.identity.uuid)]
        if gi is not None:
            ident.append((names.LABEL_GPU_I_ID, str(gi)))
        samples.extend(([*ident, ("resource", h.resource), ("device_id", h.device_id),
                         (names.LABEL_NAMESPACE, h.namespace), (names.LABEL_POD, h.pod),
                         (names.LABEL_CONTAINER, h.container),
                         *(_claim_pairs(h.claim) if h.claim is not None else ())], 1)
                        for h in holders)
    return _family(f"{P}device_allocation_info", "gauge",
                   "A pod's container holds this device (time-slicing and MPS replicas "
                   "included; a DRA claim's holders with dra_claim_name, dra_claim_namespace "
                   "and admin_access: true for a claim that monitors the device and labels "
                   "none of its series).", samples)


def _claim_pairs(claim: ClaimRef) -> list[tuple[str, str]]:
    return [*claim.label_pairs()[:2], ("admin_access", "true" if claim.admin_access else "false")]


def claim_family(resolved: int, unresolved: Collection[str]) -> list[Metric]:
    """DRA: claimed devices matched to a GPU, and those no ResourceSlice resolves."""
    return [_family(f"{P}dra_claim_devices", "gauge",
                    "Devices held through DRA ResourceClaims, by whether a ResourceSlice of "
                    "this node resolves them to a GPU or MIG instance.",
                    [([("resolved", "true")], resolved), ([("resolved", "false")],
                                                          len(unresolved))])]
