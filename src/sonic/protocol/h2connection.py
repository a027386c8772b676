"""One HTTP/2 connection (RFC 9113) as an asyncio protocol, for either end: frames, flow control, streams.

The server (:mod:`sonic.server.frontends.h2`) and the client (:mod:`sonic.client.transport.h2`) subclass
:class:`Http2Base` and fill in what differs by role: who opens streams (``_headers_done``), what ends
one (``_finish``), GOAWAY, and the ``stream_*`` hooks. Written for the request rates of small inference
calls: a frame is parsed in place from the received bytes, a DATA payload goes straight to its stream,
header blocks that leave the HPACK table alone are decoded once and remembered, and everything written
in one event-loop iteration leaves in one ``writelines``.

Receive windows are large (we replenish as data arrives; message-size limits and stream limits bound
memory); send windows are the peer's, and output waits for its WINDOW_UPDATEs.
"""

from __future__ import annotations

import asyncio
import logging
import struct
from typing import cast

from sonic.protocol.http2 import (
    DEFAULT_MAX_FRAME_BYTES,
    DEFAULT_WINDOW_BYTES,
    FRAME_HEADER,
    FRAME_HEADER_BYTES,
    MAX_FRAME_BYTES_LIMIT,
    MAX_HEADER_LIST_BYTES,
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
    frame_header,
    goaway,
    rst_stream,
    settings_frame,
    window_update,
)

log = logging.getLogger(__name__)

STREAM_WINDOW_BYTES = 1 << 26  # what each stream may send before our WINDOW_UPDATE
CONNECTION_WINDOW_BYTES = 1 << 30
MAX_FRAME_BYTES = 1 << 20  # largest frame we accept: big tensors arrive in few frames


