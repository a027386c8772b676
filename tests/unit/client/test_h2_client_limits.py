"""The native client against a misbehaving server: bounded inflation, protocol errors, keepalive."""

from __future__ import annotations

import asyncio
import dataclasses
import gzip
import struct

import pytest

from sonic.client.errors import ConnectionLostError, ResourceExhaustedError
from sonic.client.transport.h2 import H2Transport
from sonic.client.transport.h2_connection import ClientConnection
from sonic.grpc.call import grpc_message_prefix
from sonic.h2.frames import PREFACE, ErrorCode, Flag, FrameType, frame, settings_frame
from sonic.h2.headers import encode_headers
from sonic.h2.limits import CLIENT_LIMITS
from sonic.testing.h2 import CoreOutput, parse_frames

GZIP_HEADERS = encode_headers(
    [(b":status", b"200"), (b"content-type", b"application/grpc"), (b"grpc-encoding", b"gzip")]
)
OK_TRAILERS = encode_headers([(b"grpc-status", b"0")])


class CompressingServer(asyncio.Protocol):
    """Answers stream 1, once its request has arrived, with one gzip-compressed message."""

    def __init__(self, message: bytes) -> None:
        self.message = message
        self.received = bytearray()

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        self.transport: asyncio.Transport = transport  # type: ignore[assignment]

    def data_received(self, data: bytes) -> None:
        self.received += data
        frames = parse_frames(bytes(self.received[len(PREFACE) :]))
        if any(f[0] == FrameType.DATA and f[1] & Flag.END_STREAM for f in frames):
            body = grpc_message_prefix(len(self.message), compressed=True) + self.message
            self.transport.write(
                settings_frame({})
                + frame(FrameType.HEADERS, Flag.END_HEADERS, 1, GZIP_HEADERS)
                + frame(FrameType.DATA, 0, 1, body)
                + frame(FrameType.HEADERS, Flag.END_HEADERS | Flag.END_STREAM, 1, OK_TRAILERS)
            )


async def call_server(message: bytes, max_decompressed_bytes: int) -> bytes | memoryview:
    server = await asyncio.get_running_loop().create_server(
        lambda: CompressingServer(message), "127.0.0.1", 0
    )
    port = server.sockets[0].getsockname()[1]
    transport = H2Transport(f"127.0.0.1:{port}", max_decompressed_bytes=max_decompressed_bytes)
    try:
        return await transport.raw_call("ModelInfer", b"request", 10.0)
    finally:
        await transport.close()
        server.close()
        await server.wait_closed()


async def test_compressed_responses_inflate_within_the_bound() -> None:
    assert bytes(await call_server(gzip.compress(b"tensor" * 1000), 6000)) == b"tensor" * 1000
    bomb = gzip.compress(bytes(16 << 20))  # 16 MiB of zeros in 16 KiB
    with pytest.raises(ResourceExhaustedError, match=r"larger than max \(> 1048576 bytes decompressed\)"):
        await call_server(bomb, 1 << 20)


async def connected(**limits: object) -> tuple[ClientConnection, CoreOutput]:
    connection = ClientConnection("127.0.0.1:1", dataclasses.replace(CLIENT_LIMITS, **limits))  # type: ignore[arg-type]
    connection.core.start(asyncio.get_running_loop().time())
    transport = CoreOutput(connection.core)
    connection.core.receive_data(settings_frame({}))
    transport.written.clear()
    return connection, transport


def goaway_code(transport: CoreOutput) -> int | None:
    frames = [f for f in parse_frames(bytes(transport.written)) if f[0] == FrameType.GOAWAY]
    return struct.unpack(">II", frames[-1][3][:8])[1] if frames else None


@pytest.mark.parametrize(
    ("data", "code"),
    [
        (frame(FrameType.PUSH_PROMISE, Flag.END_HEADERS, 1, b"\0\0\0\2"), ErrorCode.PROTOCOL_ERROR),
        (frame(FrameType.HEADERS, Flag.END_HEADERS, 3, OK_TRAILERS), ErrorCode.PROTOCOL_ERROR),
        (frame(FrameType.DATA, 0, 0, b"x"), ErrorCode.PROTOCOL_ERROR),
        (frame(FrameType.HEADERS, Flag.END_HEADERS, 1, b"\x00" * 70_000), ErrorCode.ENHANCE_YOUR_CALM),
        (frame(FrameType.PING, 0, 0, b"12345678") * 1001, ErrorCode.ENHANCE_YOUR_CALM),
        (frame(FrameType.HEADERS, Flag.END_HEADERS, 1, b"\x20\x20\x20"), ErrorCode.COMPRESSION_ERROR),
    ],
    ids=[
        "PUSH_PROMISE",
        "HEADERS on an idle stream",
        "DATA on stream 0",
        "huge header block",
        "PING flood",
        "table size updates",
    ],
)
async def test_server_violations_end_the_connection_with_their_code(data: bytes, code: int) -> None:
    connection, transport = await connected()
    stream = connection.open_call(b"", [grpc_message_prefix(1), b"x"], max_bytes=1 << 20)
    connection.core.receive_data(data)
    assert goaway_code(transport) == code
    assert transport.closed
    connection.protocol.connection_lost(None)
    assert isinstance(stream.app.future.exception(), ConnectionLostError)


async def test_keepalive_is_an_option_of_the_client() -> None:
    connection, transport = await connected(keepalive_interval_s=5.0, ping_timeout_s=1.0)
    now = asyncio.get_running_loop().time()
    deadline = connection.core.next_deadline()
    assert deadline is not None
    assert deadline == pytest.approx(now + 5.0, abs=1.0)
    connection.core.on_timer(deadline)  # the SETTINGS arrived in the first period: no PING needed
    assert not transport.written
    connection.core.on_timer(deadline + 5.0)  # silence in the second
    pings = [f for f in parse_frames(bytes(transport.written)) if f[0] == FrameType.PING]
    assert len(pings) == 1
    connection.core.on_timer(deadline + 6.0)
    assert transport.closed  # no answer: the connection is dropped, calls go to a new one
    default, _ = await connected()
    assert default.core.next_deadline() is None  # off unless asked for
