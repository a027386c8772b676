"""The worker of ``benchmarks/h2_cost.py``: run with one tree's ``src`` on ``PYTHONPATH``.

Feeds N small unary gRPC requests (one HEADERS with the same block, one DATA with END_STREAM, a 64-byte
framed message) into an HTTP/2 server-role core, sans I/O, in reads of 32 requests; each stream is
answered at once (headers, DATA, trailers) and the output taken once per read, as the asyncio adapter does
per loop iteration. Prints the SHA-256 of every byte written, so trees can be checked for the same wire.

Usage (by h2_cost.py): ``python benchmarks/h2_cost_worker.py REQUESTS``.
"""

from __future__ import annotations

import hashlib
import sys
from typing import Any

import hpack

READ_REQUESTS = 32  # requests per receive_data call (one socket read of a busy connection)
BODY = b"\x00\x00\x00\x00\x3b" + b"x" * 59  # a framed 59-byte message


def server_core() -> tuple[Any, Any, Any, Any, Any]:
    """A started server-role core answering each request with its body; and the frame helpers."""
    try:  # the layout since issue 25: sonic.h2, a core calling one handler
        from sonic.h2.frames import (  # noqa: PLC0415
            PREFACE,
            Flag,
            FrameType,
            frame,
            settings_frame,
            window_update,
        )
        from sonic.h2.headers import encode_headers  # noqa: PLC0415
        from sonic.h2.server import ServerRole  # noqa: PLC0415
    except ImportError:  # before: a ServerCore subclass in sonic.server.frontends.h2
        return _server_core_before()
    head = encode_headers([(b":status", b"200"), (b"content-type", b"application/grpc")])
    trailers = encode_headers([(b"grpc-status", b"0")])

    class Echo:
        # Bodies by stream, not on the stream: what a stream carries for the application was renamed
        # (``call``, then ``app``), and one worker serves every tree alike.
        def __init__(self) -> None:
            self.h2 = ServerRole(self).connection
            self.bodies: dict[Any, list[bytes | memoryview]] = {}

        def headers_received(self, stream: Any, headers: Any, end_stream: bool) -> None:  # noqa: ARG002
            self.bodies[stream] = []

        def stream_data(self, stream: Any, data: memoryview) -> None:
            self.bodies[stream].append(bytes(data))

        def stream_ended(self, stream: Any) -> None:
            self.h2.send_headers(stream, head)
            self.h2.respond(stream, self.bodies.pop(stream), trailers)

        def stream_reset(self, stream: Any) -> None:
            self.bodies.pop(stream, None)

        def goaway_received(self, *goaway: object) -> None:  # its arguments differ between trees
            pass

    core = Echo().h2
    core.start(0.0)
    return core, PREFACE + settings_frame({}) + window_update(0, 1 << 30), frame, FrameType, Flag


def _server_core_before() -> tuple[Any, Any, Any, Any, Any]:
    # The layout before sonic.h2 (trees older than it): absent from this tree, hence the ignores.
    from sonic.protocol.http2 import (  # type: ignore[import-not-found]  # noqa: PLC0415
        PREFACE,
        Flag,
        FrameType,
        encode_headers,
        frame,
        settings_frame,
        window_update,
    )
    from sonic.server.frontends.h2 import ServerCore  # type: ignore[import-not-found]  # noqa: PLC0415

    head = encode_headers([(b":status", b"200"), (b"content-type", b"application/grpc")])
    trailers = encode_headers([(b"grpc-status", b"0")])

    class Echo(ServerCore):  # type: ignore[misc]
        def stream_opened(self, stream: Any, headers: Any) -> None:  # noqa: ARG002
            stream.call = []

        def stream_data(self, stream: Any, data: memoryview) -> None:
            stream.call.append(bytes(data))

        def stream_ended(self, stream: Any) -> None:
            self.send_headers(stream, head)
            self.respond(stream, stream.call, trailers)

        def stream_reset(self, stream: Any) -> None:
            pass

    core = Echo()
    core.start()
    core.start_timers(0.0)
    return core, PREFACE + settings_frame({}) + window_update(0, 1 << 30), frame, FrameType, Flag


def main(requests: int) -> str:
    core, opening, frame, frame_type, flag = server_core()
    block = hpack.Encoder().encode(
        [
            (":method", "POST"),
            (":scheme", "http"),
            (":path", "/inference.GRPCInferenceService/ModelInfer"),
            (":authority", "localhost"),
            ("content-type", "application/grpc"),
            ("te", "trailers"),
        ]
    )
    reads = []
    stream_id = 1
    for start in range(0, requests, READ_REQUESTS):
        parts = []
        for _ in range(min(READ_REQUESTS, requests - start)):
            parts.append(frame(frame_type.HEADERS, flag.END_HEADERS, stream_id, block))
            parts.append(frame(frame_type.DATA, flag.END_STREAM, stream_id, BODY))
            stream_id += 2
        reads.append(b"".join(parts))
    written = hashlib.sha256()
    core.receive_data(opening)
    for piece in core.data_to_send():
        written.update(piece)
    for data in reads:
        core.receive_data(data)
        for piece in core.data_to_send():
            written.update(piece)
    if core.streams:
        raise RuntimeError(f"{len(core.streams)} streams left open")
    return written.hexdigest()


if __name__ == "__main__":
    print(main(int(sys.argv[1])))