class Http2Base(asyncio.Protocol):
    """What both ends of a connection do alike. Subclasses send their preface and SETTINGS."""

    # DATA queued for the socket per loop iteration, at most (None: all the windows allow). Python
    # 3.11's transports join a writelines() into one copy and keep what the socket did not take in a
    # bytearray trimmed from the front, which costs O(n^2) memmove for a 15 MB message; a bounded
    # batch per iteration, paused by the transport's high-water mark, leaves the socket paced instead.
    write_batch_bytes: int | None = None

    def __init__(self, *, expect_preface: bool) -> None:
        self._transport: asyncio.Transport | None = None
        self._loop = asyncio.get_running_loop()
        self._buffer = bytearray()
        self._preface_seen = not expect_preface
        self._headers = HeaderDecoder()
        self._continuation: tuple[int, int, bytearray] | None = None  # stream, flags, block so far
        self._data_left = 0  # bytes of a DATA payload still to arrive, routed straight to its stream
        self._data_stream: Stream | None = None
        self._data_end = False
        self.streams: dict[int, Stream] = {}
        self._last_stream_id = 0  # the highest stream id opened, by the peer (server) or by us (client)
        self._send_window = DEFAULT_WINDOW_BYTES
        self._peer_initial_window = DEFAULT_WINDOW_BYTES
        self._peer_max_frame = DEFAULT_MAX_FRAME_BYTES
        self._peer_max_streams = 1 << 31  # unlimited until its SETTINGS say otherwise
        self._recv_unacked = 0
        self._blocked: dict[int, Stream] = {}  # streams with output waiting for a window
        self._out: list[bytes | memoryview] = []
        self._write_scheduled = False
        self._batch_bytes = 0  # DATA bytes in _out
        self._paused = False
        self.closing = False  # GOAWAY sent or received: no new streams
        self.closed = asyncio.Event()

    # --- hooks for the application and the role -----------------------------------------------------

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

    # --- asyncio.Protocol ---------------------------------------------------------------------------

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        # uvloop's transports are not asyncio.Transport subclasses, hence a cast and not a check.
        self._transport = cast("asyncio.Transport", transport)

    def _send_settings(self, extra: dict[Setting, int]) -> None:
        settings = {
            Setting.INITIAL_WINDOW_SIZE: STREAM_WINDOW_BYTES,
            Setting.MAX_FRAME_SIZE: MAX_FRAME_BYTES,
            Setting.MAX_HEADER_LIST_SIZE: MAX_HEADER_LIST_BYTES,
            Setting.ENABLE_PUSH: 0,
        }
        settings.update(extra)
        self._emit(settings_frame(settings))
        self._emit(window_update(0, CONNECTION_WINDOW_BYTES - DEFAULT_WINDOW_BYTES))

    def connection_lost(self, exc: Exception | None) -> None:
        if exc is not None:
            log.debug("HTTP/2 connection with %s lost: %s", self.peer, exc)
        streams = list(self.streams.values())
        self.streams.clear()
        self._blocked.clear()
        for stream in streams:
            self.stream_reset(stream)
        self.closed.set()

    def pause_writing(self) -> None:
        self._paused = True

    def resume_writing(self) -> None:
        self._paused = False
        self._flush_blocked()

    def data_received(self, data: bytes) -> None:
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
            log.info("HTTP/2 connection error with %s: %s", self.peer, exc)
            self._emit(goaway(self._last_stream_id, exc.code, str(exc)))
            self._close()

    # --- output ----------------------------------------------------------------------------------------

    @property
    def peer(self) -> str:
        """The peer as gRPC spells it: ``ipv4:127.0.0.1:5000``, ``ipv6:[::1]:5000``."""
        address = self._transport.get_extra_info("peername") if self._transport is not None else None
        if not address:
            return "unknown"
        host, port = address[0], address[1]
        return f"ipv6:[{host}]:{port}" if ":" in host else f"ipv4:{host}:{port}"

    def _emit(self, data: bytes | memoryview) -> None:
        self._out.append(data)
        if not self._write_scheduled:
            self._write_scheduled = True
            self._loop.call_soon(self._write_out)

    def _write_out(self) -> None:
        self._write_scheduled = False
        out, self._out = self._out, []
        if self._transport is not None and not self._transport.is_closing():
            self._transport.writelines(out)
        if self._batch_bytes:
            self._batch_bytes = 0
            if self._blocked and not self._paused:
                self._flush_blocked()  # the next batch, written on the next iteration

    def _close(self) -> None:
        self.closing = True
        if self._transport is not None:
            self._write_out()
            self._transport.close()

    def send_headers(self, stream: Stream, block: bytes, *, end_stream: bool = False) -> None:
        self._emit_header_block(stream.stream_id, block, end_stream=end_stream)
        if end_stream:
            self._finish(stream)

    def respond(self, stream: Stream, data: list[bytes | memoryview], trailers: bytes | None = None) -> None:
        """DATA as flow control allows, then (when given) the end of the stream: see Stream.trailers."""
        if stream.local_closed:
            return
        stream.pending.extend(memoryview(piece).cast("B") for piece in data)
        if trailers is not None:
            stream.trailers = trailers
        self._flush(stream)

    def reset(self, stream: Stream, code: ErrorCode) -> None:
        if not stream.local_closed or not stream.remote_closed:
            self._emit(rst_stream(stream.stream_id, code))
        stream.local_closed = stream.remote_closed = True
        stream.pending.clear()
        self._forget(stream)

    def abort(self) -> None:
        if self._transport is not None:
            self._transport.abort()

    def _emit_header_block(self, stream_id: int, block: bytes, *, end_stream: bool) -> None:
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

    def _flush(self, stream: Stream) -> None:
        pending = stream.pending
        while pending:
            allowed = min(stream.send_window, self._send_window, self._peer_max_frame)
            batch = self.write_batch_bytes
            if allowed <= 0 or self._paused or (batch is not None and self._batch_bytes >= batch):
                self._blocked[stream.stream_id] = stream
                return
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
            stream.send_window -= size
            self._send_window -= size
            self._batch_bytes += size
            # The last DATA of a request carries END_STREAM itself, saving a frame.
            end = Flag.END_STREAM if not pending and stream.trailers == b"" else 0
            self._emit(frame_header(FrameType.DATA, end, stream.stream_id, size))
            for piece in pieces:
                self._emit(piece)
            if end:
                stream.trailers = None
                self._finish(stream)
        self._blocked.pop(stream.stream_id, None)
        if stream.trailers is not None:
            if stream.trailers:
                self._emit_header_block(stream.stream_id, stream.trailers, end_stream=True)
            else:
                self._emit(frame(FrameType.DATA, Flag.END_STREAM, stream.stream_id))
            stream.trailers = None
            self._finish(stream)

    def _flush_blocked(self) -> None:
        for stream in list(self._blocked.values()):
            self._flush(stream)

    def _forget(self, stream: Stream) -> None:
        self.streams.pop(stream.stream_id, None)
        self._blocked.pop(stream.stream_id, None)
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
        while end - pos >= FRAME_HEADER_BYTES:
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
        if stream is None:
            return
        if flags & Flag.PADDED:
            if not length or payload[0] >= length:
                raise ProtocolError(ErrorCode.PROTOCOL_ERROR, "DATA padding longer than the frame")
            payload = payload[1 : length - payload[0]]
        stream.recv_unacked += length
        if payload:
            self.stream_data(stream, payload)
        self._after_data(stream, bool(flags & Flag.END_STREAM))

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
            self._emit(window_update(stream.stream_id, stream.recv_unacked))
            stream.recv_unacked = 0

    def _count_received(self, length: int) -> None:
        self._recv_unacked += length
        if self._recv_unacked > CONNECTION_WINDOW_BYTES // 2:
            self._emit(window_update(0, self._recv_unacked))
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
        if flags & Flag.END_HEADERS:
            self._headers_done(stream_id, flags, bytes(payload[start:stop]))
        else:
            self._continuation = (stream_id, flags, bytearray(payload[start:stop]))

    def _on_continuation(self, stream_id: int, flags: int, payload: memoryview) -> None:
        if self._continuation is None or self._continuation[0] != stream_id:
            raise ProtocolError(ErrorCode.PROTOCOL_ERROR, "CONTINUATION without HEADERS")
        block = self._continuation[2]
        block += payload
        if len(block) > MAX_HEADER_LIST_BYTES:
            raise ProtocolError(ErrorCode.ENHANCE_YOUR_CALM, "header block too large")
        if flags & Flag.END_HEADERS:
            first_flags = self._continuation[1]
            self._continuation = None
            self._headers_done(stream_id, first_flags, bytes(block))

    def _on_control(self, frame_type: int, flags: int, stream_id: int, payload: memoryview) -> None:
        if frame_type == FrameType.SETTINGS:
            if stream_id != 0 or len(payload) % 6:
                raise ProtocolError(ErrorCode.PROTOCOL_ERROR, "malformed SETTINGS")
            if not flags & Flag.ACK:
                self._apply_settings(payload)
                self._emit(frame(FrameType.SETTINGS, Flag.ACK, 0))
        elif frame_type == FrameType.PING:
            if len(payload) != 8 or stream_id != 0:
                raise ProtocolError(ErrorCode.PROTOCOL_ERROR, "malformed PING")
            if not flags & Flag.ACK:
                self._emit(frame(FrameType.PING, Flag.ACK, 0, bytes(payload)))
        elif frame_type == FrameType.WINDOW_UPDATE:
            self._on_window_update(stream_id, payload)
        elif frame_type == FrameType.RST_STREAM:
            if stream_id == 0 or len(payload) != 4:
                raise ProtocolError(ErrorCode.PROTOCOL_ERROR, "malformed RST_STREAM")
            stream = self.streams.get(stream_id)
            if stream is not None:
                stream.local_closed = stream.remote_closed = True
                stream.pending.clear()
                stream.reset_code = struct.unpack_from(">I", payload)[0]
                self._forget(stream)
                self.stream_reset(stream)
        elif frame_type == FrameType.GOAWAY:
            if len(payload) < 8:
                raise ProtocolError(ErrorCode.FRAME_SIZE_ERROR, "GOAWAY shorter than 8 bytes")
            last_stream_id, code = struct.unpack_from(">II", payload)
            self.goaway_received(last_stream_id & 0x7FFFFFFF, code)
        elif frame_type == FrameType.PUSH_PROMISE:
            raise ProtocolError(ErrorCode.PROTOCOL_ERROR, "PUSH_PROMISE, but push is disabled")
        # PRIORITY and unknown frame types are ignored, as RFC 9113 asks.

    def _apply_settings(self, payload: memoryview) -> None:
        for offset in range(0, len(payload), 6):
            key, value = struct.unpack_from(">HI", payload, offset)
            if key == Setting.INITIAL_WINDOW_SIZE:
                if value > MAX_WINDOW_BYTES:
                    raise ProtocolError(ErrorCode.FLOW_CONTROL_ERROR, "INITIAL_WINDOW_SIZE too large")
                delta = value - self._peer_initial_window
                self._peer_initial_window = value
                for stream in self.streams.values():
                    stream.send_window += delta
            elif key == Setting.MAX_FRAME_SIZE:
                if not DEFAULT_MAX_FRAME_BYTES <= value <= MAX_FRAME_BYTES_LIMIT:
                    raise ProtocolError(ErrorCode.PROTOCOL_ERROR, f"MAX_FRAME_SIZE {value} out of range")
                self._peer_max_frame = value
            elif key == Setting.MAX_CONCURRENT_STREAMS:
                self._peer_max_streams = value
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
        stream = self.streams.get(stream_id)
        if stream is None:
            return
        if increment == 0:
            self.reset(stream, ErrorCode.PROTOCOL_ERROR)
            self.stream_reset(stream)
            return
        stream.send_window += increment
        if stream.send_window > MAX_WINDOW_BYTES:
            self.reset(stream, ErrorCode.FLOW_CONTROL_ERROR)
            self.stream_reset(stream)
            return
        if stream.pending or stream.trailers is not None:
            self._flush(stream)
