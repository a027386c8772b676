"""The status table, one test per row: each error's gRPC and HTTP status, and what a client makes of it."""

from __future__ import annotations

from http import HTTPStatus

import grpc
import pytest

from sonic.client import errors as client
from sonic.protocol import errors
from sonic.protocol.grpc_codec import code_of, grpc_status

pytestmark = pytest.mark.unit

# error raised by the server, status it is sent with, HTTP status, error type the client raises for it
ROWS = [
    (
        errors.InvalidArgumentError,
        grpc.StatusCode.INVALID_ARGUMENT,
        HTTPStatus.BAD_REQUEST,
        client.InvalidRequestError,
    ),
    (errors.NotFoundError, grpc.StatusCode.NOT_FOUND, HTTPStatus.NOT_FOUND, client.InvalidRequestError),
    (
        errors.UnavailableError,
        grpc.StatusCode.UNAVAILABLE,
        HTTPStatus.SERVICE_UNAVAILABLE,
        client.UnavailableError,
    ),
    (
        errors.AlreadyExistsError,
        grpc.StatusCode.ALREADY_EXISTS,
        HTTPStatus.BAD_REQUEST,  # as Triton 2.51
        client.InvalidRequestError,
    ),
    (
        errors.FailedPreconditionError,
        grpc.StatusCode.FAILED_PRECONDITION,
        HTTPStatus.BAD_REQUEST,
        client.InvalidRequestError,
    ),
    (
        errors.UnimplementedError,
        grpc.StatusCode.UNIMPLEMENTED,
        HTTPStatus.NOT_IMPLEMENTED,
        client.InvalidRequestError,
    ),
    (
        errors.ModelConfigError,
        grpc.StatusCode.INVALID_ARGUMENT,
        HTTPStatus.BAD_REQUEST,
        client.InvalidRequestError,
    ),
    (
        errors.UnauthenticatedError,
        grpc.StatusCode.UNAUTHENTICATED,
        HTTPStatus.UNAUTHORIZED,
        client.InvalidRequestError,
    ),
    (
        errors.PermissionDeniedError,
        grpc.StatusCode.PERMISSION_DENIED,
        HTTPStatus.FORBIDDEN,
        client.InvalidRequestError,
    ),
    (
        errors.ResourceExhaustedError,
        grpc.StatusCode.RESOURCE_EXHAUSTED,
        HTTPStatus.TOO_MANY_REQUESTS,
        client.ResourceExhaustedError,
    ),
    (errors.InternalError, grpc.StatusCode.INTERNAL, HTTPStatus.INTERNAL_SERVER_ERROR, client.ServerError),
]


def test_every_error_has_a_row() -> None:
    assert {row[0] for row in ROWS} == set(errors.SonicError.__subclasses__())


@pytest.mark.parametrize(("error", "code", "http", "client_error"), ROWS, ids=[r[0].__name__ for r in ROWS])
def test_error_table_row(
    error: type[errors.SonicError],
    code: grpc.StatusCode,
    http: HTTPStatus,
    client_error: type[client.ServerError],
) -> None:
    instance = error("x")
    assert grpc_status(instance) is code
    assert errors.http_status(instance) is http
    received = client.error_for_status(code_of(code), instance.message, "server:1")
    assert type(received) is client_error
    assert (received.status, received.detail, received.server) == (code_of(code), "x", "server:1")


# Statuses only a client sees (from the transport or grpc's core), and ones the table does not list.
@pytest.mark.parametrize(
    ("status", "client_error"),
    [
        (errors.GrpcCode.DEADLINE_EXCEEDED, client.DeadlineExceededError),
        (errors.GrpcCode.CANCELLED, client.ConnectionLostError),
        (errors.GrpcCode.UNKNOWN, client.ServerError),
        (errors.GrpcCode.ABORTED, client.InvalidRequestError),
        (errors.GrpcCode.DATA_LOSS, client.InvalidRequestError),
    ],
)
def test_client_only_statuses(status: errors.GrpcCode, client_error: type[client.ServerError]) -> None:
    assert type(client.error_for_status(status, "x", "server:1")) is client_error


def test_retried_exactly_when_the_table_says_later() -> None:
    for code, row in errors.STATUSES.items():
        received = client.error_for_status(code, "x", "server:1")
        assert isinstance(received, client.TransientError) is (
            row.retry in {errors.Retry.LATER, errors.Retry.CONNECTION}
        )
