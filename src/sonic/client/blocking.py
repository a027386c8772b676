"""The blocking fast path of :class:`~sonic.client.sync.SyncClient`: a planned call on a plain socket.

A blocking call through the client's event loop pays for the loop's turns (selector, handles,
futures) on every call, which grpcio's C core does not. The common call (a planned signature, every
server HEALTHY, no shared memory, our HTTP/2 transport without TLS or compression) instead goes out
on a blocking socket per server, driven by the same sans-I/O core as the transport
(:class:`sonic.h2.client.ClientRole`): ``sendall`` of ``data_to_send()``, ``recv`` into the core until
the call's trailers, the call's deadline as the socket's timeout. One call at a time per connection:
:class:`FastPath` is used only while the caller holds the client's loop lock.

What this path does not handle goes back to the loop's path. A connection that breaks or closes
(refused, reset, GOAWAY, a protocol error) was not this try's answer: the call is made again on the
loop's path as a new call, which finds out about the server itself. An answer (a non-OK status, a
missed deadline) is this call's first try: the loop's retries and failover go on from it
(:meth:`~sonic.client.client.AsyncClient.after_first_try`), as they would after a first try of theirs.
"""

from __future__ import annotations

import socket
import time
from collections.abc import Mapping, Sequence
from typing import Any

from sonic.client.client import AsyncClient
from sonic.client.config import Compression, TransportKind
from sonic.client.errors import ConnectionLostError, DeadlineExceededError, ServerError, error_for_status
from sonic.client.plans import FirstTry
from sonic.client.results import Arrays
from sonic.client.transport.base import Transport
from sonic.client.transport.h2 import H2Transport
from sonic.grpc.call import reset_status
from sonic.grpc.unary import ENDED_WITHOUT_STATUS, Failure, Message, UnaryAnswer
from sonic.h2.client import ClientRole
from sonic.h2.headers import Headers
from sonic.h2.lifecycle import ConnectionState
from sonic.h2.limits import CLIENT_LIMITS, Http2Limits
from sonic.h2.stream import Stream
from sonic.protocol.errors import GrpcCode
from sonic.protocol.grpc_codec import decode_response, split_response
from sonic.protocol.wire import MAX_MESSAGE_BYTES

RECV_BYTES = 1 << 18
Answer = bytes | bytearray | memoryview


class Unanswered(Exception):
    """The connection broke or closed before the call's answer: the loop's path makes the call."""


class BlockingConnection:
    """One blocking HTTP/2 connection to one server; the :class:`~sonic.h2.events.Handler` of its core."""

    def __init__(
        self,
        address: str,
        host: str,
        port: int,
        connect_timeout_s: float,
        limits: Http2Limits = CLIENT_LIMITS,
    ) -> None:
        """Connects now (``OSError`` when it cannot) and queues the preface. ``limits``: the transport's,
        whose keepalive runs during a call as on the loop (a hung server is found by its PINGs)."""
        self.address = address
        self._sock = socket.create_connection((host, port), timeout=connect_timeout_s)
        self._sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
        # One call at a time: nothing hangs on a stream (None), the call's state is this object's.
        self._role: ClientRole[None] = ClientRole(self, limits=limits)
        self._core = self._role.connection
        self._core.start(time.monotonic())  # its timers run only during calls
        self._stream: Stream[None] | None = None  # the call's stream
        self._reset_call()

    def _reset_call(self) -> None:
        self._answer = UnaryAnswer(MAX_MESSAGE_BYTES)
        self._outcome: Answer | ServerError | Unanswered | None = None

    @property
    def usable(self) -> bool:
        return self._core.state.opens_streams and self._role.ids_left

    def exchange(self, block: bytes, message: list[bytes | memoryview], timeout_s: float | None) -> Answer:
        """One unary call: its response message; a :class:`ServerError` for a status or a missed deadline
        (the connection is closed then), :class:`Unanswered` when the connection failed first."""
        self._reset_call()
        self._stream = self._role.open_stream(block, message, None)
        deadline = None if timeout_s is None else time.monotonic() + timeout_s
        sock = self._sock
        if deadline is None:
            sock.settimeout(None)  # no deadline: wait as the loop's path would (connect's timeout is gone)
        try:
            self._until_answer(sock, deadline)
        except TimeoutError:
            self.close()  # the server sees the call cancelled with the connection
            detail = f"no response within {timeout_s} s"
            raise DeadlineExceededError(
                detail, status=GrpcCode.DEADLINE_EXCEEDED, server=self.address
            ) from None
        except OSError:
            self.close()
            raise Unanswered from None
        except BaseException:  # KeyboardInterrupt in recv: the call is abandoned with its connection
            self.close()
            raise
        outcome = self._outcome
        assert outcome is not None  # _until_answer returns once there is one
        if isinstance(outcome, Exception):
            if isinstance(outcome, Unanswered):
                self.close()
            raise outcome
        if self._answer.compressed:  # inflated on the loop's path (bounded, off the caller)
            self.close()
            raise Unanswered
        return outcome

    def _until_answer(self, sock: socket.socket, deadline: float | None) -> None:
        core = self._core
        while self._outcome is None:
            out = core.data_to_send()
            if out:
                sock.sendall(out[0] if len(out) == 1 else b"".join(out))
                continue  # everything the windows allow goes out before reading
            if (
                core.state is ConnectionState.ABORTING
            ):  # keepalive: no answer to our PING, as the loop's path says it
                detail = f"the connection was lost (no PING answer) ({self.address})"
                raise ConnectionLostError(detail, status=GrpcCode.UNAVAILABLE, server=self.address)
            if core.state.ended:
                raise Unanswered
            wake = core.next_deadline()  # keepalive's next PING or its answer's deadline
            until = deadline if wake is None or (deadline is not None and deadline <= wake) else wake
            if until is not None:
                # Past it: a timeout of a microsecond, so recv raises TimeoutError at once.
                sock.settimeout(max(until - time.monotonic(), 1e-6))
            try:
                data = sock.recv(RECV_BYTES)
            except TimeoutError:
                now = time.monotonic()
                if until is deadline:
                    raise
                core.on_timer(now)
                continue
            if not data:
                raise Unanswered
            core.receive_data(data)

    def close(self) -> None:
        self._core.transport_lost()
        self._sock.close()

    # --- the core's handler: this connection's one call at a time -----------------------------------

    def headers_received(self, stream: Stream[None], headers: Headers, end_stream: bool) -> None:
        if stream is not self._stream or self._outcome is not None:
            return
        outcome = self._answer.headers_received(headers, end_stream)
        if outcome is not None:
            self._end(stream, outcome)

    def stream_data(self, stream: Stream[None], data: memoryview) -> None:
        if stream is not self._stream or self._outcome is not None:
            return
        failure = self._answer.data_received(data)
        if failure is not None:
            self._end(stream, failure)

    def stream_ended(self, stream: Stream[None]) -> None:
        if stream is not self._stream or self._outcome is not None:
            return
        self._end(stream, ENDED_WITHOUT_STATUS)

    def stream_reset(self, stream: Stream[None]) -> None:
        if stream is not self._stream or self._outcome is not None:
            return
        if self._core.state is ConnectionState.LOST:
            self._outcome = Unanswered()
            return
        code = self._core.peer_reset_code(stream)
        detail = f"the server reset the stream (RST_STREAM {code})"
        self._outcome = error_for_status(reset_status(code), detail, self.address)

    def goaway_received(self, last_stream_id: int, code: int, unprocessed: list[Stream[None]]) -> None:  # noqa: ARG002  (any code: closed)
        if self._stream in unprocessed:
            self._outcome = Unanswered()  # not processed: the loop's path sends it

    def _end(self, stream: Stream[None], outcome: Message | Failure) -> None:
        self._core.end(stream)
        if self._outcome is None:
            self._outcome = (
                error_for_status(outcome.status, outcome.detail, self.address)
                if isinstance(outcome, Failure)
                else outcome
            )


