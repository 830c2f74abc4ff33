"""Per-pod GPU energy kept across passes (`gpu_enricher_pod_energy_joules_total` and
`gpu_enricher_unattributed_energy_joules_total`, docs/chargeback.md). No I/O: the collector
hands each pass's snapshot, processes, holdings and monotonic clock in.

Each pass's split (attribution/energy.py) is weighed by the time it covers (never more than
`max_step`) and added to the GPU's pending weights; when the GPU's energy counter moves (every
pass, or every --slow-fields-interval when it is read on the slow cadence and repeated in
between), the delta is split by the weights pending since the last move. So, per GPU, the
totals shown plus those of the pods whose series ended always equal (the counter now - its
first reading) / 1000. Where the counter is unsupported, power times the step is split instead.
The idle baseline is the lowest power seen on the GPU over the last `baseline_window` seconds.
"""

from collections import deque
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field

from ..attribution.devices import EntityKey, Holder
from ..attribution.energy import (
    ENERGY_FIELD,
    NOBODY_OUTSIDE,
    POWER_FIELD,
    Outside,
    Payer,
    pass_split,
    reading,
)
from ..attribution.shares import OccupantHoldings
from ..attribution.workloads import GpuProcess
from ..exposition.chargeback import EnergyAccount
from ..model import DeviceIdentity, GpuSnapshot, NodeSnapshot, ProcessTable

MIN_WEIGHT = 1e-9
"""A pass covering no time (the first) still weighs something: a delta is never unsplit."""


@dataclass(slots=True)
class Meter:
    """One GPU's energy account."""

    identity: DeviceIdentity
    profiles: dict[int, str] = field(default_factory=dict)
    """GPU instance ID → profile, for the MIG labels of its pods' series."""
    totals: dict[Payer, float] = field(default_factory=dict)
    """Joules per payer since the exporter first saw the GPU: the series shown."""
    ended: float = 0.0
    """Joules of the pods whose series ended (so that everything adds up)."""
    first_mj: float | None = None
    last_mj: float | None = None
    at: float | None = None
    pending: dict[Payer, float] = field(default_factory=dict)
    closing: set[Payer] = field(default_factory=set)
    lows: deque[tuple[float, float]] = field(default_factory=deque)
    """(time, watts), watts increasing: the window's minimum is the first."""

    def baseline(self, now: float, watts: float | None, window: float) -> float | None:
        if watts is not None:
            while self.lows and self.lows[-1][1] >= watts:
                self.lows.pop()
            self.lows.append((now, watts))
        while len(self.lows) > 1 and self.lows[0][0] < now - window:
            self.lows.popleft()
        return self.lows[0][1] if self.lows else None

    def counted_joules(self) -> float:
        """What the totals must add up to: the counter's rise, or the power integrated."""
        return sum(self.totals.values()) + self.ended


