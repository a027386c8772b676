"""HPACK (RFC 7541) with its bounds, and the field rules of RFC 9113 sections 8.2 and 8.3.

Header blocks we send never touch the HPACK dynamic table (literals "without indexing"), so our encoder
is stateless and cannot fall out of step with the peer's decoder. The decoder is hpack's, bounded (list
size, table-size updates per block: :mod:`sonic.h2.hpack_bounded`) and memoised for blocks that leave the table alone, within a
per-connection and (server) a shared :class:`~sonic.h2.limits.MemoBudget`.
"""

from __future__ import annotations

from collections.abc import Callable

import hpack

from sonic.h2.frames import ErrorCode, Flag, ProtocolError
from sonic.h2.hpack_bounded import BoundedDecoder, CountingTable
from sonic.h2.limits import Http2Limits, MemoBudget

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
        self._decoder = BoundedDecoder(max_header_list_bytes, max_table_size_updates)
        self._table = CountingTable()
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


class HeaderBlocks:
    """A header block split over HEADERS and CONTINUATION frames, assembled within the limits."""

    __slots__ = ("_block", "_count", "_empty_frame", "_flags", "_limits", "_stream_id", "open")

    def __init__(self, limits: Http2Limits, empty_frame: Callable[[], None]) -> None:
        self._limits = limits
        self._empty_frame = empty_frame  # counts a frame without payload (bounded)
        self.open = False  # a block is being assembled: only its CONTINUATION frames may come
        self._stream_id = 0
        self._flags = 0  # of its HEADERS frame
        self._block = bytearray()
        self._count = 0  # its CONTINUATION frames so far

    def too_large(self) -> None:
        msg = f"header block of more than {self._limits.max_header_block_bytes} bytes"
        raise ProtocolError(ErrorCode.ENHANCE_YOUR_CALM, msg)

    def begin(self, stream_id: int, flags: int, fragment: memoryview) -> None:
        """HEADERS without END_HEADERS."""
        if not fragment:
            self._empty_frame()
        self.open = True
        self._stream_id, self._flags, self._block, self._count = stream_id, flags, bytearray(fragment), 0

    def continued(self, stream_id: int, flags: int, payload: memoryview) -> tuple[int, int, bytes] | None:
        """A CONTINUATION frame: the whole block (stream id, HEADERS flags, block) once it ends."""
        if not self.open or self._stream_id != stream_id:
            raise ProtocolError(ErrorCode.PROTOCOL_ERROR, "CONTINUATION without HEADERS")
        self._count += 1
        if self._count > self._limits.max_continuation_frames:
            msg = f"more than {self._limits.max_continuation_frames} CONTINUATION frames in one header block"
            raise ProtocolError(ErrorCode.ENHANCE_YOUR_CALM, msg)
        if not payload and not flags & Flag.END_HEADERS:
            self._empty_frame()
        self._block += payload
        if len(self._block) > self._limits.max_header_block_bytes:
            self.too_large()
        if not flags & Flag.END_HEADERS:
            return None
        self.open = False
        block, self._block = bytes(self._block), bytearray()
        return stream_id, self._flags, block
