"""How one pass splits one GPU's energy between pods (docs/chargeback.md, "Energy per pod").
Pure: the fractions returned add up to 1; collector/energy.py weighs them by time and applies
them to the GPU's own energy counter, so the counters add up to what the GPU consumed.

- **Active** (the power above the GPU's idle baseline, as a fraction of the power now) goes to
  the processes by their SM share, then to their pods: a pod using a GPU it does not hold pays
  for what it used. NVML has no per-process power (nor per-MIG-instance power, Kepler's
  #1198): when no process on the GPU has an SM sample (MIG, where NVML samples no process),
  each process counts its instance's compute slices over the GPU's, times the instance's own
  measured activity where GPM gives every such instance one (`DCGM_FI_PROF_SM_ACTIVE`, else
  `DCGM_FI_PROF_GR_ENGINE_ACTIVE`, a ratio of the instance's own SMs), split evenly between the
  processes on that instance (a whole GPU: 1).
- **MPS**: a real H200 samples the server only (docs/real-gpu.md); the server's SM share goes
  to the MPS clients on the GPU by their memory, or to `unknown` when none is seen.
- **Idle** (the rest) goes to the holders by their share of the GPU (attribution/shares.py),
  the part nobody holds to `idle`.
- A process in no container pays as `host`; one we cannot attribute as `unknown`. On a host
  without Kubernetes, a process outside any pod pays as its container or its person
  (attribution/containers.py `outside_pods`), and a GPU no pod holds has its idle energy split
  between its occupants as its GPU time is (attribution/shares.py `occupant_holdings`).
"""

from collections.abc import Iterable, Mapping
from typing import Final, TypeGuard

from ..model import GpuSnapshot, ProcessTable
from .containers import Occupant
from .devices import EntityKey, Holder
from .workloads import MPS_SERVER, GpuProcess

PodPayer = tuple[str, str, str, int | None]
"""(namespace, pod, container, GPU instance ID or None): one pod's energy series on a GPU."""
OccupantPayer = tuple[str, str, int | None]
"""(`container` or `user`, its name, GPU instance ID or None): without Kubernetes."""
Payer = PodPayer | OccupantPayer | str
"""A pod, a container or person outside pods, or a reason: `idle`, `host` or `unknown`."""
POD_PAYER_FIELDS: Final = 4
Outside = Mapping[int, Occupant]
"""PID → who runs a process outside any pod (attribution/containers.py `outside_pods`)."""
NOBODY_OUTSIDE: Final[Outside] = {}


def is_pod_payer(payer: Payer) -> TypeGuard[PodPayer]:
    return isinstance(payer, tuple) and len(payer) == POD_PAYER_FIELDS


def is_occupant_payer(payer: Payer) -> TypeGuard[OccupantPayer]:
    return isinstance(payer, tuple) and len(payer) == POD_PAYER_FIELDS - 1

IDLE: Final = "idle"
HOST: Final = "host"
UNKNOWN: Final = "unknown"
POWER_FIELD: Final = "DCGM_FI_DEV_POWER_USAGE"
ENERGY_FIELD: Final = "DCGM_FI_DEV_TOTAL_ENERGY_CONSUMPTION"
ACTIVITY_FIELDS: Final = ("DCGM_FI_PROF_SM_ACTIVE", "DCGM_FI_PROF_GR_ENGINE_ACTIVE")
"""A MIG instance's measured activity (NVML GPM per GPU instance), best first."""


def reading(gpu: GpuSnapshot, name: str) -> float | None:
    value = gpu.values.get(name)
    return float(value) if isinstance(value, (int, float)) else None


def active_fraction(power_watts: float | None, baseline_watts: float | None) -> float:
    """The part of the power now above the idle baseline; 0 without a power reading."""
    if power_watts is None or baseline_watts is None or power_watts <= 0:
        return 0.0
    return min(1.0, max(0.0, (power_watts - baseline_watts) / power_watts))


def _payer(proc: GpuProcess, table: ProcessTable, outside: Outside) -> Payer:
    if proc.workload is not None:
        return (proc.workload.namespace, proc.workload.pod, proc.workload.container,
                proc.key[1])
    who = outside.get(proc.sample.pid)
    if who is not None:
        return (*who, proc.key[1])
    host = table.processes.get(proc.sample.pid)
    return HOST if host is not None and host.container is None else UNKNOWN


