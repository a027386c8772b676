"""Server side of one HTTP/2 connection: the peer opens streams, we answer and end them.

:class:`ServerCore` is the role, sans I/O (frame handling, flow control and limits shared with the
client are :class:`sonic.protocol.h2connection.Http2Core`); :class:`Http2Connection` puts it on asyncio
(:class:`sonic.protocol.h2asyncio.Http2Protocol`). The gRPC layer
(:mod:`sonic.server.frontends.grpc_native`) subclasses :class:`Http2Connection` and fills in the four
``stream_*`` hooks; what it keeps of the request DATA it reports (``hold_data``/``drop_data``/
``release_data``), which charges the server's request-buffer budget and opens the flow-control windows
only while that has room.
"""

from __future__ import annotations

import asyncio

from sonic.protocol.h2asyncio import Http2Protocol
from sonic.protocol.h2connection import Http2Core
from sonic.protocol.h2limits import SERVER_LIMITS, Http2Limits, MemoBudget
from sonic.protocol.http2 import (
    ErrorCode,
    Flag,
    HeaderDecoder,
    Headers,
    ProtocolError,
    Setting,
    Stream,
    goaway,
    malformed_fields,
    rst_stream,
)
from sonic.server.budget import RequestBudget

__all__ = ["HeaderDecoder", "Headers", "Http2Connection", "ServerCore", "Stream"]

# Request header blocks whose validity is remembered (clients repeat theirs), and the largest kept.
CHECKED_BLOCKS = 64
CHECKED_BLOCK_BYTES = 4096
_UNCHECKED = "unchecked"


class ServerCore(Http2Core):
    """The server's role. Subclasses implement the ``stream_*`` hooks and answer with ``respond``."""

    def __init__(self, *, limits: Http2Limits = SERVER_LIMITS, memo_budget: MemoBudget | None = None) -> None:
        super().__init__(expect_preface=True, limits=limits, memo_budget=memo_budget)
        self._checked: dict[bytes, str | None] = {}  # request blocks seen: why malformed, or None

    def stream_opened(self, stream: Stream, headers: Headers) -> None:
        raise NotImplementedError

    def start(self) -> None:
        self._send_settings({Setting.MAX_CONCURRENT_STREAMS: self.limits.max_concurrent_streams})

    def start_shutdown(self) -> None:
        """GOAWAY: streams already opened finish, new ones are refused."""
        if not self.closing:
            self.closing = True
            self._emit(goaway(self._last_stream_id, ErrorCode.NO_ERROR))
        if not self.streams:
            self._close()

    def goaway_received(self, last_stream_id: int, code: int) -> None:  # noqa: ARG002  (a client's GOAWAY: we stop alike)
        self.start_shutdown()

    def _finish(self, stream: Stream) -> None:
        """We sent END_STREAM. A peer still sending is told to stop (RFC 9113 section 8.1)."""
        stream.local_closed = True
        self._streams_completed += 1
        if not stream.remote_closed:
            self._emit(rst_stream(stream.stream_id, ErrorCode.NO_ERROR))
            self.closed_streams.add(stream.stream_id, reset_by_us=True)  # its DATA in flight is ignored
            stream.remote_closed = True
        self._forget(stream)

    def _headers_done(self, stream_id: int, flags: int, block: bytes) -> None:
        headers = self._headers.decode(block)  # always: the HPACK table must stay in step
        end_stream = bool(flags & Flag.END_STREAM)
        stream = self.streams.get(stream_id)
        if stream is not None:  # trailers from the client
            if stream.remote_closed:
                self.reset(stream, ErrorCode.STREAM_CLOSED)
                self.stream_reset(stream)
            elif not end_stream:
                raise ProtocolError(ErrorCode.PROTOCOL_ERROR, "second HEADERS without END_STREAM")
            elif malformed_fields(headers, trailers=True) is not None:
                self.reset(stream, ErrorCode.PROTOCOL_ERROR)
                self.stream_reset(stream)
            else:
                self._after_data(stream, end_stream=True)
            return
        if stream_id <= self._last_stream_id:
            if stream_id not in self.closed_streams:  # RFC 9113 section 5.1.1: ids only grow
                msg = f"HEADERS on stream {stream_id}, below {self._last_stream_id} and never opened"
                raise ProtocolError(ErrorCode.PROTOCOL_ERROR, msg)
            if not self.closed_streams.reset_by_us(stream_id):
                # A stream that ended or that the peer reset: say so rather than leave the peer waiting.
                self.refuse(stream_id, ErrorCode.STREAM_CLOSED)
            return
        self._last_stream_id = stream_id
        self._streams_opened += 1
        if self.closing or len(self.streams) >= self.limits.max_concurrent_streams:
            self.refuse(stream_id, ErrorCode.REFUSED_STREAM)
            if not self.closing:
                self._count_reset()  # a peer that ignores our limit is budgeted like a rapid reset
            return
        if self._malformed(block, headers):
            self.refuse(stream_id, ErrorCode.PROTOCOL_ERROR)
            self._count_reset()
            return
        stream = Stream(stream_id)
        self.streams[stream_id] = stream
        stream.remote_closed = end_stream
        self.stream_opened(stream, headers)
        if end_stream and not stream.local_closed:
            self.stream_ended(stream)

    def _malformed(self, block: bytes, headers: Headers) -> bool:
        """RFC 9113 section 8.2/8.3, checked once per distinct block (clients repeat theirs)."""
        problem = self._checked.get(block, _UNCHECKED)
        if problem is _UNCHECKED:
            problem = malformed_fields(headers, trailers=False)
            if len(block) <= CHECKED_BLOCK_BYTES:
                if len(self._checked) >= CHECKED_BLOCKS:
                    self._checked.clear()
                self._checked[block] = problem
        return problem is not None