class FastPath:
    """A :class:`SyncClient`'s blocking connections (one per server, reused) and its fast calls."""

    def __init__(self, client: AsyncClient) -> None:
        self._client = client
        self._connections: dict[Transport, BlockingConnection] = {}
        config = client.config
        # Other transports never take this path: their calls skip even the look-up.
        self._possible = (
            config.transport is TransportKind.H2
            and config.tls is None
            and config.compression is Compression.NONE
        )

    def infer(
        self, inputs: Mapping[str, Any], outputs: Sequence[str] | None
    ) -> Arrays | tuple[FirstTry, ServerError] | None:
        """The outputs; or the first try and its failure, for the loop's retries; or None when the loop's
        path makes the whole call (not this path's kind of call, or the connection failed first)."""
        client = self._client
        if not self._possible:
            return None
        first = client.first_try(inputs, outputs)
        if first is None:
            return None
        entry = first.entry
        transport = entry.transport
        try:
            if not isinstance(transport, H2Transport) or not transport.plain:
                return None
            entry.outstanding += 1
            try:
                block, message, timeout_s = transport.template_call(
                    first.plan.template, first.request_id, first.plan.tensor_data(first.arrays)
                )
                response = self._connection(transport).exchange(block, message, timeout_s)
            finally:
                entry.outstanding -= 1
        except Unanswered:
            self._drop(transport)
            return None
        except ServerError as exc:  # a missed deadline closed the connection; a status keeps it
            return first, exc
        finally:
            first.slots.give()
        client.statistics.count_success(1)  # every server is HEALTHY: nothing to mark
        return first.plan.decode(decode_response(*split_response(response)))

    @property
    def connected(self) -> list[str]:
        """The servers this path holds a usable connection to."""
        return [c.address for c in self._connections.values() if c.usable]

    def _connection(self, transport: H2Transport) -> BlockingConnection:
        connection = self._connections.get(transport)
        if connection is not None and connection.usable:
            return connection
        self._drop(transport)
        host, port = transport.endpoint
        try:
            connection = BlockingConnection(
                transport.address, host, port, self._client.config.control_timeout_s, transport.limits
            )
        except OSError:
            raise Unanswered from None
        self._connections[transport] = connection
        return connection

    def _drop(self, transport: Transport) -> None:
        """A connection that failed or closed: the next call opens a new one."""
        connection = self._connections.pop(transport, None)
        if connection is not None:
            connection.close()

    def close(self) -> None:
        for connection in self._connections.values():
            connection.close()
        self._connections.clear()
