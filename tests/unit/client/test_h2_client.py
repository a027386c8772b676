"""The native client's HTTP/2 layer on its own: responses cut anywhere, windows, errors, GOAWAY, deadlines."""

from __future__ import annotations

import asyncio
import struct
from typing import Any

import hpack
import numpy as np
import pytest

from sonic.client.errors import (
    ConnectionLostError,
    DeadlineExceededError,
    InvalidRequestError,
    ResourceExhaustedError,
    ServerError,
    UnavailableError,
)
from sonic.client.transport.h2 import H2Transport
from sonic.client.transport.h2_connection import WRITE_BATCH_BYTES, ClientConnection
from sonic.grpc.call import grpc_message_prefix
from sonic.h2.frames import (
    PREFACE,
    ErrorCode,
    Flag,
    FrameType,
    Setting,
    frame,
    goaway,
    rst_stream,
    settings_frame,
    window_update,
)
from sonic.h2.headers import encode_headers
from sonic.h2.stream import Stream, StreamState
from sonic.protocol.types import WireInput, WireRequest
from sonic.testing.h2 import CoreOutput, parse_frames

OK_HEADERS = encode_headers([(b":status", b"200"), (b"content-type", b"application/grpc")])


def trailers(status: int, message: str = "") -> bytes:
    fields = [(b"grpc-status", str(status).encode())]
    if message:
        fields.append((b"grpc-message", message.replace(" ", "%20").encode()))
    return encode_headers(fields)


def response(stream_id: int, message: bytes) -> bytes:
    """A whole unary answer: headers, the message in two DATA frames, OK trailers."""
    body = grpc_message_prefix(len(message)) + message
    half = len(body) // 2
    return b"".join(
        [
            frame(FrameType.HEADERS, Flag.END_HEADERS, stream_id, OK_HEADERS),
            frame(FrameType.DATA, 0, stream_id, body[:half]),
            frame(FrameType.DATA, 0, stream_id, body[half:]),
            frame(FrameType.HEADERS, Flag.END_HEADERS | Flag.END_STREAM, stream_id, trailers(0)),
        ]
    )


async def connect(
    server_settings: dict[Setting, int] | None = None,
) -> tuple[ClientConnection, CoreOutput]:
    connection = ClientConnection("127.0.0.1:1")
    connection.core.start(asyncio.get_running_loop().time())
    transport = CoreOutput(connection.core)
    connection.core.receive_data(settings_frame(server_settings or {}))
    return connection, transport


def call(connection: ClientConnection, body: bytes = b"request") -> Stream[Any]:
    return connection.open_call(b"", [grpc_message_prefix(len(body)), body], max_bytes=1 << 20)


def written_frames(transport: CoreOutput) -> list[tuple[int, int, int, bytes]]:
    data = bytes(transport.written)
    assert data.startswith(PREFACE)
    return parse_frames(data[len(PREFACE) :])


def sent_data(transport: CoreOutput, stream_id: int) -> tuple[bytes, bool]:
    """The DATA bytes sent on a stream, and whether END_STREAM was sent."""
    frames = [f for f in written_frames(transport) if f[2] == stream_id]
    data = b"".join(f[3] for f in frames if f[0] == FrameType.DATA)
    return data, any(f[1] & Flag.END_STREAM for f in frames)


@pytest.mark.parametrize("chunk", [1, 5, 13, 4096])
async def test_responses_survive_any_cut_of_the_byte_stream(chunk: int) -> None:
    connection, transport = await connect()
    assert bytes(transport.written).startswith(PREFACE)
    first, second = call(connection, b"one"), call(connection, b"two")
    assert sent_data(transport, 1) == (grpc_message_prefix(3) + b"one", True)
    messages = {1: b"a" * 1000, 3: bytes(range(256)) * 40}
    data = response(3, messages[3]) + response(1, messages[1])
    for start in range(0, len(data), chunk):
        connection.core.receive_data(data[start : start + chunk])
    assert bytes(await first.app.future) == messages[1]
    assert bytes(await second.app.future) == messages[3]
    assert not connection.core.streams


