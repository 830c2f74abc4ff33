"""The exporter's own metrics (`gpu_enricher_*`), rendered with the GPU families. Pure."""

import platform
from collections.abc import Collection, Mapping
from dataclasses import dataclass, field

from . import __version__, names
from .devices import count_devices
from .join import identity_pairs
from .model import AssignmentSnapshot, NodeSnapshot
from .render import Family, Sample, format_value, label_pairs

P = names.SELF_PREFIX


@dataclass(frozen=True, slots=True)
class SourceHealth:
    """What the collector knows about one source (nvml, simulated; later kubelet, …)."""

    up: bool
    collections: int = 0
    errors: Mapping[str, int] = field(default_factory=dict)  # reason → count since start
    last_duration_seconds: float | None = None
    last_success_timestamp: float | None = None


def _sources(health: Mapping[str, SourceHealth]) -> list[Family]:
    ordered = sorted(health.items())
    return [
        Family(f"{P}source_up", "gauge",
               "Whether the source answered on its last attempt (1) or not (0).",
               tuple(Sample(label_pairs([("source", s)]), "1" if h.up else "0")
                     for s, h in ordered)),
        Family(f"{P}collections", "counter", "Completed collection passes, by source.",
               tuple(Sample(label_pairs([("source", s)]), str(h.collections), "_total")
                     for s, h in ordered)),
        Family(f"{P}collection_errors", "counter",
               "Failed queries by source and reason (NVML error name, gRPC code, …).",
               tuple(Sample(label_pairs([("source", s), ("reason", r)]), str(n), "_total")
                     for s, h in ordered for r, n in sorted(h.errors.items()))),
        Family(f"{P}last_collection_duration_seconds", "gauge",
               "Wall time of the source's last completed pass.",
               tuple(Sample(label_pairs([("source", s)]), format_value(h.last_duration_seconds))
                     for s, h in ordered if h.last_duration_seconds is not None)),
        Family(f"{P}last_collection_timestamp_seconds", "gauge",
               "Unix time of the source's last completed pass.",
               tuple(Sample(label_pairs([("source", s)]), format_value(h.last_success_timestamp))
                     for s, h in ordered if h.last_success_timestamp is not None)),
    ]


def self_families(
    snapshot: NodeSnapshot | None,
    health: Mapping[str, SourceHealth],
    hostname: str | None,
    backend_name: str,
) -> list[Family]:
    build = label_pairs([
        ("version", __version__),
        ("python_version", platform.python_version()),
        ("backend", backend_name),
    ])
    families = [Family(f"{P}build_info", "gauge",
                       "Build information; the value is always 1.", (Sample(build, "1"),))]
    if snapshot is not None:
        host = [(names.LABEL_HOSTNAME, hostname)] if hostname is not None else []
        families.append(Family(
            f"{P}gpu_up", "gauge",
            "Whether the GPU answered its queries in the last pass (1) or failed (0).",
            tuple(Sample(label_pairs(identity_pairs(g) + host), "1" if g.healthy else "0")
                  for g in snapshot.gpus),
        ))
    families.extend(_sources(health))
    return families


def _per_resource(name: str, help_text: str, counts: Mapping[str, int]) -> Family:
    return Family(name, "gauge", help_text, tuple(
        Sample(label_pairs([("resource", r)]), str(n)) for r, n in counts.items()))


def kubelet_families(pods: AssignmentSnapshot, extra_resources: Collection[str]) -> list[Family]:
    families = [
        Family(f"{P}kubelet_up", "gauge",
               "Whether the kubelet's pod-resources API answered the last List (1) or not (0).",
               (Sample("", "1" if pods.up else "0"),)),
        Family(f"{P}kubelet_assignments_age_seconds", "gauge",
               "Age of the pod assignments behind the pod labels; absent when none are used.",
               () if pods.age_seconds is None else (Sample("", format_value(pods.age_seconds)),)),
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
