"""The parse half of ResourceClaim reads: which devices a claim holds with admin access. Pure.

The GPU Operator's DRA stack (GPUCluster) gives the exporter's own pod a claim of every GPU
(`deviceClassName: gpu.nvidia.com`, `allocationMode: All`, `adminAccess: true`), and the
kubelet's pod-resources `List` reports it like any other claim: read alone, the exporter pod
would hold every GPU. The claim's allocation says which of its devices are admin access:
`status.allocation.devices.results[].adminAccess`, the same place in v1, v1beta2 and v1beta1.
A result without the field (an API server older than the field) falls back to its request's
own `adminAccess`: under `requests[].exactly` in v1 and v1beta2, on the request in v1beta1.
"""

from collections.abc import Mapping
from typing import Any

from .events import mapping, text

Device = tuple[str, str, str]
"""(driver, pool, device), as the kubelet's `ClaimResource` names a claimed device."""


def _requests_with_admin_access(spec: Mapping[str, Any]) -> frozenset[str]:
    requests = mapping(spec.get("devices")).get("requests")
    admin: set[str] = set()
    for request in requests if isinstance(requests, list) else ():
        request = mapping(request)
        exactly = mapping(request.get("exactly"))  # v1, v1beta2
        if exactly.get("adminAccess") is True or request.get("adminAccess") is True:
            admin.add(text(request.get("name")))
    return frozenset(admin)


def admin_devices(claim: Any) -> frozenset[Device]:
    """The devices of a ResourceClaim (any served version) allocated with admin access."""
    claim = mapping(claim)
    results = mapping(mapping(mapping(claim.get("status")).get("allocation"))
                      .get("devices")).get("results")
    fallback = _requests_with_admin_access(mapping(claim.get("spec")))
    admin: set[Device] = set()
    for result in results if isinstance(results, list) else ():
        result = mapping(result)
        flag = result.get("adminAccess")
        # A subrequest's result is named `<request>/<subrequest>` (firstAvailable).
        request = text(result.get("request")).partition("/")[0]
        if flag is True or (flag is None and request in fallback):
            admin.add((text(result.get("driver")), text(result.get("pool")),
                       text(result.get("device"))))
    return frozenset(admin)
