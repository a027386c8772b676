"""Fuzzing the gRPC call layer: message framing however DATA frames cut it, ``grpc-timeout``,
``grpc-encoding``, bounded inflation of compressed messages, and the status trailers a client reads.
"""

from __future__ import annotations

import asyncio
import gzip
import itertools
import zlib

from hypothesis import given
from hypothesis import strategies as st

from sonic.grpc.call import (
    GRPC_MESSAGE_PREFIX,
    GrpcError,
    MessageLimits,
    MessageReader,
    check_encoding,
    decompress,
    encode_grpc_message,
    format_grpc_timeout,
    parse_grpc_timeout,
    trailers_status,
)
from sonic.grpc.inflate import CHUNK_BYTES, InflateError, InflateLimitError, inflate
from sonic.protocol.errors import GrpcCode
from sonic.testing.fuzz import mutated, run_bounded

MAX_MESSAGE_BYTES = 1 << 12
PEAK_BYTES = 1 << 20
# Inflation produces output a chunk at a time and checks the limit after each: one chunk past the limit is
# the bound it promises (grpc/inflate.py); the first asyncio loop of a process adds its own setup.
INFLATE_PEAK_BYTES = 2 * CHUNK_BYTES + PEAK_BYTES


@st.composite
def framed_streams(draw: st.DrawFn) -> tuple[bytes, list[int]]:
    """Length-prefixed messages (some over the limit, some with a bad flag), mutated, and where to cut."""
    stream = b"".join(
        GRPC_MESSAGE_PREFIX.pack(draw(st.sampled_from([0, 1, 2, 255])), len(body)) + body
        for body in draw(st.lists(st.binary(max_size=MAX_MESSAGE_BYTES + 8), max_size=4))
    )
    stream = draw(mutated(stream))
    cuts = sorted(draw(st.lists(st.integers(0, len(stream)), max_size=8)))
    return stream, cuts


@given(framed_streams())
def test_message_reader_any_cut(case: tuple[bytes, list[int]]) -> None:
    """Whatever the frame boundaries: the same messages come out, never one over the limit."""
    stream, cuts = case

    def read(pieces: list[bytes]) -> list[tuple[bool, bytes]]:
        reader = MessageReader(MAX_MESSAGE_BYTES)
        out = []
        for piece in pieces:
            out += [(flag, bytes(message)) for flag, message in reader.feed(memoryview(piece))]
        return out

    bounds = [0, *cuts, len(stream)]
    pieces = [stream[a:b] for a, b in itertools.pairwise(bounds)]
    whole = run_bounded(lambda: read([stream]), allowed=(GrpcError,), max_peak_bytes=PEAK_BYTES)
    cut = run_bounded(lambda: read(pieces), allowed=(GrpcError,), max_peak_bytes=PEAK_BYTES)
    assert (whole.value is None) == (cut.value is None)
    if whole.value is not None:
        assert whole.value == cut.value
        assert all(len(message) <= MAX_MESSAGE_BYTES for _, message in whole.value)
    else:
        assert isinstance(whole.error, GrpcError)
        assert whole.error.status is GrpcCode.RESOURCE_EXHAUSTED


timeouts = st.one_of(
    st.binary(max_size=12),
    st.builds(
        lambda digits, unit: digits.encode() + unit,
        st.text("0123456789", max_size=10),
        st.sampled_from([b"H", b"M", b"S", b"m", b"u", b"n", b"", b"s", b"\xff"]),
    ),
)


@given(timeouts.flatmap(mutated))
def test_grpc_timeout_parse(value: bytes) -> None:
    """A ``grpc-timeout`` is a deadline in seconds or a ValueError (answered INVALID_ARGUMENT)."""
    outcome = run_bounded(lambda: parse_grpc_timeout(value), allowed=(ValueError,), max_peak_bytes=PEAK_BYTES)
    if outcome.value is not None:
        assert 0 <= outcome.value <= 99_999_999 * 3600


@given(st.floats(min_value=1e-9, max_value=1e9))
def test_grpc_timeout_round_trip(seconds: float) -> None:
    """What we send parses back, never earlier than asked (rounded up), within a unit."""
    parsed = parse_grpc_timeout(format_grpc_timeout(seconds))
    assert parsed >= seconds * (1 - 1e-9) - 1e-9


