"""The server role of our HTTP/2 stack on its asyncio adapter: frames cut anywhere, flow control, HPACK memo, gRPC framing."""

from __future__ import annotations

import asyncio
import dataclasses
import struct
from typing import Any

import hpack
import pytest

from sonic.grpc.call import encode_grpc_message, grpc_message_prefix, parse_grpc_timeout
from sonic.h2.aio import BufferedReads, H2Protocol, receive_buffer
from sonic.h2.frames import PREFACE, ErrorCode, Flag, FrameType, Setting, frame, settings_frame, window_update
from sonic.h2.headers import HeaderDecoder, Headers, encode_headers
from sonic.h2.limits import SERVER_LIMITS
from sonic.h2.server import ServerRole
from sonic.h2.stream import Stream
from sonic.protocol.errors import GrpcCode
from sonic.server.frontends.grpc_h2_call import CallError, MessageReader
from sonic.testing.h2 import RecordingTransport, parse_frames

REQUEST_HEADERS = [
    (":method", "POST"),
    (":scheme", "http"),
    (":path", "/echo"),
    (":authority", "localhost"),
    ("content-type", "application/grpc"),
    ("te", "trailers"),
]


class EchoConnection:
    """Answers each stream with the bytes it received, once the peer ends it: the handler of a server-role
    core (``h2``) on the asyncio adapter (``protocol``)."""

    def __init__(self, linger_s: float = SERVER_LIMITS.linger_s) -> None:
        self.h2 = ServerRole(
            self, limits=dataclasses.replace(SERVER_LIMITS, max_concurrent_streams=4, linger_s=linger_s)
        ).connection
        self.protocol = H2Protocol(self.h2)
        self.received: dict[int, bytearray] = {}
        self.headers: dict[int, Headers] = {}
        self.resets: list[int] = []

    def headers_received(self, stream: Stream[Any], headers: Headers, end_stream: bool) -> None:
        self.headers[stream.stream_id] = headers
        self.received[stream.stream_id] = bytearray()

    def stream_data(self, stream: Stream[Any], data: memoryview) -> None:
        self.received[stream.stream_id] += data

    def stream_ended(self, stream: Stream[Any]) -> None:
        self.h2.send_headers(stream, encode_headers([(b":status", b"200")]))
        self.h2.respond(
            stream, [bytes(self.received[stream.stream_id])], encode_headers([(b"grpc-status", b"0")])
        )

    def stream_reset(self, stream: Stream[Any]) -> None:
        self.resets.append(stream.stream_id)

    def goaway_received(self, last_stream_id: int, code: int, unprocessed: list[Stream[Any]]) -> None:
        pass


def client_bytes(bodies: dict[int, bytes], *, settings: dict[Setting, int] | None = None) -> bytes:
    encoder = hpack.Encoder()
    # Default windows are too small to echo every body at once: the client grants more.
    settings = settings or {Setting.INITIAL_WINDOW_SIZE: 1 << 20}
    out = [PREFACE, settings_frame(settings), window_update(0, 1 << 20)]
    for stream_id, body in bodies.items():
        out.append(frame(FrameType.HEADERS, Flag.END_HEADERS, stream_id, encoder.encode(REQUEST_HEADERS)))
        # Two DATA frames per stream, the second ending it, so bodies cross frame boundaries too.
        half = len(body) // 2
        out.append(frame(FrameType.DATA, 0, stream_id, body[:half]))
        out.append(frame(FrameType.DATA, Flag.END_STREAM, stream_id, body[half:]))
    return b"".join(out)


async def run_connection(data: bytes, chunk: int) -> tuple[EchoConnection, RecordingTransport]:
    connection = EchoConnection()
    transport = RecordingTransport()
    connection.protocol.connection_made(transport)  # type: ignore[arg-type]
    for start in range(0, len(data), chunk):
        connection.protocol.data_received(data[start : start + chunk])
    await asyncio.sleep(0)  # writes leave on the next loop iteration
    return connection, transport


@pytest.mark.parametrize("chunk", [1, 7, 4096, 1 << 20])
async def test_streams_survive_any_cut_of_the_byte_stream(chunk: int) -> None:
    bodies = {1: b"a" * 1000, 3: bytes(range(256)) * 300, 5: b""}
    connection, transport = await run_connection(client_bytes(bodies), chunk)
    assert {k: bytes(v) for k, v in connection.received.items()} == bodies
    assert dict(connection.headers[1])[b":path"] == b"/echo"
    echoed: dict[int, bytearray] = {1: bytearray(), 3: bytearray(), 5: bytearray()}
    ended = set()
    for frame_type, flags, stream_id, payload in parse_frames(bytes(transport.written)):
        if frame_type == FrameType.DATA:
            echoed[stream_id] += payload
        if frame_type == FrameType.HEADERS and flags & Flag.END_STREAM:
            ended.add(stream_id)
    assert {k: bytes(v) for k, v in echoed.items()} == bodies
    assert ended == {1, 3, 5}
    assert not connection.h2.streams  # all closed and forgotten


