"""Flow control of one HTTP/2 connection: the queue of bytes to send with the send windows (:class:`Output`),
and the receive windows we give back (:class:`ReceiveWindows`).

Both are owned by the connection core (:class:`sonic.h2.connection.Connection`), which hands them what they
call back: the role's end of a stream we ended, the queue-bound count of a frame held while the peer does
not read, and (set by the adapter) "output is waiting".

A stream's DATA leaves as far as three windows allow: its own (``Stream.send_credit`` plus the peer's
SETTINGS_INITIAL_WINDOW_SIZE), the connection's, and the batch per :meth:`data_to_send` call. A stream
that must wait is parked where only the frame that can release it looks:

- waiting on the *connection* (its window, the transport's pause, the batch): ``blocked``, in order;
  a connection WINDOW_UPDATE serves them from the front until that window is spent again;
- waiting on *its own* window: ``_parked``, and a heap by credit; its WINDOW_UPDATE releases it alone,
  and a larger SETTINGS_INITIAL_WINDOW_SIZE pops only the streams whose window became positive.

So no frame walks every stream (issue 12: 5,000 parked streams made each connection WINDOW_UPDATE or
SETTINGS cost 2-6 ms).
"""

from __future__ import annotations

import heapq
from collections.abc import Callable
from typing import Generic, TypeVar

from sonic.h2.frames import (
    DEFAULT_MAX_FRAME_BYTES,
    DEFAULT_WINDOW_BYTES,
    MAX_WINDOW_BYTES,
    ErrorCode,
    Flag,
    FrameType,
    ProtocolError,
    frame,
    frame_header,
    window_update,
)
from sonic.h2.limits import Http2Limits
from sonic.h2.settings import STREAM_WINDOW_BYTES
from sonic.h2.stream import Stream

T = TypeVar("T")  # what the application hangs on a stream


def _nothing() -> None:
    """Output is waiting, and no adapter listens (a core driven by hand, as in tests)."""


