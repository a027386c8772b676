"""The native gRPC frontend's own duties: deadlines, size limits, unknown methods, bad peers."""

from __future__ import annotations

import socket
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import grpc
import hpack
import numpy as np
import numpy.typing as npt
import pytest
import tritonclient.grpc as grpcclient
from tritonclient.grpc import service_pb2
from tritonclient.utils import InferenceServerException

from sonic.grpc.call import decode_grpc_message, grpc_message_prefix
from sonic.h2.frames import PREFACE, Flag, FrameType, frame, settings_frame
from sonic.launch import ServerProcess

pytestmark = pytest.mark.integration

MAX_MESSAGE_BYTES = 50_000


@pytest.fixture(scope="module")
def native_server(test_repository: Path) -> Iterator[ServerProcess]:
    """The default frontend (h2), with a small message limit."""
    with ServerProcess.start(
        [test_repository], extra_args=["--max-message-bytes", str(MAX_MESSAGE_BYTES)]
    ) as process:
        yield process


def _infer(address: str, model: str, array: npt.NDArray[Any]) -> npt.NDArray[Any]:
    with grpcclient.InferenceServerClient(address) as client:
        tensor = grpcclient.InferInput("INPUT0", list(array.shape), "FP32")
        tensor.set_data_from_numpy(array)
        result: npt.NDArray[Any] | None = client.infer(model, [tensor]).as_numpy("OUTPUT0")
        assert result is not None
        return result


def _raw_call(
    address: str, path: str, message: bytes, extra_headers: list[tuple[str, str]]
) -> dict[str, str]:
    """One gRPC call over a plain socket; returns the response's header fields (trailers included)."""
    return _raw_calls(address, [(path, message, extra_headers)])[1]


def _raw_calls(
    address: str, calls: list[tuple[str, bytes, list[tuple[str, str]]]]
) -> dict[int, dict[str, str]]:
    """Calls on one connection over a plain socket, streams 1, 3, 5, ...; each stream's response header
    fields (trailers included), once every call has ended."""
    host, port = address.rsplit(":", 1)
    encoder, decoder = hpack.Encoder(), hpack.Decoder()
    request = [PREFACE, settings_frame({})]
    for index, (path, message, extra_headers) in enumerate(calls):
        headers = [
            (":method", "POST"),
            (":scheme", "http"),
            (":path", path),
            (":authority", address),
            ("content-type", "application/grpc"),
            ("te", "trailers"),
            *extra_headers,
        ]
        stream_id = 2 * index + 1
        request.append(frame(FrameType.HEADERS, Flag.END_HEADERS, stream_id, encoder.encode(headers)))
        request.append(
            frame(FrameType.DATA, Flag.END_STREAM, stream_id, grpc_message_prefix(len(message)) + message)
        )
    fields: dict[int, dict[str, str]] = {}
    ended: set[int] = set()
    with socket.create_connection((host, int(port)), timeout=30) as sock:
        sock.sendall(b"".join(request))
        buffer = b""
        while len(ended) < len(calls):
            chunk = sock.recv(65536)
            if not chunk:
                break
            buffer += chunk
            while len(buffer) >= 9:
                length = int.from_bytes(buffer[:3], "big")
                if len(buffer) < 9 + length:
                    break
                frame_type, flags, stream_id = buffer[3], buffer[4], int.from_bytes(buffer[5:9], "big")
                payload, buffer = buffer[9 : 9 + length], buffer[9 + length :]
                if frame_type == FrameType.HEADERS and stream_id % 2 == 1:
                    stream_fields = fields.setdefault(stream_id, {})
                    stream_fields.update(
                        (n.decode(), v.decode()) for n, v in decoder.decode(payload, raw=True)
                    )
                    if flags & Flag.END_STREAM:
                        ended.add(stream_id)
    return fields


def _slow_request() -> bytes:
    request = service_pb2.ModelInferRequest(model_name="slow")
    request.inputs.add(name="INPUT0", datatype="FP32", shape=[8, 512])
    request.raw_input_contents.append(np.ones((8, 512), np.float32).tobytes())
    return bytes(request.SerializeToString())


def test_server_ends_calls_at_their_deadline_and_keeps_serving(native_server: ServerProcess) -> None:
    fields = _raw_call(
        native_server.grpc_address,
        "/inference.GRPCInferenceService/ModelInfer",
        _slow_request(),
        [("grpc-timeout", "1u")],
    )
    assert fields["grpc-status"] == str(grpc.StatusCode.DEADLINE_EXCEEDED.value[0])
    ok = _raw_call(
        native_server.grpc_address, "/inference.GRPCInferenceService/ModelInfer", _slow_request(), []
    )
    assert ok["grpc-status"] == "0"


def test_calls_on_one_connection_keep_their_own_deadlines(native_server: ServerProcess) -> None:
    """The connection's one deadline timer: a later call with an earlier deadline moves it forward, and
    after it fires the calls with later deadlines (or none) go on to their answers."""
    path = "/inference.GRPCInferenceService/ModelInfer"
    fields = _raw_calls(
        native_server.grpc_address,
        [
            (path, _slow_request(), [("grpc-timeout", "60S")]),
            (path, _slow_request(), [("grpc-timeout", "1u")]),
            (path, _slow_request(), []),
            (path, _slow_request(), [("grpc-timeout", "2n")]),
        ],
    )
    deadline_exceeded = str(grpc.StatusCode.DEADLINE_EXCEEDED.value[0])
    assert [fields[stream_id]["grpc-status"] for stream_id in (1, 3, 5, 7)] == [
        "0",
        deadline_exceeded,
        "0",
        deadline_exceeded,
    ]


