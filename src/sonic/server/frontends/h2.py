"""Server side of one HTTP/2 connection: the peer opens streams, we answer and end them.

:class:`ServerCore` is the role, sans I/O (frame handling, flow control and limits shared with the
client are :class:`sonic.protocol.h2connection.Http2Core`); :class:`Http2Connection` puts it on asyncio
(:class:`sonic.protocol.h2asyncio.Http2Protocol`). The gRPC layer
(:mod:`sonic.server.frontends.grpc_native`) subclasses :class:`Http2Connection` and fills in the four
``stream_*`` hooks.
"""

from __future__ import annotations

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
    """One client connection on asyncio."""
