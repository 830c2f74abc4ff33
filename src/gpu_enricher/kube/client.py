"""The fetch half of a list+watch: raw API calls, their answers read as JSON, errors as reasons.

Calls go through kubernetes_asyncio with `_preload_content=False`, so it hands back the aiohttp
response unread and unchecked: we check the status and parse the JSON ourselves instead of
letting it build V1Pod models (slow, and many times the memory of the few fields we keep).
A watch body is one JSON event per line, read line by line as it arrives.

Every failure becomes a `KubeError` whose `reason` is one of `REASONS`, small and fixed so it
can be a metric label.
"""

from __future__ import annotations

import asyncio
import json
from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, Final, cast

import aiohttp

from .events import ERROR, JsonObject, WatchEvent, parse_event_line, resource_version

if TYPE_CHECKING:
    from kubernetes_asyncio.client.api_client import ApiClient

GONE: Final = "gone"
FORBIDDEN: Final = "forbidden"
UNAUTHORIZED: Final = "unauthorized"
UNAVAILABLE: Final = "unavailable"
TIMEOUT: Final = "timeout"
NO_CONFIG: Final = "no_config"
BAD_RESPONSE: Final = "bad_response"
STALLED: Final = "stalled"
NOT_SERVED: Final = "not_served"
"""404: the server does not serve the path (an API group or version absent from the cluster)."""
REASONS: Final = (GONE, FORBIDDEN, UNAUTHORIZED, UNAVAILABLE, TIMEOUT, NO_CONFIG, BAD_RESPONSE,
                  STALLED, NOT_SERVED)

_ERROR_BODY_LIMIT: Final = 4096  # enough for a Status message; an error page is not kept


class KubeError(Exception):
    """A failed call; `reason` is one of `REASONS`, `status` the HTTP status if one came."""

    def __init__(self, reason: str, detail: str, status: int | None = None) -> None:
        super().__init__(detail)
        self.reason = reason
        self.status = status


def reason_for_status(status: int) -> str:
    if status == 410:
        return GONE
    if status == 401:
        return UNAUTHORIZED
    if status == 403:
        return FORBIDDEN
    if status == 404:
        return NOT_SERVED
    if status in (408, 504):
        return TIMEOUT
    if status == 429 or status >= 500:
        return UNAVAILABLE
    return BAD_RESPONSE


def status_error(status: int, body: Any) -> KubeError:
    """The error for a non-2xx answer or an ERROR event, from its `Status` object if any."""
    message = ""
    if isinstance(body, dict):
        message = str(body.get("message") or body.get("reason") or "")
    return KubeError(reason_for_status(status), f"HTTP {status}: {message or 'no message'}",
                     status)


def _transport_error(exc: BaseException) -> KubeError:
    # aiohttp's timeouts are also ClientConnectionErrors: test for them first.
    if isinstance(exc, TimeoutError):
        return KubeError(TIMEOUT, "the API server did not answer in time")
    if isinstance(exc, aiohttp.ClientPayloadError | aiohttp.ClientConnectionError | OSError):
        return KubeError(UNAVAILABLE, f"cannot reach the API server: {exc!r}")
    return KubeError(BAD_RESPONSE, f"unexpected answer: {exc!r}")


RawCall = Callable[[], Awaitable[aiohttp.ClientResponse]]
ListCall = RawCall
WatchCall = Callable[[str, int], Awaitable[aiohttp.ClientResponse]]
"""(resourceVersion to start after, server-side timeout in seconds) → the open response."""


@dataclass(frozen=True, slots=True)
class ListWatchCalls:
    """The two calls of one kind (pods, ResourceSlices) against one API client."""

    list: ListCall
    watch: WatchCall
    served_as: str = ""
    """The API version the calls use; when a reconnect changes it, the loop lists afresh."""


@dataclass(frozen=True, slots=True)
class ListAnswer:
    items: tuple[JsonObject, ...]
    resource_version: str


async def _send(call: RawCall) -> aiohttp.ClientResponse:
    """The response of a call that answered 200; any other answer raised as a KubeError."""
    try:
        response = await call()
    except (aiohttp.ClientError, OSError, TimeoutError) as exc:
        raise _transport_error(exc) from exc
    if response.status == 200:
        return response
    try:
        raw = await response.content.read(_ERROR_BODY_LIMIT)
        body = json.loads(raw)
    except (aiohttp.ClientError, OSError, TimeoutError, ValueError):
        body = None
    finally:
        response.close()
    if response.status == 404:  # its Status says only "not found": name what was not
        raise KubeError(NOT_SERVED, f"the API server does not serve {response.url.path}", 404)
    raise status_error(response.status, body)


