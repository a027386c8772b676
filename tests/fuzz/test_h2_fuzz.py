"""Fuzzing the HTTP/2 core in the server role and its HPACK decoder: any bytes a client can send.

Streams of frames are built valid (preface, SETTINGS, requests whose header blocks use HPACK's dynamic
table and Huffman coding, DATA, CONTINUATION, WINDOW_UPDATE, PING, PRIORITY, RST_STREAM, GOAWAY, unknown
types), then mutated and cut into reads at random points. Whatever arrives, the core must not raise
out of ``receive_data`` (a protocol error is a GOAWAY, never an exception), must keep its limits (open
streams, buffered bytes), and must write only well-formed frames.
"""

from __future__ import annotations

import itertools
import struct
from typing import Any

import hpack
from hypothesis import given
from hypothesis import strategies as st

from sonic.h2.frames import (
    PREFACE,
    ErrorCode,
    Flag,
    FrameType,
    ProtocolError,
    Setting,
    frame,
    settings_frame,
    window_update,
)
from sonic.h2.headers import HeaderDecoder, Headers
from sonic.h2.limits import SERVER_LIMITS
from sonic.h2.server import ServerRole
from sonic.h2.stream import Stream
from sonic.testing.fuzz import mutated, one_in, run_bounded
from sonic.testing.h2 import parse_frames

PEAK_BYTES = 8 << 20
FRAME_TYPES = [int(t) for t in FrameType]
ERROR_CODES = {int(code) for code in ErrorCode}


class EchoCore:
    """Answers each request with its body (so flow control and output run too); records resets (the
    handler of a server-role core, ``h2``)."""

    def __init__(self) -> None:
        self.h2 = ServerRole(self, limits=SERVER_LIMITS).connection
        self.bodies: dict[int, bytearray] = {}

    def headers_received(self, stream: Stream[Any], headers: Headers, end_stream: bool) -> None:
        self.bodies[stream.stream_id] = bytearray()

    def stream_data(self, stream: Stream[Any], data: memoryview) -> None:
        body = self.bodies[stream.stream_id]
        if len(body) < 1 << 16:  # the echo is bounded, what the core buffers is what is tested
            body += data

    def stream_ended(self, stream: Stream[Any]) -> None:
        body = bytes(self.bodies.pop(stream.stream_id, b""))
        self.h2.send_headers(stream, hpack.Encoder().encode([(b":status", b"200")]))
        self.h2.respond(stream, [body * 4], hpack.Encoder().encode([(b"grpc-status", b"0")]))

    def stream_reset(self, stream: Stream[Any]) -> None:
        self.bodies.pop(stream.stream_id, None)

    def goaway_received(self, last_stream_id: int, code: int, unprocessed: list[Stream[Any]]) -> None:
        pass


REQUEST = [
    (b":method", b"POST"),
    (b":scheme", b"http"),
    (b":path", b"/inference.GRPCInferenceService/ModelInfer"),
    (b":authority", b"localhost"),
    (b"content-type", b"application/grpc"),
    (b"te", b"trailers"),
]
header_fields = st.tuples(
    st.sampled_from([b":method", b":path", b"te", b"grpc-timeout", b"x-custom", b"Upper", b"connection"])
    | st.binary(max_size=8),
    st.binary(max_size=16),
)


@st.composite
def header_blocks(draw: st.DrawFn, encoder: hpack.Encoder) -> bytes:
    """A request's header block from a stateful encoder (dynamic table, Huffman), fields changed now and then."""
    fields = list(REQUEST)
    if draw(one_in(3)):
        fields += draw(st.lists(header_fields, max_size=3))
    if draw(one_in(6)):
        fields = draw(st.permutations(fields))
    if draw(one_in(8)):
        encoder.header_table_size = draw(st.sampled_from([0, 256, 4096, 1 << 20]))
    block: bytes = encoder.encode(fields, huffman=draw(st.booleans()))
    return block


