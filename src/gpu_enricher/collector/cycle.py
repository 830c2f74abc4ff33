"""One cycle's join: every source's snapshot in, the DCGM and process families and the query
API's document out. Pure: the collector calls it once per pass and swaps the results in.
"""

import dataclasses
from collections.abc import Mapping
from dataclasses import dataclass, field

from ..attribution.claims import ClaimHolders, claim_holders, merged
from ..attribution.containers import (
    NO_OCCUPANTS,
    Occupant,
    Occupants,
    RuntimeContainers,
    occupants,
    outside_pods,
)
from ..attribution.devices import EMPTY_ATTRIBUTION, Attribution, attribute, without_pod
from ..attribution.podlabels import NO_POLICY, PodLabelPolicy
from ..attribution.shares import (
    Holdings,
    OccupantHoldings,
    Tenant,
    entity_holdings,
    occupant_holdings,
    offered_replicas,
    tenant_shares,
)
from ..attribution.workloads import (
    Allocation,
    GpuProcess,
    PodIndex,
    gpu_processes,
    live_holders,
    per_pod,
)
from ..exposition.join import (
    PodContext,
    dcgm_families,
    holder_pairs,
    holdings,
    job_attributes,
    occupant_copies,
)
from ..exposition.process_families import process_families
from ..exposition.query import Document, OutsidePods, gpus_document
from ..exposition.render import Family
from ..exposition.shape import FLEX, OLD_NAMES, PLAIN_STYLE, DeviceSelection, LabelStyle
from ..fields.counters import CounterPlan
from ..health.clock_events import ClockEventCounts
from ..health.event_families import (
    EventFamilyOptions,
    SeriesCopy,
    event_families,
    own_xid_counter_family,
)
from ..health.source import NO_INCIDENTS, HealthIncidents
from ..health.status_families import status_families
from ..health.xid import DEFAULT_WINDOW_MS, EMPTY_XIDS, XidSnapshot
from ..model import (
    NO_JOBS,
    AssignmentSnapshot,
    ClaimAccess,
    GpuInstance,
    GpuSnapshot,
    JobMapping,
    NodeSnapshot,
    PodAssignment,
    PodDirectory,
    ProcessTable,
    SliceDirectory,
)


@dataclass(frozen=True, slots=True)
class JoinOptions:
    hostname: str | None
    virtual_gpus: bool = False
    extra_resources: frozenset[str] = frozenset()
    process_metrics: bool = False
    pod_policy: PodLabelPolicy = NO_POLICY
    dra_drivers: frozenset[str] = frozenset()
    """DRA drivers whose claims attribute devices (`--kubernetes-enable-dra`); empty: off."""
    xid_window_ms: int = DEFAULT_WINDOW_MS
    clock_events_window_ms: int = DEFAULT_WINDOW_MS
    drop_labels: frozenset[str] = frozenset()
    """`--drop-labels`: left off the DCGM, event and process families when they are built,
    once per pass (the exporter's own prometheus_client metrics keep theirs)."""
    own_pod: tuple[str, str] | None = None
    """The exporter's own pod (POD_NAMESPACE, POD_NAME): a monitor, never a holder."""
    devices: DeviceSelection = FLEX
    """`-d`: the entities of the DCGM and event families."""
    style: LabelStyle = PLAIN_STYLE
    """`-rbmn`, `-o`: label spellings of the DCGM and event families."""


@dataclass(frozen=True, slots=True)
class CycleInputs:
    node: NodeSnapshot | None
    plan: CounterPlan | None
    assignments: AssignmentSnapshot | None = None
    api_pods: PodDirectory | None = None
    log_pods: PodDirectory | None = None
    processes: ProcessTable | None = None
    collected_at: float | None = None
    slices: SliceDirectory | None = None
    xids: XidSnapshot | None = None
    clock_events: ClockEventCounts | None = None
    now: float = 0.0
    """Monotonic seconds, the clock of the event windows."""
    health: HealthIncidents | None = None
    claim_access: ClaimAccess | None = None
    """DRA: the devices claimed with admin access (monitors, not holders)."""
    jobs: JobMapping | None = None
    """HPC jobs by GPU (`--hpc-job-mapping-dir`); None: off."""
    containers: RuntimeContainers | None = None
    """The container runtime's containers with GPUs (`--container-labels`); None: off."""


