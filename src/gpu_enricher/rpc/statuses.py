"""What a call's failure is called, as gRPC names it: the status codes, and how an HTTP status
or an HTTP/2 stream reset maps onto them (grpc/grpc doc/PROTOCOL-HTTP2.md, "Errors" and
"Client Cancellation"; doc/http-grpc-status-mapping.md). Pure: `wire` applies them."""

from typing import Final

STATUS_NAMES: Final = (
    "OK", "CANCELLED", "UNKNOWN", "INVALID_ARGUMENT", "DEADLINE_EXCEEDED", "NOT_FOUND",
    "ALREADY_EXISTS", "PERMISSION_DENIED", "RESOURCE_EXHAUSTED", "FAILED_PRECONDITION",
    "ABORTED", "OUT_OF_RANGE", "UNIMPLEMENTED", "INTERNAL", "UNAVAILABLE", "DATA_LOSS",
    "UNAUTHENTICATED")
"""gRPC status codes by number (grpc/grpc doc/statuscodes.md)."""

_HTTP_STATUS_CODES: Final = {400: "INTERNAL", 401: "UNAUTHENTICATED", 403: "PERMISSION_DENIED",
                             404: "UNIMPLEMENTED", 429: "UNAVAILABLE", 431: "INTERNAL",
                             502: "UNAVAILABLE", 503: "UNAVAILABLE", 504: "UNAVAILABLE"}
"""An answer without `grpc-status`, by its HTTP status; UNKNOWN for the rest, 200 included
(a truly OK answer has a `grpc-status`)."""

HTTP2_ERRORS: Final = (
    "NO_ERROR", "PROTOCOL_ERROR", "INTERNAL_ERROR", "FLOW_CONTROL_ERROR", "SETTINGS_TIMEOUT",
    "STREAM_CLOSED", "FRAME_SIZE_ERROR", "REFUSED_STREAM", "CANCEL", "COMPRESSION_ERROR",
    "CONNECT_ERROR", "ENHANCE_YOUR_CALM", "INADEQUATE_SECURITY", "HTTP_1_1_REQUIRED")
"""HTTP/2 error codes by number (RFC 9113, section 7)."""
CANCEL: Final = HTTP2_ERRORS.index("CANCEL")

_RESET_CODES: Final = {"REFUSED_STREAM": "UNAVAILABLE", "CANCEL": "CANCELLED",
                       "ENHANCE_YOUR_CALM": "RESOURCE_EXHAUSTED",
                       "INADEQUATE_SECURITY": "PERMISSION_DENIED"}
"""A stream reset by the server, by its error code; INTERNAL for the rest. NO_ERROR too: it
ends a call that has no status (a server that lame-ducks); STREAM_CLOSED has no mapping in the
table, as no stream is left to tell, but our call has to end as something, and grpc-go says
INTERNAL for it and for codes past the table."""


def status_name(number: int) -> str:
    return STATUS_NAMES[number] if 0 <= number < len(STATUS_NAMES) else "UNKNOWN"


def http2_error_name(number: int) -> str:
    return HTTP2_ERRORS[number] if 0 <= number < len(HTTP2_ERRORS) else f"0x{number:x}"


def from_http_status(http_status: bytes) -> str:
    """The code of an answer that carries no `grpc-status`."""
    return _HTTP_STATUS_CODES.get(int(http_status), "UNKNOWN") if http_status.isdigit() \
        else "UNKNOWN"


def from_reset(error: int, deadline_passed: bool) -> str:
    """The code of a call whose stream the server reset with HTTP/2 `error`. A CANCEL once
    our deadline has passed is the server keeping the deadline we sent (grpc-go from 1.72 resets
    the stream at it): DEADLINE_EXCEEDED, as a client reports its own deadline."""
    if error == CANCEL and deadline_passed:
        return "DEADLINE_EXCEEDED"
    return _RESET_CODES.get(http2_error_name(error), "INTERNAL")
