"""Errors raised by sonic, and the one table that maps them to gRPC and HTTP statuses.

The tree::

    SonicError                      base of everything we raise on purpose
    ├── InvalidArgumentError        bad request: inputs, shapes, dtypes, sizes, parameters   (INVALID_ARGUMENT / 400)
    ├── NotFoundError               unknown model, version, input or region                  (NOT_FOUND / 404)
    ├── UnavailableError            model not ready, queue full, request timed out, draining (UNAVAILABLE / 503)
    ├── AlreadyExistsError          a name that is already registered                       (ALREADY_EXISTS / 409)
    ├── FailedPreconditionError     operation not allowed in the current mode               (FAILED_PRECONDITION / 400)
    ├── UnimplementedError          a feature this server does not offer                    (UNIMPLEMENTED / 501)
    ├── ModelConfigError            config.pbtxt that cannot be parsed or is inconsistent    (INVALID_ARGUMENT / 400)
    ├── UnauthenticatedError        no bearer token, or one that is not valid                (UNAUTHENTICATED / 401)
    ├── PermissionDeniedError       an operation this server was configured to refuse        (PERMISSION_DENIED / 403)
    ├── ResourceExhaustedError      a client over its request-rate limit                     (RESOURCE_EXHAUSTED / 429)
    ├── PayloadTooLargeError        a request body over the size or decompressed-size limit   (RESOURCE_EXHAUSTED / 413)
    └── InternalError               model execution failed, or a bug                        (INTERNAL / 500)

Status codes follow Triton's own mapping of TRITONSERVER_Error codes, so clients that branch on
them (tritonclient, SonicTriton's retry logic) behave the same against us.
"""

from __future__ import annotations

from http import HTTPStatus

import grpc


class SonicError(Exception):
    """Base class; ``message`` is what the client sees."""

    @property
    def message(self) -> str:
        return str(self)


class InvalidArgumentError(SonicError):
    pass


class NotFoundError(SonicError):
    pass


class UnavailableError(SonicError):
    pass


class AlreadyExistsError(SonicError):
    pass


class FailedPreconditionError(SonicError):
    pass


class UnimplementedError(SonicError):
    pass


class ModelConfigError(SonicError):
    pass


class UnauthenticatedError(SonicError):
    pass


class PermissionDeniedError(SonicError):
    pass


class ResourceExhaustedError(SonicError):
    pass


class PayloadTooLargeError(SonicError):
    pass


class InternalError(SonicError):
    pass


STATUS_TABLE: dict[type[SonicError], tuple[grpc.StatusCode, HTTPStatus]] = {
    InvalidArgumentError: (grpc.StatusCode.INVALID_ARGUMENT, HTTPStatus.BAD_REQUEST),
    NotFoundError: (grpc.StatusCode.NOT_FOUND, HTTPStatus.NOT_FOUND),
    UnavailableError: (grpc.StatusCode.UNAVAILABLE, HTTPStatus.SERVICE_UNAVAILABLE),
    AlreadyExistsError: (grpc.StatusCode.ALREADY_EXISTS, HTTPStatus.CONFLICT),
    FailedPreconditionError: (grpc.StatusCode.FAILED_PRECONDITION, HTTPStatus.BAD_REQUEST),
    UnimplementedError: (grpc.StatusCode.UNIMPLEMENTED, HTTPStatus.NOT_IMPLEMENTED),
    ModelConfigError: (grpc.StatusCode.INVALID_ARGUMENT, HTTPStatus.BAD_REQUEST),
    UnauthenticatedError: (grpc.StatusCode.UNAUTHENTICATED, HTTPStatus.UNAUTHORIZED),
    PermissionDeniedError: (grpc.StatusCode.PERMISSION_DENIED, HTTPStatus.FORBIDDEN),
    ResourceExhaustedError: (grpc.StatusCode.RESOURCE_EXHAUSTED, HTTPStatus.TOO_MANY_REQUESTS),
    PayloadTooLargeError: (grpc.StatusCode.RESOURCE_EXHAUSTED, HTTPStatus.REQUEST_ENTITY_TOO_LARGE),
    InternalError: (grpc.StatusCode.INTERNAL, HTTPStatus.INTERNAL_SERVER_ERROR),
}


def grpc_status(error: SonicError) -> grpc.StatusCode:
    return STATUS_TABLE[type(error)][0]


def http_status(error: SonicError) -> HTTPStatus:
    return STATUS_TABLE[type(error)][1]