async def test_a_call_is_half_closed_locally_once_its_request_is_sent() -> None:
    connection, _ = await connect()
    stream = call(connection)
    states = [stream.state]  # the request ended with its last DATA
    connection.core.receive_data(response(1, b"answer"))
    states.append(stream.state)
    assert states == [StreamState.HALF_CLOSED_LOCAL, StreamState.CLOSED]
    assert bytes(await stream.app.future) == b"answer"


async def test_request_waits_for_the_servers_window() -> None:
    connection, transport = await connect({Setting.INITIAL_WINDOW_SIZE: 10})
    stream = call(connection, b"x" * 95)  # 100 bytes with the prefix
    assert sent_data(transport, 1) == (grpc_message_prefix(95) + b"x" * 5, False)
    connection.core.receive_data(window_update(1, 90))
    data, ended = sent_data(transport, 1)
    assert len(data) == 100
    assert ended
    assert not stream.app.future.done()


@pytest.mark.parametrize(
    ("status", "error"),
    [(14, UnavailableError), (3, InvalidRequestError), (8, ResourceExhaustedError), (13, ServerError)],
)
async def test_trailers_only_errors_map_to_our_types(status: int, error: type[Exception]) -> None:
    connection, _ = await connect()
    stream = call(connection)
    block = encode_headers([(b":status", b"200"), (b"grpc-status", str(status).encode())])
    block += encode_headers([(b"grpc-message", b"model%20busy")])
    connection.core.receive_data(frame(FrameType.HEADERS, Flag.END_HEADERS | Flag.END_STREAM, 1, block))
    with pytest.raises(error, match="model busy") as caught:
        await stream.app.future
    assert type(caught.value) is error


async def test_resets_goaway_and_loss_fail_calls_as_retryable() -> None:
    connection, transport = await connect()
    refused, finished, unprocessed = call(connection), call(connection), call(connection)
    connection.core.receive_data(rst_stream(1, ErrorCode.REFUSED_STREAM))
    with pytest.raises(UnavailableError, match="REFUSED_STREAM"):
        await refused.app.future
    connection.core.receive_data(goaway(3, ErrorCode.NO_ERROR) + frame(FrameType.PING, 0, 0, b"pingpong"))
    assert connection.closing
    with pytest.raises(ConnectionLostError, match="GOAWAY"):
        await unprocessed.app.future
    with pytest.raises(ConnectionLostError):
        call(connection)  # new calls go to a new connection
    connection.core.receive_data(response(3, b"done"))  # streams up to the GOAWAY's id still finish
    assert bytes(await finished.app.future) == b"done"
    assert (FrameType.PING, Flag.ACK, 0, b"pingpong") in written_frames(transport)
    assert transport.closed  # the last stream ended: the connection closes itself

    connection, _ = await connect()
    lost = call(connection)
    connection.protocol.connection_lost(ConnectionResetError("reset by peer"))
    with pytest.raises(ConnectionLostError, match="lost"):
        await lost.app.future


async def test_bad_responses_are_errors() -> None:
    connection, _ = await connect()
    unhttp, no_status, too_big = call(connection), call(connection), call(connection)
    connection.core.receive_data(
        frame(
            FrameType.HEADERS, Flag.END_HEADERS | Flag.END_STREAM, 1, encode_headers([(b":status", b"503")])
        )
    )
    with pytest.raises(UnavailableError, match="HTTP status 503"):
        await unhttp.app.future
    connection.core.receive_data(frame(FrameType.HEADERS, Flag.END_HEADERS, 3, OK_HEADERS))
    connection.core.receive_data(frame(FrameType.DATA, Flag.END_STREAM, 3, grpc_message_prefix(1) + b"x"))
    with pytest.raises(ServerError, match="without grpc-status"):
        await no_status.app.future
    connection.core.receive_data(frame(FrameType.HEADERS, Flag.END_HEADERS, 5, OK_HEADERS))
    connection.core.receive_data(frame(FrameType.DATA, 0, 5, grpc_message_prefix(2 << 20)))
    with pytest.raises(ResourceExhaustedError, match="larger than the limit"):
        await too_big.app.future
    assert not connection.core.streams