class Output(Generic[T]):
    """The queue and the send windows of one connection."""

    def __init__(self, finished: Callable[[Stream[T]], None], count_queued: Callable[[], None]) -> None:
        # DATA queued per data_to_send() call, at most (None: all the windows allow). Python 3.11's
        # transports join a writelines() into one copy and keep what the socket did not take in a
        # bytearray trimmed from the front, which costs O(n^2) memmove for a 15 MB message; a bounded
        # batch per loop iteration, paused by the transport's high-water mark, leaves the socket paced.
        self.write_batch_bytes: int | None = None
        self._finished = finished  # we sent END_STREAM on a stream (the role's bookkeeping)
        self._count_queued = count_queued  # a frame held while the peer does not read (bounded)
        self.ready: Callable[[], None] = _nothing  # output is waiting after none was (the adapter's)
        self.out: list[bytes | memoryview] = []
        self._batch_bytes = 0  # DATA bytes queued since the last data_to_send()
        self.queued_control = 0  # control frames queued since the last data_to_send()
        self.data_frames = 0  # DATA frames sent in all (the budget of the peer's control frames)
        # Streams revisited (flush calls) in all: what shows that no frame walks every stream (tests).
        self.flushes = 0
        self.paused = False
        self.send_window = DEFAULT_WINDOW_BYTES
        self.peer_initial_window = DEFAULT_WINDOW_BYTES
        self.peer_max_frame = DEFAULT_MAX_FRAME_BYTES
        self.blocked: dict[int, Stream[T]] = {}  # waiting on the connection, in order
        self._parked: dict[int, Stream[T]] = {}  # waiting on their own window
        self._parked_heap: list[tuple[int, int]] = []  # (send_credit, stream id); stale entries skipped

    def emit(self, data: bytes | memoryview) -> None:
        if not self.out:
            self.ready()
        self.out.append(data)

    def take(self) -> list[bytes | memoryview]:
        """Everything queued since the last call; the next batch of DATA is queued behind it."""
        out, self.out = self.out, []
        self.queued_control = 0
        if self._batch_bytes:
            self._batch_bytes = 0
            self.flush_blocked()  # the next batch, taken on the next call
        return out

    def emit_header_block(self, stream_id: int, block: bytes, *, end_stream: bool) -> None:
        if self.paused:  # the peer is not reading: held answers count like held ACKs
            self._count_queued()
        limit = self.peer_max_frame
        flags = Flag.END_STREAM if end_stream else 0
        if len(block) <= limit:
            self.emit(frame(FrameType.HEADERS, flags | Flag.END_HEADERS, stream_id, block))
            return
        chunks = [block[i : i + limit] for i in range(0, len(block), limit)]
        self.emit(frame(FrameType.HEADERS, flags, stream_id, chunks[0]))
        for index, chunk in enumerate(chunks[1:], start=2):
            last = Flag.END_HEADERS if index == len(chunks) else 0
            self.emit(frame(FrameType.CONTINUATION, last, stream_id, chunk))

    def pause_output(self, paused: bool) -> None:
        """The transport's buffer is full (True) or drained (False): DATA waits meanwhile."""
        self.paused = paused
        if not paused:
            self.flush_blocked()

    def respond(
        self, stream: Stream[T], data: list[bytes | memoryview], trailers: bytes | None = None
    ) -> None:
        """DATA as flow control allows, then (when given) the end of the stream: see Stream.trailers."""
        if stream.local_closed:
            return
        # Bytes views are bytes already; an array's view (format "f", ...) is cast to count bytes.
        stream.pending.extend(
            memoryview(piece) if isinstance(piece, bytes) else memoryview(piece).cast("B") for piece in data
        )
        if trailers is not None:
            stream.trailers = trailers
        self.flush(stream)

    def flush(self, stream: Stream[T]) -> None:
        self.flushes += 1
        pending = stream.pending
        while pending:
            window = stream.send_credit + self.peer_initial_window
            if window <= 0:
                self._park(stream)
                return
            batch = self.write_batch_bytes
            if self.send_window <= 0 or self.paused or (batch is not None and self._batch_bytes >= batch):
                self.blocked[stream.stream_id] = stream
                return
            allowed = min(window, self.send_window, self.peer_max_frame)
            size = 0
            pieces: list[memoryview] = []
            while pending and size < allowed:
                piece = pending[0]
                take = min(len(piece), allowed - size)
                if take == len(piece):
                    pieces.append(pending.popleft())
                else:
                    pieces.append(piece[:take])
                    pending[0] = piece[take:]
                size += take
            stream.send_credit -= size
            self.send_window -= size
            self._batch_bytes += size
            self.data_frames += 1
            # The last DATA of a request carries END_STREAM itself, saving a frame.
            end = Flag.END_STREAM if not pending and stream.trailers == b"" else 0
            self.emit(frame_header(FrameType.DATA, end, stream.stream_id, size))
            self.out += pieces  # after the header: the output is already announced
            if end:
                stream.trailers = None
                self._finished(stream)
        if stream.trailers is not None:
            if stream.trailers:
                self.emit_header_block(stream.stream_id, stream.trailers, end_stream=True)
            else:
                self.emit(frame(FrameType.DATA, Flag.END_STREAM, stream.stream_id))
            stream.trailers = None
            self._finished(stream)
        if stream.drained is not None and not pending:  # someone waits for this stream's queue to empty
            drained, stream.drained = stream.drained, None
            drained()

    def _park(self, stream: Stream[T]) -> None:
        self._parked[stream.stream_id] = stream
        heapq.heappush(self._parked_heap, (stream.send_credit, stream.stream_id))
        if len(self._parked_heap) > 2 * len(self._parked) + 64:  # drop stale entries now and then
            self._parked_heap = [(s.send_credit, i) for i, s in self._parked.items()]
            heapq.heapify(self._parked_heap)

    def flush_blocked(self) -> None:
        """Streams waiting on the connection, from the front, while the connection lets them."""
        blocked = self.blocked
        batch = self.write_batch_bytes
        while blocked and self.send_window > 0 and not self.paused:
            if batch is not None and self._batch_bytes >= batch:
                return
            stream_id = next(iter(blocked))
            self.flush(blocked.pop(stream_id))

    def stream_window_opened(self, stream: Stream[T]) -> None:
        """Its WINDOW_UPDATE: only this stream is revisited."""
        self._parked.pop(stream.stream_id, None)
        if (stream.pending or stream.trailers is not None) and stream.stream_id not in self.blocked:
            self.flush(stream)

    def set_peer_initial_window(self, value: int) -> None:
        """SETTINGS_INITIAL_WINDOW_SIZE: every stream's window moves by the change, in O(1)."""
        self.peer_initial_window = value
        heap, parked = self._parked_heap, self._parked
        while heap and heap[0][0] + value > 0:
            credit, stream_id = heapq.heappop(heap)
            stream = parked.get(stream_id)
            if stream is not None and stream.send_credit == credit:
                del parked[stream_id]
                self.flush(stream)

    def connection_window_update(self, increment: int) -> None:
        """The peer's WINDOW_UPDATE on stream 0 (increment > 0)."""
        self.send_window += increment
        if self.send_window > MAX_WINDOW_BYTES:
            raise ProtocolError(ErrorCode.FLOW_CONTROL_ERROR, "connection window overflow")
        self.flush_blocked()

    def stream_window_update(self, stream: Stream[T], increment: int) -> ErrorCode | None:
        """The peer's WINDOW_UPDATE on ``stream``: None, or the code to reset the stream with."""
        if increment == 0:
            return ErrorCode.PROTOCOL_ERROR
        stream.send_credit += increment
        if stream.send_credit + self.peer_initial_window > MAX_WINDOW_BYTES:
            return ErrorCode.FLOW_CONTROL_ERROR
        self.stream_window_opened(stream)
        return None

    def unblock(self, stream: Stream[T]) -> None:
        self.blocked.pop(stream.stream_id, None)
        self._parked.pop(stream.stream_id, None)

    def forget_all_blocked(self) -> None:
        self.blocked.clear()
        self._parked.clear()
        self._parked_heap.clear()


