"""Join a node snapshot, the counter plan and the pod attribution into dcgm-exporter's
labelled families. Pure."""

import dataclasses
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from types import MappingProxyType
from typing import Final

from ..attribution.containers import NO_OCCUPANTS, Occupants
from ..attribution.devices import EMPTY_ATTRIBUTION, Attribution, EntityKey, Holder
from ..attribution.podlabels import NO_POLICY, PodLabelPolicy
from ..attribution.workloads import EMPTY_INDEX, PodIndex
from ..fields import names
from ..fields.convert import MIB
from ..fields.counters import CounterPlan
from ..fields.namings import FB_USED, FB_USED_BYTES, GPU_UTIL, GPU_UTIL_RATIO
from ..fields.spec import MigScope
from ..fields.table import EVENT_FIELDS, IMPLEMENTED
from ..model import NO_JOBS, FieldValue, GpuInstance, GpuSnapshot, JobMapping, NodeSnapshot
from .label_drop import kept
from .render import Family, Sample, format_value, label_pairs
from .shape import FLEX, PLAIN_STYLE, DeviceSelection, LabelStyle, monitored

# A shared device's values split per pod (`_split`), under both namings.
_NOTHING_USED: Final[Mapping[str, FieldValue]] = MappingProxyType(
    {FB_USED: 0, FB_USED_BYTES: 0, GPU_UTIL: 0, GPU_UTIL_RATIO: 0.0})


@dataclass(frozen=True, slots=True)
class PodContext:
    """What the join knows about pods beyond the kubelet's holders."""

    index: PodIndex = EMPTY_INDEX
    policy: PodLabelPolicy = NO_POLICY
    usage: Mapping[tuple[EntityKey, str, str], tuple[int, float | None]] | None = None
    """(device, namespace, pod) → (bytes, SM ratio) from its processes; None: no per-process
    attribution, so a shared device's values are repeated, not split."""
    uids: Mapping[tuple[str, str], str] = dataclasses.field(default_factory=dict)
    """(namespace, pod) → UID from the kubelet's log names, for pods the API does not know."""
    drop: frozenset[str] = frozenset()
    """Label names left off every series (`--drop-labels`), pod labels and identity alike."""
    style: LabelStyle = PLAIN_STYLE
    """`-rbmn` and `-o`, applied after `drop` (which names labels as without `-o`)."""


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


Pairs = list[tuple[str, str]]


def entity_labels(
    gpu: GpuSnapshot,
    instance: GpuInstance | None,
    hostname: str | None,
    label_fields: Sequence[tuple[str, str]],
    parent_values: Mapping[str, FieldValue],
    drop: frozenset[str] = frozenset(),
    style: LabelStyle = PLAIN_STYLE,
) -> tuple[Pairs, Pairs]:
    """(identity, MIG and Hostname pairs; label-type field pairs), without `drop`'s names,
    spelled as `style` says."""
    head = identity_pairs(gpu)
    if instance is not None:
        head.append((names.LABEL_GPU_I_PROFILE, instance.profile))
        head.append((names.LABEL_GPU_I_ID, str(instance.gpu_instance_id)))
    if hostname is not None:
        head.extend(names.hostname_pairs(hostname))
    fields = [(name, _label_text(value)) for name, field in label_fields
              if (value := parent_values.get(field)) is not None]
    return style.pairs(kept(head, drop)), kept(fields, drop)


def holder_pairs(holder: Holder, vgpu: bool, pods: PodContext) -> tuple[Pairs, Pairs]:
    """One holding's (pod labels, for the label map; attributes: container, namespace, pod,
    pod_uid, vgpu, dra_*)."""
    attrs = [(names.LABEL_CONTAINER, holder.container), (names.LABEL_NAMESPACE, holder.namespace),
             (names.LABEL_POD, holder.pod)]
    if vgpu and holder.replica is not None:
        attrs.append((names.LABEL_VGPU, holder.replica))
    if holder.claim is not None:  # dcgm-exporter's dra_* attributes
        attrs += holder.claim.label_pairs()
    labels: Pairs = []
    if pods.policy.enabled:
        meta = pods.index.by_name.get((holder.namespace, holder.pod))
        extra = pods.policy.pairs(meta, pods.uids.get((holder.namespace, holder.pod), ""))
        attrs += [p for p in extra if p[0] == names.LABEL_POD_UID]
        labels = [p for p in extra if p[0] != names.LABEL_POD_UID]
    return kept(labels, pods.drop), sorted(pods.style.pairs(kept(attrs, pods.drop)))


