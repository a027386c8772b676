"""HTTP/2 (RFC 9113) and HPACK (RFC 7541) framing for our gRPC server and client.

Pure functions, constants and per-stream state; the connection state machine is
:mod:`sonic.protocol.h2connection`, the gRPC layer above it :mod:`sonic.protocol.grpc_call`. Header blocks we send never touch the HPACK dynamic table (literals
"without indexing"), so our encoder is stateless and cannot fall out of step with the peer's decoder.
"""

from __future__ import annotations

import struct
from collections import deque
from enum import IntEnum
from typing import Any

import hpack
from hpack.table import HeaderTable

from sonic.protocol.h2limits import MemoBudget

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

Headers = list[tuple[bytes, bytes]]
_MEMO_ENTRY_OVERHEAD = 64  # bytes per memo entry besides its block and header bytes (a rough bound)


class _CountingTable(HeaderTable):
    """HPACK dynamic table that counts insertions, so unchanged-table decodes can be remembered."""

    insertions = 0

    def add(self, name: bytes, value: bytes) -> Any:
        self.insertions += 1
        return super().add(name, value)


class _BoundedDecoder(hpack.Decoder):
    """hpack's decoder with a cap on dynamic-table-size updates per block (each one resizes the table)."""

    def __init__(self, max_header_list_size: int, max_table_size_updates: int) -> None:
        super().__init__(max_header_list_size=max_header_list_size)
        self.max_table_size_updates = max_table_size_updates
        self.table_size_updates = 0

    def _update_encoding_context(self, data: bytes | memoryview) -> int:
        self.table_size_updates += 1
        if self.table_size_updates > self.max_table_size_updates:
            msg = f"more than {self.max_table_size_updates} table size updates in one header block"
            raise hpack.HPACKDecodingError(msg)
        return int(super()._update_encoding_context(data))


class HeaderDecoder:
    """HPACK decoding with a memo of blocks that did not change the dynamic table.

    Peers repeat the same block (every field indexed) for every call; decoding it again against an
    unchanged table gives the same list, so it is looked up instead. The memo holds at most
    ``memo_bytes`` (blocks and lists counted), taken from the server-wide ``budget`` when given.
    """

    def __init__(
        self,
        *,
        max_header_list_bytes: int = 1 << 16,
        max_table_size_updates: int = 2,
        memo_bytes: int = 1 << 18,
        budget: MemoBudget | None = None,
    ) -> None:
        self._decoder = _BoundedDecoder(max_header_list_bytes, max_table_size_updates)
        self._table = _CountingTable()
        self._decoder.header_table = self._table
        self._memo: dict[bytes, Headers] = {}
        self._memo_bytes = memo_bytes
        self._memo_used = 0
        self._budget = budget

    def decode(self, block: bytes) -> Headers:
        headers = self._memo.get(block)
        if headers is not None:
            return headers
        before = (self._table.insertions, self._table.maxsize)
        self._decoder.table_size_updates = 0
        try:
            headers = [(bytes(n), bytes(v)) for n, v in self._decoder.decode(block, raw=True)]
        except hpack.HPACKError as exc:
            raise ProtocolError(ErrorCode.COMPRESSION_ERROR, f"bad header block: {exc}") from None
        if (self._table.insertions, self._table.maxsize) != before:
            self.clear()  # entries were decoded against the old table
        else:
            self._remember(block, headers)
        return headers

    def _remember(self, block: bytes, headers: Headers) -> None:
        size = len(block) + sum(len(n) + len(v) for n, v in headers) + _MEMO_ENTRY_OVERHEAD
        if self._memo_used + size > self._memo_bytes:
            return
        if self._budget is not None and not self._budget.take(size):
            return
        self._memo[block] = headers
        self._memo_used += size

    def clear(self) -> None:
        """Forget the memo (the table changed, or the connection is gone: its bytes go back)."""
        self._memo.clear()
        if self._budget is not None:
            self._budget.give_back(self._memo_used)
        self._memo_used = 0

    @property
    def memo_bytes(self) -> int:
        return self._memo_used


# --- field validation (RFC 9113 section 8.2 and 8.3) -------------------------------------------------

_REQUEST_PSEUDO = frozenset({b":method", b":scheme", b":path", b":authority"})
_CONNECTION_SPECIFIC = frozenset(
    {b"connection", b"keep-alive", b"proxy-connection", b"transfer-encoding", b"upgrade"}
)


def malformed_fields(headers: Headers, *, trailers: bool) -> str | None:
    """Why a request's header (or trailer) list is malformed, None when it is not."""
    pseudo: set[bytes] = set()
    regular_seen = False
    for name, value in headers:
        if name != name.lower():
            return f"upper-case field name {name!r}"
        if name.startswith(b":"):
            if trailers or regular_seen or name not in _REQUEST_PSEUDO or name in pseudo:
                return f"pseudo-header {name!r} not allowed here"
            pseudo.add(name)
        else:
            regular_seen = True
            if name in _CONNECTION_SPECIFIC or (name == b"te" and value != b"trailers"):
                return f"connection-specific field {name!r}"
    if trailers:
        return None
    method = dict(headers).get(b":method")
    if method == b"CONNECT":
        return None if pseudo == {b":method", b":authority"} else "CONNECT with :scheme or :path"
    if not {b":method", b":scheme", b":path"} <= pseudo or not dict(headers).get(b":path"):
        return "request without :method, :scheme and a non-empty :path"
    return None


class Stream:
    """One stream's state in a connection (:mod:`sonic.protocol.h2connection`), either end."""

    __slots__ = (
        "call",
        "local_closed",
        "pending",
        "recv_released",
        "recv_unacked",
        "remote_closed",
        "reset_code",
        "send_credit",
        "stream_id",
        "trailers",
    )

    def __init__(self, stream_id: int) -> None:
        self.stream_id = stream_id
        # The send window relative to the peer's SETTINGS_INITIAL_WINDOW_SIZE (window = credit + initial),
        # so a change of that setting costs O(1), not a walk over every stream.
        self.send_credit = 0
        self.recv_unacked = 0  # DATA received that our WINDOW_UPDATEs have not given back yet
        self.recv_released = 0  # of those, released by the application and not yet given back
        self.remote_closed = False
        self.local_closed = False
        self.pending: deque[memoryview] = deque()  # DATA not yet allowed out by flow control
        # Sent once ``pending`` is empty: a header block with END_STREAM, or b"": an empty DATA frame
        # with END_STREAM (a request ends so; it has no trailers).
        self.trailers: bytes | None = None
        self.call: Any = None  # the application's per-stream state
        self.reset_code = 0  # the peer's RST_STREAM error code
