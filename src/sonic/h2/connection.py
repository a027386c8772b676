"""One HTTP/2 connection (RFC 9113), sans I/O, for either end: the core both roles share.

Bytes go in through :meth:`Connection.receive_data`; what they cause comes out as calls of one
:class:`~sonic.h2.events.Handler` (the events) and as bytes from :meth:`Connection.data_to_send`. There
is no socket, loop or clock in here: timers are deadlines (:meth:`next_deadline`,
:mod:`sonic.h2.timers`) that the one asyncio adapter (:mod:`sonic.h2.aio`) arms and reports back with
:meth:`on_timer`; the adapter learns that output is waiting from ``output.ready``. What differs between
the ends is the :class:`~sonic.h2.events.Role` (:mod:`sonic.h2.server`, :mod:`sonic.h2.client`): who
opens streams, what ends one, GOAWAY. The core owns, by composition, its output queue and send windows
(:class:`~sonic.h2.windows.Output`), its flood counters (:class:`~sonic.h2.control.Counters`), its
timers and its HPACK decoder.

Written for the request rates of small inference calls: a frame is parsed in place from the received
bytes, a DATA payload goes straight to its stream, header blocks that leave the HPACK table alone are
decoded once and remembered (bounded: :class:`~sonic.h2.headers.HeaderDecoder`), and everything queued
between two :meth:`data_to_send` calls leaves together. Receive windows are given back as DATA arrives,
or, with ``receive.on_receipt`` off (the server under its request buffer budget), only as the
application calls :meth:`acknowledge_received_data`. Every per-frame cost is O(1): flow control
revisits only streams whose window opened, and floods of frames that cost work without progress are
counted against :class:`~sonic.h2.limits.Http2Limits`.

The application's face is methods: :meth:`~Connection.send_headers`, :meth:`~Connection.respond`,
:meth:`~Connection.end_now`, :meth:`~Connection.end`, :meth:`~Connection.reset`,
:meth:`~Connection.queued_bytes`, :meth:`~Connection.on_drained`, :meth:`~Connection.ended`,
:meth:`~Connection.close` and ``state``, read only (a client opens streams through its
role, :meth:`sonic.h2.client.ClientRole.open_stream`). A stream is a handle
(:class:`~sonic.h2.stream.Stream`, generic in what the application hangs on it): the application keeps its
object in ``stream.app`` and touches nothing else of a stream or of the connection.
"""

from __future__ import annotations

import logging
from collections.abc import Callable
from typing import Generic, TypeVar

from sonic.h2.control import Counters, on_control
from sonic.h2.events import DataSink, Handler, Role
from sonic.h2.frames import (
    FRAME_HEADER,
    FRAME_HEADER_BYTES,
    PREFACE,
    ErrorCode,
    Flag,
    FrameType,
    ProtocolError,
    Setting,
    frame,
    goaway,
    rst_stream,
    window_update,
)
from sonic.h2.headers import HeaderBlocks, HeaderDecoder
from sonic.h2.lifecycle import ConnectionEvent, ConnectionState, next_state
from sonic.h2.limits import Http2Limits, MemoBudget
from sonic.h2.settings import MAX_FRAME_BYTES, STREAM_WINDOW_BYTES, local_settings
from sonic.h2.stream import CLOSED, RECV_END_STREAM, SEND_RST_STREAM, ClosedStreams, Stream
from sonic.h2.timers import ConnectionTimers, TimerAction
from sonic.h2.windows import Output, ReceiveWindows

log = logging.getLogger(__name__)
T = TypeVar("T")  # what the application hangs on a stream
# The least of a DATA payload worth a read of its own into a sink (receive_target): a read is a system call
# and a few Python calls; a shorter rest is read with the frames after it into the adapter's buffer and
# copied, as a peer that sends 16 KiB frames would otherwise cost two reads per frame.
IN_PLACE_MIN_BYTES = 64 << 10
_GOING_AWAY = ConnectionState.GOING_AWAY  # bound once: a class lookup per stream otherwise (Python 3.11)


def _nothing() -> None:
    """The connection closes, and no adapter listens (a core driven by hand, as in tests)."""


