"""The sans-I/O HTTP/2 core, server role: bytes in, frames out, no loop, no socket.

Cases follow RFC 9113 / RFC 7541 (and h2spec's list where it applies to a server) and the limits of
:class:`sonic.h2.limits.Http2Limits`: each violation must be answered with the right RST_STREAM or
GOAWAY code, never silence.
"""

from __future__ import annotations

import dataclasses
import struct
from typing import Any

import pytest

from sonic.h2.frames import (
    PREFACE,
    ErrorCode,
    Flag,
    FrameType,
    Setting,
    frame,
    rst_stream,
    settings_frame,
    window_update,
)
from sonic.h2.headers import Headers, encode_headers
from sonic.h2.lifecycle import ConnectionState
from sonic.h2.limits import SERVER_LIMITS, MemoBudget
from sonic.h2.server import ServerRole
from sonic.h2.stream import Stream, StreamState
from sonic.testing.h2 import parse_frames

REQUEST = [
    (b":method", b"POST"),
    (b":scheme", b"http"),
    (b":path", b"/echo"),
    (b":authority", b"localhost"),
    (b"content-type", b"application/grpc"),
]
BLOCK = encode_headers(REQUEST)


class Core:
    """Echoes each request body once the peer ends its stream; records what happened (the handler of a
    server-role core, ``h2``)."""

    def __init__(self, budget: MemoBudget | None = None, **limits: Any) -> None:
        self.server = ServerRole(
            self, limits=dataclasses.replace(SERVER_LIMITS, **limits), memo_budget=budget
        )
        self.h2 = self.server.connection
        self.bodies: dict[int, bytearray] = {}
        self.resets: list[int] = []

    def headers_received(self, stream: Stream[Any], headers: Headers, end_stream: bool) -> None:
        self.bodies[stream.stream_id] = bytearray()

    def stream_data(self, stream: Stream[Any], data: memoryview) -> None:
        self.bodies[stream.stream_id] += data

    def stream_ended(self, stream: Stream[Any]) -> None:
        self.h2.send_headers(stream, encode_headers([(b":status", b"200")]))
        self.h2.respond(
            stream, [bytes(self.bodies[stream.stream_id])], encode_headers([(b"grpc-status", b"0")])
        )

    def stream_reset(self, stream: Stream[Any]) -> None:
        self.resets.append(stream.stream_id)

    def goaway_received(self, last_stream_id: int, code: int, unprocessed: list[Stream[Any]]) -> None:
        pass


def connect(
    budget: MemoBudget | None = None, settings: dict[Setting, int] | None = None, **limits: Any
) -> Core:
    core = Core(budget, **limits)
    core.h2.start(0.0)
    core.h2.receive_data(PREFACE + settings_frame(settings or {}))
    core.h2.data_to_send()
    return core


def sent(core: Core) -> list[tuple[int, int, int, bytes]]:
    return parse_frames(b"".join(bytes(piece) for piece in core.h2.data_to_send()))


def goaway_code(frames: list[tuple[int, int, int, bytes]]) -> int | None:
    codes = [struct.unpack(">II", f[3][:8])[1] for f in frames if f[0] == FrameType.GOAWAY]
    return codes[-1] if codes else None


def resets(frames: list[tuple[int, int, int, bytes]]) -> list[tuple[int, int]]:
    return [(f[2], struct.unpack(">I", f[3])[0]) for f in frames if f[0] == FrameType.RST_STREAM]


def headers(stream_id: int, *, end_stream: bool = True, block: bytes = BLOCK) -> bytes:
    return frame(
        FrameType.HEADERS, Flag.END_HEADERS | (Flag.END_STREAM if end_stream else 0), stream_id, block
    )


