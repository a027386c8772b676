"""Zero-copy receipt of a large ModelInfer request on the native gRPC front end (issue 37 item 2).

The socket is played by hand through the connection's ``BufferedProtocol`` (``get_buffer``, then the
bytes written where it points, then ``buffer_updated``: what the kernel's ``recv_into`` does), so the
test sees where every read went. A request of several MiB must land in one buffer, nearly all of it read
there directly (the count of bytes copied is bounded by one read of the adapter's own buffer), and the
array that reaches onnxruntime must be a view of that buffer: no copy between the socket and the model.
"""

from __future__ import annotations

import asyncio
from collections.abc import Iterator, Sequence
from typing import Any

import hpack
import numpy as np
import numpy.typing as npt
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from tests.fuzz.served import Plane, identity_plane
from tritonclient.grpc import service_pb2

from sonic.grpc.call import GRPC_MESSAGE_PREFIX_BYTES, grpc_message_prefix
from sonic.h2.aio import RECEIVE_BUFFER_BYTES
from sonic.h2.connection import IN_PLACE_MIN_BYTES
from sonic.h2.frames import (
    FRAME_HEADER_BYTES,
    PREFACE,
    Flag,
    FrameType,
    Setting,
    frame,
    settings_frame,
    window_update,
)
from sonic.h2.settings import MAX_FRAME_BYTES
from sonic.protocol.grpc_codec import encode_infer_request
from sonic.protocol.wire import MAX_MESSAGE_BYTES
from sonic.server.frontends.base import FrontendSettings
from sonic.server.frontends.grpc_h2 import GrpcConnection, H2GrpcFrontend
from sonic.testing.h2 import RecordingTransport, parse_frames
from sonic.testing.h2peer import grpc_headers

# Any batch: a request of several frames of the largest size the server takes.
CONFIG = """
name: "identity"
backend: "onnxruntime"
max_batch_size: 0
input [ { name: "INPUT0" data_type: TYPE_FP32 dims: [ -1, 16 ] } ]
output [ { name: "OUTPUT0" data_type: TYPE_FP32 dims: [ -1, 16 ] } ]
"""
ROWS = 100_000  # 6.4 MB of FP32: seven DATA frames of 1 MiB


@pytest.fixture(scope="module")
def plane(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Plane]:
    with identity_plane(tmp_path_factory.mktemp("repository"), config_text=CONFIG) as plane:
        yield plane


def served_frontend(plane: Plane) -> H2GrpcFrontend:
    settings = FrontendSettings("127.0.0.1", max_message_bytes=MAX_MESSAGE_BYTES)
    return H2GrpcFrontend(plane.dataplane, plane.gate, 0, settings, budget=plane.budget)


def client_bytes(message: bytes, frame_bytes: int, method: str = "ModelInfer", count: int = 1) -> bytes:
    """A client's connection with one call of ``count`` messages, cut in DATA frames of ``frame_bytes``
    wherever the messages end."""
    body = (grpc_message_prefix(len(message)) + message) * count
    out = [
        PREFACE,
        settings_frame({Setting.INITIAL_WINDOW_SIZE: (1 << 31) - 1}),  # the response leaves at once
        window_update(0, (1 << 31) - 1 - 65535),
        frame(FrameType.HEADERS, Flag.END_HEADERS, 1, hpack.Encoder().encode(grpc_headers(method))),
    ]
    for start in range(0, len(body), frame_bytes):
        end = min(start + frame_bytes, len(body))
        out.append(frame(FrameType.DATA, Flag.END_STREAM if end == len(body) else 0, 1, body[start:end]))
    return b"".join(out)


