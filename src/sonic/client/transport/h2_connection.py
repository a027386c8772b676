"""Client side of one HTTP/2 connection carrying unary gRPC calls, each call one stream.

:class:`ClientConnection` is the :class:`~sonic.h2.events.Handler` of a sans-I/O HTTP/2 core in the client
role (:class:`sonic.h2.client.ClientRole`); ``protocol`` puts that core on asyncio
(:class:`sonic.h2.aio.H2Protocol`), and tests drive the core by hand (``core.receive_data``,
``core.data_to_send()``). What the server's answer must be is checked by :mod:`sonic.grpc.unary`, shared
with the blocking driver. A call is opened with :meth:`ClientConnection.open_call` (HEADERS, then
its message as flow control allows, END_STREAM on the last DATA) and ends when the server's trailers
arrive; its future then holds the one response message (still compressed when ``call.answer.compressed``: the
transport inflates it, bounded and off the loop) or one of our error types.

Deadlines: every call has one by default, so a timer handle per call (made, pushed on the loop's heap,
cancelled) was a visible part of a small call's cost. Instead the connection keeps one timer
(:meth:`~sonic.h2.aio.H2Protocol.watch_deadline`), armed at the earliest deadline it knows of; when it fires, the calls past their deadline fail with
DEADLINE_EXCEEDED and it is armed again for the earliest one left. A call then only stores its deadline
(and re-arms the timer when its deadline is the earliest, which calls of one timeout never are).
"""

from __future__ import annotations

import asyncio
import math
from collections import deque

from sonic.client.errors import (
    ClientError,
    ConnectionLostError,
    DeadlineExceededError,
    DrainedError,
    ServerError,
    error_for_status,
)
from sonic.grpc.call import reset_status
from sonic.grpc.unary import ENDED_WITHOUT_STATUS, Failure, Message, UnaryAnswer
from sonic.h2.aio import BufferedReads, H2Protocol, receive_buffer
from sonic.h2.client import ClientRole
from sonic.h2.frames import ErrorCode
from sonic.h2.headers import Headers
from sonic.h2.lifecycle import ConnectionState
from sonic.h2.limits import CLIENT_LIMITS, Http2Limits
from sonic.h2.stream import Stream
from sonic.protocol.errors import GrpcCode


def _code_name(code: int) -> str:
    try:
        return ErrorCode(code).name
    except ValueError:
        return f"error code {code}"


class Call:
    """One unary call: the future its caller awaits and what has arrived so far."""

    __slots__ = ("answer", "deadline", "future", "timeout_s")

    def __init__(
        self,
        future: asyncio.Future[bytes | bytearray | memoryview],
        max_bytes: int,
        timeout_s: float | None,
        deadline: float,
    ) -> None:
        self.future = future
        self.answer = UnaryAnswer(max_bytes)
        self.timeout_s = timeout_s
        self.deadline = deadline  # loop time; inf without a timeout


WRITE_BATCH_BYTES = 1 << 18  # DATA per loop iteration: large requests leave paced (sonic.h2.windows)