def test_a_request_is_answered_without_any_io() -> None:
    core = connect()
    core.h2.receive_data(headers(1, end_stream=False) + frame(FrameType.DATA, Flag.END_STREAM, 1, b"ping"))
    frames = sent(core)
    assert [f[0] for f in frames] == [FrameType.HEADERS, FrameType.DATA, FrameType.HEADERS]
    assert frames[1][3] == b"ping"
    assert frames[2][1] & Flag.END_STREAM
    assert not core.h2.streams


def test_a_stream_goes_from_open_to_closed_as_rfc_9113_names_it() -> None:
    core = connect()
    core.h2.receive_data(headers(1, end_stream=False))
    stream = core.h2.streams[1]
    states = [stream.state]
    core.h2.receive_data(frame(FrameType.DATA, Flag.END_STREAM, 1, b"ping"))  # answered at once
    states.append(stream.state)
    assert states == [StreamState.OPEN, StreamState.CLOSED]
    assert 1 not in core.h2.streams


def test_settings_announce_the_limits() -> None:
    core = Core(max_concurrent_streams=7)
    core.h2.start(0.0)
    settings = sent(core)[0]
    pairs = dict(struct.unpack(">HI", settings[3][i : i + 6]) for i in range(0, len(settings[3]), 6))
    assert pairs[Setting.MAX_CONCURRENT_STREAMS] == 7
    assert pairs[Setting.MAX_HEADER_LIST_SIZE] == SERVER_LIMITS.max_header_list_bytes


# --- protocol violations: the right code ----------------------------------------------------------------

CONNECTION_ERRORS = {
    "DATA on stream 0": (frame(FrameType.DATA, 0, 0, b"x"), ErrorCode.PROTOCOL_ERROR),
    "DATA on an idle stream": (frame(FrameType.DATA, 0, 9, b"x"), ErrorCode.PROTOCOL_ERROR),
    "HEADERS on an even stream": (headers(2), ErrorCode.PROTOCOL_ERROR),
    "HEADERS on stream 0": (headers(0), ErrorCode.PROTOCOL_ERROR),
    "PING of 7 bytes": (frame(FrameType.PING, 0, 0, b"1234567"), ErrorCode.FRAME_SIZE_ERROR),
    "PING on a stream": (frame(FrameType.PING, 0, 1, b"12345678"), ErrorCode.PROTOCOL_ERROR),
    "SETTINGS on a stream": (frame(FrameType.SETTINGS, 0, 1, b""), ErrorCode.PROTOCOL_ERROR),
    "SETTINGS of 5 bytes": (frame(FrameType.SETTINGS, 0, 0, b"12345"), ErrorCode.FRAME_SIZE_ERROR),
    "SETTINGS ACK with a payload": (
        frame(FrameType.SETTINGS, Flag.ACK, 0, struct.pack(">HI", 1, 1)),
        ErrorCode.FRAME_SIZE_ERROR,
    ),
    "ENABLE_PUSH 2": (settings_frame({Setting.ENABLE_PUSH: 2}), ErrorCode.PROTOCOL_ERROR),
    "INITIAL_WINDOW_SIZE over 2^31-1": (
        settings_frame({Setting.INITIAL_WINDOW_SIZE: 1 << 31}),
        ErrorCode.FLOW_CONTROL_ERROR,
    ),
    "MAX_FRAME_SIZE below 16384": (settings_frame({Setting.MAX_FRAME_SIZE: 100}), ErrorCode.PROTOCOL_ERROR),
    "WINDOW_UPDATE of 0 on the connection": (window_update(0, 0), ErrorCode.PROTOCOL_ERROR),
    "WINDOW_UPDATE of 3 bytes": (frame(FrameType.WINDOW_UPDATE, 0, 0, b"123"), ErrorCode.FRAME_SIZE_ERROR),
    "WINDOW_UPDATE on an idle stream": (window_update(9, 1), ErrorCode.PROTOCOL_ERROR),
    "connection window over 2^31-1": (window_update(0, (1 << 31) - 1), ErrorCode.FLOW_CONTROL_ERROR),
    "RST_STREAM on stream 0": (rst_stream(0, ErrorCode.CANCEL), ErrorCode.PROTOCOL_ERROR),
    "RST_STREAM on an idle stream": (rst_stream(9, ErrorCode.CANCEL), ErrorCode.PROTOCOL_ERROR),
    "RST_STREAM of 3 bytes": (frame(FrameType.RST_STREAM, 0, 1, b"123"), ErrorCode.FRAME_SIZE_ERROR),
    "PRIORITY of 4 bytes": (frame(FrameType.PRIORITY, 0, 1, b"1234"), ErrorCode.FRAME_SIZE_ERROR),
    "PUSH_PROMISE from a client": (
        frame(FrameType.PUSH_PROMISE, 0, 1, b"\0\0\0\2"),
        ErrorCode.PROTOCOL_ERROR,
    ),
    "GOAWAY on a stream": (frame(FrameType.GOAWAY, 0, 1, b"\0" * 8), ErrorCode.PROTOCOL_ERROR),
    "a frame over our MAX_FRAME_SIZE": (
        frame(FrameType.DATA, 0, 1, b"x" * ((1 << 20) + 1)),
        ErrorCode.FRAME_SIZE_ERROR,
    ),
    "CONTINUATION without HEADERS": (
        frame(FrameType.CONTINUATION, Flag.END_HEADERS, 1, BLOCK),
        ErrorCode.PROTOCOL_ERROR,
    ),
    "HEADERS interrupted by DATA": (
        frame(FrameType.HEADERS, 0, 1, BLOCK) + frame(FrameType.DATA, 0, 1, b"x"),
        ErrorCode.PROTOCOL_ERROR,
    ),
    "HPACK index out of the table": (headers(1, block=b"\xff\xff\xff\x0f"), ErrorCode.COMPRESSION_ERROR),
}


