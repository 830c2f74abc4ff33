"""What each pod used, as counters for chargeback (docs/chargeback.md): rendered with the DCGM
families by our renderer. Pure.

Cardinality: one series per (pod, container, resource) holding a GPU, a MIG instance, a
replica or a claim: at most the node's holders (110 pods on a full node), each gone one pass
after its pod holds nothing.
"""

import functools
from collections.abc import Mapping
from typing import Final

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
