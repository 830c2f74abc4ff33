"""The fetch half of the ResourceSlice watch: which `resource.k8s.io` version the cluster
serves, and the list and watch calls for it, through kubernetes_asyncio's generated classes.

kubernetes_asyncio 36.1 has generated classes for v1, v1beta2 and v1beta1 (and the group's
discovery in `ResourceApi`); with `_preload_content=False` they hand back the raw response,
read by `client.py` like the pod calls.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Final, cast

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


def slice_calls(api: ApiClient, version: str, node_name: str,
                request_timeout_seconds: float) -> ListWatchCalls:
    """List and watch of the ResourceSlices of `node_name` in `version` (one of VERSIONS)."""
    from kubernetes_asyncio.client.api.resource_v1_api import ResourceV1Api
    from kubernetes_asyncio.client.api.resource_v1beta1_api import ResourceV1beta1Api
    from kubernetes_asyncio.client.api.resource_v1beta2_api import ResourceV1beta2Api

    generated: ResourceV1Api | ResourceV1beta2Api | ResourceV1beta1Api
    if version == "v1":
        generated = ResourceV1Api(api)
    elif version == "v1beta2":
        generated = ResourceV1beta2Api(api)
    elif version == "v1beta1":
        generated = ResourceV1beta1Api(api)
    else:
        raise ValueError(f"not a version we read: {version!r}")
    # Only the node is selected server-side: a field selector cannot OR several drivers, so
    # the driver filter is ours.
    return generated_calls(generated.list_resource_slice, f"spec.nodeName={node_name}",
                           request_timeout_seconds, version)
