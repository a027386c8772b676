"""Writes per response on the native gRPC front end (issue 37 item 4): a unary call's HEADERS, DATA and
trailers leave in one socket write, and the responses finished in one loop turn share it, up to
``MESSAGES_PER_WRITE`` of them (more leave in several writes, so the peer need not wait for the last).

The connection runs on a real event loop with its real adapter (``h2.aio``); only the socket is played,
by :class:`~sonic.testing.h2.RecordingTransport`, which keeps what each ``writelines`` call wrote.
"""

from __future__ import annotations

import asyncio
from collections.abc import Iterator

import hpack
import numpy as np
import pytest
from tests.fuzz.served import Plane, identity_plane

from sonic.grpc.call import grpc_message_prefix
from sonic.h2.aio import MESSAGES_PER_WRITE
from sonic.h2.frames import PREFACE, Flag, FrameType, frame, settings_frame
from sonic.protocol.grpc_codec import encode_infer_request
from sonic.protocol.wire import MAX_MESSAGE_BYTES
from sonic.server.frontends.base import FrontendSettings
from sonic.server.frontends.grpc_h2 import GrpcConnection, H2GrpcFrontend
from sonic.testing.h2 import RecordingTransport, parse_frames
from sonic.testing.h2peer import grpc_headers

pytestmark = pytest.mark.unit
CALLS = 8


@pytest.fixture(scope="module")
def plane(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Plane]:
    with identity_plane(tmp_path_factory.mktemp("repository")) as plane:
        yield plane


def unary_calls(count: int) -> bytes:
    """A client's connection with ``count`` identity ModelInfer calls, all in one read."""
    message = encode_infer_request(
        "identity", "", {"INPUT0": np.ones((1, 16), np.float32)}, {"INPUT0": "FP32"}
    )
    encoder = hpack.Encoder()
    out = [PREFACE, settings_frame({})]
    for stream_id in range(1, 2 * count, 2):
        out.append(
            frame(FrameType.HEADERS, Flag.END_HEADERS, stream_id, encoder.encode(grpc_headers("ModelInfer")))
        )
        out.append(
            frame(FrameType.DATA, Flag.END_STREAM, stream_id, grpc_message_prefix(len(message)) + message)
        )
    return b"".join(out)


async def served(plane: Plane, data: bytes) -> RecordingTransport:
    """``data`` read by a connection in one read; the transport once every call answered and the
    adapter's write of that loop turn is done."""
    settings = FrontendSettings("127.0.0.1", max_message_bytes=MAX_MESSAGE_BYTES)
    connection = GrpcConnection(H2GrpcFrontend(plane.dataplane, plane.gate, 0, settings, budget=plane.budget))
    transport = RecordingTransport()
    connection.reads.connection_made(transport)  # type: ignore[arg-type]
    running = asyncio.all_tasks()  # the models' own (schedulers), which never end
    target = connection.reads.get_buffer(-1)
    target[: len(data)] = data
    connection.reads.buffer_updated(len(data))
    while calls := asyncio.all_tasks() - running:
        await asyncio.wait(calls)
        running |= calls
    # The adapter's write is a call_soon of the turn that queued the last answer: callbacks run in order.
    written = asyncio.get_running_loop().create_future()
    asyncio.get_running_loop().call_soon(written.set_result, None)
    await written
    return transport


def test_each_response_leaves_in_one_write_and_answers_share_writes(plane: Plane) -> None:
    transport = plane.runner.run(served(plane, unary_calls(CALLS)))

    writes_of: dict[int, set[int]] = {}  # stream -> the writes that carried its frames
    kinds: dict[int, list[int]] = {}
    for index, written in enumerate(transport.writes):
        for frame_type, _flags, stream_id, _payload in parse_frames(written):
            if stream_id:
                writes_of.setdefault(stream_id, set()).add(index)
                kinds.setdefault(stream_id, []).append(frame_type)
    assert sorted(writes_of) == list(range(1, 2 * CALLS, 2))
    # Every response whole (HEADERS, DATA, trailers) in one write, never split over two.
    assert all(kinds[s] == [FrameType.HEADERS, FrameType.DATA, FrameType.HEADERS] for s in kinds), kinds
    assert all(len(indices) == 1 for indices in writes_of.values()), writes_of
    # Fewer writes than responses: answers finished in one turn leave together (the settings' included).
    assert len(transport.writes) < CALLS + 1, [len(w) for w in transport.writes]


def test_many_answers_of_one_turn_leave_in_parts(plane: Plane) -> None:
    """Answers finished in one loop turn leave every MESSAGES_PER_WRITE, not all at the turn's end: a peer
    with many calls in flight works on the first ones while the rest are encoded, rather than both ends
    taking turns (identity b1 c32: docs/benchmarks.md, issue 37: lockstep)."""
    calls = 2 * MESSAGES_PER_WRITE + 3
    transport = plane.runner.run(served(plane, unary_calls(calls)))
    ended_per_write = [
        sum(
            1
            for frame_type, flags, stream_id, _ in parse_frames(written)
            if stream_id and frame_type == FrameType.HEADERS and flags & Flag.END_STREAM
        )
        for written in transport.writes
    ]
    answered = [count for count in ended_per_write if count]
    assert sum(answered) == calls, ended_per_write
    assert max(answered) <= MESSAGES_PER_WRITE, ended_per_write
    assert len(answered) >= 3, ended_per_write