async def exchange(
    frontend: H2GrpcFrontend, data: bytes, read_caps: Sequence[int] = (), sizes: list[int] | None = None
) -> tuple[GrpcConnection, bytes]:
    """``data`` read by the connection as the kernel would hand it over (each read as large as the memory
    offered, or, with ``read_caps``, at most the next cap in turn: TCP segments); what the connection wrote.
    ``sizes``, when given, gets the size of every read in turn."""
    connection = GrpcConnection(frontend)
    transport = RecordingTransport()
    connection.reads.connection_made(transport)  # type: ignore[arg-type]
    running = asyncio.all_tasks()  # the models' own (schedulers), which never end
    with memoryview(data) as view:
        pos, reads = 0, 0
        while pos < len(view):
            target = connection.reads.get_buffer(-1)
            size = min(len(target), len(view) - pos)
            if read_caps:
                size = min(size, read_caps[reads % len(read_caps)])
                reads += 1
            target[:size] = view[pos : pos + size]
            connection.reads.buffer_updated(size)
            if sizes is not None:
                sizes.append(size)
            pos += size
    while calls := asyncio.all_tasks() - running:
        await asyncio.wait(calls)
        running |= calls
    transport.writelines(connection.core.data_to_send())
    connection.reads.connection_lost(None)
    return connection, bytes(transport.written)


def response_messages(written: bytes) -> list[bytes]:
    """The messages of the connection's answer on stream 1 (asserting it ended with status 0)."""
    decoder = hpack.Decoder()
    body = bytearray()
    status = None
    for frame_type, _, stream_id, payload in parse_frames(written):
        if stream_id != 1:
            continue
        if frame_type == FrameType.DATA:
            body += payload
        elif frame_type == FrameType.HEADERS:
            status = dict(decoder.decode(payload, raw=True)).get(b"grpc-status", status)
    assert status == b"0", written[-200:]
    messages = []
    while body:
        length = int.from_bytes(body[1:GRPC_MESSAGE_PREFIX_BYTES], "big")
        messages.append(bytes(body[GRPC_MESSAGE_PREFIX_BYTES : GRPC_MESSAGE_PREFIX_BYTES + length]))
        del body[: GRPC_MESSAGE_PREFIX_BYTES + length]
    return messages


def response_output(written: bytes) -> bytes:
    """OUTPUT0's bytes from the connection's one ModelInfer answer."""
    [message] = response_messages(written)
    return bytes(service_pb2.ModelInferResponse.FromString(message).raw_output_contents[0])


def owner(array: npt.NDArray[Any]) -> object:
    """The object that owns ``array``'s memory, through views of views and memoryviews."""
    base: object = array
    while True:
        if isinstance(base, np.ndarray) and base.base is not None:
            base = base.base
        elif isinstance(base, memoryview):
            base = base.obj
        else:
            return base


def recording(execute: Any, seen: list[npt.NDArray[Any]]) -> Any:
    """``execute`` of a backend, keeping the INPUT0 array it was given."""

    def execute_recorded(inputs: Any, output_names: Any) -> dict[str, npt.NDArray[Any]]:
        seen.append(inputs["INPUT0"])
        return dict(execute(inputs, output_names))

    return execute_recorded


def test_a_large_request_lands_once_and_reaches_the_model_as_a_view(
    plane: Plane, monkeypatch: pytest.MonkeyPatch
) -> None:
    array = np.random.default_rng(0).random((ROWS, 16), dtype=np.float32)
    message = encode_infer_request("identity", "", {"INPUT0": array}, {"INPUT0": "FP32"})
    seen: list[npt.NDArray[Any]] = []
    for instance in plane.dataplane.models.get("identity").instances:
        monkeypatch.setattr(instance.backend, "execute", recording(instance.backend.execute, seen))
    frontend = served_frontend(plane)
    connection, written = plane.runner.run(exchange(frontend, client_bytes(message, MAX_FRAME_BYTES)))

    assert response_output(written) == array.tobytes()  # the bytes out are the bytes in
    received = connection.received
    assert received.copied_bytes + received.placed_bytes == len(message)
    # Copied: what followed the first DATA frame's header in the adapter's buffer, at most one read.
    assert received.copied_bytes <= RECEIVE_BUFFER_BYTES
    [reached] = seen
    buffer = owner(reached)
    assert isinstance(buffer, np.ndarray)
    assert buffer.nbytes == len(message)  # the message's own buffer: no copy on the way to the model
    assert np.shares_memory(reached, buffer)