async def get_json(call: RawCall) -> Any:
    """The whole JSON body of a call that answered 200."""
    response = await _send(call)
    try:
        raw = await response.read()
    except (aiohttp.ClientError, OSError, TimeoutError) as exc:
        raise _transport_error(exc) from exc
    finally:
        response.release()
    try:
        return json.loads(raw)
    except ValueError as exc:
        raise KubeError(BAD_RESPONSE, f"answer is not JSON: {exc}") from exc


async def list_objects(call: ListCall) -> ListAnswer:
    """A complete list answer, its items still raw JSON objects."""
    body = await get_json(call)
    if not isinstance(body, dict):
        raise KubeError(BAD_RESPONSE, "list answer is not a JSON object")
    items = body.get("items") or []  # an empty list may come as `"items": null`
    version = resource_version(body)
    if not isinstance(items, list) or version is None:
        raise KubeError(BAD_RESPONSE, "list answer without items or metadata.resourceVersion")
    return ListAnswer(tuple(i for i in items if isinstance(i, dict)), version)


async def stream_watch(
    call: WatchCall,
    after_version: str,
    timeout_seconds: int,
    stall_seconds: float,
    on_open: Callable[[], None],
    on_event: Callable[[WatchEvent], None],
) -> None:
    """Open a watch and hand each event to `on_event` until the server ends it.

    Returns on a normal end (the server's timeout); raises KubeError on anything else: an
    ERROR event (`gone` for 410), a broken connection, or no line for `stall_seconds`
    (`stalled`: a proxy or a half-dead connection can hold a watch open and silent forever).
    A malformed line is skipped. Bookmarks and real events both reach `on_event`.
    """
    try:
        # The client's timeout covers connecting only: bound the wait for the headers too.
        # asyncio.timeout, not wait_for, which can lose a cancellation in Python 3.11 (a watch
        # that went on past shutdown).
        async with asyncio.timeout(stall_seconds):
            response = await _send(lambda: call(after_version, timeout_seconds))
    except TimeoutError as exc:
        raise KubeError(TIMEOUT, f"watch not answered in {stall_seconds:.1f}s") from exc
    ended = False
    try:
        on_open()
        while True:
            try:
                async with asyncio.timeout(stall_seconds):
                    line = await response.content.readline()
            except TimeoutError as exc:
                raise KubeError(STALLED, f"watch silent for {stall_seconds:.1f}s") from exc
            except ValueError as exc:  # a line beyond aiohttp's buffer limit
                raise KubeError(BAD_RESPONSE, f"watch line too long: {exc}") from exc
            except (aiohttp.ClientError, OSError) as exc:
                raise _transport_error(exc) from exc
            if not line:
                ended = True
                return
            if not line.strip():
                continue
            event = parse_event_line(line)
            if event is None:
                continue
            if event.type == ERROR:
                code = event.object.get("code")
                raise status_error(code if isinstance(code, int) else 500, event.object)
            on_event(event)
    finally:
        # A fully read body lets the connection be reused; anything else must not be.
        if ended:
            response.release()
        else:
            response.close()


GeneratedList = Callable[..., Awaitable[Any]]
"""A generated `list_*` method of kubernetes_asyncio (pods, ResourceSlices, …): the same
keyword arguments select, watch and bound it for every kind."""


def generated_calls(method: GeneratedList, field_selector: str, request_timeout_seconds: float,
                    served_as: str = "") -> ListWatchCalls:
    """List and watch through `method`, answers unread (see the module docstring)."""
    # A list must finish within the timeout; a watch only needs to connect within it (its
    # silences are bounded by the stall check on each line instead).
    list_timeout = aiohttp.ClientTimeout(total=request_timeout_seconds)
    watch_timeout = aiohttp.ClientTimeout(connect=request_timeout_seconds,
                                          sock_connect=request_timeout_seconds)

    async def list_call() -> aiohttp.ClientResponse:
        answer = await method(field_selector=field_selector, _preload_content=False,
                              _request_timeout=list_timeout)
        # The stubs promise a model (V1PodList, …); unpreloaded, it is the raw response.
        return cast(aiohttp.ClientResponse, answer)

    async def watch_call(after_version: str, timeout_seconds: int) -> aiohttp.ClientResponse:
        answer = await method(
            field_selector=field_selector, watch=True, allow_watch_bookmarks=True,
            resource_version=after_version, timeout_seconds=timeout_seconds,
            _preload_content=False, _request_timeout=watch_timeout)
        return cast(aiohttp.ClientResponse, answer)

    return ListWatchCalls(list_call, watch_call, served_as)


def pod_calls(api: ApiClient, node_name: str, request_timeout_seconds: float) -> ListWatchCalls:
    """List and watch of the pods bound to `node_name`, all namespaces, through `api`."""
    from kubernetes_asyncio.client.api.core_v1_api import CoreV1Api

    return generated_calls(CoreV1Api(api).list_pod_for_all_namespaces,
                           f"spec.nodeName={node_name}", request_timeout_seconds, "v1")