class Connection(Generic[T]):
    """What both ends of a connection do alike; ``role`` does the rest, ``handler`` hears the events."""

    def __init__(
        self,
        handler: Handler[T],
        role: Role[T],
        *,
        expect_preface: bool,
        limits: Http2Limits,
        memo_budget: MemoBudget | None = None,
    ) -> None:
        self.handler = handler
        self.role = role
        self.limits = limits
        self.output: Output[T] = Output(role.finished, self._count_queued)
        self.respond = self.output.respond  # the application's hot path, without a hop
        self.counters = Counters(limits)
        self.timers = ConnectionTimers(limits)
        self.streams: dict[int, Stream[T]] = {}
        self.closed_streams = ClosedStreams(limits.closed_streams_remembered)
        self.headers = HeaderDecoder(
            max_header_list_bytes=limits.max_header_list_bytes,
            max_table_size_updates=limits.max_table_size_updates,
            memo_bytes=limits.memo_bytes,
            budget=memo_budget,
        )
        self.last_stream_id = 0  # the highest stream id opened, by the peer (server) or by us (client)
        self.peer_max_streams = 1 << 31  # unlimited until its SETTINGS say otherwise
        self._peer = "unknown"  # as gRPC spells it; the adapter knows
        # Where the connection is (sonic.h2.lifecycle): read by adapters and applications, moved by the
        # methods below only. A plain attribute, not a property: clients read it once or twice per call.
        self.state = ConnectionState.OPEN
        self.on_close = _nothing  # the adapter writes out and closes at once
        self.stream_closed: Callable[[], None] | None = None  # a stream left the open ones (room for one)
        self.blocks = HeaderBlocks(limits, self.counters.empty_frame)  # HEADERS, then CONTINUATION frames
        self.receive = ReceiveWindows(limits, self.emit_control)
        self._buffer = bytearray()
        self._preface_seen = not expect_preface
        self._data_left = 0  # bytes of a DATA payload still to arrive, routed straight to its stream
        self._data_stream: Stream[T] | None = None
        self._data_end = False
        # An application that takes DATA in its own memory (set_sink, receive_target); None: copied.
        self._sink: DataSink[T] | None = None
        # A DATA payload just ended in a sink's memory: the next read should be a frame header alone, so
        # that a DATA payload after it lands in place too instead of in the adapter's buffer.
        self.header_next = False
        # What receive_target last handed out: a read there may run past the payload's rest into the
        # next frame's header (received_in_place takes those bytes back out).
        self._in_place: memoryview | None = None

    def start(self, now: float, peer: str = "unknown") -> None:
        """Our side's opening (preface, SETTINGS), and the timers from ``now`` (the adapter's clock);
        ``peer`` as gRPC spells it (``ipv4:127.0.0.1:5000``), when the adapter knows it."""
        self._peer = peer
        self.role.start()
        self.timers.start(now)

    @property
    def peer(self) -> str:
        """The peer as gRPC spells it, ``unknown`` until the adapter says."""
        return self._peer

    def send_settings(self, extra: dict[Setting, int]) -> None:
        for data in local_settings(self.limits, extra):
            self.output.emit(data)

    # --- bytes in, bytes out -------------------------------------------------------------------------

    def set_window_release(self, *, on_receipt: bool) -> None:
        """``on_receipt`` (the default): DATA opens the receive windows again as it arrives. Off: only as
        the application calls :meth:`acknowledge_received_data` (a server under a request buffer budget)."""
        self.receive.on_receipt = on_receipt

    def acknowledge_received_data(self, stream: Stream[T], size: int) -> None:
        """``size`` bytes that the handler's ``stream_data`` was passed are released: the connection's and
        the stream's windows open again by as much (a WINDOW_UPDATE once half a window is owed). Only for an application
        that turned ``receive.on_receipt`` off; every byte it was passed must come back here once."""
        self.receive.release_connection(size)
        if self.streams.get(stream.stream_id) is stream:
            self.receive.release_stream(stream, size)

    def receive_data(self, data: bytes | memoryview) -> None:
        """Bytes from the peer (a view is not kept past the call). A connection error queues GOAWAY and
        asks the adapter to close."""
        if self.state.ended:
            return  # the connection is ending: nothing more is parsed, nor kept (a lingering close reads on)
        self.timers.active = True
        self.header_next = False
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

    def set_sink(self, sink: DataSink[T]) -> None:
        """From now on a large DATA payload's rest is offered to ``sink`` (see :meth:`receive_target`)."""
        self._sink = sink

    def receive_target(self) -> memoryview | None:
        """Where the next bytes from the peer may be read to, when not the adapter's own buffer: inside a
        DATA payload whose stream's sink (:meth:`set_sink`) has memory for it, that memory (at most the payload's
        rest, when that is at least :data:`IN_PLACE_MIN_BYTES`, and the next frame's header when the sink's
        memory goes on past the payload). The adapter then reports what it read there with
        :meth:`received_in_place`."""
        stream, sink = self._data_stream, self._sink
        if (
            stream is None
            or sink is None
            or self._data_left < IN_PLACE_MIN_BYTES
            or self._buffer
            or self.state.ended
            or stream.state is CLOSED  # reset by us meanwhile: the rest of its DATA is dropped, not placed
        ):
            return None
        room = sink.stream_sink(stream)
        if room is None or not len(room):
            return None
        # The message goes on past this payload: the read may take the next frame's header too, into
        # room the next payload overwrites (one read per DATA frame, not a header read between).
        wanted = (
            self._data_left + FRAME_HEADER_BYTES
            if len(room) >= self._data_left + FRAME_HEADER_BYTES
            else self._data_left
        )
        self._in_place = room[:wanted] if len(room) > wanted else room
        return self._in_place

    def received_in_place(self, size: int) -> None:
        """``size`` bytes were read into what :meth:`receive_target` gave: the DATA payload in progress,
        then, past its end, the start of the next frame (parsed as any received bytes)."""
        stream, sink, target = self._data_stream, self._sink, self._in_place
        self._in_place = None
        if stream is None or sink is None or target is None or size > len(target):
            msg = f"{size} bytes received in place outside a DATA payload ({self._data_left} bytes left)"
            raise RuntimeError(msg)
        self.timers.active = True
        placed = min(size, self._data_left)
        following = bytes(target[placed:size])  # a frame header's bytes, before the sink sees the payload
        self._data_left -= placed
        try:
            sink.stream_data_placed(stream, placed)
            if not self._data_left:
                self._data_stream = None
                self.header_next = True
                self.after_data(stream, self._data_end)
        except ProtocolError as exc:
            self.connection_error(exc)
            return
        if following:
            self.receive_data(following)

    def data_to_send(self) -> list[bytes | memoryview]:
        """Everything queued since the last call; the next batch of DATA is queued behind it."""
        return self.output.take()

    def transport_lost(self) -> None:
        """The transport is gone: every open stream is reset for its application."""
        self.state = next_state(self.state, ConnectionEvent.TRANSPORT_LOST)
        self._in_place = None
        streams = list(self.streams.values())
        self.streams.clear()
        self.output.forget_all_blocked()
        self.headers.clear()
        for stream in streams:
            self.handler.stream_reset(stream)

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
        while end - pos >= FRAME_HEADER_BYTES and not self.state.ended:
            high, low, frame_type, flags, stream_id = FRAME_HEADER.unpack_from(view, pos)
            length = (high << 16) | low
            stream_id &= 0x7FFFFFFF
            if length > MAX_FRAME_BYTES:
                raise ProtocolError(
                    ErrorCode.FRAME_SIZE_ERROR, f"frame of {length} bytes > {MAX_FRAME_BYTES}"
                )
            if self.blocks.open and frame_type != FrameType.CONTINUATION:
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
                block = self.blocks.continued(stream_id, flags, payload)
                if block is not None:
                    self.role.headers_done(*block)
            else:
                on_control(self, frame_type, flags, stream_id, payload)
        return pos

    def _data_started(self, stream_id: int, flags: int, length: int) -> None:
        self.receive.received(length)
        stream = self._open_stream_for_data(stream_id)
        if stream is not None and not self._within_window(stream, length):
            stream = None
        self._data_stream = stream
        self._data_end = bool(flags & Flag.END_STREAM)
        self.counters.progress()

    def _data_continues(self, view: memoryview) -> int:
        take = min(len(view), self._data_left)
        stream = self._data_stream
        if stream is not None and stream.state is CLOSED:
            stream = self._data_stream = None  # ended by the application meanwhile: what is left is dropped
        if stream is not None and take:
            self.handler.stream_data(stream, view[:take])
        elif take and not self.receive.on_receipt:
            self.receive.release_connection(take)  # dropped: nobody holds it
        self._data_left -= take
        if not self._data_left:
            self._data_stream = None
            if stream is not None:
                self.after_data(stream, self._data_end)
        return take

    def _on_data(self, stream_id: int, flags: int, payload: memoryview, length: int) -> None:
        self.receive.received(length)
        stream = self._open_stream_for_data(stream_id)
        if flags & Flag.PADDED:
            if not length or payload[0] >= length:
                raise ProtocolError(ErrorCode.PROTOCOL_ERROR, "DATA padding longer than the frame")
            payload = payload[1 : length - payload[0]]
        if payload:
            self.counters.progress()
        elif not flags & Flag.END_STREAM:
            self.counters.empty_frame()
        if stream is None or not self._within_window(stream, length):
            if not self.receive.on_receipt:
                self.receive.release_connection(length)  # dropped: nobody holds it
            return
        if len(payload) < length and not self.receive.on_receipt:  # padding
            self.receive.release_connection(length - len(payload))
            self.receive.release_stream(stream, length - len(payload))
        if payload:
            self.handler.stream_data(stream, payload)
        self.after_data(stream, bool(flags & Flag.END_STREAM))

    def _open_stream_for_data(self, stream_id: int) -> Stream[T] | None:
        if stream_id == 0:
            raise ProtocolError(ErrorCode.PROTOCOL_ERROR, "DATA on stream 0")
        stream = self.streams.get(stream_id)
        if stream is None and stream_id > self.last_stream_id:
            raise ProtocolError(ErrorCode.PROTOCOL_ERROR, f"DATA on idle stream {stream_id}")
        if stream is not None and stream.remote_closed:
            self.reset(stream, ErrorCode.STREAM_CLOSED)
            return None
        if stream is None and not self.closed_streams.reset_by_us(stream_id):
            # Closed without our RST_STREAM (ended both ways, or reset by the peer): RFC 9113 section 5.1
            # makes a late DATA a STREAM_CLOSED error; said once per stream, and budgeted like a reset.
            self.refuse(stream_id, ErrorCode.STREAM_CLOSED)
            self.counters.reset()
        return stream  # None: a stream already closed; its data is dropped

    def after_data(self, stream: Stream[T], end_stream: bool) -> None:
        if stream.state is CLOSED:
            return  # the application ended or reset it as it heard the DATA: nothing more to do
        if end_stream:
            stream.apply(RECV_END_STREAM)
            self.handler.stream_ended(stream)
            if stream.state is CLOSED and self.streams.get(stream.stream_id) is stream:
                self.forget(stream)  # unless the handler ended it (Connection.end) as it heard the end
        elif (
            stream.recv_unacked > STREAM_WINDOW_BYTES // 2
            and not stream.local_closed
            and self.receive.on_receipt
        ):
            self.emit_control(window_update(stream.stream_id, stream.recv_unacked))
            stream.recv_unacked = 0

    def _within_window(self, stream: Stream[T], length: int) -> bool:
        """Count DATA against the stream's receive window; past it the stream is reset."""
        stream.recv_unacked += length
        if stream.recv_unacked <= STREAM_WINDOW_BYTES:
            return True
        self.reset(stream, ErrorCode.FLOW_CONTROL_ERROR)
        self.handler.stream_reset(stream)
        return False

    def _on_headers(self, stream_id: int, flags: int, payload: memoryview) -> None:
        if stream_id == 0 or stream_id % 2 == 0:
            raise ProtocolError(ErrorCode.PROTOCOL_ERROR, f"HEADERS on stream {stream_id}")
        start, stop = 0, len(payload)
        if flags & Flag.PADDED:
            if not payload:  # no room for the pad length itself
                raise ProtocolError(ErrorCode.PROTOCOL_ERROR, "HEADERS padded without a pad length")
            start = 1
            stop -= payload[0]
        if flags & Flag.PRIORITY:
            start += 5
        if start > stop:
            raise ProtocolError(ErrorCode.PROTOCOL_ERROR, "HEADERS padding longer than the frame")
        if stop - start > self.limits.max_header_block_bytes:  # inline: twice per call
            self.blocks.too_large()
        if flags & Flag.END_HEADERS:
            self.counters.progress()
            self.role.headers_done(stream_id, flags, bytes(payload[start:stop]))
        else:
            self.blocks.begin(stream_id, flags, payload[start:stop])

    # --- streams, closing, control frames ---------------------------------------------------------------

    def connection_error(self, exc: ProtocolError) -> None:
        log.info("HTTP/2 connection error with %s: %s", self.peer, exc)
        self.output.emit(goaway(self.last_stream_id, exc.code, str(exc)))
        # An abusive peer: its unread output is not waited for.
        self.close(abort=exc.code == ErrorCode.ENHANCE_YOUR_CALM)

    def stop_new_streams(self) -> None:
        """GOAWAY sent or received, or our stream ids spent: no new streams, open ones finish."""
        self.state = next_state(self.state, ConnectionEvent.STOP_NEW_STREAMS)

    def close(self, *, abort: bool = False) -> None:
        """No more streams; the adapter closes once what is queued is written (at once), or with
        ``abort`` drops the transport without waiting for the peer to read."""
        self.receive.stopped = True
        self.state = next_state(self.state, ConnectionEvent.ABORT if abort else ConnectionEvent.CLOSE)
        self.output.ready()
        self.on_close()

    def next_deadline(self) -> float | None:
        """When :meth:`on_timer` is next due (the adapter's clock), None when never."""
        return self.timers.next_deadline()

    def on_timer(self, now: float) -> None:
        due = self.timers.due(now, has_streams=bool(self.streams), last_stream_id=self.last_stream_id)
        for action in due:
            if action is TimerAction.PING:
                self.output.emit(frame(FrameType.PING, 0, 0, self.timers.ping_payload))
            elif action is TimerAction.PING_TIMEOUT:
                log.info(
                    "HTTP/2 connection with %s: no PING answer within %s s",
                    self.peer,
                    self.limits.ping_timeout_s,
                )
                self.close(abort=True)
            elif self.state.opens_streams:  # idle
                self.output.emit(goaway(self.last_stream_id, ErrorCode.NO_ERROR, "idle"))
                self.close()

    def pause_output(self, paused: bool) -> None:
        """The transport's buffer is full (True) or drained (False): DATA waits meanwhile."""
        self.output.pause_output(paused)

    def emit_control(self, data: bytes) -> None:
        """A control frame we owe the peer (ACK, RST_STREAM, WINDOW_UPDATE): bounded while unread."""
        self._count_queued()
        self.output.emit(data)

    def _count_queued(self) -> None:
        output = self.output
        output.queued_control += 1
        if output.queued_control > self.limits.max_queued_control_frames and not self.state.ended:
            # Not raised: the application's answers come here too, outside receive_data.
            msg = f"more than {self.limits.max_queued_control_frames} frames queued and not read"
            self.connection_error(ProtocolError(ErrorCode.ENHANCE_YOUR_CALM, msg))

    def send_headers(self, stream: Stream[T], block: bytes, *, end_stream: bool = False) -> None:
        """HEADERS (with CONTINUATION) ``block`` on ``stream``; none once we ended it."""
        if stream.local_closed:
            return
        self.output.emit_header_block(stream.stream_id, block, end_stream=end_stream)
        if end_stream:
            self.role.finished(stream)

    def end_now(self, stream: Stream[T], block: bytes) -> None:
        """End ``stream`` with header block ``block`` at once: DATA not yet sent is dropped (an error
        replaces a response that has not left); nothing once we ended it."""
        if stream.local_closed:
            return
        stream.pending.clear()
        self.send_headers(stream, block, end_stream=True)

    def ended(self, stream: Stream[T]) -> bool:
        """We ended ``stream`` (END_STREAM or RST_STREAM sent): whatever more is sent on it is dropped."""
        return stream.local_closed

    def end(self, stream: Stream[T]) -> None:
        """The application is done with ``stream`` (a client: its answer came, or is refused): forgotten
        when both sides ended it, otherwise reset (CANCEL) so that neither side sends more. Nothing for a
        stream that already left the connection."""
        if self.streams.get(stream.stream_id) is not stream:
            return
        if stream.state is CLOSED:
            self.forget(stream)
        else:
            self.reset(stream, ErrorCode.CANCEL)

    def peer_reset_code(self, stream: Stream[T]) -> int:
        """The error code of the peer's RST_STREAM on ``stream`` (0 when the peer did not reset it)."""
        return stream.reset_code

    def open_streams(self) -> list[Stream[T]]:
        """The streams open now (a copy: the caller may end them as it goes)."""
        return list(self.streams.values())

    def queued_bytes(self, stream: Stream[T]) -> int:
        """DATA queued on ``stream`` that flow control has not let out yet."""
        return sum(len(piece) for piece in stream.pending) if stream.pending else 0

    def on_drained(self, stream: Stream[T], callback: Callable[[], None]) -> None:
        """``callback`` once, when the DATA queued on ``stream`` has all left (at once if none is)."""
        if not stream.pending:
            callback()
        else:
            stream.drained = callback

    def reset(self, stream: Stream[T], code: ErrorCode) -> None:
        if stream.state is not CLOSED:
            self.output.emit(rst_stream(stream.stream_id, code))
            self.closed_streams.add(stream.stream_id, reset_by_us=True)
            stream.apply(SEND_RST_STREAM)
        stream.pending.clear()
        self.forget(stream)

    def refuse(self, stream_id: int, code: ErrorCode) -> None:
        """RST_STREAM for a stream that never became a :class:`Stream` (refused, malformed)."""
        self.emit_control(rst_stream(stream_id, code))
        self.closed_streams.add(stream_id, reset_by_us=True)

    def forget(self, stream: Stream[T]) -> None:
        """The stream is closed both ways: it leaves the open streams."""
        self.closed_streams.add(stream.stream_id, reset_by_us=False)
        self.streams.pop(stream.stream_id, None)
        self.output.unblock(stream)
        if self.stream_closed is not None:
            self.stream_closed()
        if self.state is _GOING_AWAY and not self.streams:
            self.close()
