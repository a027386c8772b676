"""Server side of one HTTP/2 connection: the peer opens streams, we answer and end them.

The frame handling, flow control and HPACK memo shared with the client are
:class:`sonic.protocol.h2connection.Http2Base`. The gRPC layer
(:mod:`sonic.server.frontends.grpc_native`) subclasses :class:`Http2Connection` and fills in the four
``stream_*`` hooks.
"""

from __future__ import annotations

import asyncio

from sonic.protocol.h2connection import Http2Base
from sonic.protocol.http2 import (
    ErrorCode,
    Flag,
    HeaderDecoder,
    Headers,
    ProtocolError,
    Setting,
    Stream,
    goaway,
    rst_stream,
)

__all__ = ["HeaderDecoder", "Headers", "Http2Connection", "Stream"]


class Http2Connection(Http2Base):
    """One client connection. Subclasses implement the ``stream_*`` hooks and answer with ``respond``."""

    def __init__(self, *, max_concurrent_streams: int | None = None) -> None:
        super().__init__(expect_preface=True)
        self._max_streams = max_concurrent_streams

    def stream_opened(self, stream: Stream, headers: Headers) -> None:
        raise NotImplementedError

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        super().connection_made(transport)
        extra = {} if self._max_streams is None else {Setting.MAX_CONCURRENT_STREAMS: self._max_streams}
        self._send_settings(extra)

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
        if not stream.remote_closed:
            self._emit(rst_stream(stream.stream_id, ErrorCode.NO_ERROR))
            stream.remote_closed = True
        self._forget(stream)

    def _headers_done(self, stream_id: int, flags: int, block: bytes) -> None:
        headers = self._headers.decode(block)  # always: the HPACK table must stay in step
        end_stream = bool(flags & Flag.END_STREAM)
        stream = self.streams.get(stream_id)
        if stream is not None:  # trailers from the client
            if not end_stream:
                raise ProtocolError(ErrorCode.PROTOCOL_ERROR, "second HEADERS without END_STREAM")
            self._after_data(stream, end_stream=True)
            return
        if stream_id <= self._last_stream_id:
            return  # a stream we already closed (e.g. reset): nothing to do
        self._last_stream_id = stream_id
        stream = Stream(stream_id, self._peer_initial_window)
        if self.closing or (self._max_streams is not None and len(self.streams) >= self._max_streams):
            self._emit(rst_stream(stream_id, ErrorCode.REFUSED_STREAM))
            return
        self.streams[stream_id] = stream
        stream.remote_closed = end_stream
        self.stream_opened(stream, headers)
        if end_stream and not stream.local_closed:
            self.stream_ended(stream)
