"""Join a node snapshot, the counter plan and the pod attribution into dcgm-exporter's
labelled families. Pure."""

import dataclasses
from collections.abc import Mapping
from dataclasses import dataclass

from . import names
from .counters import CounterPlan
from .devices import EMPTY_ATTRIBUTION, Attribution, EntityKey, Holder
from .fields import IMPLEMENTED, MigScope
from .model import FieldValue, GpuInstance, GpuSnapshot, NodeSnapshot
from .podlabels import NO_POLICY, PodLabelPolicy
from .render import Family, Sample, format_value, label_pairs
from .workloads import EMPTY_INDEX, PodIndex

MIB = 1 << 20
SPLIT_FIELDS = ("DCGM_FI_DEV_FB_USED", "DCGM_FI_DEV_GPU_UTIL")


@dataclass(frozen=True, slots=True)
class PodContext:
    """What the join knows about pods beyond the kubelet's holders."""

    index: PodIndex = EMPTY_INDEX
    policy: PodLabelPolicy = NO_POLICY
    usage: Mapping[tuple[EntityKey, str, str], tuple[int, float | None]] | None = None
    """(device, namespace, pod) → (bytes, SM ratio) from its processes; None: no per-process
    attribution, so a shared device's values are repeated, not split."""


NO_PODS = PodContext()


@dataclass(frozen=True, slots=True)
class Entity:
    """One labelled thing that series are emitted for: a whole GPU or one MIG instance."""

    gpu: GpuSnapshot
    instance: GpuInstance | None
    labels: str
    overrides: Mapping[str, FieldValue] = dataclasses.field(default_factory=dict)

    def value(self, field: str, scope: MigScope) -> FieldValue | None:
        # A split value never brings back a field the instance lacks (GPU_UTIL is GPU_ONLY).
        if field in self.overrides and (self.instance is None or scope is not MigScope.GPU_ONLY):
            return self.overrides[field]
        if self.instance is None:
            return self.gpu.values.get(field)
        if scope is MigScope.INSTANCE:
            return self.instance.values.get(field)
        if scope is MigScope.PARENT:
            return self.gpu.values.get(field)
        return None


def identity_pairs(gpu: GpuSnapshot) -> list[tuple[str, str]]:
    ident = gpu.identity
    return [
        (names.LABEL_GPU, str(ident.index)),
        (names.LABEL_UUID, ident.uuid),
        (names.LABEL_PCI_BUS_ID, ident.pci_bus_id),
        (names.LABEL_DEVICE, names.device_name(ident.index)),
        (names.LABEL_MODEL_NAME, ident.model_name),
    ]


def _label_text(value: FieldValue) -> str:
    return value if isinstance(value, str) else format_value(value)


def _entity_labels(
    gpu: GpuSnapshot,
    instance: GpuInstance | None,
    hostname: str | None,
    label_fields: tuple[str, ...],
    parent_values: Mapping[str, FieldValue],
) -> str:
    pairs = identity_pairs(gpu)
    if instance is not None:
        pairs.append((names.LABEL_GPU_I_PROFILE, instance.profile))
        pairs.append((names.LABEL_GPU_I_ID, str(instance.gpu_instance_id)))
    if hostname is not None:
        pairs.append((names.LABEL_HOSTNAME, hostname))
    for field in label_fields:
        value = parent_values.get(field)
        if value is not None:
            pairs.append((field, _label_text(value)))
    return label_pairs(pairs)


def _pod_labels(holder: Holder, vgpu: bool, pods: PodContext) -> str:
    pairs = [(names.LABEL_CONTAINER, holder.container), (names.LABEL_NAMESPACE, holder.namespace),
             (names.LABEL_POD, holder.pod)]
    if vgpu and holder.replica is not None:
        pairs.append((names.LABEL_VGPU, holder.replica))
    if pods.policy.enabled:
        pairs.extend(pods.policy.pairs(pods.index.by_name.get((holder.namespace, holder.pod))))
    return "," + label_pairs(sorted(pairs))  # sorted, as dcgm-exporter ranges over a map


def _split(key: EntityKey, holder: Holder, pods: PodContext) -> Mapping[str, FieldValue]:
    """A shared device's per-pod memory (MiB) and utilisation (%) from the pod's processes,
    0 for a pod without one (dcgm-exporter's 2026 virtual-GPU semantics)."""
    if pods.usage is None:
        return {}
    memory, sm = pods.usage.get((key, holder.namespace, holder.pod), (0, None))
    return {"DCGM_FI_DEV_FB_USED": memory // MIB,
            "DCGM_FI_DEV_GPU_UTIL": min(100, round(100 * (sm or 0.0)))}


def _with_holders(gpu: GpuSnapshot, inst: GpuInstance | None, key: EntityKey, labels: str,
                  holders: tuple[Holder, ...], virtual_gpus: bool,
                  pods: PodContext) -> list[Entity]:
    """Series of a held device carry its pod; a shared one carries either its first holder
    (sorted: labels never flip between scrapes) or, with virtual GPUs, each holder in turn."""
    if not holders:
        return [Entity(gpu, inst, labels)]
    if not virtual_gpus:
        return [Entity(gpu, inst, labels + _pod_labels(holders[0], False, pods))]
    shared = len({(h.namespace, h.pod) for h in holders}) > 1
    return [Entity(gpu, inst, labels + _pod_labels(h, True, pods),
                   _split(key, h, pods) if shared else {}) for h in holders]


def entities(snapshot: NodeSnapshot, plan: CounterPlan, hostname: str | None,
             attribution: Attribution = EMPTY_ATTRIBUTION,
             virtual_gpus: bool = False, pods: PodContext = NO_PODS) -> list[Entity]:
    """A MIG-enabled GPU is represented by its GPU instances (dcgm-exporter's `-d f`);
    one in MIG mode without instances keeps its GPU-level series so it stays visible."""
    result: list[Entity] = []
    for gpu in snapshot.gpus:
        if not gpu.healthy:
            continue
        index = gpu.identity.index
        parts: list[tuple[GpuInstance | None, EntityKey]] = (
            [(inst, (index, inst.gpu_instance_id)) for inst in gpu.instances]
            if gpu.mig_enabled and gpu.instances else [(None, (index, None))]
        )
        for inst, key in parts:
            labels = _entity_labels(gpu, inst, hostname, plan.label_fields, gpu.values)
            result.extend(_with_holders(gpu, inst, key, labels,
                                        attribution.holders.get(key, ()), virtual_gpus, pods))
    return result


def dcgm_families(
    snapshot: NodeSnapshot, plan: CounterPlan, hostname: str | None,
    attribution: Attribution = EMPTY_ATTRIBUTION, virtual_gpus: bool = False,
    pods: PodContext = NO_PODS,
) -> list[Family]:
    ents = entities(snapshot, plan, hostname, attribution, virtual_gpus, pods)
    families: list[Family] = []
    for metric in plan.metrics:
        scope = IMPLEMENTED[metric.name].mig
        samples: list[Sample] = []
        for ent in ents:
            value = ent.value(metric.name, scope)
            if value is None or isinstance(value, str):
                continue
            samples.append(Sample(ent.labels, format_value(value)))
        families.append(Family(metric.name, metric.prom_type, metric.help, tuple(samples)))
    return families
