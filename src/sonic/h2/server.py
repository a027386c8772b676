"""The server's role on one HTTP/2 connection, sans I/O: the peer opens streams, we answer and end them.

:class:`ServerRole` holds its :class:`~sonic.h2.connection.Connection` core (``role.connection``) and
does what only a server does: SETTINGS with MAX_CONCURRENT_STREAMS, streams opened by the peer (ids only
grow, refused past the limit or while closing, malformed requests refused, RFC 9113 sections 5.1.1, 8.2
and 8.3), trailers, RST_STREAM NO_ERROR to a peer still sending once we ended (section 8.1), GOAWAY. The
application is the core's :class:`~sonic.h2.events.Handler` (our gRPC front end:
:mod:`sonic.server.frontends.grpc_h2`); it answers with ``connection.send_headers`` and
``connection.respond``. On asyncio: :class:`sonic.h2.aio.H2Protocol`. A stream the peer opens has no
application object yet (``app`` None) until the handler hangs one on it as it hears the headers:
``ServerRole[T]``'s core is a ``Connection[T | None]``.
"""

from __future__ import annotations

from typing import Generic, TypeVar

from sonic.h2.connection import Connection
from sonic.h2.events import Handler
from sonic.h2.frames import ErrorCode, Flag, ProtocolError, Setting, goaway, rst_stream
from sonic.h2.headers import Headers, malformed_fields
from sonic.h2.limits import SERVER_LIMITS, Http2Limits, MemoBudget
from sonic.h2.stream import CLOSED, RECV_END_STREAM, SEND_END_STREAM, SEND_RST_STREAM, Stream

# Request header blocks whose validity is remembered (clients repeat theirs), and the largest kept.
CHECKED_BLOCKS = 64
CHECKED_BLOCK_BYTES = 4096
_UNCHECKED = "unchecked"
T = TypeVar("T")  # what the application hangs on a stream


class ServerRole(Generic[T]):
    """The server's end of one connection; ``connection`` is its core, ``handler`` hears the requests."""

    def __init__(
        self,
        handler: Handler[T | None],
        *,
        limits: Http2Limits = SERVER_LIMITS,
        memo_budget: MemoBudget | None = None,
    ) -> None:
        self.connection: Connection[T | None] = Connection(
            handler, self, expect_preface=True, limits=limits, memo_budget=memo_budget
        )
        self._handler = handler
        self._checked: dict[bytes, str | None] = {}  # request blocks seen: why malformed, or None

    def start(self) -> None:
        core = self.connection
        core.send_settings({Setting.MAX_CONCURRENT_STREAMS: core.limits.max_concurrent_streams})

    def start_shutdown(self) -> None:
        """GOAWAY: streams already opened finish, new ones are refused."""
        core = self.connection
        if core.state.opens_streams:
            core.stop_new_streams()
            core.output.emit(goaway(core.last_stream_id, ErrorCode.NO_ERROR))
        if not core.streams:
            core.close()

    def goaway_received(self, last_stream_id: int, code: int) -> None:
        """A client's GOAWAY: we stop alike (a client opens streams, a server has none it opened)."""
        self.start_shutdown()
        self._handler.goaway_received(last_stream_id, code, [])

    def finished(self, stream: Stream[T | None]) -> None:
        """We sent END_STREAM. A peer still sending is told to stop (RFC 9113 section 8.1)."""
        core = self.connection
        core.counters.streams_completed += 1
        if stream.apply(SEND_END_STREAM) is not CLOSED:
            core.output.emit(rst_stream(stream.stream_id, ErrorCode.NO_ERROR))
            core.closed_streams.add(stream.stream_id, reset_by_us=True)  # its DATA in flight is ignored
            stream.apply(SEND_RST_STREAM)
        core.forget(stream)

    def headers_done(self, stream_id: int, flags: int, block: bytes) -> None:
        core = self.connection
        headers = core.headers.decode(block)  # always: the HPACK table must stay in step
        end_stream = bool(flags & Flag.END_STREAM)
        stream = core.streams.get(stream_id)
        if stream is not None:  # trailers from the client
            if stream.remote_closed:
                core.reset(stream, ErrorCode.STREAM_CLOSED)
                self._handler.stream_reset(stream)
            elif not end_stream:
                raise ProtocolError(ErrorCode.PROTOCOL_ERROR, "second HEADERS without END_STREAM")
            elif malformed_fields(headers, trailers=True) is not None:
                core.reset(stream, ErrorCode.PROTOCOL_ERROR)
                self._handler.stream_reset(stream)
            else:
                core.after_data(stream, end_stream=True)
            return
        if stream_id <= core.last_stream_id:
            if stream_id not in core.closed_streams:  # RFC 9113 section 5.1.1: ids only grow
                msg = f"HEADERS on stream {stream_id}, below {core.last_stream_id} and never opened"
                raise ProtocolError(ErrorCode.PROTOCOL_ERROR, msg)
            if not core.closed_streams.reset_by_us(stream_id):
                # A stream that ended or that the peer reset: say so rather than leave the peer waiting.
                core.refuse(stream_id, ErrorCode.STREAM_CLOSED)
            return
        core.last_stream_id = stream_id
        core.counters.streams_opened += 1
        opens_streams = core.state.opens_streams
        if not opens_streams or len(core.streams) >= core.limits.max_concurrent_streams:
            core.refuse(stream_id, ErrorCode.REFUSED_STREAM)
            if opens_streams:
                core.counters.reset()  # a peer that ignores our limit is budgeted like a rapid reset
            return
        if self._malformed(block, headers):
            core.refuse(stream_id, ErrorCode.PROTOCOL_ERROR)
            core.counters.reset()
            return
        stream = Stream(stream_id, None)
        core.streams[stream_id] = stream
        if end_stream:
            stream.apply(RECV_END_STREAM)
        self._handler.headers_received(stream, headers, end_stream)
        if end_stream and not stream.local_closed:
            self._handler.stream_ended(stream)

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
