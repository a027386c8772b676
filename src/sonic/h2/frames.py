"""HTTP/2 frames (RFC 9113 section 4 and 6): types, flags, error codes, settings ids, and the frames we build.

Pure constants and functions. Parsing is the connection core's (:mod:`sonic.h2.connection`), which reads
frame headers in place from the received bytes; header blocks are :mod:`sonic.h2.headers`.
"""

from __future__ import annotations

import struct
from enum import IntEnum
from typing import Final

PREFACE = b"PRI * HTTP/2.0\r\n\r\nSM\r\n\r\n"
FRAME_HEADER = struct.Struct(">BHBBI")  # length (24 bits as 8 + 16), type, flags, stream id
FRAME_HEADER_BYTES = 9
DEFAULT_WINDOW_BYTES = 65_535
DEFAULT_MAX_FRAME_BYTES = 16_384
MAX_FRAME_BYTES_LIMIT = (1 << 24) - 1
MAX_WINDOW_BYTES = (1 << 31) - 1


class FrameType(IntEnum):
    DATA = 0
    HEADERS = 1
    PRIORITY = 2
    RST_STREAM = 3
    SETTINGS = 4
    PUSH_PROMISE = 5
    PING = 6
    GOAWAY = 7
    WINDOW_UPDATE = 8
    CONTINUATION = 9


class Flag:
    # Final: class attributes (mypyc compiles a bare assignment in a class body as an instance attribute).
    END_STREAM: Final = 0x1
    ACK: Final = 0x1
    END_HEADERS: Final = 0x4
    PADDED: Final = 0x8
    PRIORITY: Final = 0x20


class ErrorCode(IntEnum):
    NO_ERROR = 0x0
    PROTOCOL_ERROR = 0x1
    INTERNAL_ERROR = 0x2
    FLOW_CONTROL_ERROR = 0x3
    STREAM_CLOSED = 0x5
    FRAME_SIZE_ERROR = 0x6
    REFUSED_STREAM = 0x7
    CANCEL = 0x8
    COMPRESSION_ERROR = 0x9
    ENHANCE_YOUR_CALM = 0xB


class Setting(IntEnum):
    HEADER_TABLE_SIZE = 0x1
    ENABLE_PUSH = 0x2
    MAX_CONCURRENT_STREAMS = 0x3
    INITIAL_WINDOW_SIZE = 0x4
    MAX_FRAME_SIZE = 0x5
    MAX_HEADER_LIST_SIZE = 0x6


class ProtocolError(Exception):
    """A connection error: the connection is closed with GOAWAY carrying ``code``."""

    def __init__(self, code: ErrorCode, message: str) -> None:
        super().__init__(message)
        self.code = code


def frame(frame_type: int, flags: int, stream_id: int, payload: bytes = b"") -> bytes:
    length = len(payload)
    return FRAME_HEADER.pack(length >> 16, length & 0xFFFF, frame_type, flags, stream_id) + payload


def frame_header(frame_type: int, flags: int, stream_id: int, length: int) -> bytes:
    return FRAME_HEADER.pack(length >> 16, length & 0xFFFF, frame_type, flags, stream_id)


def settings_frame(settings: dict[Setting, int]) -> bytes:
    return frame(
        FrameType.SETTINGS, 0, 0, b"".join(struct.pack(">HI", key, value) for key, value in settings.items())
    )


def window_update(stream_id: int, increment: int) -> bytes:
    return frame(FrameType.WINDOW_UPDATE, 0, stream_id, struct.pack(">I", increment))


def rst_stream(stream_id: int, code: ErrorCode) -> bytes:
    return frame(FrameType.RST_STREAM, 0, stream_id, struct.pack(">I", code))


def goaway(last_stream_id: int, code: ErrorCode, debug: str = "") -> bytes:
    return frame(FrameType.GOAWAY, 0, 0, struct.pack(">II", last_stream_id, code) + debug.encode()[:256])
