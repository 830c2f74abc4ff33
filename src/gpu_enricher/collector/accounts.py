"""The per-pod accounts kept across passes, for chargeback (docs/chargeback.md): GPU-seconds
(with -k, `ledger.py`) and joules (with --process-metrics, `energy.py`). The collector hands
each render its inputs and the pure join's outputs; the accounts step and give their families.
"""

from ..attribution.containers import Occupant
from ..attribution.energy import ENERGY_FIELD, POWER_FIELD, is_occupant_payer, is_pod_payer
from ..attribution.shares import Tenant, occupant_shares
from ..exposition.chargeback import EnergyView, gpu_seconds_family, host_pairs
from ..exposition.query import Billed
from ..exposition.render import Family
from ..model import NodeSnapshot, ProcessTable
from .cycle import CycleInputs, CycleOutputs
from .energy import EnergyBook
from .ledger import Ledger, accumulate


class PodAccounts:
    def __init__(self, interval_seconds: float, process_metrics: bool,
                 drop_labels: frozenset[str], hostname: str | None = None) -> None:
        # A step is bounded by two intervals: a gap is not billed beyond what was seen.
        self._max_step = 2 * interval_seconds
        self._process_metrics = process_metrics
        self._gpu_time: Ledger[Tenant] = Ledger()  # GPU-seconds per pod since start (-k)
        self._occupied_time: Ledger[Occupant] = Ledger()  # per container, person (issue 34)
        self._energy = EnergyBook(self._max_step)  # joules per pod, once per NVML pass
        self._energy_node: NodeSnapshot | None = None
        self._host = host_pairs(hostname, drop_labels)  # on these series too (issue 32)
        self._energy_view = EnergyView(drop_labels, self._host)
        self._energy_shown: tuple[int, list[Family]] | None = None
        """The energy families and the book's revision they show: rebuilt only when a total
        changed, which a counter on the slow cadence does once per --slow-fields-interval."""

    def sampled_fields(self) -> frozenset[str]:
        """What the GPU pass must read for the energy split, whatever the counters file lists:
        the GPU's own energy counter (on the backend's slow cadence) and its power."""
        return frozenset({ENERGY_FIELD, POWER_FIELD}) if self._process_metrics else frozenset()

    def families(self, inputs: CycleInputs, joined: CycleOutputs) -> list[Family]:
        families: list[Family] = []
        if joined.shares is not None or inputs.containers is not None:
            # Pods' holdings (-k), and on hosts without Kubernetes (--container-labels) the
            # occupants of the devices no pod holds (issue 34).
            self._gpu_time = accumulate(self._gpu_time, joined.shares or {}, inputs.now,
                                        self._max_step)
            self._occupied_time = accumulate(self._occupied_time,
                                             occupant_shares(joined.occupied), inputs.now,
                                             self._max_step)
            families.append(gpu_seconds_family(self._gpu_time.totals, self._host,
                                               self._occupied_time.totals))
        if self._process_metrics and inputs.node is not None:
            if inputs.node is not self._energy_node:  # a render without a new pass adds nothing
                self._energy_node = inputs.node
                self._energy.step(inputs.node, joined.processes,
                                  inputs.processes or ProcessTable(), joined.holdings or {},
                                  inputs.now, joined.outside, joined.occupied)
            if self._energy_shown is None or self._energy_shown[0] != self._energy.revision:
                self._energy_shown = (self._energy.revision, self._energy_view.families(
                    self._energy.accounts(), self._energy.members))
            families += self._energy_shown[1]
        return families

    def billed(self) -> Billed:
        """What the accounts hold for the query document (exposition/query.with_accounts)."""
        joules: dict[tuple[int, str, str, str, int | None], float] = {}
        occupant_joules: dict[tuple[int, str, str, int | None], float] = {}
        for account in self._energy.accounts():
            for payer, total in account.totals.items():
                if is_pod_payer(payer):
                    joules[(account.gpu, *payer)] = total
                elif is_occupant_payer(payer):
                    occupant_joules[(account.gpu, *payer)] = total
        return Billed(self._gpu_time.totals, joules, self._occupied_time.totals,
                      occupant_joules)