def test_each_large_data_frame_is_one_read_with_the_next_frames_header(plane: Plane) -> None:
    """A DATA payload's rest and the next frame's header arrive in one read, into the message's buffer
    (the next payload overwrites the header there): no read of a frame header alone between two frames
    of a message (issue 37: 16 of the ~35 reads of a 15.6 MB request were 9-byte header reads)."""
    array = np.random.default_rng(2).random((ROWS, 16), dtype=np.float32)
    message = encode_infer_request("identity", "", {"INPUT0": array}, {"INPUT0": "FP32"})
    data = client_bytes(message, MAX_FRAME_BYTES)
    frames = -(-(len(message) + GRPC_MESSAGE_PREFIX_BYTES) // MAX_FRAME_BYTES)
    sizes: list[int] = []
    connection, written = plane.runner.run(exchange(served_frontend(plane), data, sizes=sizes))

    assert response_output(written) == array.tobytes()
    assert FRAME_HEADER_BYTES not in sizes
    assert len(sizes) == frames + 1  # the read buffer's first read, then one per frame
    assert connection.received.copied_bytes + connection.received.placed_bytes == len(message)


def test_small_frames_are_copied_from_the_read_buffer(plane: Plane) -> None:
    """Frames that fit the adapter's buffer many times over are parsed there and copied once, as before:
    reading the rest of each 16 KiB frame on its own would cost two reads per frame."""
    array = np.ones((20_000, 16), np.float32)
    message = encode_infer_request("identity", "", {"INPUT0": array}, {"INPUT0": "FP32"})
    frontend = served_frontend(plane)
    connection, written = plane.runner.run(exchange(frontend, client_bytes(message, 16384)))

    assert response_output(written) == array.tobytes()
    assert connection.received.copied_bytes == len(message)  # no read of its own for a 16 KiB frame's rest
    assert connection.received.placed_bytes == 0


def test_stream_messages_cut_anywhere_by_frames_each_land_in_their_own_buffer(plane: Plane) -> None:
    """ModelStreamInfer: messages that end inside DATA frames; each is read into its own buffer, the next
    one's prefix and first bytes through the read buffer."""
    array = np.random.default_rng(1).random((ROWS, 16), dtype=np.float32)
    message = encode_infer_request("identity", "", {"INPUT0": array}, {"INPUT0": "FP32"})
    data = client_bytes(message, MAX_FRAME_BYTES - 12345, method="ModelStreamInfer", count=3)
    connection, written = plane.runner.run(exchange(served_frontend(plane), data))

    answers = [service_pb2.ModelStreamInferResponse.FromString(m) for m in response_messages(written)]
    assert [a.error_message for a in answers] == ["", "", ""]
    assert all(a.infer_response.raw_output_contents[0] == array.tobytes() for a in answers)
    received = connection.received
    assert received.copied_bytes + received.placed_bytes == 3 * len(message)
    assert received.copied_bytes <= 3 * RECEIVE_BUFFER_BYTES  # at most one read's worth per message


@settings(max_examples=25, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(
    frame_bytes=st.integers(2 * IN_PLACE_MIN_BYTES, MAX_FRAME_BYTES),  # frames some of which land in place
    read_caps=st.lists(st.integers(1, 2 * RECEIVE_BUFFER_BYTES), min_size=1, max_size=8),
)
def test_any_cut_of_frames_and_reads_gives_the_same_answer(
    plane: Plane, frame_bytes: int, read_caps: list[int]
) -> None:
    """Whatever frame sizes a client picks and however TCP cuts its bytes into reads, the in-place reads
    and the copied ones together deliver every byte of each message once, in order, to its own buffer."""
    array = np.random.default_rng(frame_bytes).random((12_000, 16), dtype=np.float32)  # 768 KB
    message = encode_infer_request("identity", "", {"INPUT0": array}, {"INPUT0": "FP32"})
    data = client_bytes(message, frame_bytes, method="ModelStreamInfer", count=2)
    connection, written = plane.runner.run(exchange(served_frontend(plane), data, read_caps))

    answers = [service_pb2.ModelStreamInferResponse.FromString(m) for m in response_messages(written)]
    assert [a.error_message for a in answers] == ["", ""]
    assert all(a.infer_response.raw_output_contents[0] == array.tobytes() for a in answers)
    assert connection.received.copied_bytes + connection.received.placed_bytes == 2 * len(message)
