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
queued between two :meth:`data_to_send` calls leaves together. Receive windows are given back as DATA
arrives, or, with ``acknowledges_on_receipt`` off (the server under its request buffer budget), only as the
application calls :meth:`acknowledge_received_data`. Every per-frame cost is O(1): flow
control revisits only streams whose window opened (:mod:`sonic.protocol.h2output`), and floods of frames
that cost work without progress are counted against :class:`~sonic.protocol.h2limits.Http2Limits`
(control frames and the counters: :mod:`sonic.protocol.h2control`).
"""

from __future__ import annotations

from sonic.protocol.h2control import Http2Control
from sonic.protocol.h2limits import Http2Limits, MemoBudget
from sonic.protocol.http2 import (
    DEFAULT_WINDOW_BYTES,
    FRAME_HEADER,
    FRAME_HEADER_BYTES,
    PREFACE,
    ErrorCode,
    Flag,
    FrameType,
    HeaderDecoder,
    ProtocolError,
    Setting,
    Stream,
    settings_frame,
    window_update,
)

STREAM_WINDOW_BYTES = 1 << 26  # what each stream may send before our WINDOW_UPDATE
MAX_FRAME_BYTES = 1 << 20  # largest frame we accept: big tensors arrive in few frames


class Http2Core(Http2Control):
    """What both ends of a connection do alike. Roles send their preface and SETTINGS (``start``)."""

    def __init__(
        self, *, expect_preface: bool, limits: Http2Limits, memo_budget: MemoBudget | None = None
    ) -> None:
        super().__init__(limits)
        self._buffer = bytearray()
        self._preface_seen = not expect_preface
        self._headers = HeaderDecoder(
            max_header_list_bytes=limits.max_header_list_bytes,
            max_table_size_updates=limits.max_table_size_updates,
            memo_bytes=limits.memo_bytes,
            budget=memo_budget,
        )
        # A header block being assembled: stream, HEADERS flags, block so far; its CONTINUATION frames.
        self._continuation: tuple[int, int, bytearray] | None = None
        self._continuations = 0
        self._data_left = 0  # bytes of a DATA payload still to arrive, routed straight to its stream
        self._data_stream: Stream | None = None
        self._data_end = False
        self._recv_unacked = 0  # DATA received that our WINDOW_UPDATEs have not given back yet
        self._recv_released = 0  # of those, released and not yet given back
        self._empty_frames = 0  # frames without payload in a row
        # True: DATA opens the windows again as soon as it is received. False: what ``stream_data`` passed
        # on opens them only once the application calls :meth:`acknowledge_received_data` (as python-hyper
        # h2 does), so a server short of buffer memory throttles a sender by flow control; what the core
        # drops (padding, closed streams) it gives back itself.
        self.acknowledges_on_receipt = True

    # --- hooks for the application, the role and the adapter ----------------------------------------

    def stream_data(self, stream: Stream, data: memoryview) -> None:
        raise NotImplementedError

    def stream_ended(self, stream: Stream) -> None:
        """The peer sent END_STREAM."""
        raise NotImplementedError

    def _headers_done(self, stream_id: int, flags: int, block: bytes) -> None:
        raise NotImplementedError

    def start(self) -> None:
        """Our side's opening: preface (client) and SETTINGS."""
        raise NotImplementedError

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
        if self.limits.connection_window_bytes > DEFAULT_WINDOW_BYTES:
            self._emit(window_update(0, self.limits.connection_window_bytes - DEFAULT_WINDOW_BYTES))

    def acknowledge_received_data(self, stream: Stream, size: int) -> None:
        """``size`` bytes that :meth:`stream_data` passed on are released: the connection's and the stream's
        windows open again by as much (a WINDOW_UPDATE once half a window is owed). Only for an application
        that turned ``acknowledges_on_receipt`` off; every byte it was passed must come back here once."""
        self._release_connection(size)
        if self.streams.get(stream.stream_id) is stream:
            self._release_stream(stream, size)

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

    def data_to_send(self) -> list[bytes | memoryview]:
        """Everything queued since the last call; the next batch of DATA is queued behind it."""
        out, self._out = self._out, []
        self._queued_control = 0
        if self._batch_bytes:
            self._batch_bytes = 0
            self._flush_blocked()  # the next batch, taken on the next call
        return out

    def transport_lost(self) -> None:
        """The transport is gone: every open stream is reset for its application."""
        streams = list(self.streams.values())
        self.streams.clear()
        self._forget_all_blocked()
        self._headers.clear()
        for stream in streams:
            self.stream_reset(stream)

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
        if stream is not None and not self._within_window(stream, length):
            stream = None
        self._data_stream = stream
        self._data_end = bool(flags & Flag.END_STREAM)
        self._empty_frames = 0

    def _data_continues(self, view: memoryview) -> int:
        take = min(len(view), self._data_left)
        stream = self._data_stream
        if stream is not None and take:
            self.stream_data(stream, view[:take])
        elif take and not self.acknowledges_on_receipt:
            self._release_connection(take)  # dropped: nobody holds it
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
        if stream is None or not self._within_window(stream, length):
            if not self.acknowledges_on_receipt:
                self._release_connection(length)  # dropped: nobody holds it
            return
        if len(payload) < length and not self.acknowledges_on_receipt:  # padding
            self._release_connection(length - len(payload))
            self._release_stream(stream, length - len(payload))
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
        if stream is None and not self.closed_streams.reset_by_us(stream_id):
            # Closed without our RST_STREAM (ended both ways, or reset by the peer): RFC 9113 section 5.1
            # makes a late DATA a STREAM_CLOSED error; said once per stream, and budgeted like a reset.
            self.refuse(stream_id, ErrorCode.STREAM_CLOSED)
            self._count_reset()
        return stream  # None: a stream already closed; its data is dropped

    def _after_data(self, stream: Stream, end_stream: bool) -> None:
        if end_stream:
            stream.remote_closed = True
            self.stream_ended(stream)
            if stream.local_closed:
                self._forget(stream)
        elif (
            stream.recv_unacked > STREAM_WINDOW_BYTES // 2
            and not stream.local_closed
            and self.acknowledges_on_receipt
        ):
            self._emit_control(window_update(stream.stream_id, stream.recv_unacked))
            stream.recv_unacked = 0

    def _release_stream(self, stream: Stream, size: int) -> None:
        stream.recv_released += size
        if (
            stream.recv_released > STREAM_WINDOW_BYTES // 2
            and not stream.local_closed
            and not stream.remote_closed
        ):
            self._emit_control(window_update(stream.stream_id, stream.recv_released))
            stream.recv_unacked -= stream.recv_released
            stream.recv_released = 0

    def _within_window(self, stream: Stream, length: int) -> bool:
        """Count DATA against the stream's receive window; past it the stream is reset."""
        stream.recv_unacked += length
        if stream.recv_unacked <= STREAM_WINDOW_BYTES:
            return True
        self.reset(stream, ErrorCode.FLOW_CONTROL_ERROR)
        self.stream_reset(stream)
        return False

    def _count_received(self, length: int) -> None:
        self._recv_unacked += length
        if self._recv_unacked > self.limits.connection_window_bytes:
            raise ProtocolError(ErrorCode.FLOW_CONTROL_ERROR, "DATA beyond the connection window")
        if self.acknowledges_on_receipt:
            self._release_connection(length)

    def _release_connection(self, size: int) -> None:
        self._recv_released += size
        if self._recv_released > self.limits.connection_window_bytes // 2 and not self.close_wanted:
            self._emit_control(window_update(0, self._recv_released))
            self._recv_unacked -= self._recv_released
            self._recv_released = 0

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
        if stop - start > self.limits.max_header_block_bytes:  # inline: twice per call
            self._block_too_large()
        if flags & Flag.END_HEADERS:
            self._empty_frames = 0
            self._headers_done(stream_id, flags, bytes(payload[start:stop]))
        else:
            if start == stop:
                self._count_empty_frame()
            self._continuation = (stream_id, flags, bytearray(payload[start:stop]))
            self._continuations = 0

    def _block_too_large(self) -> None:
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
        if len(block) > self.limits.max_header_block_bytes:
            self._block_too_large()
        if flags & Flag.END_HEADERS:
            first_flags = self._continuation[1]
            self._continuation = None
            self._headers_done(stream_id, first_flags, bytes(block))