@dataclass(frozen=True, slots=True)
class CycleOutputs:
    families: list[Family]
    attribution: Attribution | None
    """None without a kubelet source."""
    processes: tuple[GpuProcess, ...]
    document: Document
    claims: ClaimHolders | None = None
    """DRA: the claim holders found and the claimed devices no slice resolves; None: off."""
    shares: dict[Tenant, float] | None = None
    """Each holder's share of a whole GPU (GPU time per pod); None without a kubelet source."""
    holdings: Holdings | None = None
    """The same per GPU or MIG instance (idle energy per pod); None without a kubelet source."""
    outside: Mapping[int, Occupant] = field(default_factory=dict)
    """PID → the container or person running a GPU process outside any pod (issue 34)."""
    occupied: OccupantHoldings = field(default_factory=dict)
    """The devices no pod holds: their occupants' shares (GPU time, idle energy; issue 34)."""


def _claims(inputs: CycleInputs, options: JoinOptions) -> ClaimHolders | None:
    drivers = options.dra_drivers
    if not drivers or inputs.node is None or inputs.assignments is None:
        return None
    slices = inputs.slices or SliceDirectory()
    found = claim_holders(inputs.node.gpus, inputs.assignments.claims, slices, drivers,
                          inputs.claim_access or ClaimAccess(), options.own_pod)
    # Before the first complete list of slices nothing is "unresolved" yet, only pending.
    return found if slices.synced else dataclasses.replace(found, unresolved={})


def _attribution(inputs: CycleInputs, options: JoinOptions, pods: PodIndex,
                 claims: ClaimHolders | None) -> Attribution:
    assert inputs.node is not None and inputs.assignments is not None
    found = without_pod(attribute(inputs.node.gpus, inputs.assignments.assignments,
                                  options.extra_resources, inputs.assignments.pod_age),
                        options.own_pod)
    if claims is not None:
        found = merged(found, claims, inputs.assignments.pod_age)
    return live_holders(found, pods) if pods.by_name else found


def _allocation(inputs: CycleInputs, pods: PodIndex,
                claims: ClaimHolders | None) -> Allocation | None:
    """Every holder of every resource, and the devices the device plugin manages; None unless
    the kubelet's last `List` answered (a process is never called unallocated on an old
    answer: its pod may have been given the GPU since)."""
    answer = inputs.assignments
    if inputs.node is None or answer is None or not answer.up or answer.age_seconds is None:
        return None
    offered = answer.allocatable or ()
    resources = {a.resource for a in answer.assignments} | {d.resource for d in offered}
    held = attribute(inputs.node.gpus, answer.assignments, resources, answer.pod_age)
    if pods.by_name:
        held = live_holders(held, pods)
    free = attribute(inputs.node.gpus,
                     [PodAssignment("", "", "", d.resource, d.device_ids) for d in offered],
                     resources)
    managed = frozenset(held.holders) | frozenset(free.holders)
    if claims is not None:  # a GPU a DRA driver publishes is handed out through claims
        held = merged(held, claims, answer.pod_age, monitors=True)
        # ... but only a kubelet that reports claims (v1, 1.34+ or its feature gate) tells us
        # who holds them: without any, no process on a DRA GPU can be called unallocated.
        if claims.holders or claims.monitors or claims.unresolved:
            managed |= claims.managed | frozenset(claims.holders)
    return Allocation(held.holders, managed)


def _proc_usable(inputs: CycleInputs) -> bool:
    """Whether /proc told us anything: NVML reported processes but the table has none of
    them when the exporter sees its own /proc instead of the host's (no hostPID, no mount).
    Then a shared GPU's values are repeated per pod rather than split into zeros."""
    if inputs.processes is None or inputs.node is None:
        return False
    nvml_pids = any(gpu.processes for gpu in inputs.node.gpus if gpu.healthy)
    return not nvml_pids or bool(inputs.processes.processes)