def _add(split: dict[Payer, float], payer: Payer, amount: float) -> None:
    split[payer] = split.get(payer, 0.0) + amount


def _slice_share(proc: GpuProcess) -> float:
    inst = proc.instance
    if inst is None:
        return 1.0
    return inst.slices / inst.gpu_slices if inst.slices and inst.gpu_slices else 0.0


def instance_activity(users: Iterable[GpuProcess]) -> dict[int, float] | None:
    """Each GPU instance's measured activity (0-1), or None unless every user runs in an
    instance with a reading: slices and measured activity do not mix in one split."""
    found: dict[int, float] = {}
    for proc in users:
        inst = proc.instance
        if inst is None:
            return None
        if inst.gpu_instance_id not in found:
            value = next((v for name in ACTIVITY_FIELDS
                          if isinstance(v := inst.values.get(name), (int, float))), None)
            if value is None:
                return None
            found[inst.gpu_instance_id] = min(1.0, max(0.0, float(value)))
    return found


def used_weights(processes: Iterable[GpuProcess], table: ProcessTable,
                 outside: Outside = NOBODY_OUTSIDE) -> dict[Payer, float]:
    """Each payer's weight in the active energy of one GPU (not normalised)."""
    procs = list(processes)
    weights: dict[Payer, float] = {}
    if any(p.sample.sm_utilization for p in procs):
        clients = [p for p in procs if p.sample.kind == "mps"]
        for proc in procs:
            sm = proc.sample.sm_utilization or 0.0
            if proc.sample.kind != MPS_SERVER:
                payer = _payer(proc, table, outside)
                weights[payer] = weights.get(payer, 0.0) + sm
            elif clients:  # the server runs the clients' kernels
                memory = [float(c.sample.used_memory_bytes or 0) for c in clients]
                total = sum(memory)
                for client, used in zip(clients, memory, strict=True):
                    _add(weights, _payer(client, table, outside),
                         sm * (used / total if total else 1 / len(clients)))
            else:
                _add(weights, UNKNOWN, sm)
        return weights
    users = [p for p in procs if p.sample.kind != MPS_SERVER]
    per_entity: dict[EntityKey, int] = {}
    for proc in users:
        per_entity[proc.key] = per_entity.get(proc.key, 0) + 1
    activity = instance_activity(users)
    for proc in users:
        share = _slice_share(proc)
        if activity is not None and proc.instance is not None:
            share *= activity[proc.instance.gpu_instance_id]
        _add(weights, _payer(proc, table, outside), share / per_entity[proc.key])
    return weights


def pass_split(gpu: GpuSnapshot, processes: Iterable[GpuProcess], table: ProcessTable,
               holdings: Mapping[EntityKey, list[tuple[Holder, float]]],
               baseline_watts: float | None, outside: Outside = NOBODY_OUTSIDE,
               occupied: Mapping[EntityKey, list[tuple[Occupant, float]]] | None = None,
               ) -> dict[Payer, float]:
    """Fractions of this GPU's energy over this pass, per payer; they add up to 1."""
    split: dict[Payer, float] = {}
    active = active_fraction(reading(gpu, POWER_FIELD), baseline_watts)
    weights = used_weights(processes, table, outside)
    used = sum(weights.values())
    if used <= 0:
        active = 0.0  # nothing measurably runs: power above the baseline is the GPU's own
    else:
        for payer, weight in weights.items():
            if weight > 0:  # in this order: a tiny `used` would overflow active / used
                split[payer] = active * weight / used
    idle = 1.0 - active
    held = 0.0
    index = gpu.identity.index
    for (gpu_index, instance_id), parts in holdings.items():
        if gpu_index != index:
            continue
        for holder, share in parts:  # a full node: ~110 holders a pass over its GPUs
            payer = (holder.namespace, holder.pod, holder.container, instance_id)
            split[payer] = split.get(payer, 0.0) + idle * share
            held += share
    for (gpu_index, instance_id), occupants in (occupied or {}).items():
        if gpu_index != index:
            continue
        for occupant, share in occupants:
            _add(split, (*occupant, instance_id), idle * share)
            held += share
    if held < 1.0:
        _add(split, IDLE, idle * (1.0 - held))
    return split