def job_attributes(jobs: tuple[str, ...]) -> list[Pairs]:
    """One attribute list per HPC job an entity's series are repeated for, in file order
    (dcgm-exporter's hpc.go copies each series once per job); one empty list without a job.
    (`--drop-labels` refuses `hpc_job`: the copies would become one series.)"""
    return [[(names.LABEL_HPC_JOB, job)] for job in jobs] if jobs else [[]]


def occupant_copies(job: Pairs, occupants: Sequence[tuple[str, str]],
                    pods: PodContext) -> list[Pairs]:
    """The attributes of a series no pod holds (`--container-labels`): as it is, then one copy
    per container given or using its GPU (and per person using it), `container` (`user`)
    sorted in: dcgm-exporter 4.8.3's container mapper runs after hpc.go, and leaves alone a
    series whose pod already names its container."""
    copies = [job]
    for occupant in occupants:
        extra = pods.style.pairs(kept([occupant], pods.drop))
        if extra:  # a dropped occupant label: the copy would be the series again
            copies.append(sorted(job + extra))
    return copies


def holdings(key: EntityKey, attribution: Attribution, virtual_gpus: bool) -> list[Holder]:
    """The holders an entity's series are repeated for: the first in sorted order (labels
    never flip between scrapes), or each with virtual GPUs; none for a free device."""
    holders = attribution.holders.get(key, ())
    return list(holders) if virtual_gpus else list(holders[:1])


def _labels(head: Pairs, fields: Pairs, holder: Holder | None, vgpu: bool,
            pods: PodContext, job: Pairs) -> str:
    """dcgm-exporter's order: identity, Hostname, then its label map (label-type fields and
    the pod's own labels, sorted), then its attribute map (container, namespace, pod, pod_uid,
    vgpu, sorted): Go templates range over maps in key order (its kubernetes.go copies pod
    labels into the label map). `job`: the `hpc_job` attribute, sorted in with the others."""
    if holder is None:
        return label_pairs(head + fields + job)
    labels, attrs = holder_pairs(holder, vgpu, pods)
    if labels:
        fields = sorted(fields + labels)
    return label_pairs(head + fields + sorted(attrs + job))


