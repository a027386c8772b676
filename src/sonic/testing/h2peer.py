"""A raw HTTP/2 peer over a blocking socket, for conformance and attack tests against ``sonic serve``.

It writes whatever frames a test builds (well-formed or not) and reads the server's frames back, so a
test can assert the exact reaction RFC 9113 / RFC 7541 require: a GOAWAY code, an RST_STREAM code, or
the connection closed. Header blocks are encoded with the ``hpack`` package (a real encoder, with its
own dynamic table, so indexed representations stay in step with the server's decoder).
"""

from __future__ import annotations

import socket
import struct
from collections.abc import Iterable
from typing import NamedTuple, Self

import hpack

from sonic.h2.frames import (
    FRAME_HEADER_BYTES,
    PREFACE,
    ErrorCode,
    Flag,
    FrameType,
    Setting,
    frame,
    settings_frame,
)

GRPC_SERVICE = "/inference.GRPCInferenceService"


class Frame(NamedTuple):
    type: int
    flags: int
    stream_id: int
    payload: bytes

    @property
    def error_code(self) -> int:
        """The code of a GOAWAY (after the last stream id) or an RST_STREAM."""
        offset = 4 if self.type == FrameType.GOAWAY else 0
        return int(struct.unpack_from(">I", self.payload, offset)[0])


class ConnectionEnded(AssertionError):
    """The server closed the connection (or reset it) while we expected a frame."""


def grpc_headers(method: str = "ServerLive", **extra: str) -> list[tuple[str, str]]:
    """A gRPC request's header list for ``GRPCInferenceService/method``."""
    headers = [
        (":method", "POST"),
        (":scheme", "http"),
        (":path", f"{GRPC_SERVICE}/{method}"),
        (":authority", "localhost"),
        ("content-type", "application/grpc"),
        ("te", "trailers"),
    ]
    return headers + [(name.replace("_", "-"), value) for name, value in extra.items()]


def grpc_message(payload: bytes = b"", *, compressed: bool = False) -> bytes:
    """A gRPC length-prefixed message: compressed flag, 32-bit length, the bytes."""
    return struct.pack(">BI", 1 if compressed else 0, len(payload)) + payload


def data_frame(stream_id: int, payload: bytes, *, end_stream: bool = False) -> bytes:
    return frame(FrameType.DATA, Flag.END_STREAM if end_stream else 0, stream_id, payload)


