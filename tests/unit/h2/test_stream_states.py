"""A stream's states (RFC 9113 section 5.1): the transition table, and one byte-fed case per row.

Each row of :data:`sonic.h2.stream.TRANSITIONS` is reached here through a real core, fed bytes as a peer
sends them (and the application's calls where the application causes the event), with the state read
before and after; the pairs the table does not hold are refused as the module says.
"""

from __future__ import annotations

import struct
from collections.abc import Callable
from typing import Any

import pytest

from sonic.h2.client import ClientRole
from sonic.h2.connection import Connection
from sonic.h2.frames import PREFACE, ErrorCode, Flag, FrameType, ProtocolError, frame, goaway, settings_frame
from sonic.h2.headers import Headers, encode_headers
from sonic.h2.server import ServerRole
from sonic.h2.stream import TRANSITIONS, Stream, StreamEvent, StreamState

S, E = StreamState, StreamEvent
REQUEST = encode_headers(
    [(b":method", b"POST"), (b":scheme", b"http"), (b":path", b"/m"), (b":authority", b"x")]
)
RESPONSE = encode_headers([(b":status", b"200")])
TRAILERS = encode_headers([(b"grpc-status", b"0")])


class Recorder:
    """A handler that answers nothing by itself: the test plays the application."""

    def __init__(self) -> None:
        self.streams: dict[int, Stream[Any]] = {}
        self.resets: list[int] = []

    def headers_received(self, stream: Stream[Any], headers: Headers, end_stream: bool) -> None:
        self.streams[stream.stream_id] = stream

    def stream_data(self, stream: Stream[Any], data: memoryview) -> None:
        pass

    def stream_ended(self, stream: Stream[Any]) -> None:
        pass

    def stream_reset(self, stream: Stream[Any]) -> None:
        self.resets.append(stream.stream_id)

    def goaway_received(self, last_stream_id: int, code: int, unprocessed: list[Stream[Any]]) -> None:
        pass


def server() -> tuple[Connection[Any], Recorder]:
    handler = Recorder()
    core = ServerRole(handler).connection
    core.start(0.0)
    core.receive_data(PREFACE + settings_frame({}))
    core.data_to_send()
    return core, handler


def client(*, window_bytes: int = 65535) -> tuple[ClientRole[Any], Connection[Any], Recorder]:
    handler = Recorder()
    role = ClientRole(handler)
    core = role.connection
    core.start(0.0)
    core.receive_data(settings_frame({}) if window_bytes == 65535 else _window_settings(window_bytes))
    core.data_to_send()
    return role, core, handler


def _window_settings(window_bytes: int) -> bytes:
    return frame(FrameType.SETTINGS, 0, 0, struct.pack(">HI", 0x4, window_bytes))


def rst(stream_id: int, code: ErrorCode = ErrorCode.CANCEL) -> bytes:
    return frame(FrameType.RST_STREAM, 0, stream_id, struct.pack(">I", code))


def open_server_stream(core: Connection[Any], handler: Recorder, *, ended: bool) -> Stream[Any]:
    core.receive_data(
        frame(FrameType.HEADERS, Flag.END_HEADERS | (Flag.END_STREAM if ended else 0), 1, REQUEST)
    )
    return handler.streams[1]


def answer(core: Connection[Any], stream: Stream[Any]) -> None:
    core.send_headers(stream, RESPONSE)
    core.respond(stream, [b"answer"], TRAILERS)
    core.data_to_send()


def server_open_send_end() -> tuple[Stream[Any], list[StreamState]]:
    core, handler = server()
    stream = open_server_stream(core, handler, ended=False)
    seen = [stream.state]
    core.send_headers(stream, RESPONSE, end_stream=True)  # answered before the request ended
    seen.append(stream.state)  # ... and the rest of the request refused: RST_STREAM NO_ERROR
    return stream, seen


def server_open_recv_end() -> tuple[Stream[Any], list[StreamState]]:
    core, handler = server()
    stream = open_server_stream(core, handler, ended=False)
    seen = [stream.state]
    core.receive_data(frame(FrameType.DATA, Flag.END_STREAM, 1, b"body"))
    seen.append(stream.state)
    return stream, seen


def server_half_closed_remote_send_end() -> tuple[Stream[Any], list[StreamState]]:
    core, handler = server()
    stream = open_server_stream(core, handler, ended=True)
    seen = [stream.state]
    answer(core, stream)
    seen.append(stream.state)
    assert 1 not in core.streams
    return stream, seen


def server_send_rst(*, ended: bool) -> tuple[Stream[Any], list[StreamState]]:
    core, handler = server()
    stream = open_server_stream(core, handler, ended=ended)
    seen = [stream.state]
    core.reset(stream, ErrorCode.CANCEL)  # the application gives up (a deadline passed)
    seen.append(stream.state)
    return stream, seen


def server_recv_rst(*, ended: bool) -> tuple[Stream[Any], list[StreamState]]:
    core, handler = server()
    stream = open_server_stream(core, handler, ended=ended)
    seen = [stream.state]
    core.receive_data(rst(1))
    seen.append(stream.state)
    assert handler.resets == [1]
    return stream, seen