@given(st.one_of(st.none(), st.binary(max_size=12), st.sampled_from([b"gzip", b"deflate", b"identity"])))
def test_grpc_encoding_header(value: bytes | None) -> None:
    """Known encodings are named, anything else is UNIMPLEMENTED (as the gRPC spec asks)."""
    outcome = run_bounded(lambda: check_encoding(value), allowed=(GrpcError,), max_peak_bytes=PEAK_BYTES)
    if isinstance(outcome.error, GrpcError):
        assert outcome.error.status is GrpcCode.UNIMPLEMENTED
    else:
        assert outcome.value in {None, "gzip", "deflate"}


@st.composite
def compressed_messages(draw: st.DrawFn) -> tuple[bytes, str]:
    encoding = draw(st.sampled_from(["gzip", "deflate"]))
    body = draw(st.binary(max_size=256) | st.builds(bytes, st.integers(0, 4 * MAX_MESSAGE_BYTES)))
    packed = gzip.compress(body) if encoding == "gzip" else zlib.compress(body)
    return draw(mutated(packed)), encoding


@given(compressed_messages())
def test_inflate_is_bounded(case: tuple[bytes, str]) -> None:
    """Inflation stops at the limit whatever the data claims; bad data is an InflateError."""
    data, encoding = case
    outcome = run_bounded(
        lambda: inflate(data, encoding, MAX_MESSAGE_BYTES),
        allowed=(InflateError, InflateLimitError),
        max_peak_bytes=INFLATE_PEAK_BYTES,
    )
    if outcome.value is not None:
        assert len(outcome.value) <= MAX_MESSAGE_BYTES


@given(compressed_messages(), st.sampled_from(["gzip", "deflate", None]))
def test_decompress_statuses(case: tuple[bytes, str], encoding: str | None) -> None:
    """The call layer's statuses for compressed messages: over the limit RESOURCE_EXHAUSTED; data that
    does not inflate, or a compressed flag without ``grpc-encoding``, INTERNAL, as the gRPC spec's status
    table and grpcio answer them (a transport failure, not a field of the request)."""
    data, _ = case
    limits = MessageLimits(MAX_MESSAGE_BYTES, MAX_MESSAGE_BYTES)
    outcome = run_bounded(
        lambda: asyncio.run(decompress(data, encoding, limits)),
        allowed=(GrpcError,),
        max_peak_bytes=INFLATE_PEAK_BYTES,
    )
    if isinstance(outcome.error, GrpcError):
        assert outcome.error.status in {GrpcCode.RESOURCE_EXHAUSTED, GrpcCode.INTERNAL}
        assert outcome.error.message
    else:
        assert outcome.value is not None
        assert len(outcome.value) <= MAX_MESSAGE_BYTES


status_codes = st.integers(-5, 40).map(lambda n: str(n).encode()) | st.binary(max_size=4)


@given(
    st.lists(
        st.tuples(st.sampled_from([b"grpc-status", b"grpc-message", b"other"]), st.binary(max_size=16)),
        max_size=3,
    ),
    status_codes,
    st.binary(max_size=24) | st.text(max_size=8).map(encode_grpc_message),
)
def test_client_reads_any_trailers(extra: list[tuple[bytes, bytes]], code: bytes, message: bytes) -> None:
    """A client (attacked by a server, or behind a proxy) turns any trailers into a status and text:
    the gRPC spec asks a decoder never to fail on a bad ``grpc-message``."""
    trailers = [(b"grpc-status", code), (b"grpc-message", message), *extra]
    outcome = run_bounded(lambda: trailers_status(trailers), allowed=(), max_peak_bytes=PEAK_BYTES)
    assert outcome.value is not None
    status, text = outcome.value
    assert isinstance(status, GrpcCode)
    assert isinstance(text, str)


@given(st.text(max_size=64))
def test_grpc_message_round_trip(message: str) -> None:
    fields = [(b"grpc-status", b"3"), (b"grpc-message", encode_grpc_message(message))]
    assert trailers_status(fields) == (GrpcCode.INVALID_ARGUMENT, message)
