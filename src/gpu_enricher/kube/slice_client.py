"""The fetch half of the `resource.k8s.io` reads: which version the cluster serves, the list
and watch calls of ResourceSlices, and the read of one ResourceClaim, through kubernetes_asyncio's
generated classes.

kubernetes_asyncio 36.1 has generated classes for v1, v1beta2 and v1beta1 (and the group's
discovery in `ResourceApi`); with `_preload_content=False` they hand back the raw response,
read by `client.py` like the pod calls.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any, Final, cast

import aiohttp

from .client import NOT_SERVED, KubeError, ListWatchCalls, generated_calls, get_json
from .slices import API_GROUP, VERSIONS, choose_version, served_versions

if TYPE_CHECKING:
    from kubernetes_asyncio.client.api_client import ApiClient

LIBRARY: Final = ("kubernetes_asyncio.client.api.resource_api",
                  "kubernetes_asyncio.client.api.resource_v1_api",
                  "kubernetes_asyncio.client.api.resource_v1beta2_api",
                  "kubernetes_asyncio.client.api.resource_v1beta1_api",
                  "kubernetes_asyncio.config")
"""What the calls below import, for loading ahead in a thread."""


async def discover_version(api: ApiClient, request_timeout_seconds: float) -> str:
    """The best version of `resource.k8s.io` the server serves (see `slices.VERSIONS`).

    KubeError(`not_served`) when the group is absent (404: a cluster without DRA) or serves
    none of the versions we read; any other failure as from any call.
    """
    from kubernetes_asyncio.client.api.resource_api import ResourceApi

    group = ResourceApi(api)
    timeout = aiohttp.ClientTimeout(total=request_timeout_seconds)

    async def get_group() -> aiohttp.ClientResponse:
        answer = await group.get_api_group(_preload_content=False, _request_timeout=timeout)
        return cast(aiohttp.ClientResponse, answer)  # unpreloaded: the raw response

    try:
        document = await get_json(get_group)
    except KubeError as exc:
        if exc.reason == NOT_SERVED:
            raise KubeError(NOT_SERVED, f"this cluster serves no {API_GROUP} API",
                            exc.status) from exc
        raise
    version = choose_version(document)
    if version is None:
        served = ", ".join(served_versions(document)) or "no version"
        raise KubeError(NOT_SERVED, f"this cluster serves {API_GROUP} only as {served}, none "
                                    f"of {', '.join(VERSIONS)}")
    return version


def _generated(api: ApiClient, version: str) -> Any:
    """The generated API class of `version` (one of VERSIONS)."""
    from kubernetes_asyncio.client.api.resource_v1_api import ResourceV1Api
    from kubernetes_asyncio.client.api.resource_v1beta1_api import ResourceV1beta1Api
    from kubernetes_asyncio.client.api.resource_v1beta2_api import ResourceV1beta2Api

    if version == "v1":
        return ResourceV1Api(api)
    if version == "v1beta2":
        return ResourceV1beta2Api(api)
    if version == "v1beta1":
        return ResourceV1beta1Api(api)
    raise ValueError(f"not a version we read: {version!r}")


def slice_calls(api: ApiClient, version: str, node_name: str,
                request_timeout_seconds: float) -> ListWatchCalls:
    """List and watch of the ResourceSlices of `node_name` in `version` (one of VERSIONS)."""
    # Only the node is selected server-side: a field selector cannot OR several drivers, so
    # the driver filter is ours.
    return generated_calls(_generated(api, version).list_resource_slice,
                           f"spec.nodeName={node_name}", request_timeout_seconds, version)


async def read_claim(api: ApiClient, version: str, namespace: str, name: str,
                     request_timeout_seconds: float) -> Any:
    """One ResourceClaim as raw JSON. Unread by the library: its typed models of
    ResourceClaims do not load (a watch of them looks for a model class that does not exist)."""
    method = _generated(api, version).read_namespaced_resource_claim
    timeout = aiohttp.ClientTimeout(total=request_timeout_seconds)

    async def call() -> aiohttp.ClientResponse:
        answer = await method(name, namespace, _preload_content=False, _request_timeout=timeout)
        return cast(aiohttp.ClientResponse, answer)

    return await get_json(call)