@pytest.mark.parametrize("case", list(CONNECTION_ERRORS))
def test_connection_errors_are_goaway_with_their_code(case: str) -> None:
    data, code = CONNECTION_ERRORS[case]
    core = connect()
    core.h2.receive_data(data)
    assert goaway_code(sent(core)) == code
    assert core.h2.state.ended


def test_a_bad_preface_is_a_protocol_error() -> None:
    core = Core()
    core.h2.start(0.0)
    core.h2.receive_data(b"GET / HTTP/1.1\r\nHost: x\r\n\r\n")
    assert goaway_code(sent(core)) == ErrorCode.PROTOCOL_ERROR


def test_headers_on_a_closed_stream_get_rst_stream_closed() -> None:
    core = connect()
    core.h2.receive_data(headers(1) + headers(3))
    sent(core)
    core.h2.receive_data(headers(1))  # a stream id used before: the client must not wait forever
    assert resets(sent(core)) == [(1, ErrorCode.STREAM_CLOSED)]
    core.h2.receive_data(headers(5, end_stream=False) + rst_stream(5, ErrorCode.CANCEL) + headers(5))
    assert resets(sent(core)) == [(5, ErrorCode.STREAM_CLOSED)]
    assert not core.h2.state.ended


def test_frames_after_end_stream_are_stream_closed() -> None:
    core = Core(max_concurrent_streams=10)
    core.h2.start(0.0)
    core.h2.receive_data(PREFACE + settings_frame({Setting.INITIAL_WINDOW_SIZE: 0}))
    core.h2.receive_data(headers(1))  # the answer waits for a window: the stream stays half-closed (remote)
    sent(core)
    core.h2.receive_data(frame(FrameType.DATA, 0, 1, b"late"))
    assert resets(sent(core)) == [(1, ErrorCode.STREAM_CLOSED)]


