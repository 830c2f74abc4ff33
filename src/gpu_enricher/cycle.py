"""One cycle's join: every source's snapshot in, the DCGM and process families and the query
API's document out. Pure: the collector calls it once per pass and swaps the results in.
"""

import dataclasses
from collections.abc import Collection
from dataclasses import dataclass

from .counters import CounterPlan
from .devices import EMPTY_ATTRIBUTION, Attribution, attribute
from .join import PodContext, dcgm_families
from .model import AssignmentSnapshot, NodeSnapshot, PodDirectory, ProcessTable
from .podlabels import NO_POLICY, PodLabelPolicy
from .process_families import process_families
from .query import Document, gpus_document
from .render import Family
from .workloads import GpuProcess, PodIndex, gpu_processes, live_holders, per_pod


@dataclass(frozen=True, slots=True)
class JoinOptions:
    hostname: str | None
    virtual_gpus: bool = False
    extra_resources: frozenset[str] = frozenset()
    process_metrics: bool = False
    pod_policy: PodLabelPolicy = NO_POLICY


@dataclass(frozen=True, slots=True)
class CycleInputs:
    node: NodeSnapshot | None
    plan: CounterPlan | None
    assignments: AssignmentSnapshot | None = None
    api_pods: PodDirectory | None = None
    log_pods: PodDirectory | None = None
    processes: ProcessTable | None = None
    collected_at: float | None = None


@dataclass(frozen=True, slots=True)
class CycleOutputs:
    families: list[Family]
    attribution: Attribution | None
    """None without a kubelet source."""
    processes: tuple[GpuProcess, ...]
    document: Document


def _attribution(inputs: CycleInputs, extra: Collection[str], pods: PodIndex) -> Attribution:
    assert inputs.node is not None and inputs.assignments is not None
    found = attribute(inputs.node.gpus, inputs.assignments.assignments, extra,
                      inputs.assignments.pod_age)
    return live_holders(found, pods) if pods.by_name else found


def _proc_usable(inputs: CycleInputs) -> bool:
    """Whether /proc told us anything: NVML reported processes but the table has none of
    them when the exporter sees its own /proc instead of the host's (no hostPID, no mount).
    Then a shared GPU's values are repeated per pod rather than split into zeros."""
    if inputs.processes is None or inputs.node is None:
        return False
    nvml_pids = any(gpu.processes for gpu in inputs.node.gpus if gpu.healthy)
    return not nvml_pids or bool(inputs.processes.processes)


def compose(inputs: CycleInputs, options: JoinOptions) -> CycleOutputs:
    api = PodIndex.of(inputs.api_pods)
    attribution = (_attribution(inputs, options.extra_resources, api)
                   if inputs.node is not None and inputs.assignments is not None else None)
    # Holders are known only while the kubelet's answer is current: otherwise no process
    # can be called unallocated.
    current = attribution if inputs.assignments is not None and \
        inputs.assignments.age_seconds is not None else None
    processes: tuple[GpuProcess, ...] = ()
    if inputs.node is not None and inputs.processes is not None:
        indexes = [api, PodIndex.of(inputs.log_pods)]
        processes = gpu_processes(inputs.node, inputs.processes, indexes, current)
    families: list[Family] = []
    if inputs.node is not None and inputs.plan is not None:
        # A pod label named like a label-type field of this counters file is prefixed too.
        policy = (dataclasses.replace(options.pod_policy, reserved=options.pod_policy.reserved
                                      | frozenset(inputs.plan.label_fields))
                  if options.pod_policy.labels and inputs.plan.label_fields
                  else options.pod_policy)
        usage = per_pod(processes) if _proc_usable(inputs) else None
        context = PodContext(api, policy, usage)
        families = dcgm_families(inputs.node, inputs.plan, options.hostname,
                                 attribution or EMPTY_ATTRIBUTION, options.virtual_gpus, context)
        if options.process_metrics:
            families += process_families(processes, policy)
    document = gpus_document(inputs.node, attribution or EMPTY_ATTRIBUTION, processes, api,
                             options.hostname, inputs.collected_at, options.process_metrics)
    return CycleOutputs(families, attribution, processes, document)
