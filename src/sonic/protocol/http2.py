"""HTTP/2 (RFC 9113), HPACK (RFC 7541) and gRPC-over-HTTP/2 framing for our gRPC server and client.

Pure functions and constants; the connection state machine is
:mod:`sonic.protocol.h2connection`. Header blocks we send never touch the HPACK dynamic table (literals
"without indexing"), so our encoder is stateless and cannot fall out of step with the peer's decoder.
"""

from __future__ import annotations

import math
import struct
from collections import deque
from enum import IntEnum
from typing import Any
from urllib.parse import quote, unquote

import hpack
import numpy as np
import numpy.typing as npt
from hpack.table import HeaderTable

PREFACE = b"PRI * HTTP/2.0\r\n\r\nSM\r\n\r\n"
FRAME_HEADER = struct.Struct(">BHBBI")  # length (24 bits as 8 + 16), type, flags, stream id
FRAME_HEADER_BYTES = 9
DEFAULT_WINDOW_BYTES = 65_535
DEFAULT_MAX_FRAME_BYTES = 16_384
MAX_FRAME_BYTES_LIMIT = (1 << 24) - 1
MAX_WINDOW_BYTES = (1 << 31) - 1
GRPC_MESSAGE_PREFIX = struct.Struct(">BI")  # compressed flag, message length
GRPC_MESSAGE_PREFIX_BYTES = 5


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
    END_STREAM = 0x1
    ACK = 0x1
    END_HEADERS = 0x4
    PADDED = 0x8
    PRIORITY = 0x20


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


# --- HPACK, encoder side -------------------------------------------------------------------------------

# The static-table entries our responses use (RFC 7541 appendix A): full matches and names.
_STATIC_FULL = {(b":status", b"200"): 8}
_STATIC_NAMES = {b":status": 8, b"content-type": 31}


def _hpack_int(value: int, prefix_bits: int, first_byte: int) -> bytes:
    limit = (1 << prefix_bits) - 1
    if value < limit:
        return bytes([first_byte | value])
    out = bytearray([first_byte | limit])
    value -= limit
    while value >= 0x80:
        out.append((value & 0x7F) | 0x80)
        value >>= 7
    out.append(value)
    return bytes(out)


def _hpack_string(value: bytes) -> bytes:
    return _hpack_int(len(value), 7, 0x00) + value  # no Huffman: the peer decodes either


def encode_headers(headers: list[tuple[bytes, bytes]]) -> bytes:
    """An HPACK header block of indexed static entries and literals without indexing."""
    out = []
    for name, value in headers:
        index = _STATIC_FULL.get((name, value))
        if index is not None:
            out.append(_hpack_int(index, 7, 0x80))
            continue
        name_index = _STATIC_NAMES.get(name)
        if name_index is not None:
            out.append(_hpack_int(name_index, 4, 0x00) + _hpack_string(value))
        else:
            out.append(b"\x00" + _hpack_string(name) + _hpack_string(value))
    return b"".join(out)


# --- HPACK, decoder side -------------------------------------------------------------------------------

MAX_HEADER_LIST_BYTES = 1 << 16
HEADER_CACHE_ENTRIES = 256

Headers = list[tuple[bytes, bytes]]


class _CountingTable(HeaderTable):
    """HPACK dynamic table that counts insertions, so unchanged-table decodes can be remembered."""

    insertions = 0

    def add(self, name: bytes, value: bytes) -> Any:
        self.insertions += 1
        return super().add(name, value)


class HeaderDecoder:
    """HPACK decoding with a memo of blocks that did not change the dynamic table.

    Peers repeat the same block (every field indexed) for every call; decoding it again against an
    unchanged table gives the same list, so it is looked up instead.
    """

    def __init__(self) -> None:
        self._decoder = hpack.Decoder(max_header_list_size=MAX_HEADER_LIST_BYTES)
        self._table = _CountingTable()
        self._decoder.header_table = self._table
        self._memo: dict[bytes, Headers] = {}

    def decode(self, block: bytes) -> Headers:
        headers = self._memo.get(block)
        if headers is not None:
            return headers
        before = (self._table.insertions, self._table.maxsize)
        try:
            headers = [(bytes(n), bytes(v)) for n, v in self._decoder.decode(block, raw=True)]
        except hpack.HPACKError as exc:
            raise ProtocolError(ErrorCode.COMPRESSION_ERROR, f"bad header block: {exc}") from None
        if (self._table.insertions, self._table.maxsize) != before:
            self._memo.clear()  # entries were decoded against the old table
        elif len(self._memo) < HEADER_CACHE_ENTRIES:
            self._memo[block] = headers
        return headers


# --- gRPC over HTTP/2 -----------------------------------------------------------------------------------

_TIMEOUT_UNITS_S = {"H": 3600.0, "M": 60.0, "S": 1.0, "m": 1e-3, "u": 1e-6, "n": 1e-9}


