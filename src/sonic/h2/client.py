"""The client's role on one HTTP/2 connection, sans I/O: we open streams, the server answers and ends them.

:class:`ClientRole` holds its :class:`~sonic.h2.connection.Connection` core (``role.connection``) and does
what only a client does: the connection preface, stream ids (odd, growing, spent at 2**31), MAX_CONCURRENT_STREAMS
of the server, a response's headers and trailers passed to the :class:`~sonic.h2.events.Handler` (our
client's gRPC calls: :mod:`sonic.client.transport.h2_connection`), GOAWAY. Bytes in with
``connection.receive_data``, out with ``connection.data_to_send()``: tests drive it without a loop's
round trips; on asyncio it runs on :class:`sonic.h2.aio.H2Protocol`.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Generic, TypeVar

from sonic.h2.connection import Connection
from sonic.h2.events import Handler
from sonic.h2.frames import PREFACE, ErrorCode, Flag, ProtocolError
from sonic.h2.limits import CLIENT_LIMITS, Http2Limits
from sonic.h2.stream import CLOSED, RECV_END_STREAM, RECV_GOAWAY, SEND_END_STREAM, Stream

MAX_STREAM_ID = 0x7FFFFFFF
T = TypeVar("T")  # what the application hangs on a stream


class ClientRole(Generic[T]):
    """The client's end of one connection; ``connection`` is its core, ``handler`` hears the responses."""

    def __init__(
        self,
        handler: Handler[T],
        *,
        limits: Http2Limits = CLIENT_LIMITS,
        write_batch_bytes: int | None = None,
        stream_closed: Callable[[], None] | None = None,
    ) -> None:
        """``write_batch_bytes``: DATA queued per ``data_to_send()`` at most (None: all the windows
        allow; :mod:`sonic.h2.windows`); ``stream_closed``: called as a stream leaves the open ones
        (room for one more under the server's MAX_CONCURRENT_STREAMS)."""
        self.connection: Connection[T] = Connection(handler, self, expect_preface=False, limits=limits)
        self.connection.output.write_batch_bytes = write_batch_bytes
        self.connection.stream_closed = stream_closed
        self._handler = handler
        self._next_stream_id = 1

    @property
    def full(self) -> bool:
        """As many streams open as the server's MAX_CONCURRENT_STREAMS allows."""
        core = self.connection
        return len(core.streams) >= core.peer_max_streams

    @property
    def ids_left(self) -> bool:
        return self._next_stream_id <= MAX_STREAM_ID

    def open_stream(self, block: bytes, message: list[bytes | memoryview], app: T) -> Stream[T]:
        """A new stream (the application's object for it ``app``): HEADERS ``block``, then ``message`` as
        DATA with END_STREAM as flow control allows. The caller checks the connection's ``state`` and
        :attr:`ids_left` first; it ends the stream with ``connection.end`` once the answer is in."""
        core = self.connection
        stream_id = self._next_stream_id
        self._next_stream_id += 2
        core.last_stream_id = stream_id
        stream = Stream(stream_id, app)
        core.streams[stream_id] = stream
        core.output.emit_header_block(stream_id, block, end_stream=False)
        core.respond(stream, message, trailers=b"")
        return stream

    # --- the core's role ------------------------------------------------------------------------------

    def start(self) -> None:
        self.connection.output.emit(PREFACE)
        self.connection.send_settings({})

    def headers_done(self, stream_id: int, flags: int, block: bytes) -> None:
        core = self.connection
        headers = core.headers.decode(block)  # always: the HPACK table must stay in step
        stream = core.streams.get(stream_id)
        if stream is None:
            if stream_id > core.last_stream_id:
                raise ProtocolError(ErrorCode.PROTOCOL_ERROR, f"HEADERS on idle stream {stream_id}")
            return  # a call we already cancelled
        end_stream = bool(flags & Flag.END_STREAM)
        if end_stream:
            stream.apply(RECV_END_STREAM)
        self._handler.headers_received(stream, headers, end_stream)

    def finished(self, stream: Stream[T]) -> None:
        if stream.apply(SEND_END_STREAM) is CLOSED:
            self.connection.forget(stream)

    def goaway_received(self, last_stream_id: int, code: int) -> None:
        """No new streams; those above ``last_stream_id`` were not processed: they are forgotten without
        a frame and handed to the handler (to send again elsewhere). Closed once none is left."""
        core = self.connection
        core.stop_new_streams()
        unprocessed = [stream for stream in core.streams.values() if stream.stream_id > last_stream_id]
        for stream in unprocessed:
            self._drop(stream)
        self._handler.goaway_received(last_stream_id, code, unprocessed)
        if not core.streams:
            core.close()

    def _drop(self, stream: Stream[T]) -> None:
        """A stream the server will not process (above a GOAWAY's last id): forgotten without a frame."""
        core = self.connection
        core.streams.pop(stream.stream_id)
        core.output.unblock(stream)
        stream.apply(RECV_GOAWAY)
