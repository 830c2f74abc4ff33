"""What each pod used, as counters for chargeback (docs/chargeback.md): rendered with the DCGM
families by our renderer. Pure.

Cardinality: one series per (pod, container, resource) holding a GPU, a MIG instance, a
replica or a claim: at most the node's holders (110 pods on a full node), each gone one pass
after its pod holds nothing. Energy: one series per (GPU, pod, container) that holds or uses
it, gone one pass after that ends, and up to three reasons per GPU. On a host without
Kubernetes (issue 34) the same families have series of its containers (`container` alone) and
people (`user`) instead: one per occupant, and per (GPU, occupant) for energy.
"""

import functools
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from typing import Final

from ..attribution.containers import Occupant
from ..attribution.energy import Payer, is_pod_payer
from ..attribution.shares import Tenant
from ..fields import names
from .label_drop import kept
from .render import Family, Sample, format_value, label_pairs

POD_GPU_SECONDS: Final = f"{names.SELF_PREFIX}pod_gpu_seconds"
LABEL_RESOURCE: Final = "resource"


HostPairs = tuple[tuple[str, str], ...]
"""The host label(s) of every series (names.hostname_pairs), after `--drop-labels`."""


# A pod's labels are the same every pass: escaped once (a full node holds ~110).
@functools.lru_cache(maxsize=4096)
def _labels(tenant: Tenant, host: HostPairs) -> str:
    namespace, pod, container, resource = tenant
    return label_pairs([*host, (names.LABEL_NAMESPACE, namespace), (names.LABEL_POD, pod),
                        (names.LABEL_CONTAINER, container), (LABEL_RESOURCE, resource)])


def host_pairs(hostname: str | None, drop: frozenset[str] = frozenset()) -> HostPairs:
    """The host label(s) as every other series has them (issue 32), but those dropped."""
    return tuple(kept(names.hostname_pairs(hostname), drop)) if hostname is not None else ()


@functools.lru_cache(maxsize=1024)
def _occupant_labels(occupant: Occupant, host: HostPairs) -> str:
    return label_pairs([*host, occupant])


def gpu_seconds_family(totals: Mapping[Tenant, float], host: HostPairs = (),
                       occupied: Mapping[Occupant, float] | None = None) -> Family:
    """`gpu_enricher_pod_gpu_seconds_total{Hostname,hostname,namespace,pod,container,
    resource}`, and `{Hostname,hostname,container}` or `{…,user}` for the occupants of a host
    without Kubernetes. The pod labels are the series' identity, so `--drop-labels` leaves them
    on."""
    samples = [Sample(_labels(tenant, host), format_value(float(totals[tenant])), "_total")
               for tenant in sorted(totals)]
    samples += [Sample(_occupant_labels(who, host), format_value(float(seconds)), "_total")
                for who, seconds in sorted((occupied or {}).items())]
    return Family(POD_GPU_SECONDS, "counter",
                  "Seconds a container held GPUs, times the share of a whole GPU it held "
                  "(a MIG instance its slices over the GPU's, a replica 1/replicas), "
                  "since the exporter started.", tuple(samples))


POD_ENERGY: Final = f"{names.SELF_PREFIX}pod_energy_joules"
UNATTRIBUTED_ENERGY: Final = f"{names.SELF_PREFIX}unattributed_energy_joules"
LABEL_REASON: Final = "reason"


@dataclass(frozen=True, slots=True)
class EnergyAccount:
    """One GPU's energy totals as the ledger keeps them (collector/energy.py)."""

    gpu: int
    uuid: str
    profiles: Mapping[int, str]
    totals: Mapping[Payer, float]


