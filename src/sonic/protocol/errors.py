"""Errors raised by sonic, and the one table of what each status means on gRPC, HTTP and to a client.

The tree::

    SonicError                      base of everything we raise on purpose
    ├── InvalidArgumentError        bad request: inputs, shapes, dtypes, sizes, parameters   (INVALID_ARGUMENT / 400)
    ├── NotFoundError               unknown model, version, input or region                  (NOT_FOUND / 404)
    ├── UnavailableError            model not ready, queue full, request timed out, draining (UNAVAILABLE / 503)
    ├── AlreadyExistsError          a name that is already registered                       (ALREADY_EXISTS / 400)
    ├── FailedPreconditionError     operation not allowed in the current mode               (FAILED_PRECONDITION / 400)
    ├── UnimplementedError          a feature this server does not offer                    (UNIMPLEMENTED / 501)
    ├── ModelConfigError            config.pbtxt that cannot be parsed or is inconsistent    (INVALID_ARGUMENT / 400)
    ├── UnauthenticatedError        no bearer token, or one that is not valid                (UNAUTHENTICATED / 401)
    ├── PermissionDeniedError       an operation this server was configured to refuse        (PERMISSION_DENIED / 403)
    ├── ResourceExhaustedError      a client over its request-rate limit                     (RESOURCE_EXHAUSTED / 429)
    └── InternalError               model execution failed, or a bug                        (INTERNAL / 500)

Each error class names its gRPC status (``code``); :data:`STATUSES` is the one table of what a status
means: the HTTP status a server answers with (two subclasses say on HTTP what the table cannot:
:class:`RequestBufferBusyError` is 503 with ``Retry-After``, :class:`MethodNotAllowedError` 405 with ``Allow``), and what a client does when it receives it (the client's
error types come from it, see :func:`sonic.client.errors.error_for_status`). Status codes follow
Triton's own mapping of TRITONSERVER_Error codes, so clients that branch on them (tritonclient,
SonicTriton's retry logic) behave the same against us.

Codes are plain integers here (grpc/status.h): only the gRPC codec (:mod:`sonic.protocol.grpc_codec`)
turns them into ``grpc.StatusCode``, so this layer does not depend on grpcio.
"""

from __future__ import annotations

import enum
from http import HTTPStatus
from typing import ClassVar, NamedTuple


class GrpcCode(enum.IntEnum):
    """gRPC status codes, numbered as on the wire (``grpc-status``)."""

    OK = 0
    CANCELLED = 1
    UNKNOWN = 2
    INVALID_ARGUMENT = 3
    DEADLINE_EXCEEDED = 4
    NOT_FOUND = 5
    ALREADY_EXISTS = 6
    PERMISSION_DENIED = 7
    RESOURCE_EXHAUSTED = 8
    FAILED_PRECONDITION = 9
    ABORTED = 10
    OUT_OF_RANGE = 11
    UNIMPLEMENTED = 12
    INTERNAL = 13
    UNAVAILABLE = 14
    DATA_LOSS = 15
    UNAUTHENTICATED = 16


class Retry(enum.Enum):
    """What a client does with an error status."""

    NEVER = "never"  # the request itself is wrong: the same request fails everywhere
    LATER = "later"  # the server cannot take it now: retried, elsewhere or after a while
    CONNECTION = "connection"  # the call, not the server's answer, broke: retried elsewhere
    SERVER = "server"  # the server failed (a bug, a model that raised): reported, not retried


class Status(NamedTuple):
    http: HTTPStatus | None  # None: only a client or the transport reports it, never a sonic error
    retry: Retry


# The one table. A status not listed is handled as INVALID_ARGUMENT is (never retried).
STATUSES: dict[GrpcCode, Status] = {
    GrpcCode.INVALID_ARGUMENT: Status(HTTPStatus.BAD_REQUEST, Retry.NEVER),
    GrpcCode.NOT_FOUND: Status(HTTPStatus.NOT_FOUND, Retry.NEVER),
    # Triton 2.51's HTTP answers ALREADY_EXISTS (a region name registered twice) with 400, not 409.
    GrpcCode.ALREADY_EXISTS: Status(HTTPStatus.BAD_REQUEST, Retry.NEVER),
    GrpcCode.FAILED_PRECONDITION: Status(HTTPStatus.BAD_REQUEST, Retry.NEVER),
    GrpcCode.UNIMPLEMENTED: Status(HTTPStatus.NOT_IMPLEMENTED, Retry.NEVER),
    GrpcCode.UNAUTHENTICATED: Status(HTTPStatus.UNAUTHORIZED, Retry.NEVER),
    GrpcCode.PERMISSION_DENIED: Status(HTTPStatus.FORBIDDEN, Retry.NEVER),
    GrpcCode.UNAVAILABLE: Status(HTTPStatus.SERVICE_UNAVAILABLE, Retry.LATER),
    GrpcCode.RESOURCE_EXHAUSTED: Status(HTTPStatus.TOO_MANY_REQUESTS, Retry.LATER),
    GrpcCode.DEADLINE_EXCEEDED: Status(HTTPStatus.GATEWAY_TIMEOUT, Retry.LATER),
    GrpcCode.CANCELLED: Status(None, Retry.CONNECTION),
    GrpcCode.INTERNAL: Status(HTTPStatus.INTERNAL_SERVER_ERROR, Retry.SERVER),
    GrpcCode.UNKNOWN: Status(HTTPStatus.INTERNAL_SERVER_ERROR, Retry.SERVER),
}
_NOT_LISTED = STATUSES[GrpcCode.INVALID_ARGUMENT]