async def test_the_server_must_speak_hpack_and_http2() -> None:
    connection, transport = await connect()
    stream = call(connection)
    connection.core.receive_data(frame(FrameType.HEADERS, Flag.END_HEADERS, 1, b"\xff\xff\xff\xff"))
    assert transport.closed
    assert written_frames(transport)[-1][0] == FrameType.GOAWAY
    connection.protocol.connection_lost(None)
    with pytest.raises(ConnectionLostError):
        await stream.app.future
    assert isinstance(hpack.Decoder().decode(OK_HEADERS), list)  # our encoder's blocks are plain HPACK


class SilentServer(asyncio.Protocol):
    """Takes a connection and reads it, answering nothing: every call runs into its deadline."""

    received = bytearray()

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        self.transport = transport

    def data_received(self, data: bytes) -> None:
        self.received += data


async def test_deadline_cancels_the_stream_and_connect_failures_are_connection_errors() -> None:
    protocol = SilentServer()
    server = await asyncio.get_running_loop().create_server(lambda: protocol, "127.0.0.1", 0)
    port = server.sockets[0].getsockname()[1]
    transport = H2Transport(f"127.0.0.1:{port}")
    x = np.ones((1, 4), np.float32)
    request = WireRequest("identity", "", (WireInput("INPUT0", "FP32", (1, 4), x.data),), timeout_s=0.05)
    with pytest.raises(DeadlineExceededError, match=r"no response within 0\.05 s"):
        await transport.infer(request)
    await transport.close()
    server.close()
    await server.wait_closed()
    frames = parse_frames(bytes(protocol.received[len(PREFACE) :]))
    headers = next(f for f in frames if f[0] == FrameType.HEADERS)
    fields = dict(hpack.Decoder().decode(headers[3], raw=True))
    assert fields[b":path"] == b"/inference.GRPCInferenceService/ModelInfer"
    assert fields[b"grpc-timeout"] == b"50000u"
    assert (FrameType.RST_STREAM, 0, 1, struct.pack(">I", ErrorCode.CANCEL)) in frames

    with pytest.raises(ConnectionLostError, match="failed to connect"):
        await H2Transport(f"127.0.0.1:{port}").server_ready()


async def test_large_requests_leave_in_bounded_batches() -> None:
    connection, transport = await connect({Setting.INITIAL_WINDOW_SIZE: 1 << 24})
    connection.core.receive_data(window_update(0, 1 << 24))
    body = bytes(range(256)) * 4096  # 1 MiB: four batches
    stream = call(connection, body)
    # Each read takes what one loop iteration would write: one batch, so reads are not starved.
    batches = [len(sent_data(transport, 1)[0]) for _ in range(6)]
    batch = WRITE_BATCH_BYTES
    assert batches[0] == batch
    assert batches[1] == 2 * batch
    assert sent_data(transport, 1) == (grpc_message_prefix(len(body)) + body, True)
    assert not stream.app.future.done()


async def test_one_timer_fails_each_call_at_its_own_deadline() -> None:
    """Calls of mixed timeouts share the connection's one deadline timer: each fails at its own
    deadline (a shorter one opened later re-arms it), answered calls and calls without one never do."""
    connection, transport = await connect()

    def timed(timeout_s: float | None) -> Stream[Any]:
        body = b"request"
        message: list[bytes | memoryview] = [grpc_message_prefix(len(body)), body]
        return connection.open_call(b"", message, max_bytes=1 << 20, timeout_s=timeout_s)

    long, short, middle, answered, endless = timed(30.0), timed(0.05), timed(0.2), timed(0.1), timed(None)
    connection.core.receive_data(response(answered.stream_id, b"in time"))
    with pytest.raises(DeadlineExceededError, match=r"no response within 0\.05 s"):
        await short.app.future
    assert not middle.app.future.done()
    with pytest.raises(DeadlineExceededError, match=r"no response within 0\.2 s"):
        await middle.app.future
    resets = {f[2] for f in written_frames(transport) if f[0] == FrameType.RST_STREAM}
    assert resets == {short.stream_id, middle.stream_id}
    assert bytes(await answered.app.future) == b"in time"
    assert not long.app.future.done()
    assert not endless.app.future.done()
    connection.core.receive_data(response(long.stream_id, b"late but within 30 s"))
    assert bytes(await long.app.future) == b"late but within 30 s"
    connection.protocol.connection_lost(None)
    with pytest.raises(ConnectionLostError):
        await endless.app.future
