"""Errors raised by :mod:`sonic.client`.

The tree::

    ClientError                     base of every client error
    ├── ClientStateError            misuse: a closed client, infer() before start-up, a pickled live object
    ├── InputError                  inputs do not match the model (name, dtype, shape, batch); never sent
    ├── NoServerError               no server (remote or fallback) has the model
    ├── ModelVersionError           the server's model checksums differ from the local model files
    ├── ServerError                 the server answered with an error; ``status``: its gRPC status (GrpcCode)
    │   ├── InvalidRequestError     INVALID_ARGUMENT, NOT_FOUND, ...: retrying cannot help
    │   └── TransientError          retried: the same request may succeed later or elsewhere
    │       ├── UnavailableError        UNAVAILABLE (queue full, model unloading, server draining)
    │       ├── DeadlineExceededError   DEADLINE_EXCEEDED (per-request deadline)
    │       ├── ResourceExhaustedError  RESOURCE_EXHAUSTED
    │       └── ConnectionLostError     the connection broke or was refused
    │           └── DrainedError            ... by a server that announced its shutdown (GOAWAY)
    └── RetriesExhaustedError       every allowed try failed; ``attempts`` lists server and cause of each

gRPC status codes become these types through the protocol's status table (:func:`error_for_status`),
used by both transports; ``grpc.aio.AioRpcError`` is converted only in :mod:`sonic.client.transport.grpc`.
"""

from __future__ import annotations

from dataclasses import dataclass

from sonic.protocol.errors import GrpcCode, Retry, status_of


class ClientError(Exception):
    """Base of every error raised by the client."""


class ClientStateError(ClientError):
    pass


class InputError(ClientError):
    pass


class NoServerError(ClientError):
    pass


class ModelVersionError(ClientError):
    """The server's ``model_repository_agents`` checksums do not match the local model files."""


class ServerError(ClientError):
    """An error answer from a server."""

    def __init__(self, message: str, *, status: GrpcCode, server: str) -> None:
        super().__init__(f"{server}: {status.name}: {message}")
        self.status = status
        self.server = server
        self.detail = message


class InvalidRequestError(ServerError):
    pass


class TransientError(ServerError):
    pass


class UnavailableError(TransientError):
    pass


class DeadlineExceededError(TransientError):
    pass


class ResourceExhaustedError(TransientError):
    pass


class ConnectionLostError(TransientError):
    pass


class DrainedError(ConnectionLostError):
    """A call a draining server did not finish: refused after its GOAWAY, or cut off at its exit timeout."""


# What the protocol's status table says a client does with a status, as our error types. Statuses to
# retry get a type each so callers can tell them apart; a transport that knows a status means a broken
# connection (UNAVAILABLE, INTERNAL from grpc's core) raises ConnectionLostError itself.
_RETRY_ERRORS: dict[Retry, type[ServerError]] = {
    Retry.NEVER: InvalidRequestError,
    Retry.LATER: TransientError,
    Retry.CONNECTION: ConnectionLostError,
    Retry.SERVER: ServerError,
}
_LATER_ERRORS: dict[GrpcCode, type[ServerError]] = {
    GrpcCode.UNAVAILABLE: UnavailableError,
    GrpcCode.DEADLINE_EXCEEDED: DeadlineExceededError,
    GrpcCode.RESOURCE_EXHAUSTED: ResourceExhaustedError,
}


def error_for_status(status: GrpcCode, message: str, server: str) -> ServerError:
    """A gRPC status as our error type, as :data:`sonic.protocol.errors.STATUSES` says."""
    cls = _LATER_ERRORS.get(status) or _RETRY_ERRORS[status_of(status).retry]
    return cls(message, status=status, server=server)


@dataclass(frozen=True)
class Attempt:
    """One failed try: where it went and why it failed."""

    server: str
    error: ClientError


class RetriesExhaustedError(ClientError):
    def __init__(self, model: str, attempts: list[Attempt]) -> None:
        lines = [f"model '{model}': all {len(attempts)} tries failed:"]
        lines += [f"  try {i}: {a.server}: {a.error}" for i, a in enumerate(attempts, 1)]
        super().__init__("\n".join(lines))
        self.model = model
        self.attempts = attempts