class EnergyBook:
    def __init__(self, max_step: float, baseline_window: float = 3600.0) -> None:
        self.max_step = max_step
        self.baseline_window = baseline_window
        self.meters: dict[str, Meter] = {}
        self.revision = 0
        """Moves whenever a total shown changes, starts or ends: between two moves of a slow
        counter the families need not be rebuilt."""
        self.members = 0
        """Moves whenever a series starts or ends or a GPU's labels change: while it stays,
        only the values of the series shown change."""

    def accounts(self) -> list[EnergyAccount]:
        return [EnergyAccount(m.identity.index, m.identity.uuid, m.profiles, m.totals)
                for m in self.meters.values()]

    def step(self, node: NodeSnapshot, processes: Iterable[GpuProcess], table: ProcessTable,
             holdings: Mapping[EntityKey, list[tuple[Holder, float]]], now: float,
             outside: Outside = NOBODY_OUTSIDE,
             occupied: OccupantHoldings | None = None) -> None:
        """One pass. `outside` and `occupied`: who runs the processes outside any pod, and
        who occupies the devices no pod holds (a host without Kubernetes, issue 34)."""
        by_index: dict[int, list[GpuProcess]] = {}
        for proc in processes:
            by_index.setdefault(proc.key[0], []).append(proc)
        held: dict[int, dict[EntityKey, list[tuple[Holder, float]]]] = {}
        for key, parts in holdings.items():
            held.setdefault(key[0], {})[key] = parts
        occupants: dict[int, OccupantHoldings] = {}
        for key, found in (occupied or {}).items():
            occupants.setdefault(key[0], {})[key] = found
        present = {gpu.identity.uuid for gpu in node.gpus}
        for uuid in [u for u in self.meters if u not in present]:  # unbound: its series end
            del self.meters[uuid]
            self._changed_members()
        for gpu in node.gpus:
            if gpu.healthy:  # a lost GPU's series stay as they were until it answers
                index = gpu.identity.index
                self._gpu(gpu, by_index.get(index, ()), table, held.get(index, {}), now,
                          outside, occupants.get(index))

    def _gpu(self, gpu: GpuSnapshot, processes: Iterable[GpuProcess], table: ProcessTable,
             holdings: Mapping[EntityKey, list[tuple[Holder, float]]], now: float,
             outside: Outside, occupied: OccupantHoldings | None) -> None:
        meter = self.meters.get(gpu.identity.uuid)
        if meter is None:
            meter = self.meters[gpu.identity.uuid] = Meter(gpu.identity)
            self._changed_members()
        if meter.identity != gpu.identity:
            meter.identity = gpu.identity
            self._changed_members()
        for inst in gpu.instances:
            if meter.profiles.get(inst.gpu_instance_id) != inst.profile:
                meter.profiles[inst.gpu_instance_id] = inst.profile
                self._changed_members()
        watts = reading(gpu, POWER_FIELD)
        baseline = meter.baseline(now, watts, self.baseline_window)
        step = 0.0 if meter.at is None else min(max(0.0, now - meter.at), self.max_step)
        meter.at = now
        split = pass_split(gpu, processes, table, holdings, baseline, outside, occupied)
        weight = max(step, MIN_WEIGHT)
        pending, totals = meter.pending, meter.totals
        for payer, fraction in split.items():
            pending[payer] = pending.get(payer, 0.0) + fraction * weight
            if payer not in totals:  # a new series starts at 0
                totals[payer] = 0.0
                self._changed_members()
        if self._spend(meter, self._delta(meter, gpu, watts, step)):
            self.revision += 1
        if len(totals) > len(split) or meter.closing:  # some series neither held nor used
            self._close(meter, split.keys() | pending.keys())

    def _close(self, meter: Meter, live: set[Payer]) -> None:
        for payer in [p for p in meter.totals if isinstance(p, tuple) and p not in live]:
            if payer in meter.closing:  # shown once with its final value: now it ends
                meter.ended += meter.totals.pop(payer)
                meter.closing.discard(payer)
                self._changed_members()
            else:
                meter.closing.add(payer)
        meter.closing &= meter.totals.keys() - live

    def _changed_members(self) -> None:
        self.members += 1
        self.revision += 1

    @staticmethod
    def _delta(meter: Meter, gpu: GpuSnapshot, watts: float | None, step: float) -> float:
        counter = reading(gpu, ENERGY_FIELD)
        if counter is None:
            return watts * step if watts is not None else 0.0
        if meter.first_mj is None or meter.last_mj is None:
            meter.first_mj = meter.last_mj = counter
            return 0.0
        rise = counter - meter.last_mj
        meter.last_mj = counter
        if rise < 0:  # the counter went back (a GPU reset): counted on from its new value
            meter.first_mj += rise
            return 0.0
        return rise / 1000

    @staticmethod
    def _spend(meter: Meter, joules: float) -> bool:
        """Split `joules` by the pending weights; whether any total moved."""
        weight = sum(meter.pending.values())
        if joules <= 0 or weight <= 0:
            return False
        for payer, part in meter.pending.items():
            meter.totals[payer] = meter.totals.get(payer, 0.0) + joules * part / weight
        meter.pending.clear()
        return True