def status_of(code: GrpcCode) -> Status:
    return STATUSES.get(code, _NOT_LISTED)


# A message goes back in gRPC trailers (``grpc-message``), and clients drop answers whose metadata
# passes their limit (grpc's default: 16 KiB) with RESOURCE_EXHAUSTED, losing the status we meant. So
# client strings are quoted cut to MAX_QUOTED_CHARS, and a whole message is cut to MAX_MESSAGE_CHARS.
MAX_QUOTED_CHARS = 200
MAX_MESSAGE_CHARS = 4096


def clip(text: str) -> str:
    """A client's string cut in the middle when longer than MAX_QUOTED_CHARS, saying how long it was."""
    if len(text) <= MAX_QUOTED_CHARS:
        return text
    half = MAX_QUOTED_CHARS // 2
    return f"{text[:half]}...({len(text)} characters)...{text[-half:]}"


def quote(text: str) -> str:
    """A client's string (model, input, parameter name...) in single quotes for a message, cut if long."""
    return f"'{clip(text)}'"


class SonicError(Exception):
    """Base class; ``message`` is what the client sees, ``code`` the gRPC status it is sent with."""

    code: ClassVar[GrpcCode] = GrpcCode.INTERNAL
    http: ClassVar[HTTPStatus | None] = None  # the HTTP status where it is not the table's (code's)

    @property
    def message(self) -> str:
        text = str(self)
        if len(text) <= MAX_MESSAGE_CHARS:
            return text
        return f"{text[: MAX_MESSAGE_CHARS - 40]}... ({len(text)} characters in all)"


class InvalidArgumentError(SonicError):
    code = GrpcCode.INVALID_ARGUMENT


class NotFoundError(SonicError):
    code = GrpcCode.NOT_FOUND


class MethodNotAllowedError(NotFoundError):
    """An HTTP path that has routes, none of them for the request's method. HTTP answers 405 with
    ``Allow`` listing ``allowed`` (RFC 9110; not the 404 of the table: the path exists, as Triton
    answers); it is never sent over gRPC, where a method is its own path."""

    http = HTTPStatus.METHOD_NOT_ALLOWED

    def __init__(self, message: str, allowed: tuple[str, ...]) -> None:
        super().__init__(message)
        self.allowed = allowed


class UnavailableError(SonicError):
    code = GrpcCode.UNAVAILABLE


class AlreadyExistsError(SonicError):
    code = GrpcCode.ALREADY_EXISTS


class FailedPreconditionError(SonicError):
    code = GrpcCode.FAILED_PRECONDITION


class UnimplementedError(SonicError):
    code = GrpcCode.UNIMPLEMENTED


class ModelConfigError(SonicError):
    code = GrpcCode.INVALID_ARGUMENT


class UnauthenticatedError(SonicError):
    code = GrpcCode.UNAUTHENTICATED


class PermissionDeniedError(SonicError):
    code = GrpcCode.PERMISSION_DENIED


class ResourceExhaustedError(SonicError):
    code = GrpcCode.RESOURCE_EXHAUSTED


class RequestBufferBusyError(ResourceExhaustedError):
    """A request waited past its bound for room in the server's request-buffer budget. gRPC answers
    RESOURCE_EXHAUSTED; HTTP answers 503 with ``Retry-After`` (not the 429 of the table: it is the
    server that is short, not the client that asked too often), and closes the connection."""


class InternalError(SonicError):
    code = GrpcCode.INTERNAL


def http_status(error: SonicError) -> HTTPStatus:
    status = error.http or status_of(error.code).http
    return HTTPStatus.INTERNAL_SERVER_ERROR if status is None else status