class Http2Connection(ServerCore, Http2Protocol):
    """One client connection on asyncio, its request DATA charged to the server's request-buffer budget.

    With a budget, the windows the peer's DATA used open again (WINDOW_UPDATE) only while the budget has
    room; otherwise once it has, so a sender is throttled by flow control, not by an error. A connection
    that waits past the budget's ``wait_s`` has its role fail the calls still receiving
    (:meth:`budget_wait_over`), which gives their bytes back.
    """

    def __init__(
        self,
        *,
        limits: Http2Limits = SERVER_LIMITS,
        memo_budget: MemoBudget | None = None,
        budget: RequestBudget | None = None,
    ) -> None:
        super().__init__(limits=limits, memo_budget=memo_budget)
        self._budget = budget
        self.acknowledges_on_receipt = budget is None
        self._deferred: dict[int, tuple[Stream, int]] = {}  # windows owed, by stream, until there is room
        self._budget_timer: asyncio.TimerHandle | None = None

    def hold_data(self, stream: Stream, size: int) -> None:
        """The role keeps ``size`` bytes of ``stream``'s DATA (it gives them back with :meth:`release_data`)."""
        budget = self._budget
        if budget is None:
            return
        budget.charge(size)
        if not self._deferred and budget.has_room:
            self.acknowledge_received_data(stream, size)
            return
        if not self._deferred:
            budget.when_room(self, self._budget_room)
            self._budget_timer = self._loop.call_later(budget.wait_s, self._budget_timer_fired)
        owed = self._deferred.get(stream.stream_id)
        self._deferred[stream.stream_id] = (stream, size + (owed[1] if owed else 0))

    def drop_data(self, stream: Stream, size: int) -> None:
        """The role does not keep these bytes (a call already ended): the windows open at once."""
        if self._budget is not None:
            self.acknowledge_received_data(stream, size)

    def release_data(self, size: int) -> None:
        """Bytes given to :meth:`hold_data` are no longer held."""
        if self._budget is not None and size:
            self._budget.release(size)

    def budget_wait_over(self) -> None:
        """The connection waited ``wait_s`` for room: the role fails its calls still receiving."""

    def _budget_room(self) -> None:
        deferred, self._deferred = self._deferred, {}
        if self._budget_timer is not None:
            self._budget_timer.cancel()
            self._budget_timer = None
        for stream, size in deferred.values():
            self.acknowledge_received_data(stream, size)

    def _budget_timer_fired(self) -> None:
        self._budget_timer = None
        self.budget_wait_over()  # releases bytes: may give room, and _budget_room runs meanwhile
        if self._deferred and self._budget is not None:
            self._budget_timer = self._loop.call_later(self._budget.wait_s, self._budget_timer_fired)

    def connection_lost(self, exc: Exception | None) -> None:
        super().connection_lost(exc)  # every open stream is reset: the roles release what they held
        self._deferred.clear()
        if self._budget is not None:
            self._budget.forget(self)
        if self._budget_timer is not None:
            self._budget_timer.cancel()
            self._budget_timer = None