class RawH2:
    """One client connection; ``handshake`` sends the preface and SETTINGS and ACKs the server's."""

    def __init__(
        self,
        address: str,
        *,
        timeout_s: float = 5.0,
        handshake: bool = True,
        settings: dict[Setting, int] | None = None,
    ) -> None:
        host, port = address.rsplit(":", 1)
        self.sock = socket.create_connection((host, int(port)), timeout=timeout_s)
        self.timeout_s = timeout_s
        self.encoder = hpack.Encoder()
        self.decoder = hpack.Decoder()
        self._buffer = b""
        self.server_settings: dict[int, int] = {}
        self.received: list[Frame] = []  # every frame read so far
        if handshake:
            self.send(PREFACE + settings_frame(settings or {}))
            first = self.read_frame()
            if first.type != FrameType.SETTINGS:
                raise AssertionError(f"the server's first frame is {first}, not SETTINGS")
            for offset in range(0, len(first.payload), 6):
                key, value = struct.unpack_from(">HI", first.payload, offset)
                self.server_settings[key] = value
            self.send(frame(FrameType.SETTINGS, Flag.ACK, 0))

    def close(self) -> None:
        self.sock.close()

    def __enter__(self) -> Self:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    # --- output ----------------------------------------------------------------------------------------

    def send(self, *data: bytes) -> bool:
        """Write ``data``; False when the server has closed or reset the connection."""
        try:
            self.sock.sendall(b"".join(data))
        except (BrokenPipeError, ConnectionResetError):
            return False
        return True

    def block(self, headers: Iterable[tuple[str, str] | hpack.HeaderTuple]) -> bytes:
        # No Huffman coding: hpack's pure-Python Huffman encoder costs ~10 ms per KiB.
        return bytes(self.encoder.encode(list(headers), huffman=False))

    def headers(
        self,
        stream_id: int,
        headers: Iterable[tuple[str, str]] | None = None,
        *,
        end_stream: bool = False,
        end_headers: bool = True,
    ) -> bytes:
        """A HEADERS frame with a block from our encoder (a gRPC ServerLive request by default)."""
        flags = (Flag.END_STREAM if end_stream else 0) | (Flag.END_HEADERS if end_headers else 0)
        return frame(FrameType.HEADERS, flags, stream_id, self.block(headers or grpc_headers()))

    def call(self, stream_id: int, method: str = "ServerLive", message: bytes = b"") -> bytes:
        """HEADERS and one DATA frame ending the stream: a whole unary gRPC request."""
        return self.headers(stream_id, grpc_headers(method)) + data_frame(
            stream_id, grpc_message(message), end_stream=True
        )

    # --- input -----------------------------------------------------------------------------------------

    def _fill(self, need: int) -> None:
        while len(self._buffer) < need:
            try:
                chunk = self.sock.recv(1 << 16)
            except ConnectionResetError:
                chunk = b""
            if not chunk:
                raise ConnectionEnded(f"the server closed the connection; frames read: {self.received}")
            self._buffer += chunk

    def read_frame(self) -> Frame:
        """The next frame; ConnectionEnded at EOF, TimeoutError (socket.timeout) after ``timeout_s``."""
        self._fill(FRAME_HEADER_BYTES)
        length = int.from_bytes(self._buffer[:3], "big")
        self._fill(FRAME_HEADER_BYTES + length)
        frame_type, flags = self._buffer[3], self._buffer[4]
        stream_id = int.from_bytes(self._buffer[5:9], "big") & 0x7FFFFFFF
        payload = self._buffer[FRAME_HEADER_BYTES : FRAME_HEADER_BYTES + length]
        self._buffer = self._buffer[FRAME_HEADER_BYTES + length :]
        received = Frame(frame_type, flags, stream_id, payload)
        self.received.append(received)
        return received

    def wait_for(self, frame_type: FrameType, stream_id: int | None = None) -> Frame:
        """Frames are read until one of ``frame_type`` (on ``stream_id`` if given); others are skipped."""
        while True:
            received = self.read_frame()
            if received.type == frame_type and (stream_id is None or received.stream_id == stream_id):
                return received

    def connection_error(self) -> int | None:
        """The code of the GOAWAY the server sends before closing, or None if it just closes.

        Frames before it are read and skipped; a server that neither sends GOAWAY nor closes within
        ``timeout_s`` fails the test (TimeoutError).
        """
        try:
            return self.wait_for(FrameType.GOAWAY).error_code
        except ConnectionEnded:
            return None

    def stream_error(self, stream_id: int) -> int:
        """The code of the server's RST_STREAM on ``stream_id`` (AssertionError on a GOAWAY first)."""
        while True:
            received = self.read_frame()
            if received.type == FrameType.RST_STREAM and received.stream_id == stream_id:
                return received.error_code
            if received.type == FrameType.GOAWAY:
                code = ErrorCode(received.error_code).name
                raise AssertionError(f"expected RST_STREAM on stream {stream_id}, got GOAWAY {code}")

    def reaction(self, stream_id: int) -> tuple[str, int | None]:
        """How the server answered a bad frame on ``stream_id``: ("RST_STREAM", code), ("GOAWAY", code),
        or ("closed", None); other frames are skipped, silence fails (TimeoutError after ``timeout_s``)."""
        while True:
            try:
                received = self.read_frame()
            except ConnectionEnded:
                return "closed", None
            if received.type == FrameType.RST_STREAM and received.stream_id == stream_id:
                return "RST_STREAM", received.error_code
            if received.type == FrameType.GOAWAY:
                return "GOAWAY", received.error_code

    def flood(self, unit: bytes, total_bytes: int, *, stall_s: float = 2.0) -> int:
        """Write ``unit`` again and again, never reading, up to ``total_bytes``; returns the bytes sent.

        Stops early when the server closes the connection or stops reading from it for ``stall_s``
        (a server that bounds what it queues for a peer that does not read does one or the other).
        """
        chunk = unit * max(1, (1 << 16) // len(unit))
        self.sock.settimeout(stall_s)
        sent = 0
        try:
            while sent < total_bytes:
                self.sock.sendall(chunk)
                sent += len(chunk)
        except (TimeoutError, BrokenPipeError, ConnectionResetError):
            pass
        finally:
            self.sock.settimeout(self.timeout_s)
        return sent

    def response_headers(self, stream_id: int) -> list[tuple[str, str]]:
        """The next header block on ``stream_id`` (response headers, or trailers), decoded."""
        received = self.wait_for(FrameType.HEADERS, stream_id)
        block = received.payload
        while not received.flags & Flag.END_HEADERS:
            received = self.wait_for(FrameType.CONTINUATION, stream_id)
            block += received.payload
        return [(str(name), str(value)) for name, value in self.decoder.decode(block)]

    def grpc_status(self, stream_id: int) -> tuple[int, str]:
        """The ``grpc-status`` and ``grpc-message`` of the call on ``stream_id`` (its trailers)."""
        while True:
            fields = dict(self.response_headers(stream_id))
            if "grpc-status" in fields:
                return int(fields["grpc-status"]), fields.get("grpc-message", "")