def parse_grpc_timeout(value: bytes) -> float:
    """``grpc-timeout`` (e.g. ``100m``) in seconds; ValueError when malformed."""
    text = value.decode("ascii")
    digits, unit = text[:-1], text[-1:]
    if not digits.isdigit() or len(digits) > 8 or unit not in _TIMEOUT_UNITS_S:
        msg = f"malformed grpc-timeout {text!r}: expected up to 8 digits and one of H M S m u n"
        raise ValueError(msg)
    return int(digits) * _TIMEOUT_UNITS_S[unit]


def format_grpc_timeout(seconds: float) -> bytes:
    """``grpc-timeout`` for a deadline ``seconds`` away: the finest unit that fits 8 digits, rounded up."""
    for unit in "umSMH":
        count = math.ceil(seconds / _TIMEOUT_UNITS_S[unit] - 1e-6)  # 1e-6: float noise, not a unit more
        if count < 10**8:
            return f"{max(count, 1)}{unit}".encode("ascii")
    return b"99999999H"


def encode_grpc_message(message: str) -> bytes:
    """``grpc-message``: percent-encoded UTF-8, as the gRPC spec asks (space and printable ASCII kept)."""
    return quote(message, safe=" !\"#$&'()*+,-./:;<=>?@[\\]^_`{|}~").encode("ascii")


def decode_grpc_message(value: bytes) -> str:
    return unquote(value.decode("ascii"))


def grpc_message_prefix(length: int, *, compressed: bool = False) -> bytes:
    return GRPC_MESSAGE_PREFIX.pack(1 if compressed else 0, length)


class MessageReader:
    """gRPC length-prefixed messages out of a stream's DATA, however the frames cut them."""

    __slots__ = ("_body", "_compressed", "_filled", "_max_bytes", "_prefix")

    def __init__(self, max_bytes: int) -> None:
        self._max_bytes = max_bytes
        self._prefix = b""
        self._body: npt.NDArray[np.uint8] | None = None
        self._filled = 0
        self._compressed = False

    def feed(self, data: memoryview) -> list[tuple[bool, bytes | memoryview]]:
        """Complete (compressed, message) pairs; ``data`` is copied, never kept."""
        out: list[tuple[bool, bytes | memoryview]] = []
        pos, end = 0, len(data)
        while pos < end:
            body = self._body
            if body is None:
                if self._prefix or end - pos < GRPC_MESSAGE_PREFIX_BYTES:
                    take = min(GRPC_MESSAGE_PREFIX_BYTES - len(self._prefix), end - pos)
                    self._prefix += bytes(data[pos : pos + take])
                    pos += take
                    if len(self._prefix) < GRPC_MESSAGE_PREFIX_BYTES:
                        break
                    flag, length = GRPC_MESSAGE_PREFIX.unpack(self._prefix)
                    self._prefix = b""
                else:
                    flag, length = GRPC_MESSAGE_PREFIX.unpack_from(data, pos)
                    pos += GRPC_MESSAGE_PREFIX_BYTES
                if length > self._max_bytes:
                    raise self.too_large(length)
                if end - pos >= length:  # the whole message is here: one copy
                    out.append((flag == 1, bytes(data[pos : pos + length])))
                    pos += length
                    continue
                # Left uninitialised (bytearray(n) would zero it first): a large tensor is written once.
                body = self._body = np.empty(length, np.uint8)
                self._filled = 0
                self._compressed = flag == 1
            take = min(len(body) - self._filled, end - pos)
            body[self._filled : self._filled + take] = np.frombuffer(data[pos : pos + take], np.uint8)
            self._filled += take
            pos += take
            if self._filled == len(body):
                out.append((self._compressed, body.data))
                self._body = None
        return out

    def too_large(self, length: int) -> Exception:
        return ValueError(f"gRPC message of {length} bytes, larger than the limit of {self._max_bytes}")

    @property
    def partial(self) -> bool:
        return bool(self._prefix) or self._body is not None


class Stream:
    """One stream's state in a connection (:mod:`sonic.protocol.h2connection`), either end."""

    __slots__ = (
        "call",
        "local_closed",
        "pending",
        "recv_unacked",
        "remote_closed",
        "reset_code",
        "send_window",
        "stream_id",
        "trailers",
    )

    def __init__(self, stream_id: int, send_window: int) -> None:
        self.stream_id = stream_id
        self.send_window = send_window
        self.recv_unacked = 0
        self.remote_closed = False
        self.local_closed = False
        self.pending: deque[memoryview] = deque()  # DATA not yet allowed out by flow control
        # Sent once ``pending`` is empty: a header block with END_STREAM, or b"": an empty DATA frame
        # with END_STREAM (a request ends so; it has no trailers).
        self.trailers: bytes | None = None
        self.call: Any = None  # the application's per-stream state
        self.reset_code = 0  # the peer's RST_STREAM error code
