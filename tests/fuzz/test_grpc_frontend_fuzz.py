"""Fuzzing the native gRPC front end end to end, without a socket: HTTP/2 bytes into a real
:class:`GrpcConnection` over a real data plane with a loaded model, the answer read back from what the
connection writes.

Calls are built valid (every method's path, content-type, ``grpc-timeout``, ``grpc-encoding``, a
length-prefixed message, compressed or not, for ModelInfer a request the model accepts), then their
headers, messages and bytes are changed. Every call must end with a gRPC status, and a status of
INTERNAL or UNKNOWN only where the gRPC spec's status table puts one (a message that does not inflate,
a stream that ends inside a message, a request message protobuf cannot parse).
"""

from __future__ import annotations

import asyncio
import gzip
import struct
from collections.abc import Iterator
from dataclasses import dataclass

import hpack
import numpy as np
import pytest
from hypothesis import given
from hypothesis import strategies as st
from tests.fuzz.served import identity_plane
from tritonclient.grpc import service_pb2

from sonic.grpc.call import decode_grpc_message, grpc_message_prefix
from sonic.h2.frames import PREFACE, Flag, FrameType, frame, settings_frame
from sonic.protocol.errors import GrpcCode
from sonic.protocol.wire import SERVICE
from sonic.server.frontends.base import FrontendSettings
from sonic.server.frontends.grpc_h2 import GrpcConnection, H2GrpcFrontend
from sonic.testing.fuzz import mutated, one_in
from sonic.testing.h2 import RecordingTransport, parse_frames

MAX_MESSAGE_BYTES = 1 << 16
# INTERNAL where the gRPC status table (and grpcio, so Triton) puts it; any other is a server failure.
SPEC_INTERNAL = (
    "compressed message without a grpc-encoding header",
    "request stream ended inside a message",
    "the request has no message",
    "cannot parse the",
    "cannot decompress the message",
)


@dataclass(frozen=True)
class Served:
    frontend: H2GrpcFrontend
    runner: asyncio.Runner


@pytest.fixture(scope="module")
def served(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Served]:
    with identity_plane(tmp_path_factory.mktemp("repository")) as plane:
        settings = FrontendSettings("127.0.0.1", max_message_bytes=MAX_MESSAGE_BYTES)
        frontend = H2GrpcFrontend(plane.dataplane, plane.gate, 0, settings, budget=plane.budget)
        yield Served(frontend, plane.runner)


def _infer_request(batch: int) -> bytes:
    request = service_pb2.ModelInferRequest(model_name="identity")
    request.inputs.add(name="INPUT0", datatype="FP32", shape=[batch, 16])
    request.raw_input_contents.append(np.ones((batch, 16), np.float32).tobytes())
    return bytes(request.SerializeToString())


UNARY = {
    "ServerLive": b"",
    "ModelReady": service_pb2.ModelReadyRequest(name="identity").SerializeToString(),
    "ModelMetadata": service_pb2.ModelMetadataRequest(name="identity", version="1").SerializeToString(),
    "ModelConfig": service_pb2.ModelConfigRequest(name="identity").SerializeToString(),
    "SystemSharedMemoryStatus": b"",
    "ModelInfer": _infer_request(2),
    "ModelStreamInfer": _infer_request(1),
}


@st.composite
def calls(draw: st.DrawFn) -> bytes:
    """One connection with one to three calls, each a header block and a framed message."""
    encoder = hpack.Encoder()
    out = [PREFACE, settings_frame({})]
    for index in range(draw(st.integers(1, 3))):
        method = draw(st.sampled_from(sorted(UNARY)))
        message = UNARY[method]
        fields = [
            (b":method", b"POST"),
            (b":scheme", b"http"),
            (b":path", f"/{SERVICE}/{method}".encode()),
            (b":authority", b"localhost"),
            (b"content-type", b"application/grpc"),
            (b"te", b"trailers"),
        ]
        compressed = draw(one_in(4))
        if compressed:
            fields.append(
                (b"grpc-encoding", draw(st.sampled_from([b"gzip", b"deflate", b"br", b"identity"])))
            )
            message = gzip.compress(message)
        if draw(one_in(3)):
            timeout = draw(st.sampled_from([b"1S", b"100m", b"99999999H", b"0n", b"1", b"S", b"123456789S"]))
            fields.append((b"grpc-timeout", timeout))
        if draw(one_in(4)):
            name, value = draw(st.sampled_from(fields))
            fields.remove((name, value))
            fields.append((name, draw(st.binary(max_size=12))))
        body = grpc_message_prefix(len(message), compressed=compressed) + message
        if draw(one_in(3)):
            body = draw(mutated(body))
        stream_id = 2 * index + 1
        out.append(frame(FrameType.HEADERS, Flag.END_HEADERS, stream_id, encoder.encode(fields)))
        out.append(frame(FrameType.DATA, Flag.END_STREAM, stream_id, body))
    return b"".join(out)


def _statuses(written: bytes) -> list[tuple[int, str]]:
    """(grpc-status, grpc-message) of every call the connection ended."""
    decoder = hpack.Decoder()
    statuses = []
    for frame_type, _, _, payload in parse_frames(written):
        if frame_type != FrameType.HEADERS:
            continue
        fields = dict(decoder.decode(payload, raw=True))
        if b"grpc-status" in fields:
            statuses.append(
                (int(fields[b"grpc-status"]), decode_grpc_message(fields.get(b"grpc-message", b"")))
            )
    return statuses


async def _exchange(frontend: H2GrpcFrontend, data: bytes) -> bytes:
    connection = GrpcConnection(frontend)
    transport = RecordingTransport()
    connection.protocol.connection_made(transport)  # type: ignore[arg-type]
    running = asyncio.all_tasks()  # the models' own (schedulers), which never end
    connection.protocol.data_received(data)
    # Each call's handler runs as a task of this loop: the answers are all written once they are done.
    while calls := asyncio.all_tasks() - running:
        await asyncio.wait(calls)
        running |= calls
    transport.writelines(connection.core.data_to_send())  # what the next loop iteration would write
    written = bytes(transport.written)
    connection.protocol.connection_lost(None)
    return written


@given(calls())
def test_every_call_ends_with_a_status_of_the_spec(served: Served, data: bytes) -> None:
    written = served.runner.run(_exchange(served.frontend, data))
    for frame_type, _, _, payload in parse_frames(written):
        if frame_type == FrameType.GOAWAY:  # a connection error: the code is the core's (test_h2_fuzz)
            assert struct.unpack(">I", payload[4:8])[0] != 2  # never INTERNAL_ERROR
    for code, message in _statuses(written):
        assert code <= max(GrpcCode)
        if code in {GrpcCode.INTERNAL, GrpcCode.UNKNOWN}:
            assert message.startswith(SPEC_INTERNAL) or any(part in message for part in SPEC_INTERNAL), (
                message
            )
