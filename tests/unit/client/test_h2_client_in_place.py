"""A large response read straight into its message buffer by the native client (issue 37: 15.6 MB answers).

The socket is played by hand through the connection's ``BufferedProtocol`` (``get_buffer``, the bytes written
where it points, ``buffer_updated``: what the kernel's ``recv_into`` does), so the test sees where every read
went: nearly all of a message of several MiB must be read into its own buffer, and the call's answer must
be that buffer, not a copy of it.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from sonic.client.transport.h2_connection import ClientConnection
from sonic.grpc.call import grpc_message_prefix
from sonic.h2.aio import RECEIVE_BUFFER_BYTES
from sonic.h2.connection import IN_PLACE_MIN_BYTES
from sonic.h2.frames import Flag, FrameType, frame, settings_frame
from sonic.h2.headers import encode_headers
from sonic.h2.settings import MAX_FRAME_BYTES
from sonic.h2.stream import Stream
from sonic.testing.h2 import RecordingTransport

OK_HEADERS = encode_headers([(b":status", b"200"), (b"content-type", b"application/grpc")])
OK_TRAILERS = encode_headers([(b"grpc-status", b"0")])
MESSAGE_BYTES = 6 << 20  # six DATA frames of the largest size the client takes


def answer_bytes(message: bytes, frame_bytes: int, *, messages: int = 1) -> bytes:
    """The server's side of stream 1: SETTINGS, headers, ``messages`` copies of ``message`` cut in DATA frames
    of ``frame_bytes``, then OK trailers."""
    body = (grpc_message_prefix(len(message)) + message) * messages
    out = [settings_frame({}), frame(FrameType.HEADERS, Flag.END_HEADERS, 1, OK_HEADERS)]
    out += [
        frame(FrameType.DATA, 0, 1, body[start : start + frame_bytes])
        for start in range(0, len(body), frame_bytes)
    ]
    out.append(frame(FrameType.HEADERS, Flag.END_HEADERS | Flag.END_STREAM, 1, OK_TRAILERS))
    return b"".join(out)


def open_call(max_bytes: int = 64 << 20) -> tuple[ClientConnection, Stream[Any]]:
    connection = ClientConnection("127.0.0.1:1")
    connection.reads.connection_made(RecordingTransport())  # type: ignore[arg-type]
    stream = connection.open_call(b"", [grpc_message_prefix(7), b"request"], max_bytes=max_bytes)
    return connection, stream


def read(connection: ClientConnection, data: bytes, read_caps: Sequence[int] = ()) -> list[int]:
    """``data`` read by the connection as the kernel hands it over (each read as large as the memory offered,
    or at most the next of ``read_caps`` in turn); the size of each read."""
    sizes: list[int] = []
    with memoryview(data) as view:
        pos = 0
        while pos < len(view):
            target = connection.reads.get_buffer(-1)
            size = min(len(target), len(view) - pos)
            if read_caps:
                size = min(size, read_caps[len(sizes) % len(read_caps)])
            target[:size] = view[pos : pos + size]
            connection.reads.buffer_updated(size)
            sizes.append(size)
            pos += size
    return sizes


def owner(view: object) -> object:
    while isinstance(view, memoryview):
        view = view.obj
    return view


async def test_a_large_response_lands_once_in_the_buffer_the_caller_gets() -> None:
    message = np.random.default_rng(0).bytes(MESSAGE_BYTES)
    connection, stream = open_call()
    sizes = read(connection, answer_bytes(message, MAX_FRAME_BYTES))
    answer = await stream.app.future

    assert bytes(answer) == message
    # Copied: what followed the first DATA frame's header in the read buffer, at most one read's worth.
    assert stream.app.answer.reader.copied_bytes <= RECEIVE_BUFFER_BYTES
    buffer = owner(answer)
    assert isinstance(buffer, np.ndarray)
    assert buffer.nbytes == len(message)  # the message's own buffer, handed over as it landed
    frames = -(-(len(message) + 5) // MAX_FRAME_BYTES)
    assert len(sizes) <= frames + 2  # one read per DATA frame (its rest and the next header), no more


async def test_a_second_message_in_a_unary_answer_still_fails_the_call() -> None:
    """The in-place path keeps the unary rule of the copied one: one response message, not two."""
    connection, stream = open_call()
    read(
        connection,
        answer_bytes(np.random.default_rng(1).bytes(2 * IN_PLACE_MIN_BYTES), MAX_FRAME_BYTES, messages=2),
    )
    with pytest.raises(Exception, match="more than one response message"):
        await stream.app.future


@settings(max_examples=20, deadline=None)
@given(
    frame_bytes=st.integers(2 * IN_PLACE_MIN_BYTES, MAX_FRAME_BYTES),
    read_caps=st.lists(st.integers(1, 2 * RECEIVE_BUFFER_BYTES), min_size=1, max_size=8),
)
async def test_any_cut_of_frames_and_reads_gives_the_same_answer(
    frame_bytes: int, read_caps: list[int]
) -> None:
    """However the server frames the answer and TCP cuts it into reads, the in-place reads and the copied
    ones together deliver every byte once, in order."""
    message = np.random.default_rng(frame_bytes).bytes(3 << 19)
    connection, stream = open_call()
    read(connection, answer_bytes(message, frame_bytes), read_caps)
    assert bytes(await stream.app.future) == message
