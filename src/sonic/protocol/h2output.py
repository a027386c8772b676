"""Output side of an HTTP/2 connection core: the queue of bytes to send and send-side flow control.

A stream's DATA leaves as far as three windows allow: its own (``Stream.send_credit`` plus the peer's
SETTINGS_INITIAL_WINDOW_SIZE), the connection's, and the batch per :meth:`data_to_send` call. A stream
that must wait is parked where only the frame that can release it looks:

- waiting on the *connection* (its window, the transport's pause, the batch): ``_blocked``, in order;
  a connection WINDOW_UPDATE serves them from the front until that window is spent again;
- waiting on *its own* window: ``_parked``, and a heap by credit; its WINDOW_UPDATE releases it alone,
  and a larger SETTINGS_INITIAL_WINDOW_SIZE pops only the streams whose window became positive.

So no frame walks every stream (issue 12: 5,000 parked streams made each connection WINDOW_UPDATE or
SETTINGS cost 2-6 ms).
"""

from __future__ import annotations

import heapq

from sonic.protocol.http2 import (
    DEFAULT_MAX_FRAME_BYTES,
    DEFAULT_WINDOW_BYTES,
    Flag,
    FrameType,
    Stream,
    frame,
    frame_header,
)


class Http2Output:
    """The queue and the windows. Subclasses provide ``_finish`` and ``_emit_header_block``."""

    # DATA queued per data_to_send() call, at most (None: all the windows allow). Python 3.11's
    # transports join a writelines() into one copy and keep what the socket did not take in a
    # bytearray trimmed from the front, which costs O(n^2) memmove for a 15 MB message; a bounded
    # batch per loop iteration, paused by the transport's high-water mark, leaves the socket paced.
    write_batch_bytes: int | None = None

    def __init__(self) -> None:
        self._out: list[bytes | memoryview] = []
        self._batch_bytes = 0  # DATA bytes queued since the last data_to_send()
        self._queued_control = 0  # control frames queued since the last data_to_send()
        self._data_frames = 0  # DATA frames sent in all (the budget of the peer's control frames)
        self._paused = False
        self._send_window = DEFAULT_WINDOW_BYTES
        self._peer_initial_window = DEFAULT_WINDOW_BYTES
        self._peer_max_frame = DEFAULT_MAX_FRAME_BYTES
        self._blocked: dict[int, Stream] = {}  # waiting on the connection, in order
        self._parked: dict[int, Stream] = {}  # waiting on their own window
        self._parked_heap: list[tuple[int, int]] = []  # (send_credit, stream id); stale entries skipped

    def _finish(self, stream: Stream) -> None:
        raise NotImplementedError

    def _emit_header_block(self, stream_id: int, block: bytes, *, end_stream: bool) -> None:
        raise NotImplementedError

    def _output_ready(self) -> None:
        raise NotImplementedError

    def _emit(self, data: bytes | memoryview) -> None:
        if not self._out:
            self._output_ready()
        self._out.append(data)

    def pause_output(self, paused: bool) -> None:
        """The transport's buffer is full (True) or drained (False): DATA waits meanwhile."""
        self._paused = paused
        if not paused:
            self._flush_blocked()

    def respond(self, stream: Stream, data: list[bytes | memoryview], trailers: bytes | None = None) -> None:
        """DATA as flow control allows, then (when given) the end of the stream: see Stream.trailers."""
        if stream.local_closed:
            return
        # Bytes views are bytes already; an array's view (format "f", ...) is cast to count bytes.
        stream.pending.extend(
            memoryview(piece) if isinstance(piece, bytes) else memoryview(piece).cast("B") for piece in data
        )
        if trailers is not None:
            stream.trailers = trailers
        self._flush(stream)

    def _flush(self, stream: Stream) -> None:
        pending = stream.pending
        while pending:
            window = stream.send_credit + self._peer_initial_window
            if window <= 0:
                self._park(stream)
                return
            batch = self.write_batch_bytes
            if self._send_window <= 0 or self._paused or (batch is not None and self._batch_bytes >= batch):
                self._blocked[stream.stream_id] = stream
                return
            allowed = min(window, self._send_window, self._peer_max_frame)
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
            self._send_window -= size
            self._batch_bytes += size
            self._data_frames += 1
            # The last DATA of a request carries END_STREAM itself, saving a frame.
            end = Flag.END_STREAM if not pending and stream.trailers == b"" else 0
            self._emit(frame_header(FrameType.DATA, end, stream.stream_id, size))
            self._out += pieces  # after the header: the output is already announced
            if end:
                stream.trailers = None
                self._finish(stream)
        if stream.trailers is not None:
            if stream.trailers:
                self._emit_header_block(stream.stream_id, stream.trailers, end_stream=True)
            else:
                self._emit(frame(FrameType.DATA, Flag.END_STREAM, stream.stream_id))
            stream.trailers = None
            self._finish(stream)

    def _park(self, stream: Stream) -> None:
        self._parked[stream.stream_id] = stream
        heapq.heappush(self._parked_heap, (stream.send_credit, stream.stream_id))
        if len(self._parked_heap) > 2 * len(self._parked) + 64:  # drop stale entries now and then
            self._parked_heap = [(s.send_credit, i) for i, s in self._parked.items()]
            heapq.heapify(self._parked_heap)

    def _flush_blocked(self) -> None:
        """Streams waiting on the connection, from the front, while the connection lets them."""
        blocked = self._blocked
        batch = self.write_batch_bytes
        while blocked and self._send_window > 0 and not self._paused:
            if batch is not None and self._batch_bytes >= batch:
                return
            stream_id = next(iter(blocked))
            self._flush(blocked.pop(stream_id))

    def _stream_window_opened(self, stream: Stream) -> None:
        """Its WINDOW_UPDATE: only this stream is revisited."""
        self._parked.pop(stream.stream_id, None)
        if (stream.pending or stream.trailers is not None) and stream.stream_id not in self._blocked:
            self._flush(stream)

    def _set_peer_initial_window(self, value: int) -> None:
        """SETTINGS_INITIAL_WINDOW_SIZE: every stream's window moves by the change, in O(1)."""
        self._peer_initial_window = value
        heap, parked = self._parked_heap, self._parked
        while heap and heap[0][0] + value > 0:
            credit, stream_id = heapq.heappop(heap)
            stream = parked.get(stream_id)
            if stream is not None and stream.send_credit == credit:
                del parked[stream_id]
                self._flush(stream)

    def _unblock(self, stream: Stream) -> None:
        self._blocked.pop(stream.stream_id, None)
        self._parked.pop(stream.stream_id, None)

    def _forget_all_blocked(self) -> None:
        self._blocked.clear()
        self._parked.clear()
        self._parked_heap.clear()