def _events(inputs: CycleInputs, options: JoinOptions, attribution: Attribution,
            pods: PodContext, occupied: Occupants) -> list[Family]:
    """XIDs and clock events, counted over windows; the series carry the device's pod (or
    container) as the sampled fields do."""
    assert inputs.node is not None and inputs.plan is not None
    node = inputs.node

    def copies(gpu: GpuSnapshot, instance: GpuInstance | None) -> list[SeriesCopy]:
        key = (gpu.identity.index, instance.gpu_instance_id if instance else None)
        found = [SeriesCopy(*map(tuple, holder_pairs(h, options.virtual_gpus, pods)))
                 for h in holdings(key, attribution, options.virtual_gpus)]
        jobs = job_attributes((inputs.jobs or NO_JOBS).of(*key))
        if not found:
            return [SeriesCopy((), tuple(attrs)) for job in jobs
                    for attrs in occupant_copies(job, occupied.get(key, ()), pods)]
        return [SeriesCopy(c.labels, (*c.attributes, *job)) for c in found for job in jobs]

    event_options = EventFamilyOptions(options.hostname, inputs.plan.labels,
                                       options.xid_window_ms, options.clock_events_window_ms,
                                       copies, options.drop_labels, options.devices,
                                       options.style)
    xids = inputs.xids or EMPTY_XIDS
    clocks = inputs.clock_events or ClockEventCounts()
    families = event_families(node, inputs.plan.metrics, xids, clocks.window, clocks.totals,
                              event_options, inputs.now)
    families += status_families(node, inputs.plan.metrics, inputs.health or NO_INCIDENTS, xids,
                                event_options, inputs.now)
    if inputs.xids is not None:  # our own real counter (dcgm-exporter's "last value" is #500)
        families.append(own_xid_counter_family(node, xids, options.hostname,
                                               options.drop_labels))
    return families


def compose(inputs: CycleInputs, options: JoinOptions) -> CycleOutputs:
    api = PodIndex.of(inputs.api_pods)
    claims = _claims(inputs, options)
    attribution = (_attribution(inputs, options, api, claims)
                   if inputs.node is not None and inputs.assignments is not None else None)
    logs = PodIndex.of(inputs.log_pods)
    processes: tuple[GpuProcess, ...] = ()
    if inputs.node is not None and inputs.processes is not None:
        processes = gpu_processes(inputs.node, inputs.processes, [api, logs],
                                  _allocation(inputs, api, claims))
    families: list[Family] = []
    outside = outside_pods(inputs.containers, inputs.processes)
    occupied = (occupants(inputs.node, inputs.containers, outside)
                if inputs.node is not None and inputs.containers is not None else NO_OCCUPANTS)
    if inputs.node is not None and inputs.plan is not None:
        # A pod label named like a label-type field of this counters file, or like a 1.x
        # label name under -o, is prefixed too.
        taken = frozenset(inputs.plan.label_fields) | (
            frozenset(OLD_NAMES.values()) if options.style.old_namespace else frozenset())
        policy = (dataclasses.replace(options.pod_policy,
                                      reserved=options.pod_policy.reserved | taken)
                  if options.pod_policy.labels and taken else options.pod_policy)
        sums = per_pod(processes)
        usage = sums if _proc_usable(inputs) else None
        uids = {name: meta.uid for name, meta in logs.by_name.items() if meta.uid}
        context = PodContext(api, policy, usage, uids, options.drop_labels, options.style)
        families = dcgm_families(inputs.node, inputs.plan, options.hostname,
                                 attribution or EMPTY_ATTRIBUTION, options.virtual_gpus, context,
                                 options.devices, inputs.jobs or NO_JOBS, occupied)
        families += _events(inputs, options, attribution or EMPTY_ATTRIBUTION, context,
                            occupied)
        if options.process_metrics:
            families += process_families(processes, policy, sums, options.drop_labels, outside)
    document = gpus_document(inputs.node, attribution or EMPTY_ATTRIBUTION, processes, api,
                             options.hostname, inputs.collected_at, options.process_metrics,
                             inputs.jobs or NO_JOBS, OutsidePods(occupied, outside))
    holdings = None
    if attribution is not None and inputs.node is not None and inputs.assignments is not None:
        holdings = entity_holdings(inputs.node.gpus, attribution, offered_replicas(
            inputs.node.gpus, inputs.assignments.allocatable, options.extra_resources))
    held = {key for key, parts in (holdings or {}).items() if parts}
    return CycleOutputs(families, attribution, processes, document, claims,
                        tenant_shares(holdings) if holdings is not None else None, holdings,
                        # Accounts per container and person: hosts without Kubernetes only.
                        outside if inputs.containers is not None else {},
                        occupant_holdings(inputs.node.gpus, occupied, held)
                        if inputs.node is not None and occupied else {})
