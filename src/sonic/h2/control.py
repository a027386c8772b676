"""Control frames (RFC 9113 section 6: SETTINGS, PING, WINDOW_UPDATE, RST_STREAM, GOAWAY, PRIORITY) and the
counters that bound each kind of flood, against :class:`~sonic.h2.limits.Http2Limits`.

:func:`on_control` handles one control frame for a connection core (:class:`ControlTarget`: the part of
:class:`sonic.h2.connection.Connection` it uses).

Frames that cost us work without progress for the peer (SETTINGS, WINDOW_UPDATE, unknown types,
PRIORITY, empty frames, streams reset before their answer) are counted here; past a limit the count
raises :class:`~sonic.h2.frames.ProtocolError` with ENHANCE_YOUR_CALM, which the connection core
(:mod:`sonic.h2.connection`, the owner of one :class:`Counters`) turns into GOAWAY. Counts, never time.
"""

from __future__ import annotations

import struct
from typing import Protocol, TypeVar

from sonic.h2.events import Handler, Role
from sonic.h2.frames import ErrorCode, Flag, FrameType, ProtocolError, Setting, frame
from sonic.h2.limits import Http2Limits
from sonic.h2.settings import peer_settings
from sonic.h2.stream import RECV_RST_STREAM, Stream
from sonic.h2.timers import ConnectionTimers
from sonic.h2.windows import Output

T = TypeVar("T")  # what the application hangs on a stream


class Counters:
    """One connection's accounting."""

    __slots__ = (
        "_control_frames_in",
        "_empty_frames",
        "_limits",
        "_premature_resets",
        "_priority_frames",
        "streams_completed",
        "streams_opened",
    )

    def __init__(self, limits: Http2Limits) -> None:
        self._limits = limits
        self.streams_opened = 0  # by the peer
        self.streams_completed = 0  # ended by us normally
        self._premature_resets = 0
        self._priority_frames = 0
        self._control_frames_in = 0
        self._empty_frames = 0  # frames without payload in a row

    def control_frame(self, data_frames_sent: int) -> None:
        """SETTINGS, WINDOW_UPDATE, unknown types: free for the peer to send, so budgeted per DATA we send."""
        self._control_frames_in += 1
        limits = self._limits
        allowed = limits.control_frame_allowance + limits.max_window_updates_per_data_frame * data_frames_sent
        if self._control_frames_in > allowed:
            msg = f"{self._control_frames_in} SETTINGS/WINDOW_UPDATE frames for {data_frames_sent} DATA sent"
            raise ProtocolError(ErrorCode.ENHANCE_YOUR_CALM, msg)

    def reset(self) -> None:
        """A stream reset before its response (by the peer, or refused): rapid reset is budgeted."""
        self._premature_resets += 1
        if self._premature_resets > self._limits.rapid_reset_budget + self.streams_completed:
            msg = f"{self._premature_resets} streams reset early, {self.streams_completed} completed"
            raise ProtocolError(ErrorCode.ENHANCE_YOUR_CALM, msg)

    def priority(self) -> None:
        self._priority_frames += 1
        if self._priority_frames > self._limits.max_priority_frames_per_stream * (1 + self.streams_opened):
            raise ProtocolError(ErrorCode.ENHANCE_YOUR_CALM, "too many PRIORITY frames")

    def empty_frame(self) -> None:
        self._empty_frames += 1
        if self._empty_frames > self._limits.max_consecutive_empty_frames:
            msg = f"more than {self._limits.max_consecutive_empty_frames} empty frames in a row"
            raise ProtocolError(ErrorCode.ENHANCE_YOUR_CALM, msg)

    def progress(self) -> None:
        """A frame that carried something: the run of empty frames is over."""
        self._empty_frames = 0


class ControlTarget(Protocol[T]):
    """What control frames act on: the connection core's state and stream operations."""

    last_stream_id: int
    peer_max_streams: int
    streams: dict[int, Stream[T]]
    output: Output[T]
    counters: Counters
    timers: ConnectionTimers
    handler: Handler[T]
    role: Role[T]

    def emit_control(self, data: bytes) -> None: ...

    def reset(self, stream: Stream[T], code: ErrorCode) -> None: ...

    def forget(self, stream: Stream[T]) -> None: ...