def _split(key: EntityKey, holder: Holder, pods: PodContext,
           first_of_pod: bool) -> Mapping[str, FieldValue]:
    """A shared device's per-pod memory (MiB) and utilisation (%) from the pod's processes,
    0 for a pod without one (dcgm-exporter's 2026 virtual-GPU semantics). A pod holding
    several replicas gets its figures on its first one and 0 on the others, so that a sum
    over the pod's series is its use, not a multiple of it.

    A pod whose processes NVML gives no utilisation sample keeps the device's own value: MPS
    clients on a real H200 are never sampled (only the MPS server is, docs/real-gpu.md), and
    a 0 there would be a reading nobody took (a busy GPU shown idle to an HPA)."""
    if pods.usage is None:
        return {}
    found = pods.usage.get((key, holder.namespace, holder.pod))
    if found is None or not first_of_pod:
        return _NOTHING_USED
    memory, sm = found
    split: dict[str, FieldValue] = {FB_USED: memory // MIB, FB_USED_BYTES: memory}
    if sm is not None:
        utilization = min(100, round(100 * sm))
        split |= {GPU_UTIL: utilization, GPU_UTIL_RATIO: utilization / 100}
    return split


def _with_holders(gpu: GpuSnapshot, inst: GpuInstance | None, key: EntityKey,
                  labels: tuple[Pairs, Pairs], chosen: list[Holder], virtual_gpus: bool,
                  pods: PodContext, jobs: list[Pairs],
                  occupants: Sequence[tuple[str, str]]) -> list[Entity]:
    """Series of a held device carry its pod, once per chosen holding (`holdings`), and
    each of those once per HPC job (`job_attributes`: hpc.go runs after the pod mapper); a
    device no pod holds, once more per container or person occupying it (`occupant_copies`)."""
    head, fields = labels
    if not chosen:
        return [Entity(gpu, inst, _labels(head, fields, None, False, pods, attrs))
                for job in jobs for attrs in occupant_copies(job, occupants, pods)]
    shared = virtual_gpus and len({(h.namespace, h.pod) for h in chosen}) > 1
    seen: set[tuple[str, str]] = set()
    result: list[Entity] = []
    for holder in chosen:
        pod = (holder.namespace, holder.pod)
        split = _split(key, holder, pods, pod not in seen) if shared else {}
        seen.add(pod)
        result.extend(Entity(gpu, inst, _labels(head, fields, holder, virtual_gpus, pods, job),
                             split) for job in jobs)
    return result


def entities(snapshot: NodeSnapshot, plan: CounterPlan, hostname: str | None,
             attribution: Attribution = EMPTY_ATTRIBUTION,
             virtual_gpus: bool = False, pods: PodContext = NO_PODS,
             devices: DeviceSelection = FLEX, jobs: JobMapping = NO_JOBS,
             occupants: Occupants = NO_OCCUPANTS) -> list[Entity]:
    """The entities `devices` selects (exposition/shape.py): by default a MIG-enabled GPU is
    represented by its GPU instances, one in MIG mode without instances keeps its GPU-level
    series so it stays visible. A MIG GPU shown whole (`-d g`) carries the pods that hold the
    GPU itself, not its instances' (dcgm-exporter keys it by the GPU's UUID). An instance's
    jobs are those of its `<gpu>.<gpu instance>` file only, as hpc.go keys a MIG series: a
    whole GPU's file `<gpu>` does not cover its instances."""
    result: list[Entity] = []
    for gpu, inst in monitored(snapshot, devices):
        key = (gpu.identity.index, inst.gpu_instance_id if inst is not None else None)
        labels = entity_labels(gpu, inst, hostname, plan.labels, gpu.values,
                               pods.drop, pods.style)
        result.extend(_with_holders(gpu, inst, key, labels,
                                    holdings(key, attribution, virtual_gpus), virtual_gpus,
                                    pods, job_attributes(jobs.of(*key)),
                                    occupants.get(key, ())))
    return result


_Reading = tuple[str, Mapping[str, FieldValue] | None, Entity | None]
"""(labels, the values to read, or else the entity to ask): one entity's source per scope."""


def _readings(ents: Sequence[Entity]) -> dict[MigScope, list[_Reading]]:
    """Where each entity reads a field of each scope, worked out once per pass, not once per
    field and entity (issue 33: 1,400 lookups a pass on an 8 x 7 MIG node)."""
    found: dict[MigScope, list[_Reading]] = {scope: [] for scope in MigScope}
    for ent in ents:
        for scope, readings in found.items():
            if ent.overrides:  # a shared device's split values: the entity decides
                readings.append((ent.labels, None, ent))
            elif ent.instance is None or scope is MigScope.PARENT:
                readings.append((ent.labels, ent.gpu.values, None))
            elif scope is MigScope.INSTANCE:
                readings.append((ent.labels, ent.instance.values, None))
    return found


def dcgm_families(
    snapshot: NodeSnapshot, plan: CounterPlan, hostname: str | None,
    attribution: Attribution = EMPTY_ATTRIBUTION, virtual_gpus: bool = False,
    pods: PodContext = NO_PODS, devices: DeviceSelection = FLEX, jobs: JobMapping = NO_JOBS,
    occupants: Occupants = NO_OCCUPANTS,
) -> list[Family]:
    readings = _readings(entities(snapshot, plan, hostname, attribution, virtual_gpus, pods,
                                  devices, jobs, occupants))
    families: list[Family] = []
    for metric in plan.metrics:
        if metric.field in EVENT_FIELDS:  # counted from events: event_families builds them
            continue
        # The family is named as the counters line names it (a legacy `dcgm_sm_clock`, an
        # alias); its values are those of the implemented field it resolves to.
        field, scope = metric.field, IMPLEMENTED[metric.field].mig
        samples: list[Sample] = []
        value: FieldValue | None = None
        for labels, values, ent in readings[scope]:
            if values is not None:
                value = values.get(field)
            elif ent is not None:
                value = ent.value(field, scope)
            if value is None or isinstance(value, str):
                continue
            samples.append(Sample(labels, str(value) if type(value) is int
                                  else format_value(value)))
        families.append(Family(metric.name, metric.prom_type, metric.help, tuple(samples)))
    return families
