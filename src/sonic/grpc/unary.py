"""One unary gRPC call's answer, assembled sans I/O from what its HTTP/2 stream delivers.

A unary call's response is HEADERS (``:status`` 200), one length-prefixed message in DATA, then trailers
with ``grpc-status``; or trailers alone (an error). :class:`UnaryAnswer` takes the stream's events in
the order they come and says, at each, whether the call is decided: the message (still compressed when
:attr:`UnaryAnswer.compressed`), a :class:`Failure` (a gRPC status and why), or not yet. Both client
drivers use it (the asyncio one and the blocking one), so the protocol checks live once; each maps a
failure to its own error with the server's address.
"""

from __future__ import annotations

from typing import NamedTuple

from sonic.grpc import call as grpc_call
from sonic.grpc.call import GrpcError, trailers_status
from sonic.h2.frames import ErrorCode, ProtocolError
from sonic.h2.headers import Headers
from sonic.protocol.errors import GrpcCode

Message = bytes | bytearray | memoryview


class Failure(NamedTuple):
    """How a call failed: the gRPC status a client reports, and why."""

    status: GrpcCode
    detail: str


class ResponseReader(grpc_call.MessageReader):
    """A response's messages, with the limit named as a client says it."""

    __slots__ = ()

    def too_large(self, length: int) -> Exception:
        msg = f"gRPC message of {length} bytes, larger than the limit of {self._max_bytes}"
        return GrpcError(msg, GrpcCode.RESOURCE_EXHAUSTED)


def not_grpc(headers: Headers) -> Failure | None:
    """A response's first HEADERS whose ``:status`` is not 200 (a proxy's or another server's answer,
    not a gRPC one), else None. A 502/503/504 is UNAVAILABLE: the call may go to another server."""
    status = dict(headers).get(b":status")
    if status == b"200":
        return None
    code = GrpcCode.UNAVAILABLE if status in {b"502", b"503", b"504"} else GrpcCode.UNKNOWN
    return Failure(code, f"HTTP status {(status or b'none').decode()} instead of a gRPC response")


ENDED_WITHOUT_STATUS = Failure(GrpcCode.INTERNAL, "the response ended without grpc-status")


class UnaryAnswer:
    """What has arrived of one call's answer; each event returns the outcome once it is decided."""

    __slots__ = ("compressed", "headers", "message", "reader")

    def __init__(self, max_message_bytes: int) -> None:
        self.reader = ResponseReader(max_message_bytes)
        self.headers: Headers | None = None  # the response headers, once they came
        self.message: Message | None = None
        self.compressed = False  # the message is compressed with the response's grpc-encoding

    @property
    def encoding(self) -> str | None:
        value = dict(self.headers or ()).get(b"grpc-encoding")
        return None if value is None else value.decode("latin-1")

    def headers_received(self, headers: Headers, end_stream: bool) -> Message | Failure | None:
        """Response headers, or trailers (``end_stream``); None: more is to come."""
        if self.headers is None:
            self.headers = headers
            failure = not_grpc(headers)
            if failure is not None or not end_stream:
                return failure
        elif not end_stream:
            raise ProtocolError(ErrorCode.PROTOCOL_ERROR, "second HEADERS without END_STREAM")
        return self._outcome(headers)

    def data_received(self, data: memoryview) -> Failure | None:
        """DATA; a failure decides the call (the caller stops the stream)."""
        try:
            messages = self.reader.feed(data)
        except GrpcError as exc:
            return Failure(exc.status, exc.message)
        if len(messages) + (self.message is not None) > 1:
            return Failure(GrpcCode.INTERNAL, "more than one response message in a unary call")
        if messages:
            self.compressed, self.message = messages[0]
        return None

    def data_placed(self, size: int) -> Failure | None:
        """``size`` bytes of DATA were read straight into :attr:`reader`'s room (a transport reading in
        place: :class:`sonic.h2.aio.BufferedReads`); a failure decides the call, as in :meth:`data_received`."""
        placed = self.reader.placed(size)
        if placed is None:
            return None
        if self.message is not None:
            return Failure(GrpcCode.INTERNAL, "more than one response message in a unary call")
        self.compressed, self.message = placed
        return None

    def _outcome(self, trailers: Headers) -> Message | Failure:
        status, message = trailers_status(trailers)
        if status is not GrpcCode.OK:
            return Failure(status, message)
        if self.message is None:
            return Failure(GrpcCode.INTERNAL, "an OK response without a message")
        if self.reader.partial:
            return Failure(GrpcCode.INTERNAL, "the response ended inside a message")
        if self.compressed and self.encoding is None:
            return Failure(GrpcCode.INTERNAL, "a compressed response without a grpc-encoding header")
        return self.message