def test_late_frames_on_closed_streams_follow_rfc_9113_section_5_1() -> None:
    core = connect()
    core.h2.receive_data(headers(1))  # answered and closed both ways
    core.h2.receive_data(headers(3, end_stream=False) + rst_stream(3, ErrorCode.CANCEL))  # reset by the peer
    sent(core)
    late = frame(FrameType.DATA, 0, 1, b"late") + frame(FrameType.DATA, 0, 3, b"late")
    core.h2.receive_data(late)
    assert resets(sent(core)) == [(1, ErrorCode.STREAM_CLOSED), (3, ErrorCode.STREAM_CLOSED)]
    core.h2.receive_data(late)  # after our RST_STREAM, frames in flight are ignored: said once per stream
    assert resets(sent(core)) == []
    assert not core.h2.state.ended


def test_headers_on_a_lower_stream_id_never_opened_is_a_protocol_error() -> None:
    core = connect()
    core.h2.receive_data(headers(5))
    sent(core)
    core.h2.receive_data(headers(3))  # ids only grow (RFC 9113 section 5.1.1): 3 was skipped, never opened
    assert goaway_code(sent(core)) == ErrorCode.PROTOCOL_ERROR


def test_stream_window_errors_reset_only_the_stream() -> None:
    core = connect()
    core.h2.receive_data(headers(1, end_stream=False) + headers(3, end_stream=False))
    core.h2.receive_data(window_update(1, 0) + window_update(3, (1 << 31) - 1))
    assert resets(sent(core)) == [(1, ErrorCode.PROTOCOL_ERROR), (3, ErrorCode.FLOW_CONTROL_ERROR)]
    assert core.resets == [1, 3]
    assert not core.h2.state.ended


# --- limits ----------------------------------------------------------------------------------------------


def test_streams_beyond_the_default_limit_are_refused() -> None:
    core = connect()
    opens = b"".join(headers(2 * i + 1, end_stream=False) for i in range(101))
    core.h2.receive_data(opens)
    assert len(core.h2.streams) == 100
    assert resets(sent(core)) == [(201, ErrorCode.REFUSED_STREAM)]


def test_one_headers_frame_over_the_block_limit_is_refused() -> None:
    core = connect(max_header_block_bytes=1000)
    huge = encode_headers([*REQUEST, (b"x-big", b"v" * 2000)])
    core.h2.receive_data(headers(1, block=huge))
    assert goaway_code(sent(core)) == ErrorCode.ENHANCE_YOUR_CALM
    assert not core.bodies  # refused before decoding


def test_continuations_are_capped_in_size_and_number() -> None:
    core = connect(max_header_block_bytes=1000)
    pieces = [frame(FrameType.HEADERS, 0, 1, BLOCK)] + [
        frame(FrameType.CONTINUATION, 0, 1, b"\x00" * 300)
    ] * 4
    core.h2.receive_data(b"".join(pieces))
    assert goaway_code(sent(core)) == ErrorCode.ENHANCE_YOUR_CALM
    core = connect()
    pieces = [frame(FrameType.HEADERS, 0, 1, BLOCK[:2])] + [frame(FrameType.CONTINUATION, 0, 1, b"\x82")] * 9
    core.h2.receive_data(b"".join(pieces))
    assert goaway_code(sent(core)) == ErrorCode.ENHANCE_YOUR_CALM


def test_hpack_table_size_updates_are_capped_per_block() -> None:
    core = connect()
    core.h2.receive_data(headers(1, block=b"\x20\x20" + BLOCK))  # two updates (to 0): allowed
    assert goaway_code(sent(core)) is None
    core.h2.receive_data(headers(3, block=b"\x20" * 3 + BLOCK))
    assert goaway_code(sent(core)) == ErrorCode.COMPRESSION_ERROR


def test_rapid_reset_is_budgeted() -> None:
    core = connect(rapid_reset_budget=10)
    for stream_id in range(1, 22, 2):  # 11 streams reset before any answer
        core.h2.receive_data(headers(stream_id, end_stream=False) + rst_stream(stream_id, ErrorCode.CANCEL))
    assert goaway_code(sent(core)) == ErrorCode.ENHANCE_YOUR_CALM
    assert core.h2.state is ConnectionState.ABORTING