def test_malformed_deadline_and_unknown_method(native_server: ServerProcess) -> None:
    fields = _raw_call(
        native_server.grpc_address,
        "/inference.GRPCInferenceService/ModelInfer",
        b"",
        [("grpc-timeout", "soon")],
    )
    with grpc.insecure_channel(native_server.grpc_address) as channel:
        call = channel.unary_unary(
            "/inference.GRPCInferenceService/NoSuchMethod",
            request_serializer=None,
            response_deserializer=None,
        )
        with pytest.raises(grpc.RpcError) as caught:
            call(b"")
    assert caught.value.code() is grpc.StatusCode.UNIMPLEMENTED
    assert fields["grpc-status"] == str(grpc.StatusCode.INVALID_ARGUMENT.value[0])
    assert "malformed grpc-timeout 'soon'" in decode_grpc_message(fields["grpc-message"].encode())


def test_message_size_limit_is_resource_exhausted(native_server: ServerProcess) -> None:
    small = np.ones((2, 16), np.float32)
    np.testing.assert_array_equal(_infer(native_server.grpc_address, "identity", small), small)
    with pytest.raises(InferenceServerException, match="larger than max") as caught:
        _infer(native_server.grpc_address, "identity", np.ones((1024, 16), np.float32) * 2)
    assert caught.value.status() == "StatusCode.RESOURCE_EXHAUSTED"
    np.testing.assert_array_equal(_infer(native_server.grpc_address, "identity", small), small)


def test_gzip_request_over_the_limit_once_inflated(native_server: ServerProcess) -> None:
    zeros = np.zeros((1024, 16), np.float32)  # 64 KiB compresses to almost nothing
    request = service_pb2.ModelInferRequest(model_name="identity")
    request.inputs.add(name="INPUT0", datatype="FP32", shape=list(zeros.shape))
    request.raw_input_contents.append(zeros.tobytes())
    request.raw_input_contents.append(zeros.tobytes())  # 128 KiB in all: over the 50 kB limit
    with grpc.insecure_channel(native_server.grpc_address, compression=grpc.Compression.Gzip) as channel:
        call = channel.unary_unary(
            "/inference.GRPCInferenceService/ModelInfer", request_serializer=None, response_deserializer=None
        )
        with pytest.raises(grpc.RpcError) as caught:
            call(request.SerializeToString())
    assert caught.value.code() is grpc.StatusCode.RESOURCE_EXHAUSTED


def test_gzip_bomb_stops_at_the_limit_while_inflating(native_server: ServerProcess) -> None:
    bomb = bytes(40 << 20)  # 40 MiB of zeros: ~40 KiB on the wire, under the 50 kB message limit
    with grpc.insecure_channel(native_server.grpc_address, compression=grpc.Compression.Gzip) as channel:
        call = channel.unary_unary(
            "/inference.GRPCInferenceService/ModelInfer", request_serializer=None, response_deserializer=None
        )
        with pytest.raises(grpc.RpcError) as caught:
            call(bomb)
    assert caught.value.code() is grpc.StatusCode.RESOURCE_EXHAUSTED
    assert f"> {MAX_MESSAGE_BYTES} bytes decompressed" in str(caught.value.details())
    small = np.ones((1, 16), np.float32)
    np.testing.assert_array_equal(_infer(native_server.grpc_address, "identity", small), small)


def test_compressed_stream_messages_are_inflated_and_bounded(native_server: ServerProcess) -> None:
    small = np.arange(16, dtype=np.float32).reshape(1, 16)
    request = service_pb2.ModelInferRequest(model_name="identity", id="small")
    request.inputs.add(name="INPUT0", datatype="FP32", shape=[1, 16])
    request.raw_input_contents.append(small.tobytes())
    with grpc.insecure_channel(native_server.grpc_address, compression=grpc.Compression.Gzip) as channel:
        call = channel.stream_stream(
            "/inference.GRPCInferenceService/ModelStreamInfer",
            request_serializer=None,
            response_deserializer=None,
        )
        answers = list(call(iter([request.SerializeToString()])))
        assert len(answers) == 1
        answer = service_pb2.ModelStreamInferResponse.FromString(answers[0])
        assert answer.infer_response.id == "small"
        assert (
            np.frombuffer(answer.infer_response.raw_output_contents[0], np.float32).tolist()
            == small.ravel().tolist()
        )
        with pytest.raises(grpc.RpcError) as caught:
            list(call(iter([bytes(40 << 20)])))
    assert caught.value.code() is grpc.StatusCode.RESOURCE_EXHAUSTED
    assert "bytes decompressed" in str(caught.value.details())


def test_a_peer_that_is_not_http2_is_dropped_and_others_are_served(native_server: ServerProcess) -> None:
    host, port = native_server.grpc_address.rsplit(":", 1)
    with socket.create_connection((host, int(port)), timeout=30) as sock:
        sock.sendall(b"GET / HTTP/1.1\r\nHost: localhost\r\n\r\n")
        received = b""
        while chunk := sock.recv(65536):
            received += chunk
    assert received  # a SETTINGS frame, then GOAWAY, then the connection closes
    small = np.arange(16, dtype=np.float32).reshape(1, 16)
    np.testing.assert_array_equal(_infer(native_server.grpc_address, "identity", small), small)
