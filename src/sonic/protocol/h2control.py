"""Connection state and control frames of an HTTP/2 core (RFC 9113 section 6): SETTINGS, PING,
WINDOW_UPDATE, RST_STREAM, GOAWAY, PRIORITY, with the accounting that bounds each kind of flood.

:class:`Http2Control` is the base of :class:`sonic.protocol.h2connection.Http2Core` (which adds frame
parsing, DATA and header blocks); what the counts are measured against is
:class:`sonic.protocol.h2limits.Http2Limits`.
"""

from __future__ import annotations

import logging
import struct
from collections import deque

from sonic.protocol.h2limits import Http2Limits
from sonic.protocol.h2output import Http2Output
from sonic.protocol.h2timers import ConnectionTimers, TimerAction
from sonic.protocol.http2 import (
    DEFAULT_MAX_FRAME_BYTES,
    MAX_FRAME_BYTES_LIMIT,
    MAX_WINDOW_BYTES,
    ErrorCode,
    Flag,
    FrameType,
    ProtocolError,
    Setting,
    Stream,
    frame,
    goaway,
    rst_stream,
)

log = logging.getLogger("sonic.protocol.h2connection")

MAX_SETTINGS_PER_FRAME = 64  # RFC 9113 defines 6; a 1 MiB frame of 174,000 would cost ~50 ms


class ClosedStreams:
    """Ids of recently closed streams, and which of them we reset ourselves.

    RFC 9113 section 5.1: frames that arrive after we sent RST_STREAM are ignored (they may have been in
    flight); other frames on a closed stream are a STREAM_CLOSED error; a HEADERS frame on a lower id
    that was never opened is a PROTOCOL_ERROR. Bounded: the oldest ids are forgotten first.
    """

    def __init__(self, capacity: int) -> None:
        self._capacity = capacity
        self._order: deque[int] = deque()
        self._reset_by_us: dict[int, bool] = {}

    def add(self, stream_id: int, *, reset_by_us: bool) -> None:
        known = self._reset_by_us.get(stream_id)  # one lookup: this runs for every stream
        if known:
            return
        self._reset_by_us[stream_id] = reset_by_us
        if known is None:
            self._order.append(stream_id)
            if len(self._order) > self._capacity:
                del self._reset_by_us[self._order.popleft()]

    def __contains__(self, stream_id: int) -> bool:
        return stream_id in self._reset_by_us

    def reset_by_us(self, stream_id: int) -> bool:
        return self._reset_by_us.get(stream_id, False)