def test_completed_streams_earn_reset_budget() -> None:
    core = connect(rapid_reset_budget=2)
    for stream_id in range(1, 41, 4):  # one completed call, then one reset, ten times
        core.h2.receive_data(headers(stream_id))
        core.h2.receive_data(
            headers(stream_id + 2, end_stream=False) + rst_stream(stream_id + 2, ErrorCode.CANCEL)
        )
    assert goaway_code(sent(core)) is None


@pytest.mark.parametrize(
    "flood",
    [
        settings_frame({}),
        frame(FrameType.PING, 0, 0, b"12345678"),
    ],
    ids=["SETTINGS", "PING"],
)
def test_acks_are_not_queued_without_bound_for_a_peer_that_does_not_read(flood: bytes) -> None:
    core = connect(max_queued_control_frames=50)
    core.h2.receive_data(flood * 40)
    assert goaway_code(sent(core)) is None  # 40 ACKs, taken by the transport
    core.h2.receive_data(flood * 51)  # 51 more before anything is taken: the peer does not read
    assert goaway_code(sent(core)) == ErrorCode.ENHANCE_YOUR_CALM
    assert core.h2.state is ConnectionState.ABORTING


@pytest.mark.parametrize(
    "nuisance",
    [
        frame(FrameType.DATA, 0, 1, b""),
        frame(FrameType.PRIORITY, 0, 1, b"\0\0\0\0\x10"),
        window_update(1, 1),
        settings_frame({Setting.HEADER_TABLE_SIZE: 4096}),
        frame(0xEE, 0, 0, b"unknown"),
    ],
    ids=["empty DATA", "PRIORITY", "WINDOW_UPDATE", "SETTINGS", "unknown type"],
)
def test_floods_of_frames_without_progress_end_the_connection(nuisance: bytes) -> None:
    core = connect()
    core.h2.receive_data(headers(1, end_stream=False))
    for _ in range(5000):
        core.h2.receive_data(nuisance)
        sent(core)  # the peer reads everything: only the work is the problem
        if core.h2.state.ended:
            break
    assert core.h2.state.ended
    assert core.h2.state is ConnectionState.ABORTING


def test_settings_with_too_many_entries_are_refused() -> None:
    core = connect()
    core.h2.receive_data(frame(FrameType.SETTINGS, 0, 0, struct.pack(">HI", 1, 4096) * 65))
    assert goaway_code(sent(core)) == ErrorCode.ENHANCE_YOUR_CALM


def test_window_updates_revisit_only_streams_whose_window_opened() -> None:
    core = connect(settings={Setting.INITIAL_WINDOW_SIZE: 0}, max_concurrent_streams=6000)
    core.h2.receive_data(b"".join(headers(2 * i + 1) for i in range(5000)))  # 5,000 answers parked
    sent(core)
    flushes = core.h2.output.flushes
    core.h2.receive_data(window_update(0, 1 << 20))  # the connection window alone releases nobody
    core.h2.receive_data(settings_frame({Setting.INITIAL_WINDOW_SIZE: 0}))
    assert core.h2.output.flushes - flushes == 0
    core.h2.receive_data(window_update(7, 100))
    assert core.h2.output.flushes - flushes == 1
    core.h2.receive_data(settings_frame({Setting.INITIAL_WINDOW_SIZE: 100}))  # now every window opens
    assert core.h2.output.flushes - flushes == 5000
    assert not core.h2.state.ended


