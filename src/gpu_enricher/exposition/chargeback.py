"""What each pod used, as counters for chargeback (docs/chargeback.md): rendered with the DCGM
families by our renderer. Pure.

Cardinality: one series per (pod, container, resource) holding a GPU, a MIG instance, a
replica or a claim: at most the node's holders (110 pods on a full node), each gone one pass
after its pod holds nothing. Energy: one series per (GPU, pod, container) that holds or uses
it, gone one pass after that ends, and up to three reasons per GPU.
"""

import functools
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from typing import Final

from ..attribution.energy import Payer, PodPayer
from ..attribution.shares import Tenant
from ..fields import names
from .render import Family, Sample, format_value, label_pairs

POD_GPU_SECONDS: Final = f"{names.SELF_PREFIX}pod_gpu_seconds"
LABEL_RESOURCE: Final = "resource"


# A pod's labels are the same every pass: escaped once (a full node holds ~110).
@functools.lru_cache(maxsize=4096)
def _labels(tenant: Tenant) -> str:
    namespace, pod, container, resource = tenant
    return label_pairs([(names.LABEL_NAMESPACE, namespace), (names.LABEL_POD, pod),
                        (names.LABEL_CONTAINER, container), (LABEL_RESOURCE, resource)])


def gpu_seconds_family(totals: Mapping[Tenant, float]) -> Family:
    """`gpu_enricher_pod_gpu_seconds_total{namespace,pod,container,resource}`. The pod labels
    are the series' identity, so `--drop-labels` leaves them on."""
    samples = [Sample(_labels(tenant), format_value(float(totals[tenant])), "_total")
               for tenant in sorted(totals)]
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


def _payer_labels(account: EnergyAccount, payer: PodPayer) -> str:
    namespace, pod, container, instance_id = payer
    pairs = [(names.LABEL_GPU, str(account.gpu)), (names.LABEL_UUID, account.uuid)]
    if instance_id is not None:
        pairs += [(names.LABEL_GPU_I_PROFILE, account.profiles.get(instance_id, "")),
                  (names.LABEL_GPU_I_ID, str(instance_id))]
    return label_pairs([*pairs, (names.LABEL_NAMESPACE, namespace), (names.LABEL_POD, pod),
                        (names.LABEL_CONTAINER, container)])


def _by_labels(sample: Sample) -> str:
    return sample.labels


def energy_families(accounts: Iterable[EnergyAccount]) -> list[Family]:
    """`gpu_enricher_pod_energy_joules_total` and `gpu_enricher_unattributed_energy_joules_total`:
    per GPU they add up to its energy counter's rise since the exporter started."""
    pods: list[Sample] = []
    unattributed: list[Sample] = []
    for account in sorted(accounts, key=lambda a: a.gpu):
        for payer, joules in account.totals.items():
            value = format_value(float(joules))
            if isinstance(payer, str):
                unattributed.append(Sample(label_pairs(
                    [(names.LABEL_GPU, str(account.gpu)), (names.LABEL_UUID, account.uuid),
                     (LABEL_REASON, payer)]), value, "_total"))
            else:
                pods.append(Sample(_payer_labels(account, payer), value, "_total"))
    return [Family(POD_ENERGY, "counter",
                   "GPU energy a container used on this GPU, in joules, since the exporter "
                   "started (docs/chargeback.md).", tuple(sorted(pods, key=_by_labels))),
            Family(UNATTRIBUTED_ENERGY, "counter",
                   "GPU energy no pod pays for, in joules, since the exporter started: idle "
                   "(nobody holds the GPU), host (processes in no pod), unknown.",
                   tuple(sorted(unattributed, key=_by_labels)))]