async def test_connections_sharing_one_receive_buffer_keep_their_own_bytes() -> None:
    """BufferedReads of several connections read into one buffer in turn (as uvloop shares its own): what a
    read leaves unparsed (a frame cut anywhere) is the core's copy, never a view the next read overwrites."""
    shared = receive_buffer()
    bodies = [{1: b"a" * 1000, 3: bytes(range(256)) * 300}, {1: b"z" * 70_000, 3: b"", 5: b"q" * 5}]
    connections = [EchoConnection() for _ in bodies]
    reads = [BufferedReads(c.protocol, shared) for c in connections]
    transports = [RecordingTransport() for _ in bodies]
    for read, transport in zip(reads, transports, strict=True):
        read.connection_made(transport)  # type: ignore[arg-type]
    streams = [client_bytes(b) for b in bodies]
    positions = [0, 0]
    cuts = [7, 4093]  # each connection's reads end at different places in its frames
    while any(pos < len(data) for pos, data in zip(positions, streams, strict=True)):
        for index, read in enumerate(reads):
            data, pos = streams[index], positions[index]
            if pos >= len(data):
                continue
            target = read.get_buffer(-1)
            size = min(len(target), cuts[index], len(data) - pos)
            target[:size] = data[pos : pos + size]
            target[size : size + 16] = b"\xff" * len(target[size : size + 16])  # garbage past the read
            read.buffer_updated(size)
            positions[index] = pos + size
    await asyncio.sleep(0)  # writes leave on the next loop iteration
    for connection, expected in zip(connections, bodies, strict=True):
        assert {k: bytes(v) for k, v in connection.received.items()} == expected


async def test_output_waits_for_the_peers_window() -> None:
    data = client_bytes({1: b"x" * 100}, settings={Setting.INITIAL_WINDOW_SIZE: 10})
    connection, transport = await run_connection(data, 1 << 20)
    sent = [f for f in parse_frames(bytes(transport.written)) if f[2] == 1]
    assert sum(len(f[3]) for f in sent if f[0] == FrameType.DATA) == 10
    assert not any(f[0] == FrameType.HEADERS and f[1] & Flag.END_STREAM for f in sent)  # trailers wait too
    transport.written.clear()
    connection.protocol.data_received(window_update(1, 90))
    await asyncio.sleep(0)
    sent = parse_frames(bytes(transport.written))
    assert sum(len(f[3]) for f in sent if f[0] == FrameType.DATA) == 90
    assert sent[-1][0] == FrameType.HEADERS
    assert sent[-1][1] & Flag.END_STREAM


async def test_streams_over_the_limit_are_refused_and_pings_answered() -> None:
    encoder = hpack.Encoder()
    opens = [
        frame(FrameType.HEADERS, Flag.END_HEADERS, i, encoder.encode(REQUEST_HEADERS))
        for i in (1, 3, 5, 7, 9)
    ]
    ping = frame(FrameType.PING, 0, 0, b"12345678")
    connection, transport = await run_connection(b"".join([PREFACE, settings_frame({}), *opens, ping]), 64)
    frames = parse_frames(bytes(transport.written))
    refused = [f for f in frames if f[0] == FrameType.RST_STREAM]
    assert [(f[2], struct.unpack(">I", f[3])[0]) for f in refused] == [(9, ErrorCode.REFUSED_STREAM)]
    assert (FrameType.PING, Flag.ACK, 0, b"12345678") in frames
    assert sorted(connection.h2.streams) == [1, 3, 5, 7]


async def test_reset_stream_is_reported_and_garbage_closes_the_connection() -> None:
    encoder = hpack.Encoder()
    opened = frame(FrameType.HEADERS, Flag.END_HEADERS, 1, encoder.encode(REQUEST_HEADERS))
    reset = frame(FrameType.RST_STREAM, 0, 1, struct.pack(">I", ErrorCode.CANCEL))
    connection, transport = await run_connection(b"".join([PREFACE, settings_frame({}), opened, reset]), 1024)
    assert connection.resets == [1]
    assert not transport.closed
    _, bad_transport = await run_connection(b"GET / HTTP/1.1\r\nHost: x\r\n\r\n", 1024)
    # A lingering close: the GOAWAY is written, then writing shut down; the socket stays open a while.
    assert bad_transport.eof_written
    assert not bad_transport.closed
    assert parse_frames(bytes(bad_transport.written))[-1][0] == FrameType.GOAWAY


async def test_a_lingering_close_drops_what_comes_and_ends_within_its_time() -> None:
    connection = EchoConnection(linger_s=0.05)
    transport = RecordingTransport()
    protocol = connection.protocol
    protocol.connection_made(transport)  # type: ignore[arg-type]
    protocol.data_received(b"GET / HTTP/1.1\r\nHost: x\r\n\r\n")  # not HTTP/2: GOAWAY and a lingering close
    await asyncio.sleep(0)  # writes leave on the next loop iteration
    written = bytes(transport.written)
    assert parse_frames(written)[-1][0] == FrameType.GOAWAY
    assert transport.eof_written
    protocol.data_received(b"\x00" * (1 << 20))  # what the peer still sends is read and dropped
    assert bytes(transport.written) == written
    assert not transport.closed
    await asyncio.wait_for(transport.ended.wait(), timeout=5.0)  # aborted once linger_s passed


