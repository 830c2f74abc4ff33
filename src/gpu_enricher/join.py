"""Join a node snapshot, the counter plan and the pod attribution into dcgm-exporter's
labelled families. Pure."""

from collections.abc import Mapping
from dataclasses import dataclass

from . import names
from .counters import CounterPlan
from .devices import EMPTY_ATTRIBUTION, Attribution, EntityKey, Holder
from .fields import IMPLEMENTED, MigScope
from .model import FieldValue, GpuInstance, GpuSnapshot, NodeSnapshot
from .render import Family, Sample, format_value, label_pairs


@dataclass(frozen=True, slots=True)
class Entity:
    """One labelled thing that series are emitted for: a whole GPU or one MIG instance."""

    gpu: GpuSnapshot
    instance: GpuInstance | None
    labels: str

    def value(self, field: str, scope: MigScope) -> FieldValue | None:
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


def _pod_labels(holder: Holder, vgpu: bool) -> str:
    pairs = [(names.LABEL_CONTAINER, holder.container), (names.LABEL_NAMESPACE, holder.namespace),
             (names.LABEL_POD, holder.pod)]
    if vgpu and holder.replica is not None:
        pairs.append((names.LABEL_VGPU, holder.replica))
    return "," + label_pairs(pairs)


def _with_holders(gpu: GpuSnapshot, inst: GpuInstance | None, labels: str,
                  holders: tuple[Holder, ...], virtual_gpus: bool) -> list[Entity]:
    """Series of a held device carry its pod; a shared one carries either its first holder
    (sorted: labels never flip between scrapes) or, with virtual GPUs, each holder in turn."""
    if not holders:
        return [Entity(gpu, inst, labels)]
    if not virtual_gpus:
        return [Entity(gpu, inst, labels + _pod_labels(holders[0], False))]
    return [Entity(gpu, inst, labels + _pod_labels(h, True)) for h in holders]


def entities(snapshot: NodeSnapshot, plan: CounterPlan, hostname: str | None,
             attribution: Attribution = EMPTY_ATTRIBUTION,
             virtual_gpus: bool = False) -> list[Entity]:
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
            result.extend(_with_holders(gpu, inst, labels, attribution.holders.get(key, ()),
                                        virtual_gpus))
    return result


def dcgm_families(
    snapshot: NodeSnapshot, plan: CounterPlan, hostname: str | None,
    attribution: Attribution = EMPTY_ATTRIBUTION, virtual_gpus: bool = False,
) -> list[Family]:
    ents = entities(snapshot, plan, hostname, attribution, virtual_gpus)
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