def test_connection_window_serves_blocked_streams_in_order_and_stops_when_spent() -> None:
    core = connect(settings={Setting.INITIAL_WINDOW_SIZE: 1 << 20})
    body = b"x" * 40_000
    for stream_id in (1, 3, 5):
        core.h2.receive_data(
            headers(stream_id, end_stream=False) + frame(FrameType.DATA, Flag.END_STREAM, stream_id, body)
        )
    first = [f for f in sent(core) if f[0] == FrameType.DATA]
    assert sum(len(f[3]) for f in first) == 65_535  # the default connection window
    flushes = core.h2.output.flushes
    core.h2.receive_data(window_update(0, 10))
    assert core.h2.output.flushes - flushes == 1  # only the stream at the front
    core.h2.receive_data(window_update(0, 1 << 20))
    data = [f for f in sent(core) if f[0] == FrameType.DATA]
    assert sum(len(f[3]) for f in data) == 3 * 40_000 - 65_535


def test_header_memo_is_bounded_per_connection_and_server_wide() -> None:
    budget = MemoBudget(30_000)
    cores = [connect(budget, memo_bytes=20_000) for _ in range(3)]
    for core in cores:
        for stream_id in range(1, 400, 2):
            core.h2.receive_data(
                headers(stream_id, block=encode_headers([*REQUEST, (b"x-id", b"%d" % stream_id * 50)]))
            )
        sent(core)
    used = [core.h2.headers.memo_bytes for core in cores]
    assert 0 < used[0] <= 20_000
    assert sum(used) <= 30_000
    assert budget.available == 30_000 - sum(used)
    for core in cores:
        core.h2.transport_lost()
    assert budget.available == 30_000


# --- timers ----------------------------------------------------------------------------------------------


def test_an_idle_connection_is_closed_with_goaway_and_pings_do_not_keep_it() -> None:
    core = Core(idle_timeout_s=10.0, keepalive_interval_s=4.0, ping_timeout_s=2.0)
    core.h2.start(0.0)
    core.h2.receive_data(PREFACE + settings_frame({}) + headers(1))  # one call in the first period
    assert core.h2.next_deadline() == 4.0
    for now in (4.0, 8.0, 10.0, 12.0, 16.0):
        core.h2.on_timer(now)
        for ping in [f for f in sent(core) if f[0] == FrameType.PING]:
            core.h2.receive_data(frame(FrameType.PING, Flag.ACK, 0, ping[3]))  # the client answers every PING
        assert not core.h2.state.ended
    core.h2.on_timer(20.0)  # a whole period without a call
    frames = sent(core)
    assert goaway_code(frames) == ErrorCode.NO_ERROR
    assert core.h2.state.ended
    assert not (core.h2.state is ConnectionState.ABORTING)


def test_keepalive_pings_and_drops_a_silent_peer() -> None:
    core = Core(idle_timeout_s=None, keepalive_interval_s=5.0, ping_timeout_s=2.0)
    core.h2.start(0.0)
    sent(core)
    core.h2.on_timer(5.0)
    pings = [f for f in sent(core) if f[0] == FrameType.PING]
    assert len(pings) == 1
    assert core.h2.next_deadline() == 7.0
    core.h2.receive_data(PREFACE + frame(FrameType.PING, Flag.ACK, 0, pings[0][3]))
    core.h2.on_timer(10.0)  # answered, and bytes arrived: no new PING needed yet
    assert not core.h2.state.ended
    core.h2.on_timer(15.0)
    assert [f[0] for f in sent(core)] == [FrameType.PING]
    core.h2.on_timer(17.0)  # no answer within 2 s
    assert core.h2.state is ConnectionState.ABORTING


def test_answers_held_for_a_peer_that_does_not_read_are_bounded_too() -> None:
    core = connect(max_queued_control_frames=50)
    core.h2.receive_data(b"".join(headers(2 * i + 1) for i in range(60)))
    assert goaway_code(sent(core)) is None  # the transport takes each batch
    core.h2.pause_output(True)  # the transport's buffer is full: the peer does not read
    core.h2.receive_data(b"".join(headers(2 * i + 201) for i in range(60)))
    assert goaway_code(sent(core)) == ErrorCode.ENHANCE_YOUR_CALM
    assert core.h2.state is ConnectionState.ABORTING


