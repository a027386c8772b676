"""One HTTP/2 connection (RFC 9113), sans I/O, for either end: frames, flow control, streams, limits.

Bytes go in through :meth:`Http2Core.receive_data`; what they cause comes out as calls of the
``stream_*`` hooks (the events) and as bytes from :meth:`Http2Core.data_to_send`. There is no socket,
loop or clock in here: timers are deadlines (:meth:`next_deadline`) that the one asyncio adapter
(:mod:`sonic.protocol.h2asyncio`) arms and reports back with :meth:`on_timer`, and the adapter learns
that output is waiting from :meth:`_output_ready`. Roles fill in what differs: who opens streams
(``_headers_done``), what ends one (``_finish``), GOAWAY.

Written for the request rates of small inference calls: a frame is parsed in place from the received
bytes, a DATA payload goes straight to its stream, header blocks that leave the HPACK table alone are
decoded once and remembered (bounded: :class:`~sonic.protocol.http2.HeaderDecoder`), and everything
queued between two :meth:`data_to_send` calls leaves together. Every per-frame cost is O(1): flow
control revisits only streams whose window opened (:mod:`sonic.protocol.h2output`), and floods of frames
that cost work without progress are counted against :class:`~sonic.protocol.h2limits.Http2Limits`.
"""

from __future__ import annotations

import logging
import struct

from sonic.protocol.h2limits import Http2Limits, MemoBudget
from sonic.protocol.h2output import Http2Output
from sonic.protocol.h2timers import ConnectionTimers, TimerAction
from sonic.protocol.http2 import (
    DEFAULT_MAX_FRAME_BYTES,
    DEFAULT_WINDOW_BYTES,
    FRAME_HEADER,
    FRAME_HEADER_BYTES,
    MAX_FRAME_BYTES_LIMIT,
    MAX_WINDOW_BYTES,
    PREFACE,
    ErrorCode,
    Flag,
    FrameType,
    HeaderDecoder,
    ProtocolError,
    Setting,
    Stream,
    frame,
    goaway,
    rst_stream,
    settings_frame,
    window_update,
)

log = logging.getLogger(__name__)

STREAM_WINDOW_BYTES = 1 << 26  # what each stream may send before our WINDOW_UPDATE
CONNECTION_WINDOW_BYTES = 1 << 30
MAX_FRAME_BYTES = 1 << 20  # largest frame we accept: big tensors arrive in few frames
MAX_SETTINGS_PER_FRAME = 64  # RFC 9113 defines 6; a 1 MiB frame of 174,000 would cost ~50 ms