class ClientConnection:
    """One connection to a server. ``closing``: GOAWAY or loss; new calls go to a new connection."""

    def __init__(self, address: str, limits: Http2Limits = CLIENT_LIMITS) -> None:
        self.address = address
        self._role: ClientRole[Call] = ClientRole(
            self, limits=limits, write_batch_bytes=WRITE_BATCH_BYTES, stream_closed=self._room_freed
        )
        self.core = core = self._role.connection
        self.protocol = H2Protocol(core, deadlines_due=self.deadlines_due, on_lost=self._connection_lost)
        # A large response's bytes are read from the socket straight into its message buffer (stream_sink):
        # no copy out of a read buffer (issue 37: 15.6 MB answers).
        core.set_sink(self)
        self.reads = BufferedReads(self.protocol, receive_buffer())  # what the transport calls
        self._loop = self.protocol.loop
        self.closed = self.protocol.closed
        self._draining = False  # a graceful GOAWAY came: calls lost from now on were cut off by a drain
        self._room: deque[asyncio.Future[None]] = deque()  # calls waiting for MAX_CONCURRENT_STREAMS

    # --- calls --------------------------------------------------------------------------------------

    @property
    def closing(self) -> bool:
        return not self.core.state.opens_streams

    @property
    def full(self) -> bool:
        return self._role.full

    async def wait_for_room(self) -> None:
        """Until a stream may be opened under the server's MAX_CONCURRENT_STREAMS."""
        while self.full and not self.closing:
            waiter = self._loop.create_future()
            self._room.append(waiter)
            await waiter
        if self.closing:
            msg = "the connection closed while the call waited for a stream"
            raise self._lost(msg)

    def open_call(
        self,
        block: bytes,
        message: list[bytes | memoryview],
        max_bytes: int,
        timeout_s: float | None = None,
    ) -> Stream[Call]:
        """A new stream: HEADERS ``block``, then ``message`` with END_STREAM. ``stream.app`` is its Call,
        failed with DEADLINE_EXCEEDED (and the stream cancelled) if no answer comes within ``timeout_s``."""
        if self.closing:
            msg = "the connection is closing"
            raise self._lost(msg)
        if not self._role.ids_left:
            self.core.stop_new_streams()  # stream ids are spent: the next call opens a new connection
            msg = "stream ids exhausted"
            raise self._lost(msg)
        deadline = math.inf if timeout_s is None else self._loop.time() + timeout_s
        call = Call(self._loop.create_future(), max_bytes, timeout_s, deadline)
        self.protocol.watch_deadline(deadline)
        return self._role.open_stream(block, message, call)

    def cancel(self, stream: Stream[Call], error: ClientError | None) -> None:
        """Stop a call (deadline, caller cancelled): RST_STREAM CANCEL, ``error`` to its caller."""
        self.core.end(stream)
        future = stream.app.future
        if error is not None and not future.done():
            future.set_exception(error)

    def deadlines_due(self, now: float) -> float:
        """Fail the calls past their deadline (the server's MAX_CONCURRENT_STREAMS at most to walk)."""
        following = math.inf
        for stream in self.core.open_streams():
            call = stream.app
            if call.future.done():
                continue
            if call.deadline <= now:
                error = DeadlineExceededError(
                    f"no response within {call.timeout_s} s",
                    status=GrpcCode.DEADLINE_EXCEEDED,
                    server=self.address,
                )
                self.cancel(stream, error)
            else:
                following = min(following, call.deadline)
        return following

    def close(self) -> None:
        self.core.close()

    def transport_protocol(self) -> str | None:
        """The protocol TLS's ALPN agreed on (None without TLS)."""
        ssl_object = self.protocol.get_extra_info("ssl_object")
        return None if ssl_object is None else ssl_object.selected_alpn_protocol()  # type: ignore[attr-defined]

    # --- the connection -----------------------------------------------------------------------------

    def _connection_lost(self) -> None:
        """The core has reset every open stream (as lost: the core's state was LOST first)."""
        self._wake_all()

    def goaway_received(self, last_stream_id: int, code: int, unprocessed: list[Stream[Call]]) -> None:  # noqa: ARG002  (the role sorted the streams by it)
        """Streams up to ``last_stream_id`` finish; the ``unprocessed`` ones can go elsewhere."""
        self._draining = code == ErrorCode.NO_ERROR
        for stream in unprocessed:
            self._fail(stream, self._lost(f"the server is going away (GOAWAY {_code_name(code)})"))
        self._wake_all()

    def _room_freed(self) -> None:
        while self._room and not self.full:
            waiter = self._room.popleft()
            if not waiter.done():
                waiter.set_result(None)

    def _wake_all(self) -> None:
        while self._room:
            waiter = self._room.popleft()
            if not waiter.done():
                waiter.set_result(None)

    def _lost(self, detail: str) -> ConnectionLostError:
        kind = DrainedError if self._draining else ConnectionLostError
        return kind(f"{detail} ({self.address})", status=GrpcCode.UNAVAILABLE, server=self.address)

    # --- what the server sends ----------------------------------------------------------------------

    def headers_received(self, stream: Stream[Call], headers: Headers, end_stream: bool) -> None:
        outcome = stream.app.answer.headers_received(headers, end_stream)
        if outcome is not None:
            self._end(stream, outcome)

    def stream_data(self, stream: Stream[Call], data: memoryview) -> None:
        call = stream.app
        if call.future.done():
            return
        failure = call.answer.data_received(data)
        if failure is not None:
            self.cancel(stream, self._error(failure))

    def stream_sink(self, stream: Stream[Call]) -> memoryview | None:
        """The rest of the response message in progress (None between messages, or once the call is decided)."""
        call = stream.app
        return None if call.future.done() else call.answer.reader.room()

    def stream_data_placed(self, stream: Stream[Call], size: int) -> None:
        call = stream.app
        if call.future.done():  # decided meanwhile: what landed in its buffer is dropped with it
            return
        failure = call.answer.data_placed(size)
        if failure is not None:
            self.cancel(stream, self._error(failure))

    def stream_ended(self, stream: Stream[Call]) -> None:
        """DATA with END_STREAM: a response without trailers, hence without a status."""
        self._end(stream, ENDED_WITHOUT_STATUS)

    def stream_reset(self, stream: Stream[Call]) -> None:
        core = self.core
        if core.state is ConnectionState.LOST:
            self._fail(stream, self._lost("the connection was lost"))
            return
        code = core.peer_reset_code(stream)
        if self._draining and code == ErrorCode.CANCEL:
            self._fail(stream, self._lost("the draining server cut the call off at its exit timeout"))
            return
        status = reset_status(code)
        detail = f"the server reset the stream (RST_STREAM {_code_name(code)})"
        self._fail(stream, error_for_status(status, detail, self.address))

    def _end(self, stream: Stream[Call], outcome: Message | Failure) -> None:
        """The server ended the call (or its answer is refused): resolve it, and stop the stream."""
        self.core.end(stream)
        if isinstance(outcome, Failure):
            self._fail(stream, self._error(outcome))
        elif not stream.app.future.done():
            stream.app.future.set_result(outcome)

    def _error(self, failure: Failure) -> ServerError:
        return error_for_status(failure.status, failure.detail, self.address)

    def _fail(self, stream: Stream[Call], error: ClientError) -> None:
        future = stream.app.future
        if not future.done():
            future.set_exception(error)