@st.composite
def frame_streams(draw: st.DrawFn) -> bytes:
    """A client's connection: the preface, SETTINGS, then a mix of mostly valid frames."""
    encoder = hpack.Encoder()
    out = [
        PREFACE,
        settings_frame({Setting.INITIAL_WINDOW_SIZE: draw(st.sampled_from([65535, 1 << 20, 1, 0]))}),
    ]
    stream_id = 1
    for index in range(draw(st.integers(1, 12))):
        kind = (
            "request"
            if index == 0
            else draw(
                st.sampled_from(
                    [
                        "request",
                        "request",
                        "split",
                        "data",
                        "short",
                        "window",
                        "ping",
                        "priority",
                        "rst",
                        "settings",
                        "raw",
                        "goaway",
                    ]
                )
            )
        )
        if kind in {"request", "split"}:
            block = draw(header_blocks(encoder))
            body = draw(st.binary(max_size=64))
            end = not body and draw(st.booleans())
            flags = Flag.END_STREAM if end else 0
            if kind == "split" and len(block) > 1:
                cut = draw(st.integers(1, len(block) - 1))
                out.append(frame(FrameType.HEADERS, flags, stream_id, block[:cut]))
                out.append(frame(FrameType.CONTINUATION, Flag.END_HEADERS, stream_id, block[cut:]))
            else:
                padded = draw(one_in(4))
                payload = bytes([3]) + block + b"\0\0\0" if padded else block
                out.append(
                    frame(
                        FrameType.HEADERS,
                        flags | Flag.END_HEADERS | (Flag.PADDED if padded else 0),
                        stream_id,
                        payload,
                    )
                )
            if body:
                out.append(frame(FrameType.DATA, Flag.END_STREAM, stream_id, body))
            stream_id += 2
        elif kind == "data":
            target = draw(st.sampled_from([max(1, stream_id - 2), stream_id, 0]))
            out.append(
                frame(
                    FrameType.DATA, draw(st.sampled_from([0, 1, 8, 9])), target, draw(st.binary(max_size=32))
                )
            )
        elif kind == "window":
            out.append(
                window_update(
                    draw(st.integers(0, stream_id)), draw(st.sampled_from([0, 1, 65535, 2**31 - 1]))
                )
            )
        elif kind == "ping":
            out.append(
                frame(
                    FrameType.PING, draw(st.sampled_from([0, 1])), 0, draw(st.binary(min_size=8, max_size=8))
                )
            )
        elif kind == "priority":
            out.append(
                frame(FrameType.PRIORITY, 0, draw(st.integers(0, stream_id)), struct.pack(">IB", 0, 16))
            )
        elif kind == "rst":
            out.append(
                frame(
                    FrameType.RST_STREAM,
                    0,
                    draw(st.sampled_from([max(1, stream_id - 2), stream_id])),
                    struct.pack(">I", 8),
                )
            )
        elif kind == "settings":
            key = draw(st.sampled_from([int(s) for s in Setting] + [0, 7, 0xFFFF]))
            out.append(
                frame(FrameType.SETTINGS, 0, 0, struct.pack(">HI", key, draw(st.integers(0, 2**32 - 1))))
            )
        elif kind == "short":  # frames shorter than their flags promise (pad length, priority fields)
            out.append(
                frame(
                    draw(st.sampled_from([FrameType.HEADERS, FrameType.DATA, FrameType.PRIORITY])),
                    draw(st.sampled_from([Flag.PADDED, Flag.PRIORITY, Flag.PADDED | Flag.PRIORITY]))
                    | draw(st.sampled_from([0, Flag.END_HEADERS, Flag.END_STREAM])),
                    draw(st.sampled_from([stream_id, max(1, stream_id - 2)])),
                    draw(st.binary(max_size=6)),
                )
            )
        elif kind == "goaway":
            out.append(frame(FrameType.GOAWAY, 0, 0, struct.pack(">II", stream_id, 0)))
        else:
            frame_type = draw(st.sampled_from(FRAME_TYPES) | st.integers(0, 255))
            out.append(
                frame(
                    frame_type,
                    draw(st.integers(0, 255)),
                    draw(st.integers(0, stream_id + 2)),
                    draw(st.binary(max_size=24)),
                )
            )
    return b"".join(out)