class ReceiveWindows:
    """Receive-side flow control: the connection's window as we give it back (streams keep their own
    counts in :class:`~sonic.h2.stream.Stream`), one WINDOW_UPDATE once half a window is owed."""

    __slots__ = ("_emit_control", "_limit", "_released", "_unacked", "on_receipt", "stopped")

    def __init__(self, limits: Http2Limits, emit_control: Callable[[bytes], None]) -> None:
        self._limit = limits.connection_window_bytes
        self._emit_control = emit_control  # a WINDOW_UPDATE we owe: bounded while unread
        self._unacked = 0  # DATA received that our WINDOW_UPDATEs have not given back yet
        self._released = 0  # of those, released and not yet given back
        # True: DATA opens the windows again as soon as it is received. False: what the handler was passed
        # opens them only once the application acknowledges it (as python-hyper h2 does), so a server short
        # of buffer memory throttles a sender by flow control; what the core drops it gives back itself.
        self.on_receipt = True
        self.stopped = False  # the connection is closing: nothing more is given back

    def received(self, length: int) -> None:
        """A DATA frame of ``length`` bytes (padding included) arrived."""
        self._unacked += length
        if self._unacked > self._limit:
            raise ProtocolError(ErrorCode.FLOW_CONTROL_ERROR, "DATA beyond the connection window")
        if self.on_receipt:
            self.release_connection(length)

    def release_connection(self, size: int) -> None:
        self._released += size
        if self._released > self._limit // 2 and not self.stopped:
            self._emit_control(window_update(0, self._released))
            self._unacked -= self._released
            self._released = 0

    def release_stream(self, stream: Stream[T], size: int) -> None:
        stream.recv_released += size
        if (
            stream.recv_released > STREAM_WINDOW_BYTES // 2
            and not stream.local_closed
            and not stream.remote_closed
        ):
            self._emit_control(window_update(stream.stream_id, stream.recv_released))
            stream.recv_unacked -= stream.recv_released
            stream.recv_released = 0
