"""The gRPC call layer over HTTP/2, shared by our server front end and our client transport.

What the gRPC spec (PROTOCOL-HTTP2.md) puts on top of HTTP/2, for either end: length-prefixed messages
with a size limit, ``grpc-timeout``, ``grpc-status``/``grpc-message`` trailers, RST_STREAM codes as
statuses, and ``grpc-encoding`` compression (inflation bounded by :mod:`sonic.grpc.inflate`).
Statuses are :class:`~sonic.protocol.errors.GrpcCode` members; each end maps them to its own type.
"""

from __future__ import annotations

import math
import struct
import zlib
from dataclasses import dataclass
from urllib.parse import quote, unquote

import numpy as np
import numpy.typing as npt

from sonic.grpc.inflate import WBITS, InflateError, InflateLimitError, inflate_async
from sonic.h2.frames import ErrorCode
from sonic.h2.headers import Headers, encode_headers
from sonic.protocol.errors import GrpcCode

GRPC_MESSAGE_PREFIX = struct.Struct(">BI")  # compressed flag, message length
GRPC_MESSAGE_PREFIX_BYTES = 5
ACCEPT_ENCODING = b"identity,deflate,gzip"

# RST_STREAM codes as the gRPC spec maps them to statuses ("Errors"); anything else is INTERNAL.
RESET_STATUS: dict[int, GrpcCode] = {
    ErrorCode.REFUSED_STREAM: GrpcCode.UNAVAILABLE,  # not processed: safe to send again
    ErrorCode.CANCEL: GrpcCode.CANCELLED,
    ErrorCode.ENHANCE_YOUR_CALM: GrpcCode.RESOURCE_EXHAUSTED,
}


class GrpcError(Exception):
    """A call ends with this message and status."""

    def __init__(self, message: str, status: GrpcCode) -> None:
        super().__init__(message)
        self.status = status
        self.message = message


@dataclass(frozen=True)
class MessageLimits:
    """Per-message bounds of one end: the wire size, and the size once decompressed."""

    max_message_bytes: int
    max_decompressed_bytes: int


# --- grpc-timeout and grpc-message --------------------------------------------------------------------

_TIMEOUT_UNITS_S = {"H": 3600.0, "M": 60.0, "S": 1.0, "m": 1e-3, "u": 1e-6, "n": 1e-9}
_TIMEOUT_UNIT_BYTES_S = {unit.encode("ascii"): seconds for unit, seconds in _TIMEOUT_UNITS_S.items()}


def parse_grpc_timeout(value: bytes) -> float:
    """``grpc-timeout`` (e.g. ``100m``) in seconds; ValueError when malformed."""
    digits, unit_s = value[:-1], _TIMEOUT_UNIT_BYTES_S.get(value[-1:])
    if unit_s is None or not digits.isdigit() or len(digits) > 8:
        text = value.decode("ascii", errors="backslashreplace")
        msg = f"malformed grpc-timeout {text!r}: expected up to 8 digits and one of H M S m u n"
        raise ValueError(msg)
    return int(digits) * unit_s


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
    """``grpc-message`` as text. The spec asks a decoder never to fail on it: a peer that sends raw bytes
    (not percent-encoded ASCII) gets them read as UTF-8, undecodable bytes replaced."""
    return unquote(value.decode("utf-8", errors="replace"))


# --- status and trailers ------------------------------------------------------------------------------


def status_block(status: GrpcCode, message: str, *, trailers_only: bool) -> bytes:
    """Trailers ending a call with ``status``; with ``trailers_only`` also the response's headers."""
    headers = [(b":status", b"200"), (b"content-type", b"application/grpc")] if trailers_only else []
    headers.append((b"grpc-status", str(int(status)).encode()))
    if message:
        headers.append((b"grpc-message", encode_grpc_message(message)))
    return encode_headers(headers)


_OK = (GrpcCode.OK, "")
_LAST_CODE = max(GrpcCode)  # a peer may send a code newer than this list: UNKNOWN, as grpcio reads it


def trailers_status(trailers: Headers) -> tuple[GrpcCode, str]:
    """(status, message) out of a response's trailers."""
    fields = dict(trailers)
    code = fields.get(b"grpc-status")
    if code == b"0" and b"grpc-message" not in fields:
        return _OK  # every successful call: nothing to parse or decode
    if code is None or not code.isdigit():
        return GrpcCode.UNKNOWN, f"no valid grpc-status in the trailers: {code!r}"
    number = int(code)
    status = GrpcCode(number) if number <= _LAST_CODE else GrpcCode.UNKNOWN
    return status, decode_grpc_message(fields.get(b"grpc-message", b""))


