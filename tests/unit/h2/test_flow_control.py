"""The HTTP/2 core's receive windows when the application acknowledges DATA itself.

With ``receive.on_receipt`` off (the server's, under its request-buffer budget), WINDOW_UPDATEs are
owed only for bytes the application released or the core dropped: a sender that is not released can
send its window and no more.
"""

from __future__ import annotations

import dataclasses
import struct
from typing import Any

from sonic.h2.frames import PREFACE, ErrorCode, Flag, FrameType, frame, settings_frame
from sonic.h2.headers import Headers, encode_headers
from sonic.h2.limits import SERVER_LIMITS
from sonic.h2.server import ServerRole
from sonic.h2.stream import Stream
from sonic.testing.h2 import SilentHandler, parse_frames

WINDOW = 1 << 17  # the connection window under test: WINDOW_UPDATE once half of it is owed
BLOCK = encode_headers(
    [
        (b":method", b"POST"),
        (b":scheme", b"http"),
        (b":path", b"/upload"),
        (b":authority", b"localhost"),
        (b"content-type", b"application/grpc"),
    ]
)
CHUNK = b"x" * 16_384


class Holder(SilentHandler):
    """Keeps every byte of DATA until the test releases it (the handler of a server-role core, ``h2``)."""

    def __init__(self) -> None:
        limits = dataclasses.replace(SERVER_LIMITS, connection_window_bytes=WINDOW)
        self.h2 = ServerRole(self, limits=limits).connection
        self.h2.set_window_release(on_receipt=False)
        self.held: dict[int, int] = {}
        self.open: dict[int, Stream[Any]] = {}

    def headers_received(self, stream: Stream[Any], headers: Headers, end_stream: bool) -> None:
        self.held[stream.stream_id] = 0
        self.open[stream.stream_id] = stream

    def stream_data(self, stream: Stream[Any], data: memoryview) -> None:
        self.held[stream.stream_id] += len(data)


def connect() -> Holder:
    core = Holder()
    core.h2.start(0.0)
    core.h2.receive_data(PREFACE + settings_frame({}))
    core.h2.data_to_send()
    return core


def connection_updates(core: Holder) -> list[int]:
    """Increments of the WINDOW_UPDATEs on stream 0 sent since the last call."""
    frames = parse_frames(b"".join(bytes(piece) for piece in core.h2.data_to_send()))
    return [struct.unpack(">I", f[3])[0] for f in frames if f[0] == FrameType.WINDOW_UPDATE and f[2] == 0]


def data(stream_id: int, payload: bytes = CHUNK, flags: int = 0) -> bytes:
    return frame(FrameType.DATA, flags, stream_id, payload)


def test_the_announced_connection_window_is_the_limit() -> None:
    core = Holder()
    core.h2.start(0.0)
    assert connection_updates(core) == [WINDOW - 65_535]


def test_window_updates_wait_until_the_application_releases_the_data() -> None:
    core = connect()
    core.h2.receive_data(frame(FrameType.HEADERS, Flag.END_HEADERS, 1, BLOCK) + data(1) * 6)
    assert core.held[1] == 6 * len(CHUNK)
    assert connection_updates(core) == []  # auto-acknowledging would have sent one at half the window
    core.h2.acknowledge_received_data(core.open[1], 2 * len(CHUNK))
    assert connection_updates(core) == []  # under half a window owed: not worth a frame yet
    core.h2.acknowledge_received_data(core.open[1], 4 * len(CHUNK))
    assert connection_updates(core) == [6 * len(CHUNK)]


def test_a_sender_that_is_not_released_cannot_pass_its_window() -> None:
    core = connect()
    core.h2.receive_data(
        frame(FrameType.HEADERS, Flag.END_HEADERS, 1, BLOCK) + data(1) * (WINDOW // len(CHUNK))
    )
    assert not core.h2.state.ended  # exactly the window: allowed
    core.h2.receive_data(data(1, b"y"))
    frames = parse_frames(b"".join(bytes(piece) for piece in core.h2.data_to_send()))
    goaway = [f for f in frames if f[0] == FrameType.GOAWAY]
    assert goaway
    assert struct.unpack(">II", goaway[0][3][:8])[1] == ErrorCode.FLOW_CONTROL_ERROR


def test_data_the_core_drops_opens_the_window_by_itself() -> None:
    """DATA for a stream we reset and padding are nobody's to release: the core gives them back."""
    core = connect()
    core.h2.receive_data(frame(FrameType.HEADERS, Flag.END_HEADERS, 1, BLOCK))
    core.h2.reset(core.open[1], ErrorCode.CANCEL)
    core.h2.data_to_send()
    core.h2.receive_data(data(1) * 4)  # in flight when we reset: ignored
    padded = frame(FrameType.DATA, Flag.PADDED, 3, bytes([255]) + b"z" * 100 + bytes(255))
    core.h2.receive_data(frame(FrameType.HEADERS, Flag.END_HEADERS, 3, BLOCK) + padded * 60)
    assert core.held[3] == 60 * 100
    # Given back as soon as more than half the window is owed: the reset stream's 64 KiB and one padding.
    assert connection_updates(core) == [4 * len(CHUNK) + 256]


def test_released_data_of_a_finished_stream_still_opens_the_connection_window() -> None:
    core = connect()
    core.h2.receive_data(
        frame(FrameType.HEADERS, Flag.END_HEADERS, 1, BLOCK) + data(1) * 5 + data(1, CHUNK, Flag.END_STREAM)
    )
    stream = core.open[1]
    core.h2.reset(stream, ErrorCode.NO_ERROR)  # the call ended before its bytes were released
    core.h2.data_to_send()
    core.h2.acknowledge_received_data(stream, core.held[1])
    assert connection_updates(core) == [6 * len(CHUNK)]
