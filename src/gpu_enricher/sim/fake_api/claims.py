"""The fake API server's ResourceClaims: one object per (namespace, name), read by `GET` in
any served `resource.k8s.io` version, and the RBAC of the GPU Operator's DRA exporter (a Role
in its own namespace: claims elsewhere answer 403).

A claim is stored as what it allocates: (driver, pool, device, admin access) per result, and
rendered in the version asked for: `adminAccess` on each `status.allocation.devices.results[]`
in every version, and on the request, under `exactly` in v1 and v1beta2, flat in v1beta1.
"""

from collections.abc import Collection, Iterable
from dataclasses import dataclass

from aiohttp import web

from ...kube.slices import API_GROUP
from .objects import Json
from .watch import error_response, json_response


@dataclass(frozen=True, slots=True)
class StoredClaim:
    namespace: str
    name: str
    devices: tuple[tuple[str, str, str], ...]  # (driver, pool, device)
    admin_access: bool = False
    device_class: str = "gpu.nvidia.com"


def render_claim(claim: StoredClaim, version: str) -> Json:
    """`claim` as the API server serves it in `version`."""
    request: Json = {"name": "gpus", "deviceClassName": claim.device_class,
                     "allocationMode": "All" if len(claim.devices) > 1 else "ExactCount"}
    if claim.admin_access:
        request["adminAccess"] = True
    if version != "v1beta1":  # v1 and v1beta2 nest an exact request's fields
        request = {"name": "gpus", "exactly": {k: v for k, v in request.items() if k != "name"}}
    results = [{"request": "gpus", "driver": driver, "pool": pool, "device": device,
                **({"adminAccess": True} if claim.admin_access else {})}
               for driver, pool, device in claim.devices]
    return {"apiVersion": f"{API_GROUP}/{version}", "kind": "ResourceClaim",
            "metadata": {"namespace": claim.namespace, "name": claim.name},
            "spec": {"devices": {"requests": [request]}},
            "status": {"allocation": {"devices": {"results": results}}}}


class ClaimStore:
    """Attributes tests may set: `readable_namespaces` (None: all; else the others answer 403,
    as the GPU Operator's Role allows its exporter's own namespace only)."""

    def __init__(self) -> None:
        self.claims: dict[tuple[str, str], StoredClaim] = {}
        self.readable_namespaces: Collection[str] | None = None
        self.reads = 0

    def set_claims(self, claims: Iterable[StoredClaim]) -> None:
        self.claims = {(c.namespace, c.name): c for c in claims}

    def answer(self, request: web.Request, versions: Collection[str]) -> web.Response:
        self.reads += 1
        version = request.match_info["version"]
        namespace, name = request.match_info["namespace"], request.match_info["name"]
        if version not in versions:
            return error_response(404, "the server could not find the requested resource")
        if self.readable_namespaces is not None and namespace not in self.readable_namespaces:
            return error_response(403, f'resourceclaims.{API_GROUP} "{name}" is forbidden: '
                                       f'cannot get resource "resourceclaims" in API group '
                                       f'"{API_GROUP}" in the namespace "{namespace}"')
        claim = self.claims.get((namespace, name))
        if claim is None:
            return error_response(404, f'resourceclaims.{API_GROUP} "{name}" not found')
        return json_response(200, render_claim(claim, version))