class Http2Core(Http2Output):
    """What both ends of a connection do alike. Roles send their preface and SETTINGS (``start``)."""

    def __init__(
        self, *, expect_preface: bool, limits: Http2Limits, memo_budget: MemoBudget | None = None
    ) -> None:
        super().__init__()
        self.limits = limits
        self.timers = ConnectionTimers(limits)
        self._buffer = bytearray()
        self._preface_seen = not expect_preface
        self._headers = HeaderDecoder(
            max_header_list_bytes=limits.max_header_list_bytes,
            max_table_size_updates=limits.max_table_size_updates,
            memo_bytes=limits.memo_bytes,
            budget=memo_budget,
        )
        # A header block being assembled: stream, HEADERS flags, block so far, CONTINUATION frames.
        self._continuation: tuple[int, int, bytearray] | None = None
        self._continuations = 0
        self._data_left = 0  # bytes of a DATA payload still to arrive, routed straight to its stream
        self._data_stream: Stream | None = None
        self._data_end = False
        self.streams: dict[int, Stream] = {}
        self._last_stream_id = 0  # the highest stream id opened, by the peer (server) or by us (client)
        self._peer_max_streams = 1 << 31  # unlimited until its SETTINGS say otherwise
        self._recv_unacked = 0
        # Accounting against the limits (counts, never time).
        self._streams_opened = 0  # by the peer
        self._streams_completed = 0
        self._premature_resets = 0
        self._empty_frames = 0
        self._priority_frames = 0
        self._control_frames_in = 0
        self.closing = False  # GOAWAY sent or received: no new streams
        self.close_wanted = False  # the adapter closes the transport once the output is written
        self.abort_wanted = False  # ... or drops it at once (a peer we will not wait for)

    # --- hooks for the application, the role and the adapter ----------------------------------------

    def stream_data(self, stream: Stream, data: memoryview) -> None:
        raise NotImplementedError

    def stream_ended(self, stream: Stream) -> None:
        """The peer sent END_STREAM."""
        raise NotImplementedError

    def stream_reset(self, stream: Stream) -> None:
        """The stream is gone before we finished it (RST_STREAM, connection lost)."""
        raise NotImplementedError

    def _headers_done(self, stream_id: int, flags: int, block: bytes) -> None:
        raise NotImplementedError

    def _finish(self, stream: Stream) -> None:
        """We sent END_STREAM."""
        raise NotImplementedError

    def goaway_received(self, last_stream_id: int, code: int) -> None:
        raise NotImplementedError

    def start(self) -> None:
        """Our side's opening: preface (client) and SETTINGS."""
        raise NotImplementedError

    def _output_ready(self) -> None:
        """Output is waiting (after none was): the adapter schedules a :meth:`data_to_send`."""

    # --- bytes in, bytes out -------------------------------------------------------------------------

    def _send_settings(self, extra: dict[Setting, int]) -> None:
        settings = {
            Setting.INITIAL_WINDOW_SIZE: STREAM_WINDOW_BYTES,
            Setting.MAX_FRAME_SIZE: MAX_FRAME_BYTES,
            Setting.MAX_HEADER_LIST_SIZE: self.limits.max_header_list_bytes,
            Setting.ENABLE_PUSH: 0,
        }
        settings.update(extra)
        self._emit(settings_frame(settings))
        self._emit(window_update(0, CONNECTION_WINDOW_BYTES - DEFAULT_WINDOW_BYTES))

    def receive_data(self, data: bytes) -> None:
        """Bytes from the peer. A connection error queues GOAWAY and asks the adapter to close."""
        self.timers.active = True
        try:
            if self._buffer:
                self._buffer += data
                with memoryview(self._buffer) as view:
                    used = self._parse(view)
                del self._buffer[:used]
            else:
                with memoryview(data) as view:
                    used = self._parse(view)
                if used < len(data):
                    self._buffer += data[used:]
        except ProtocolError as exc:
            self.connection_error(exc)

    def connection_error(self, exc: ProtocolError) -> None:
        log.info("HTTP/2 connection error with %s: %s", self.peer, exc)
        self._emit(goaway(self._last_stream_id, exc.code, str(exc)))
        if exc.code == ErrorCode.ENHANCE_YOUR_CALM:
            self.abort_wanted = True  # an abusive peer: its unread output is not waited for
        self._close()

    def data_to_send(self) -> list[bytes | memoryview]:
        """Everything queued since the last call; the next batch of DATA is queued behind it."""
        out, self._out = self._out, []
        self._queued_control = 0
        if self._batch_bytes:
            self._batch_bytes = 0
            self._flush_blocked()  # the next batch, taken on the next call
        return out

    def next_deadline(self) -> float | None:
        """When :meth:`on_timer` is next due (the adapter's clock), None when never."""
        return self.timers.next_deadline()

    def start_timers(self, now: float) -> None:
        self.timers.start(now)

    def on_timer(self, now: float) -> None:
        for action in self.timers.due(now, has_streams=bool(self.streams)):
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

    def transport_lost(self) -> None:
        """The transport is gone: every open stream is reset for its application."""
        streams = list(self.streams.values())
        self.streams.clear()
        self._forget_all_blocked()
        self._headers.clear()
        for stream in streams:
            self.stream_reset(stream)

    @property
    def peer(self) -> str:
        return "unknown"

    def _close(self) -> None:
        self.closing = True
        self.close_wanted = True
        self._output_ready()

    # --- output helpers ------------------------------------------------------------------------------

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

    def _forget(self, stream: Stream) -> None:
        self.streams.pop(stream.stream_id, None)
        self._unblock(stream)
        if self.closing and not self.streams:
            self._close()

    # --- input -------------------------------------------------------------------------------------------

    def _parse(self, view: memoryview) -> int:
        """Handle every whole frame in ``view``; returns how many bytes were used."""
        pos = 0
        end = len(view)
        if self._data_left:
            pos = self._data_continues(view)
            if self._data_left:
                return pos
        if not self._preface_seen:
            if end - pos < len(PREFACE):
                return pos
            if view[pos : pos + len(PREFACE)] != PREFACE:
                raise ProtocolError(ErrorCode.PROTOCOL_ERROR, "not an HTTP/2 client (bad connection preface)")
            self._preface_seen = True
            pos += len(PREFACE)
        while end - pos >= FRAME_HEADER_BYTES and not self.close_wanted:
            high, low, frame_type, flags, stream_id = FRAME_HEADER.unpack_from(view, pos)
            length = (high << 16) | low
            stream_id &= 0x7FFFFFFF
            if length > MAX_FRAME_BYTES:
                raise ProtocolError(
                    ErrorCode.FRAME_SIZE_ERROR, f"frame of {length} bytes > {MAX_FRAME_BYTES}"
                )
            if self._continuation is not None and frame_type != FrameType.CONTINUATION:
                raise ProtocolError(ErrorCode.PROTOCOL_ERROR, "expected CONTINUATION")
            body = pos + FRAME_HEADER_BYTES
            if frame_type == FrameType.DATA and not flags & Flag.PADDED and end - body < length:
                # A large DATA frame: what is here goes to the stream now, the rest as it arrives.
                self._data_started(stream_id, flags, length)
                self._data_left = length
                return self._data_continues(view[body:]) + body
            if end - body < length:
                break
            payload = view[body : body + length]
            pos = body + length
            if frame_type == FrameType.DATA:
                self._on_data(stream_id, flags, payload, length)
            elif frame_type == FrameType.HEADERS:
                self._on_headers(stream_id, flags, payload)
            elif frame_type == FrameType.CONTINUATION:
                self._on_continuation(stream_id, flags, payload)
            else:
                self._on_control(frame_type, flags, stream_id, payload)
        return pos

    def _data_started(self, stream_id: int, flags: int, length: int) -> None:
        self._count_received(length)
        stream = self._open_stream_for_data(stream_id)
        if stream is not None:
            stream.recv_unacked += length
        self._data_stream = stream
        self._data_end = bool(flags & Flag.END_STREAM)
        self._empty_frames = 0

    def _data_continues(self, view: memoryview) -> int:
        take = min(len(view), self._data_left)
        stream = self._data_stream
        if stream is not None and take:
            self.stream_data(stream, view[:take])
        self._data_left -= take
        if not self._data_left:
            self._data_stream = None
            if stream is not None:
                self._after_data(stream, self._data_end)
        return take

    def _on_data(self, stream_id: int, flags: int, payload: memoryview, length: int) -> None:
        self._count_received(length)
        stream = self._open_stream_for_data(stream_id)
        if flags & Flag.PADDED:
            if not length or payload[0] >= length:
                raise ProtocolError(ErrorCode.PROTOCOL_ERROR, "DATA padding longer than the frame")
            payload = payload[1 : length - payload[0]]
        if payload:
            self._empty_frames = 0
        elif not flags & Flag.END_STREAM:
            self._count_empty_frame()
        if stream is None:
            return
        stream.recv_unacked += length
        if payload:
            self.stream_data(stream, payload)
        self._after_data(stream, bool(flags & Flag.END_STREAM))

    def _count_empty_frame(self) -> None:
        self._empty_frames += 1
        if self._empty_frames > self.limits.max_consecutive_empty_frames:
            msg = f"more than {self.limits.max_consecutive_empty_frames} empty frames in a row"
            raise ProtocolError(ErrorCode.ENHANCE_YOUR_CALM, msg)

    def _open_stream_for_data(self, stream_id: int) -> Stream | None:
        if stream_id == 0:
            raise ProtocolError(ErrorCode.PROTOCOL_ERROR, "DATA on stream 0")
        stream = self.streams.get(stream_id)
        if stream is None and stream_id > self._last_stream_id:
            raise ProtocolError(ErrorCode.PROTOCOL_ERROR, f"DATA on idle stream {stream_id}")
        if stream is not None and stream.remote_closed:
            self.reset(stream, ErrorCode.STREAM_CLOSED)
            return None
        return stream  # None: a stream we already closed; its data is dropped

    def _after_data(self, stream: Stream, end_stream: bool) -> None:
        if end_stream:
            stream.remote_closed = True
            self.stream_ended(stream)
            if stream.local_closed:
                self._forget(stream)
        elif stream.recv_unacked > STREAM_WINDOW_BYTES // 2 and not stream.local_closed:
            self._emit_control(window_update(stream.stream_id, stream.recv_unacked))
            stream.recv_unacked = 0

    def _count_received(self, length: int) -> None:
        self._recv_unacked += length
        if self._recv_unacked > CONNECTION_WINDOW_BYTES // 2:
            self._emit_control(window_update(0, self._recv_unacked))
            self._recv_unacked = 0

    def _on_headers(self, stream_id: int, flags: int, payload: memoryview) -> None:
        if stream_id == 0 or stream_id % 2 == 0:
            raise ProtocolError(ErrorCode.PROTOCOL_ERROR, f"HEADERS on stream {stream_id}")
        start, stop = 0, len(payload)
        if flags & Flag.PADDED:
            start = 1
            stop -= payload[0]
        if flags & Flag.PRIORITY:
            start += 5
        if start > stop:
            raise ProtocolError(ErrorCode.PROTOCOL_ERROR, "HEADERS padding longer than the frame")
        self._check_block_size(stop - start)
        if flags & Flag.END_HEADERS:
            self._empty_frames = 0
            self._headers_done(stream_id, flags, bytes(payload[start:stop]))
        else:
            if start == stop:
                self._count_empty_frame()
            self._continuation = (stream_id, flags, bytearray(payload[start:stop]))
            self._continuations = 0

    def _check_block_size(self, size: int) -> None:
        if size > self.limits.max_header_block_bytes:
            msg = f"header block of more than {self.limits.max_header_block_bytes} bytes"
            raise ProtocolError(ErrorCode.ENHANCE_YOUR_CALM, msg)

    def _on_continuation(self, stream_id: int, flags: int, payload: memoryview) -> None:
        if self._continuation is None or self._continuation[0] != stream_id:
            raise ProtocolError(ErrorCode.PROTOCOL_ERROR, "CONTINUATION without HEADERS")
        self._continuations += 1
        if self._continuations > self.limits.max_continuation_frames:
            msg = f"more than {self.limits.max_continuation_frames} CONTINUATION frames in one header block"
            raise ProtocolError(ErrorCode.ENHANCE_YOUR_CALM, msg)
        if not payload and not flags & Flag.END_HEADERS:
            self._count_empty_frame()
        block = self._continuation[2]
        block += payload
        self._check_block_size(len(block))
        if flags & Flag.END_HEADERS:
            first_flags = self._continuation[1]
            self._continuation = None
            self._headers_done(stream_id, first_flags, bytes(block))

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
