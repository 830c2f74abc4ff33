"""What one list+watch loop (listwatch.py) is told: the kind it lists, for log lines and the
RBAC hint, its timeouts, and how long it waits after a failure."""

import random
from collections.abc import Callable
from dataclasses import dataclass
from typing import Final

from .client import FORBIDDEN, NO_CONFIG, NOT_SERVED, UNAUTHORIZED

# Failures only an operator (or a cluster upgrade) can fix: retrying every second helps no one.
NEEDS_OPERATOR: Final = frozenset({FORBIDDEN, NO_CONFIG, NOT_SERVED})
RECONNECT: Final = frozenset({UNAUTHORIZED, NO_CONFIG})


@dataclass(frozen=True, slots=True)
class ResourceKind:
    """What is listed, for log lines and the RBAC hint."""

    resource: str  # plural, as RBAC names it: `pods`, `resourceslices`
    api_group: str = ""  # "" is the core group
    scope: str = ""  # e.g. `on node gpu-1`, for messages only
    when_absent: str = ""
    """What the exporter does without this kind, for the `not_served` log line."""
    namespace: str = ""
    """A namespaced kind read in one namespace (RBAC: a Role there); "": all namespaces."""

    def rbac_hint(self) -> str:
        where = (f"a Role and RoleBinding in namespace {self.namespace}" if self.namespace
                 else "a ClusterRole and ClusterRoleBinding")
        return (f'grant the exporter\'s service account get, list and watch on apiGroups: '
                f'["{self.api_group}"], resources: ["{self.resource}"] ({where})')


@dataclass(frozen=True, slots=True)
class ListWatchOptions:
    watch_timeout_seconds: int = 300
    """Server-side timeout asked of every watch (`timeoutSeconds`)."""
    stall_margin_seconds: float = 30.0
    """A watch with no line for its timeout plus this margin is stalled and restarted."""
    backoff_initial_seconds: float = 1.0
    backoff_max_seconds: float = 60.0
    short_watch_seconds: float = 1.0
    """A watch that ends sooner than this without an event is a failure (client-go's bound)."""


def backoff_delay(failures: int, reason: str, options: ListWatchOptions,
                  jitter: Callable[[float, float], float] = random.uniform) -> float:
    """Seconds to wait after the `failures`-th failure in a row (jittered ±20 %).

    Doubling from the initial delay to the cap; failures only an operator can fix grow eight
    times per attempt instead, so they reach the cap within a few tries.
    """
    growth = 8.0 if reason in NEEDS_OPERATOR else 2.0
    exponent = min(max(failures - 1, 0), 64)  # bounded: no float overflow in a long outage
    delay = min(options.backoff_initial_seconds * growth ** exponent, options.backoff_max_seconds)
    return delay * jitter(0.8, 1.2)