async def test_a_lingering_close_drops_a_peer_that_floods() -> None:
    connection = EchoConnection(linger_s=60.0)
    transport = RecordingTransport()
    protocol = connection.protocol
    protocol.connection_made(transport)  # type: ignore[arg-type]
    protocol.data_received(b"GET / HTTP/1.1\r\nHost: x\r\n\r\n")
    await asyncio.sleep(0)  # writes leave on the next loop iteration
    assert transport.eof_written
    assert not transport.closed
    protocol.data_received(b"\x00" * (SERVER_LIMITS.linger_bytes + 1))
    assert transport.closed  # past linger_bytes: dropped at once, not after linger_s


def test_header_memo_matches_a_plain_decoder_as_the_table_changes() -> None:
    encoder = hpack.Encoder()
    values = ["a", "a", "b", "a", "b", "c" * 5000, "a"]  # the long value evicts entries
    blocks = [encoder.encode([*REQUEST_HEADERS, ("x-value", value)]) for value in values]
    blocks.append(blocks[1])  # an identical block after the table moved on
    memo, plain = HeaderDecoder(), hpack.Decoder()
    for block in blocks:
        expected = [(bytes(n), bytes(v)) for n, v in plain.decode(block, raw=True)]
        assert memo.decode(block) == expected


def test_encoded_headers_decode_to_themselves() -> None:
    headers = [(b":status", b"200"), (b"content-type", b"application/grpc"), (b"grpc-message", b"x" * 300)]
    assert hpack.Decoder().decode(encode_headers(headers), raw=True) == headers


@pytest.mark.parametrize("cut", [1, 2, 5, 6, 17, 1000])
def test_message_reader_reassembles_messages_cut_anywhere(cut: int) -> None:
    messages = [b"", b"hello", bytes(range(256)) * 10]
    data = b"".join(grpc_message_prefix(len(m)) + m for m in messages)
    reader = MessageReader(max_bytes=1 << 20, budget_bytes=1 << 30)
    got = []
    for start in range(0, len(data), cut):
        got += [bytes(m) for _, m in reader.feed(memoryview(data[start : start + cut]))]
    assert got == messages
    assert not reader.partial


def test_message_reader_refuses_oversized_messages() -> None:
    reader = MessageReader(max_bytes=10, budget_bytes=1 << 30)
    with pytest.raises(CallError, match=r"larger than max \(11 vs. 10\)") as caught:
        reader.feed(memoryview(grpc_message_prefix(11)))
    assert caught.value.code is GrpcCode.RESOURCE_EXHAUSTED


def test_message_reader_refuses_messages_over_the_whole_request_buffer_budget() -> None:
    reader = MessageReader(max_bytes=1 << 20, budget_bytes=10)
    with pytest.raises(CallError, match=r"11 bytes, larger than the server's whole request buffer") as caught:
        reader.feed(memoryview(grpc_message_prefix(11)))
    assert caught.value.code is GrpcCode.RESOURCE_EXHAUSTED


def test_grpc_timeout_and_message_encoding() -> None:
    assert parse_grpc_timeout(b"100m") == pytest.approx(0.1)
    assert parse_grpc_timeout(b"2S") == 2.0
    assert parse_grpc_timeout(b"5u") == pytest.approx(5e-6)
    for bad in (b"", b"10", b"x1m", b"123456789S", b"1q"):
        with pytest.raises(ValueError, match="malformed grpc-timeout"):
            parse_grpc_timeout(bad)
    assert encode_grpc_message("input 'x': 50% done\n é") == b"input 'x': 50%25 done%0A %C3%A9"


async def test_header_block_split_over_continuation_frames() -> None:
    block = hpack.Encoder().encode([*REQUEST_HEADERS, ("x-long", "v" * 40_000)])
    pieces = [block[:100], block[100:20_000], block[20_000:]]
    frames = [
        frame(FrameType.HEADERS, 0, 1, pieces[0]),
        frame(FrameType.CONTINUATION, 0, 1, pieces[1]),
        frame(FrameType.CONTINUATION, Flag.END_HEADERS, 1, pieces[2]),
        frame(FrameType.DATA, Flag.END_STREAM, 1, b"body"),
    ]
    connection, transport = await run_connection(b"".join([PREFACE, settings_frame({}), *frames]), 4096)
    assert dict(connection.headers[1])[b"x-long"] == b"v" * 40_000
    assert bytes(connection.received[1]) == b"body"
    assert not transport.closed
    interrupted = [frames[0], frame(FrameType.DATA, 0, 1, b"x")]  # anything but CONTINUATION is an error
    _, broken = await run_connection(b"".join([PREFACE, settings_frame({}), *interrupted]), 4096)
    assert broken.eof_written  # ended: GOAWAY, then writing shut down (a lingering close)