def reset_status(code: int) -> GrpcCode:
    return RESET_STATUS.get(code, GrpcCode.INTERNAL)


# --- messages -----------------------------------------------------------------------------------------


def grpc_message_prefix(length: int, *, compressed: bool = False) -> bytes:
    return GRPC_MESSAGE_PREFIX.pack(1 if compressed else 0, length)


def compress(data: bytes | bytearray | memoryview, encoding: str) -> bytes:
    return zlib.compress(data, wbits=WBITS[encoding])


def check_encoding(encoding: bytes | None) -> str | None:
    """The ``grpc-encoding`` of a call as a name, None for identity; GrpcError(UNIMPLEMENTED) if unknown."""
    if encoding is None or encoding == b"identity":
        return None
    name = encoding.decode("latin-1")
    if name not in WBITS:
        msg = f"compression {name!r} not supported (identity, deflate, gzip)"
        raise GrpcError(msg, GrpcCode.UNIMPLEMENTED)
    return name


async def decompress(
    message: bytes | bytearray | memoryview, encoding: str | None, limits: MessageLimits
) -> bytes:
    """A compressed message inflated, bounded by ``limits.max_decompressed_bytes`` (large ones in a thread)."""
    if encoding is None:
        msg = "compressed message without a grpc-encoding header"
        raise GrpcError(msg, GrpcCode.INTERNAL)
    try:
        return await inflate_async(message, encoding, limits.max_decompressed_bytes)
    # Two names: mypyc gives one name one type in a function, and the clauses catch different ones.
    except InflateLimitError as too_large:
        msg = f"Received message larger than max (> {too_large.limit} bytes decompressed)"
        raise GrpcError(msg, GrpcCode.RESOURCE_EXHAUSTED) from None
    except InflateError as exc:
        raise GrpcError(str(exc), GrpcCode.INTERNAL) from None


class MessageReader:
    """gRPC length-prefixed messages out of a stream's DATA, however the frames cut them.

    A message larger than what one read holds lands in one buffer sized from its length prefix,
    uninitialised (``bytearray(n)`` would zero it first). Its bytes get there by :meth:`feed` (copied from
    a received view) or, for a transport that reads into memory it is given, straight from the socket:
    :meth:`room` is where the next bytes of the message go and :meth:`placed` says they arrived.
    ``copied_bytes`` counts the message bytes that :meth:`feed` copied, so a test can tell which way
    they came (a message of ``n`` bytes that came whole by :meth:`placed` counts none of them).
    """

    __slots__ = ("_body", "_compressed", "_filled", "_max_bytes", "_prefix", "copied_bytes")

    def __init__(self, max_bytes: int) -> None:
        self._max_bytes = max_bytes
        self._prefix = b""
        self._body: npt.NDArray[np.uint8] | None = None
        self._filled = 0
        self._compressed = False
        self.copied_bytes = 0

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
                    self.copied_bytes += length
                    pos += length
                    continue
                body = self._body = np.empty(length, np.uint8)
                self._filled = 0
                self._compressed = flag == 1
            take = min(len(body) - self._filled, end - pos)
            body[self._filled : self._filled + take] = np.frombuffer(data[pos : pos + take], np.uint8)
            self.copied_bytes += take
            self._filled += take
            pos += take
            if self._filled == len(body):
                out.append((self._compressed, body.data))
                self._body = None
        return out

    def room(self) -> memoryview | None:
        """Where the next bytes of the message in progress go (None between messages)."""
        body = self._body
        return None if body is None else body.data[self._filled :]

    def placed(self, size: int) -> tuple[bool, memoryview] | None:
        """``size`` bytes were written at :meth:`room`: the (compressed, message) pair once it is whole."""
        body = self._body
        if body is None or size > len(body) - self._filled:
            msg = f"{size} bytes placed where {self.room_bytes} were free"
            raise RuntimeError(msg)
        self._filled += size
        if self._filled < len(body):
            return None
        self._body = None
        return self._compressed, body.data

    @property
    def room_bytes(self) -> int:
        return 0 if self._body is None else len(self._body) - self._filled

    def too_large(self, length: int) -> Exception:
        """As grpcio words it (clients match on it)."""
        msg = f"Received message larger than max ({length} vs. {self._max_bytes})"
        return GrpcError(msg, GrpcCode.RESOURCE_EXHAUSTED)

    @property
    def partial(self) -> bool:
        return bool(self._prefix) or self._body is not None