def on_control(
    core: ControlTarget[T], frame_type: int, flags: int, stream_id: int, payload: memoryview
) -> None:
    if frame_type == FrameType.SETTINGS:
        if stream_id != 0:
            raise ProtocolError(ErrorCode.PROTOCOL_ERROR, "SETTINGS on a stream")
        if len(payload) % 6 or (flags & Flag.ACK and payload):
            raise ProtocolError(ErrorCode.FRAME_SIZE_ERROR, "SETTINGS of a wrong length")
        if not flags & Flag.ACK:
            core.counters.control_frame(core.output.data_frames)
            _apply_settings(core, payload)
            core.emit_control(frame(FrameType.SETTINGS, Flag.ACK, 0))
    elif frame_type == FrameType.PING:
        if stream_id != 0:
            raise ProtocolError(ErrorCode.PROTOCOL_ERROR, "PING on a stream")
        if len(payload) != 8:
            raise ProtocolError(ErrorCode.FRAME_SIZE_ERROR, "PING of a wrong length")
        if flags & Flag.ACK:
            core.timers.pong(bytes(payload))
        else:  # bounded by the queue of ACKs the peer must read (max_queued_control_frames)
            core.emit_control(frame(FrameType.PING, Flag.ACK, 0, bytes(payload)))
    elif frame_type == FrameType.WINDOW_UPDATE:
        core.counters.control_frame(core.output.data_frames)
        _on_window_update(core, stream_id, payload)
    elif frame_type == FrameType.RST_STREAM:
        _on_rst_stream(core, stream_id, payload)
    elif frame_type == FrameType.GOAWAY:
        if stream_id != 0:
            raise ProtocolError(ErrorCode.PROTOCOL_ERROR, "GOAWAY on a stream")
        if len(payload) < 8:
            raise ProtocolError(ErrorCode.FRAME_SIZE_ERROR, "GOAWAY shorter than 8 bytes")
        last_stream_id, code = struct.unpack_from(">II", payload)
        core.role.goaway_received(last_stream_id & 0x7FFFFFFF, code)
    elif frame_type == FrameType.PUSH_PROMISE:
        raise ProtocolError(ErrorCode.PROTOCOL_ERROR, "PUSH_PROMISE, but push is disabled")
    elif frame_type == FrameType.PRIORITY:
        if stream_id == 0:
            raise ProtocolError(ErrorCode.PROTOCOL_ERROR, "PRIORITY on stream 0")
        if len(payload) != 5:
            raise ProtocolError(ErrorCode.FRAME_SIZE_ERROR, "PRIORITY of a wrong length")
        core.counters.priority()
    else:  # unknown frame types are ignored, as RFC 9113 asks, but not for free
        core.counters.control_frame(core.output.data_frames)


def _on_rst_stream(core: ControlTarget[T], stream_id: int, payload: memoryview) -> None:
    if stream_id == 0:
        raise ProtocolError(ErrorCode.PROTOCOL_ERROR, "RST_STREAM on stream 0")
    if len(payload) != 4:
        raise ProtocolError(ErrorCode.FRAME_SIZE_ERROR, "RST_STREAM of a wrong length")
    if stream_id > core.last_stream_id:
        raise ProtocolError(ErrorCode.PROTOCOL_ERROR, f"RST_STREAM on idle stream {stream_id}")
    stream = core.streams.get(stream_id)
    if stream is None:
        return
    if not stream.local_closed:
        core.counters.reset()
    stream.apply(RECV_RST_STREAM)
    stream.pending.clear()
    stream.reset_code = struct.unpack_from(">I", payload)[0]
    core.forget(stream)
    core.handler.stream_reset(stream)


def _apply_settings(core: ControlTarget[T], payload: memoryview) -> None:
    output = core.output
    for key, value in peer_settings(payload):
        if key == Setting.INITIAL_WINDOW_SIZE:
            output.set_peer_initial_window(value)
        elif key == Setting.MAX_FRAME_SIZE:
            output.peer_max_frame = value
        elif key == Setting.MAX_CONCURRENT_STREAMS:
            core.peer_max_streams = value
    output.flush_blocked()


def _on_window_update(core: ControlTarget[T], stream_id: int, payload: memoryview) -> None:
    if len(payload) != 4:
        raise ProtocolError(ErrorCode.FRAME_SIZE_ERROR, "WINDOW_UPDATE of the wrong size")
    increment = struct.unpack_from(">I", payload)[0] & 0x7FFFFFFF
    if stream_id == 0:
        if increment == 0:
            raise ProtocolError(ErrorCode.PROTOCOL_ERROR, "WINDOW_UPDATE of 0")
        core.output.connection_window_update(increment)
        return
    if stream_id > core.last_stream_id:
        raise ProtocolError(ErrorCode.PROTOCOL_ERROR, f"WINDOW_UPDATE on idle stream {stream_id}")
    stream = core.streams.get(stream_id)
    if stream is None:
        return
    code = core.output.stream_window_update(stream, increment)
    if code is not None:
        core.reset(stream, code)
        core.handler.stream_reset(stream)