class Http2Control(Http2Output):
    """Streams, closing state, control frames and the limits' counters, for either end."""

    def __init__(self, limits: Http2Limits) -> None:
        super().__init__()
        self.limits = limits
        self.timers = ConnectionTimers(limits)
        self.streams: dict[int, Stream] = {}
        self.closed_streams = ClosedStreams(limits.closed_streams_remembered)
        self._last_stream_id = 0  # the highest stream id opened, by the peer (server) or by us (client)
        self._peer_max_streams = 1 << 31  # unlimited until its SETTINGS say otherwise
        # Accounting against the limits (counts, never time).
        self._streams_opened = 0  # by the peer
        self._streams_completed = 0
        self._premature_resets = 0
        self._priority_frames = 0
        self._control_frames_in = 0
        self.closing = False  # GOAWAY sent or received: no new streams
        self.close_wanted = False  # the adapter closes the transport once the output is written
        self.abort_wanted = False  # ... or drops it at once (a peer we will not wait for)

    def stream_reset(self, stream: Stream) -> None:
        """The stream is gone before we finished it (RST_STREAM, connection lost)."""
        raise NotImplementedError

    def _finish(self, stream: Stream) -> None:
        """We sent END_STREAM."""
        raise NotImplementedError

    def goaway_received(self, last_stream_id: int, code: int) -> None:
        raise NotImplementedError

    def _output_ready(self) -> None:
        """Output is waiting (after none was): the adapter schedules a :meth:`data_to_send`."""

    def connection_error(self, exc: ProtocolError) -> None:
        log.info("HTTP/2 connection error with %s: %s", self.peer, exc)
        self._emit(goaway(self._last_stream_id, exc.code, str(exc)))
        if exc.code == ErrorCode.ENHANCE_YOUR_CALM:
            self.abort_wanted = True  # an abusive peer: its unread output is not waited for
        self._close()

    def next_deadline(self) -> float | None:
        """When :meth:`on_timer` is next due (the adapter's clock), None when never."""
        return self.timers.next_deadline()

    def start_timers(self, now: float) -> None:
        self.timers.start(now)

    def on_timer(self, now: float) -> None:
        due = self.timers.due(now, has_streams=bool(self.streams), last_stream_id=self._last_stream_id)
        for action in due:
            if action is TimerAction.PING:
                self._emit(frame(FrameType.PING, 0, 0, self.timers.ping_payload))
            elif action is TimerAction.PING_TIMEOUT:
                log.info(
                    "HTTP/2 connection with %s: no PING answer within %s s",
                    self.peer,
                    self.limits.ping_timeout_s,
                )
                self.abort_wanted = True
                self._close()
            elif not self.closing:  # idle
                self._emit(goaway(self._last_stream_id, ErrorCode.NO_ERROR, "idle"))
                self._close()

    def _pong(self, payload: bytes) -> None:
        self.timers.pong(payload)

    @property
    def peer(self) -> str:
        return "unknown"

    def _close(self) -> None:
        self.closing = True
        self.close_wanted = True
        self._output_ready()

    def _emit_control(self, data: bytes) -> None:
        """A control frame we owe the peer (ACK, RST_STREAM, WINDOW_UPDATE): bounded while unread."""
        self._count_queued()
        self._emit(data)

    def _count_queued(self) -> None:
        self._queued_control += 1
        if self._queued_control > self.limits.max_queued_control_frames and not self.close_wanted:
            # Not raised: the application's answers come here too, outside receive_data.
            msg = f"more than {self.limits.max_queued_control_frames} frames queued and not read"
            self.connection_error(ProtocolError(ErrorCode.ENHANCE_YOUR_CALM, msg))

    def send_headers(self, stream: Stream, block: bytes, *, end_stream: bool = False) -> None:
        self._emit_header_block(stream.stream_id, block, end_stream=end_stream)
        if end_stream:
            self._finish(stream)

    def reset(self, stream: Stream, code: ErrorCode) -> None:
        if not stream.local_closed or not stream.remote_closed:
            self._emit(rst_stream(stream.stream_id, code))
            self.closed_streams.add(stream.stream_id, reset_by_us=True)
        stream.local_closed = stream.remote_closed = True
        stream.pending.clear()
        self._forget(stream)

    def _emit_header_block(self, stream_id: int, block: bytes, *, end_stream: bool) -> None:
        if self._paused:  # the peer is not reading: held answers count like held ACKs
            self._count_queued()
        limit = self._peer_max_frame
        flags = Flag.END_STREAM if end_stream else 0
        if len(block) <= limit:
            self._emit(frame(FrameType.HEADERS, flags | Flag.END_HEADERS, stream_id, block))
            return
        chunks = [block[i : i + limit] for i in range(0, len(block), limit)]
        self._emit(frame(FrameType.HEADERS, flags, stream_id, chunks[0]))
        for index, chunk in enumerate(chunks[1:], start=2):
            last = Flag.END_HEADERS if index == len(chunks) else 0
            self._emit(frame(FrameType.CONTINUATION, last, stream_id, chunk))

    def refuse(self, stream_id: int, code: ErrorCode) -> None:
        """RST_STREAM for a stream that never became a :class:`Stream` (refused, malformed)."""
        self._emit_control(rst_stream(stream_id, code))
        self.closed_streams.add(stream_id, reset_by_us=True)

    def _forget(self, stream: Stream) -> None:
        self.closed_streams.add(stream.stream_id, reset_by_us=False)
        self.streams.pop(stream.stream_id, None)
        self._unblock(stream)
        if self.closing and not self.streams:
            self._close()

    def _count_control_frame(self) -> None:
        """SETTINGS, WINDOW_UPDATE, unknown types: free for the peer to send, so budgeted per DATA we send."""
        self._control_frames_in += 1
        limits = self.limits
        allowed = (
            limits.control_frame_allowance + limits.max_window_updates_per_data_frame * self._data_frames
        )
        if self._control_frames_in > allowed:
            msg = f"{self._control_frames_in} SETTINGS/WINDOW_UPDATE frames for {self._data_frames} DATA sent"
            raise ProtocolError(ErrorCode.ENHANCE_YOUR_CALM, msg)

    def _count_reset(self) -> None:
        """A stream reset before its response (by the peer, or refused): rapid reset is budgeted."""
        self._premature_resets += 1
        if self._premature_resets > self.limits.rapid_reset_budget + self._streams_completed:
            msg = f"{self._premature_resets} streams reset early, {self._streams_completed} completed"
            raise ProtocolError(ErrorCode.ENHANCE_YOUR_CALM, msg)

    def _on_control(self, frame_type: int, flags: int, stream_id: int, payload: memoryview) -> None:
        if frame_type == FrameType.SETTINGS:
            if stream_id != 0:
                raise ProtocolError(ErrorCode.PROTOCOL_ERROR, "SETTINGS on a stream")
            if len(payload) % 6 or (flags & Flag.ACK and payload):
                raise ProtocolError(ErrorCode.FRAME_SIZE_ERROR, "SETTINGS of a wrong length")
            if not flags & Flag.ACK:
                self._count_control_frame()
                if len(payload) > 6 * MAX_SETTINGS_PER_FRAME:
                    msg = f"SETTINGS with more than {MAX_SETTINGS_PER_FRAME} entries"
                    raise ProtocolError(ErrorCode.ENHANCE_YOUR_CALM, msg)
                self._apply_settings(payload)
                self._emit_control(frame(FrameType.SETTINGS, Flag.ACK, 0))
        elif frame_type == FrameType.PING:
            if stream_id != 0:
                raise ProtocolError(ErrorCode.PROTOCOL_ERROR, "PING on a stream")
            if len(payload) != 8:
                raise ProtocolError(ErrorCode.FRAME_SIZE_ERROR, "PING of a wrong length")
            if flags & Flag.ACK:
                self._pong(bytes(payload))
            else:  # bounded by the queue of ACKs the peer must read (max_queued_control_frames)
                self._emit_control(frame(FrameType.PING, Flag.ACK, 0, bytes(payload)))
        elif frame_type == FrameType.WINDOW_UPDATE:
            self._count_control_frame()
            self._on_window_update(stream_id, payload)
        elif frame_type == FrameType.RST_STREAM:
            self._on_rst_stream(stream_id, payload)
        elif frame_type == FrameType.GOAWAY:
            if stream_id != 0:
                raise ProtocolError(ErrorCode.PROTOCOL_ERROR, "GOAWAY on a stream")
            if len(payload) < 8:
                raise ProtocolError(ErrorCode.FRAME_SIZE_ERROR, "GOAWAY shorter than 8 bytes")
            last_stream_id, code = struct.unpack_from(">II", payload)
            self.goaway_received(last_stream_id & 0x7FFFFFFF, code)
        elif frame_type == FrameType.PUSH_PROMISE:
            raise ProtocolError(ErrorCode.PROTOCOL_ERROR, "PUSH_PROMISE, but push is disabled")
        elif frame_type == FrameType.PRIORITY:
            if stream_id == 0:
                raise ProtocolError(ErrorCode.PROTOCOL_ERROR, "PRIORITY on stream 0")
            if len(payload) != 5:
                raise ProtocolError(ErrorCode.FRAME_SIZE_ERROR, "PRIORITY of a wrong length")
            self._priority_frames += 1
            if self._priority_frames > self.limits.max_priority_frames_per_stream * (
                1 + self._streams_opened
            ):
                raise ProtocolError(ErrorCode.ENHANCE_YOUR_CALM, "too many PRIORITY frames")
        else:  # unknown frame types are ignored, as RFC 9113 asks, but not for free
            self._count_control_frame()

    def _on_rst_stream(self, stream_id: int, payload: memoryview) -> None:
        if stream_id == 0:
            raise ProtocolError(ErrorCode.PROTOCOL_ERROR, "RST_STREAM on stream 0")
        if len(payload) != 4:
            raise ProtocolError(ErrorCode.FRAME_SIZE_ERROR, "RST_STREAM of a wrong length")
        if stream_id > self._last_stream_id:
            raise ProtocolError(ErrorCode.PROTOCOL_ERROR, f"RST_STREAM on idle stream {stream_id}")
        stream = self.streams.get(stream_id)
        if stream is None:
            return
        if not stream.local_closed:
            self._count_reset()
        stream.local_closed = stream.remote_closed = True
        stream.pending.clear()
        stream.reset_code = struct.unpack_from(">I", payload)[0]
        self._forget(stream)
        self.stream_reset(stream)

    def _apply_settings(self, payload: memoryview) -> None:
        for offset in range(0, len(payload), 6):
            key, value = struct.unpack_from(">HI", payload, offset)
            if key == Setting.INITIAL_WINDOW_SIZE:
                if value > MAX_WINDOW_BYTES:
                    raise ProtocolError(ErrorCode.FLOW_CONTROL_ERROR, "INITIAL_WINDOW_SIZE too large")
                self._set_peer_initial_window(value)
            elif key == Setting.MAX_FRAME_SIZE:
                if not DEFAULT_MAX_FRAME_BYTES <= value <= MAX_FRAME_BYTES_LIMIT:
                    raise ProtocolError(ErrorCode.PROTOCOL_ERROR, f"MAX_FRAME_SIZE {value} out of range")
                self._peer_max_frame = value
            elif key == Setting.MAX_CONCURRENT_STREAMS:
                self._peer_max_streams = value
            elif key == Setting.ENABLE_PUSH and value > 1:
                raise ProtocolError(ErrorCode.PROTOCOL_ERROR, f"ENABLE_PUSH {value} is not 0 or 1")
        self._flush_blocked()

    def _on_window_update(self, stream_id: int, payload: memoryview) -> None:
        if len(payload) != 4:
            raise ProtocolError(ErrorCode.FRAME_SIZE_ERROR, "WINDOW_UPDATE of the wrong size")
        increment = struct.unpack_from(">I", payload)[0] & 0x7FFFFFFF
        if stream_id == 0:
            if increment == 0:
                raise ProtocolError(ErrorCode.PROTOCOL_ERROR, "WINDOW_UPDATE of 0")
            self._send_window += increment
            if self._send_window > MAX_WINDOW_BYTES:
                raise ProtocolError(ErrorCode.FLOW_CONTROL_ERROR, "connection window overflow")
            self._flush_blocked()
            return
        if stream_id > self._last_stream_id:
            raise ProtocolError(ErrorCode.PROTOCOL_ERROR, f"WINDOW_UPDATE on idle stream {stream_id}")
        stream = self.streams.get(stream_id)
        if stream is None:
            return
        if increment == 0:
            self.reset(stream, ErrorCode.PROTOCOL_ERROR)
            self.stream_reset(stream)
            return
        stream.send_credit += increment
        if stream.send_credit + self._peer_initial_window > MAX_WINDOW_BYTES:
            self.reset(stream, ErrorCode.FLOW_CONTROL_ERROR)
            self.stream_reset(stream)
            return
        self._stream_window_opened(stream)
