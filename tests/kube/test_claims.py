"""Which devices of a ResourceClaim are held with admin access, in each served version (the
fake API server's rendering and hand-written shapes), and the source reading them."""

from typing import Any

import pytest

from gpu_enricher.kube.claim_source import ClaimReadOptions, ResourceClaimSource
from gpu_enricher.kube.claims import admin_devices
from gpu_enricher.model import ClaimAllocation
from gpu_enricher.sim.fake_api.claims import StoredClaim, render_claim
from gpu_enricher.sim.fake_api.server import FakeKubeApi

GPU0 = ("gpu.nvidia.com", "node-1", "gpu-0")
GPU1 = ("gpu.nvidia.com", "node-1", "gpu-1")


@pytest.mark.parametrize("version", ["v1", "v1beta2", "v1beta1"])
def test_admin_access_in_every_served_version(version: str) -> None:
    monitor = render_claim(StoredClaim("gpu-operator", "admin", (GPU0, GPU1), True), version)
    workload = render_claim(StoredClaim("ml", "single", (GPU0,)), version)
    assert admin_devices(monitor) == {GPU0, GPU1}
    assert admin_devices(workload) == frozenset()


def result(request: str, device: str, admin: Any = None) -> dict[str, Any]:
    found: dict[str, Any] = {"request": request, "driver": GPU0[0], "pool": GPU0[1],
                             "device": device}
    if admin is not None:
        found["adminAccess"] = admin
    return found


def claim(requests: list[dict[str, Any]], results: list[dict[str, Any]]) -> dict[str, Any]:
    return {"spec": {"devices": {"requests": requests}},
            "status": {"allocation": {"devices": {"results": results}}}}


def test_a_result_without_the_field_falls_back_to_its_request() -> None:
    """An API server older than results[].adminAccess: the request says it, under `exactly`
    (v1, v1beta2) or flat (v1beta1); a subrequest's result names `<request>/<sub>`."""
    v1 = claim([{"name": "mon", "exactly": {"adminAccess": True}}, {"name": "use"}],
               [result("mon", "gpu-0"), result("use", "gpu-1")])
    assert admin_devices(v1) == {GPU0}
    v1beta1 = claim([{"name": "mon", "adminAccess": True}], [result("mon/any", "gpu-1")])
    assert admin_devices(v1beta1) == {GPU1}
    # The allocation's own answer wins over the request's.
    explicit = claim([{"name": "mon", "adminAccess": True}], [result("mon", "gpu-0", False)])
    assert admin_devices(explicit) == frozenset()


@pytest.mark.parametrize("garbage", [None, [], "x", {"status": {"allocation": 3}},
                                     {"status": {"allocation": {"devices": {"results": [7]}}}}])
def test_a_malformed_claim_has_no_admin_devices(garbage: Any) -> None:
    assert admin_devices(garbage) == frozenset()


def allocation(namespace: str, name: str, device: str) -> ClaimAllocation:
    return ClaimAllocation(namespace, "pod", "c", name, namespace, GPU0[0], GPU0[1], device)


async def test_claims_are_read_once_while_in_use_and_forgotten_after(api: FakeKubeApi) -> None:
    api.claims.set_claims([StoredClaim("ops", "admin", (GPU0,), True)])
    in_use = [allocation("ops", "admin", "gpu-0")]
    source = ResourceClaimSource(ClaimReadOptions(host=api.url), lambda: in_use)
    try:
        await source.refresh(None)
        assert source.snapshot().admin == {("ops", "admin", *GPU0)}
        await source.refresh(None)
        assert api.claims.reads == 1
        in_use = []
        await source.refresh(None)
        assert source.snapshot().admin == frozenset()
        in_use = [allocation("ops", "admin", "gpu-0")]  # back (a new pod, the same name)
        await source.refresh(None)
        assert api.claims.reads == 2 and source.snapshot().admin
        assert source.health().up
    finally:
        await source.close()


async def test_a_missing_claim_and_a_missing_group_are_retried(api: FakeKubeApi) -> None:
    in_use = [allocation("ops", "admin", "gpu-0")]
    source = ResourceClaimSource(ClaimReadOptions(host=api.url, retry_seconds=0.0),
                                 lambda: in_use)
    try:
        await source.refresh(None)  # not created yet: 404
        assert source.snapshot().admin == frozenset() and source.health().errors
        api.claims.set_claims([StoredClaim("ops", "admin", (GPU0,), True)])
        await source.refresh(None)
        assert source.snapshot().admin == {("ops", "admin", *GPU0)}
        api.resource_versions = ()  # a cluster without resource.k8s.io
        in_use = [allocation("ops", "other", "gpu-0")]
        await source.refresh(None)
        assert not source.health().up and source.snapshot().admin == frozenset()
    finally:
        await source.close()