# A pod's energy labels are the same every pass: escaped once (a full node has ~110 pods).
@functools.lru_cache(maxsize=4096)
def _energy_labels(gpu: int, uuid: str, profile: str | None, payer: Payer,
                   drop: frozenset[str], host: HostPairs) -> str:
    """As a DCGM series orders them: identity, GPU instance, host, then the payer."""
    pairs = [(names.LABEL_GPU, str(gpu)), (names.LABEL_UUID, uuid)]
    if isinstance(payer, str):
        return label_pairs(kept([*pairs, *host, (LABEL_REASON, payer)], drop))
    instance_id = payer[-1]
    if instance_id is not None:
        pairs += [(names.LABEL_GPU_I_PROFILE, profile or ""),
                  (names.LABEL_GPU_I_ID, str(instance_id))]
    if not is_pod_payer(payer):  # a container or person outside pods (issue 34)
        return label_pairs(kept([*pairs, *host, (str(payer[0]), str(payer[1]))], drop))
    namespace, pod, container, _ = payer
    return label_pairs(kept([*pairs, *host, (names.LABEL_NAMESPACE, namespace),
                             (names.LABEL_POD, pod), (names.LABEL_CONTAINER, container)], drop))


EnergyRow = tuple[str, Mapping[Payer, float], Payer]
"""One energy series: its labels, and where its value is (its GPU's totals, by payer)."""


def _energy_rows(accounts: Iterable[EnergyAccount], drop: frozenset[str],
                 host: HostPairs) -> tuple[list[EnergyRow], list[EnergyRow]]:
    """The pod series and the unattributed ones, each sorted by labels."""
    pods: list[EnergyRow] = []
    unattributed: list[EnergyRow] = []
    for account in accounts:
        for payer in account.totals:
            instance = None if isinstance(payer, str) else payer[-1]
            profile = account.profiles.get(instance) if isinstance(instance, int) else None
            row = (_energy_labels(account.gpu, account.uuid, profile, payer, drop, host),
                   account.totals, payer)
            (unattributed if isinstance(payer, str) else pods).append(row)
    pods.sort(key=_by_labels)
    unattributed.sort(key=_by_labels)
    return pods, unattributed


def _by_labels(row: EnergyRow) -> str:
    return row[0]


def _samples(rows: list[EnergyRow]) -> tuple[Sample, ...]:
    # Finite and never negative: `%f` as format_value writes it, without its checks.
    return tuple(Sample(labels, f"{totals[payer]:.6f}", "_total") for labels, totals, payer in rows)


class EnergyView:
    """`gpu_enricher_pod_energy_joules_total` and `gpu_enricher_unattributed_energy_joules_total`
    of an energy book: per GPU they add up to its energy counter's rise since the exporter
    started. `--drop-labels` may drop `UUID` and `GPU_I_PROFILE` (`gpu` and `GPU_I_ID` still
    tell the series apart). The series' labels and order are kept while the same series are
    shown (the book's `members` revision), so a pass whose counter moved only writes values."""

    def __init__(self, drop: frozenset[str] = frozenset(), host: HostPairs = ()) -> None:
        self._drop = drop
        self._host = host
        self._members: int | None = None
        self._rows: tuple[list[EnergyRow], list[EnergyRow]] = ([], [])

    def families(self, accounts: Iterable[EnergyAccount], members: int | None) -> list[Family]:
        """`members`: a number that changes whenever a series starts or ends, or a GPU's labels
        change; None: the accounts are new (labelled and sorted afresh)."""
        if members is None or members != self._members:
            self._rows = _energy_rows(accounts, self._drop, self._host)
            self._members = members
        pods, unattributed = self._rows
        return [Family(POD_ENERGY, "counter",
                       "GPU energy a container used on this GPU, in joules, since the exporter "
                       "started (docs/chargeback.md).", _samples(pods)),
                Family(UNATTRIBUTED_ENERGY, "counter",
                       "GPU energy no pod pays for, in joules, since the exporter started: idle "
                       "(nobody holds the GPU), host (processes in no pod), unknown.",
                       _samples(unattributed))]


def energy_families(accounts: Iterable[EnergyAccount], drop: frozenset[str] = frozenset(),
                    host: HostPairs = ()) -> list[Family]:
    """The two energy families of `accounts`, labelled afresh (EnergyView)."""
    return EnergyView(drop, host).families(accounts, None)
