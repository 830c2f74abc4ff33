"""A pod's own Kubernetes labels and UID as metric labels (`--kubernetes-enable-pod-labels`,
`--kubernetes-pod-label-allowlist-regex`, `--kubernetes-enable-pod-uid`). Pure.

Names are sanitised as dcgm-exporter does (`[^a-zA-Z0-9_]` → `_`). A name that would collide
with a label the exporter sets (`pod`, `gpu`, a label-type field, …) or that Prometheus would
reject (a leading digit, a reserved `__` prefix) gets the `pod_label_` prefix. Two pod labels
that sanitise to one name: the first in sorted order of the original names wins.
"""

import re
from collections.abc import Collection
from dataclasses import dataclass, field
from functools import lru_cache
from typing import Final

from ..fields import names
from ..model import PodMeta

_INVALID = re.compile(r"[^a-zA-Z0-9_]")


def sanitize(label: str, taken: Collection[str]) -> str:
    name = _INVALID.sub("_", label)
    if name in taken or not name or name[0].isdigit() or name.startswith("__"):
        name = names.POD_LABEL_PREFIX + name
    return name


@dataclass(frozen=True, slots=True)
class PodLabelPolicy:
    labels: bool = False
    uid: bool = False
    allowlist: tuple[str, ...] = ()
    reserved: frozenset[str] = field(default=names.RESERVED_LABELS)
    """Label names the exporter sets itself, label-type fields included."""

    @property
    def enabled(self) -> bool:
        return self.labels or self.uid

    def allowed(self, label: str) -> bool:
        """Unanchored, as Go's regexp.MatchString: `app` allows `app.kubernetes.io/name`."""
        return not self.allowlist or any(_compiled(p).search(label) for p in self.allowlist)

    def pairs(self, pod: PodMeta | None, uid: str = "") -> list[tuple[str, str]]:
        """Extra attribute labels for a pod; nothing when the pod is unknown."""
        result: list[tuple[str, str]] = []
        pod_uid = pod.uid if pod is not None else uid
        if self.uid and pod_uid:
            result.append((names.LABEL_POD_UID, pod_uid))
        if self.labels and pod is not None:
            result.extend(_sanitized(tuple(sorted(pod.labels.items())), self.allowlist,
                                     self.reserved))
        return result


NO_POLICY: Final = PodLabelPolicy()


@lru_cache(maxsize=256)
def _compiled(pattern: str) -> re.Pattern[str]:
    return re.compile(pattern)


@lru_cache(maxsize=4096)
def _sanitized(items: tuple[tuple[str, str], ...], allowlist: tuple[str, ...],
               reserved: frozenset[str]) -> tuple[tuple[str, str], ...]:
    """Cached per distinct label set: pods of one Deployment share it, and a pass labels the
    same pods every cycle."""
    policy = PodLabelPolicy(labels=True, allowlist=allowlist, reserved=reserved)
    seen: dict[str, str] = {}
    for key, value in items:
        if not policy.allowed(key):
            continue
        seen.setdefault(sanitize(key, reserved), value)
    return tuple(seen.items())