MALFORMED = {
    "upper-case name": [*REQUEST, (b"X-Trace", b"1")],
    "unknown pseudo-header": [*REQUEST, (b":protocol", b"websocket")],
    "pseudo-header after a regular one": [*REQUEST[1:], REQUEST[0]],
    "duplicate :method": [*REQUEST[:1], *REQUEST],
    "connection-specific field": [*REQUEST, (b"connection", b"keep-alive")],
    "te other than trailers": [*REQUEST, (b"te", b"gzip")],
    "no :path": [f for f in REQUEST if f[0] != b":path"],
    "empty :path": [(n, b"" if n == b":path" else v) for n, v in REQUEST],
}


@pytest.mark.parametrize("case", list(MALFORMED))
def test_malformed_requests_are_reset_with_protocol_error(case: str) -> None:
    core = connect()
    core.h2.receive_data(headers(1, block=encode_headers(MALFORMED[case])))
    core.h2.receive_data(headers(3))  # the connection goes on
    frames = sent(core)
    assert resets(frames) == [(1, ErrorCode.PROTOCOL_ERROR)]
    assert goaway_code(frames) is None
    assert [f[2] for f in frames if f[0] == FrameType.HEADERS and f[1] & Flag.END_STREAM] == [3]


def test_pseudo_headers_in_trailers_are_a_stream_error() -> None:
    core = connect()
    core.h2.receive_data(headers(1, end_stream=False) + headers(1, block=encode_headers([(b":path", b"/x")])))
    assert resets(sent(core)) == [(1, ErrorCode.PROTOCOL_ERROR)]
    assert core.resets == [1]


class Refuser(Core):
    """Ends each stream as its first DATA arrives, as an application refuses a message too large."""

    def __init__(self) -> None:
        super().__init__()
        self.data_events: list[int] = []
        self.ended_events: list[int] = []

    def stream_data(self, stream: Stream[Any], data: memoryview) -> None:
        self.data_events.append(len(data))
        self.h2.end_now(stream, encode_headers([(b":status", b"200"), (b"grpc-status", b"8")]))

    def stream_ended(self, stream: Stream[Any]) -> None:
        self.ended_events.append(stream.stream_id)


def refusing() -> Refuser:
    core = Refuser()
    core.h2.start(0.0)
    core.h2.receive_data(PREFACE + settings_frame({}))
    core.h2.data_to_send()
    return core


def test_a_stream_ended_as_its_last_data_arrives_leaves_the_connection_open() -> None:
    # The END_STREAM of that DATA frame comes after the application ended the stream: once a
    # connection error (STREAM_CLOSED, "ended again by the peer") that failed every other call.
    core = refusing()
    core.h2.receive_data(headers(1, end_stream=False) + frame(FrameType.DATA, Flag.END_STREAM, 1, b"x" * 10))
    frames = sent(core)
    assert [f[0] for f in frames] == [FrameType.HEADERS, FrameType.RST_STREAM]
    assert frames[0][1] & Flag.END_STREAM
    assert goaway_code(frames) is None
    assert core.h2.state is ConnectionState.OPEN
    assert core.ended_events == []  # the application ended it: it hears no more of it
    assert not core.h2.streams


def test_the_rest_of_a_large_data_frame_on_a_stream_ended_meanwhile_is_dropped() -> None:
    core = refusing()
    body = frame(FrameType.DATA, Flag.END_STREAM, 1, b"x" * 10_000)
    core.h2.receive_data(headers(1, end_stream=False) + body[:5_000])
    core.h2.receive_data(body[5_000:])
    assert core.data_events == [5_000 - 9]  # the first part, less the frame header; none of the rest
    assert goaway_code(sent(core)) is None
    assert core.h2.state is ConnectionState.OPEN
    # The connection goes on.
    core.h2.receive_data(headers(3, end_stream=False) + frame(FrameType.DATA, Flag.END_STREAM, 3, b"y"))
    assert core.data_events == [5_000 - 9, 1]