def client_call(role: ClientRole[Any], core: Connection[Any], message: bytes = b"request") -> Stream[Any]:
    stream = role.open_stream(REQUEST, [message], None)
    core.data_to_send()
    return stream


def client_half_closed_local_recv_end() -> tuple[Stream[Any], list[StreamState]]:
    role, core, _ = client()
    stream = client_call(role, core)
    seen = [stream.state]
    core.receive_data(frame(FrameType.HEADERS, Flag.END_HEADERS | Flag.END_STREAM, 1, TRAILERS))
    seen.append(stream.state)
    return stream, seen


def client_half_closed_local_reset(*, by_peer: bool) -> tuple[Stream[Any], list[StreamState]]:
    role, core, handler = client()
    stream = client_call(role, core)
    seen = [stream.state]
    if by_peer:
        core.receive_data(rst(1, ErrorCode.REFUSED_STREAM))
    else:
        core.reset(stream, ErrorCode.CANCEL)  # the caller cancelled
    seen.append(stream.state)
    assert handler.resets == ([1] if by_peer else [])
    return stream, seen


def client_recv_goaway(*, request_sent: bool) -> tuple[Stream[Any], list[StreamState]]:
    # A window of 0 keeps the request's DATA back: the stream stays open on our side.
    role, core, _ = client(window_bytes=65535 if request_sent else 0)
    stream = client_call(role, core)
    seen = [stream.state]
    core.receive_data(goaway(0, ErrorCode.NO_ERROR))  # above its last stream id: never processed
    seen.append(stream.state)
    return stream, seen


ROWS: dict[tuple[StreamState, StreamEvent], Callable[[], tuple[Stream[Any], list[StreamState]]]] = {
    (S.OPEN, E.SEND_END_STREAM): server_open_send_end,
    (S.OPEN, E.RECV_END_STREAM): server_open_recv_end,
    (S.HALF_CLOSED_REMOTE, E.SEND_END_STREAM): server_half_closed_remote_send_end,
    (S.HALF_CLOSED_LOCAL, E.RECV_END_STREAM): client_half_closed_local_recv_end,
    (S.OPEN, E.SEND_RST_STREAM): lambda: server_send_rst(ended=False),
    (S.HALF_CLOSED_REMOTE, E.SEND_RST_STREAM): lambda: server_send_rst(ended=True),
    (S.HALF_CLOSED_LOCAL, E.SEND_RST_STREAM): lambda: client_half_closed_local_reset(by_peer=False),
    (S.OPEN, E.RECV_RST_STREAM): lambda: server_recv_rst(ended=False),
    (S.HALF_CLOSED_REMOTE, E.RECV_RST_STREAM): lambda: server_recv_rst(ended=True),
    (S.HALF_CLOSED_LOCAL, E.RECV_RST_STREAM): lambda: client_half_closed_local_reset(by_peer=True),
    (S.OPEN, E.RECV_GOAWAY): lambda: client_recv_goaway(request_sent=False),
    (S.HALF_CLOSED_LOCAL, E.RECV_GOAWAY): lambda: client_recv_goaway(request_sent=True),
}


def test_every_row_of_the_table_has_its_byte_fed_case() -> None:
    assert set(ROWS) == set(TRANSITIONS)


@pytest.mark.parametrize("row", list(ROWS), ids=lambda row: f"{row[0].name}-{row[1].name}")
def test_each_row_is_reached_by_a_real_core(row: tuple[StreamState, StreamEvent]) -> None:
    stream, seen = ROWS[row]()
    first, event = row
    assert seen[0] is first
    # The server answering early goes on to reset the rest of the request: one more row, same end.
    expected = S.CLOSED if row == (S.OPEN, E.SEND_END_STREAM) else TRANSITIONS[row]
    assert seen[1] is expected, f"{event.label} from {first.label}"
    assert (stream.local_closed, stream.remote_closed) == (
        expected in {S.HALF_CLOSED_LOCAL, S.CLOSED},
        expected in {S.HALF_CLOSED_REMOTE, S.CLOSED},
    )


@pytest.mark.parametrize("state", list(S), ids=lambda s: s.name)
@pytest.mark.parametrize("event", list(E), ids=lambda e: e.name)
def test_what_the_table_does_not_hold_is_refused(state: StreamState, event: StreamEvent) -> None:
    if (state, event) in TRANSITIONS:
        return
    stream: Stream[None] = Stream(1, None)
    stream.state = state
    if event is E.RECV_END_STREAM:  # the peer ended its side twice: STREAM_CLOSED (RFC 9113 5.1)
        with pytest.raises(ProtocolError, match="ended again") as caught:
            stream.apply(event)
        assert caught.value.code == ErrorCode.STREAM_CLOSED
    else:  # ours: a bug, never a frame on the wire
        with pytest.raises(RuntimeError, match=event.label):
            stream.apply(event)
    assert stream.state is state


def test_data_after_the_peer_ended_its_side_is_a_stream_error() -> None:
    core, handler = server()
    stream = open_server_stream(core, handler, ended=True)
    core.receive_data(frame(FrameType.DATA, 0, 1, b"late"))
    assert stream.state is S.CLOSED
    assert handler.resets == []  # our reset, not the peer's: the handler hears nothing
