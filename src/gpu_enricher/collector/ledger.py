"""Per-pod (and, without Kubernetes, per-container and per-person) counters kept across
passes: GPU-seconds (`gpu_enricher_pod_gpu_seconds_total`).
Pure: the collector hands each pass's shares and its monotonic clock in.

Each step bills the shares in force since the previous pass (those the previous pass saw)
over the time between the two passes, but never more than `max_step` seconds: a gap (the
backend lost and reopened with backoff, passes skipped under load) is billed as at most
`max_step`, not as what nobody observed. A tenant first seen shows 0; one no longer holding
anything is billed up to the pass that saw it gone, shown once more with that final value,
then dropped. Everything restarts from 0 with the exporter (`increase()` handles the reset).
"""

from collections.abc import Hashable, Mapping
from dataclasses import dataclass, field
from typing import Generic, TypeVar

K = TypeVar("K", bound=Hashable)
"""Who is billed: a pod's (namespace, pod, container, resource), or an occupant."""


@dataclass(frozen=True, slots=True)
class Ledger(Generic[K]):
    totals: Mapping[K, float] = field(default_factory=dict)
    """Who → GPU-seconds since first seen: the series this pass shows."""
    shares: Mapping[K, float] = field(default_factory=dict)
    """The shares the last pass saw: billed over the next step."""
    at: float | None = None
    """Monotonic seconds of the last pass; None before the first."""


def accumulate(ledger: Ledger[K], shares: Mapping[K, float], now: float,
               max_step: float) -> Ledger[K]:
    """The ledger after one more pass at `now` that saw `shares`."""
    step = 0.0 if ledger.at is None else min(max(0.0, now - ledger.at), max_step)
    totals = {tenant: ledger.totals.get(tenant, 0.0) + share * step
              for tenant, share in ledger.shares.items()}
    for tenant in shares:
        totals.setdefault(tenant, ledger.totals.get(tenant, 0.0))
    return Ledger(totals, dict(shares), now)