def _feed(pieces: list[bytes]) -> EchoCore:
    core = EchoCore()
    core.h2.start(0.0)
    written = bytearray()
    for piece in pieces:
        core.h2.receive_data(piece)
        for chunk in core.h2.data_to_send():
            written += chunk
        assert len(core.h2.streams) <= core.h2.limits.max_concurrent_streams
        assert len(core.h2._buffer) <= 9 + (1 << 20) + len(PREFACE)
        if core.h2.state.ended:
            break
    for frame_type, _, _, payload in parse_frames(bytes(written)):
        if frame_type == FrameType.GOAWAY:
            assert struct.unpack(">I", payload[4:8])[0] in ERROR_CODES
        if frame_type == FrameType.RST_STREAM:
            assert struct.unpack(">I", payload)[0] in ERROR_CODES
    return core


def _cut(data: bytes, cuts: list[int]) -> list[bytes]:
    bounds = [0, *sorted(c % (len(data) + 1) for c in cuts), len(data)]
    return [data[a:b] for a, b in itertools.pairwise(bounds)]


@st.composite
def mutated_frame_streams(draw: st.DrawFn) -> bytes:
    data = draw(frame_streams())
    return draw(mutated(data)) if draw(one_in(3)) else data


@given(mutated_frame_streams(), st.lists(st.integers(0, 1 << 16), max_size=6))
def test_server_core_takes_any_frames(data: bytes, cuts: list[int]) -> None:
    run_bounded(lambda: _feed(_cut(data, cuts)), allowed=(), max_peak_bytes=PEAK_BYTES)


@given(st.binary(max_size=256), st.lists(st.integers(0, 512), max_size=4))
def test_server_core_takes_random_bytes_after_the_preface(data: bytes, cuts: list[int]) -> None:
    run_bounded(lambda: _feed(_cut(PREFACE + data, cuts)), allowed=(), max_peak_bytes=PEAK_BYTES)


@given(st.binary(max_size=64))
def test_server_core_refuses_what_is_not_a_preface(data: bytes) -> None:
    core = run_bounded(lambda: _feed([data]), allowed=(), max_peak_bytes=PEAK_BYTES).value
    assert core is not None
    if len(data) >= len(PREFACE) and not data.startswith(PREFACE):
        assert core.h2.state.ended


@st.composite
def hpack_sequences(draw: st.DrawFn) -> list[bytes]:
    encoder = hpack.Encoder()
    # In order: each block is encoded against the table the blocks before it left.
    return [draw(mutated(draw(header_blocks(encoder)))) for _ in range(draw(st.integers(1, 4)))]


@given(hpack_sequences())
def test_hpack_decoder_raises_only_protocol_errors(blocks: list[bytes]) -> None:
    """A bad block is a COMPRESSION_ERROR (the connection ends); the decoded list stays bounded."""
    decoder = HeaderDecoder(max_header_list_bytes=1 << 12, memo_bytes=1 << 14)

    def decode_all() -> None:
        for block in blocks:
            fields = decoder.decode(block)
            assert sum(len(n) + len(v) for n, v in fields) <= (1 << 12) + 32 * len(fields)
        assert decoder.memo_bytes <= 1 << 14

    outcome = run_bounded(decode_all, allowed=(ProtocolError,), max_peak_bytes=PEAK_BYTES)
    if isinstance(outcome.error, ProtocolError):
        assert outcome.error.code == ErrorCode.COMPRESSION_ERROR
