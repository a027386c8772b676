"""One gRPC call of the native front end (on :mod:`sonic.h2`): its state, its errors, the fixed header blocks
it sends.

:mod:`sonic.server.frontends.grpc_h2` drives these from the HTTP/2 connection's events.
"""

from __future__ import annotations

import asyncio
import math

from sonic.grpc import call as grpc_call
from sonic.grpc.call import ACCEPT_ENCODING
from sonic.h2.headers import encode_headers
from sonic.protocol.errors import GrpcCode
from sonic.server.header_forward import Forwarded

RESPONSE_HEADERS = encode_headers(
    [
        (b":status", b"200"),
        (b"content-type", b"application/grpc"),
        (b"grpc-accept-encoding", ACCEPT_ENCODING),
    ]
)
TRAILERS_OK = encode_headers([(b"grpc-status", b"0")])


def header_text(value: bytes | None) -> str | None:
    """A header value as text (HTTP/2 header values are bytes; latin-1 maps each byte to one character)."""
    return value.decode("latin-1") if value is not None else None


class CallError(Exception):
    """A call ends with this gRPC status before or instead of its handler."""

    def __init__(self, code: GrpcCode, message: str) -> None:
        super().__init__(message)
        self.code = code
        self.message = message


class MessageReader(grpc_call.MessageReader):
    """Messages of a request: one too large ends the call with RESOURCE_EXHAUSTED, as grpcio does; so does
    one larger than the server's whole request buffer budget, which could never be held."""

    __slots__ = ("_message_limit",)

    def __init__(self, max_bytes: int, budget_bytes: int) -> None:
        super().__init__(min(max_bytes, budget_bytes))
        self._message_limit = max_bytes

    def too_large(self, length: int) -> Exception:
        if length <= self._message_limit:
            msg = (
                f"Received message of {length} bytes, larger than the server's whole request buffer budget "
                f"of {self._max_bytes} bytes (--request-buffer-budget-mb)"
            )
        else:
            msg = f"Received message larger than max ({length} vs. {self._message_limit})"
        return CallError(GrpcCode.RESOURCE_EXHAUSTED, msg)


class Call:
    """One RPC: which method, its message(s), deadline and running tasks."""

    __slots__ = (
        "compressed",
        "deadline",
        "encoding",
        "forwarded",
        "headers_sent",
        "held",
        "input_done",
        "message",
        "method",
        "reader",
        "send_paused",
        "tasks",
        "trace",
    )

    def __init__(self, method: str, max_bytes: int, budget_bytes: int) -> None:
        self.method = method
        self.reader = MessageReader(max_bytes, budget_bytes)
        self.held = 0  # request bytes charged to the server's budget and not handed to a task yet
        self.message: bytes | memoryview | None = None
        self.compressed = False
        self.encoding: str | None = None
        self.trace: dict[str, str] | None = None
        self.forwarded: Forwarded = ()  # headers that become request parameters (--grpc-header-forward-pattern)
        self.deadline = math.inf  # loop time; the connection's one deadline timer watches it
        self.tasks: set[asyncio.Task[None]] = set()
        # ModelStreamInfer: set while a decoupled model's responses wait for the client to read
        # what is queued (back-pressure); resolved when the stream's queued output is all sent.
        self.send_paused: asyncio.Future[None] | None = None
        self.headers_sent = False
        self.input_done = False

    def output_drained(self) -> None:
        """The stream's queued responses have all left: the next one may be sent."""
        drained, self.send_paused = self.send_paused, None
        if drained is not None and not drained.done():
            drained.set_result(None)
