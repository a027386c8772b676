"""The gRPC call layer shared by our server and client, and its bounded inflation."""

from __future__ import annotations

import gzip
import threading
import zlib

import hpack
import pytest

from sonic.grpc import inflate as inflate_module
from sonic.grpc.call import (
    GrpcError,
    MessageLimits,
    check_encoding,
    decompress,
    reset_status,
    status_block,
    trailers_status,
)
from sonic.grpc.inflate import InflateError, InflateLimitError, inflate, inflate_async
from sonic.h2.frames import ErrorCode
from sonic.protocol.errors import GrpcCode

BOMB = gzip.compress(bytes(64 << 20))  # 64 MiB of zeros in ~64 KiB


def test_inflation_stops_at_the_limit() -> None:
    with pytest.raises(InflateLimitError, match="larger than the limit of 1000000 bytes"):
        inflate(BOMB, "gzip", 1_000_000)
    data = b"physics " * 1000
    assert inflate(gzip.compress(data), "gzip", len(data)) == data  # exactly the limit is fine
    assert inflate(zlib.compress(data), "deflate", len(data)) == data


@pytest.mark.parametrize(
    ("data", "encoding", "match"),
    [
        (b"not gzip at all", "gzip", "cannot decompress"),
        (gzip.compress(b"x" * 1000)[:-12], "gzip", "truncated"),
        (b"", "br", "unsupported encoding 'br'"),
    ],
)
def test_bad_compressed_data_is_an_error(data: bytes, encoding: str, match: str) -> None:
    with pytest.raises(InflateError, match=match):
        inflate(data, encoding, 1 << 20)


async def test_large_inflations_run_off_the_event_loop(monkeypatch: pytest.MonkeyPatch) -> None:
    threads = set()
    finish = inflate_module._finish

    def recording_finish(inflater: inflate_module.BoundedInflater) -> bytes:
        threads.add(threading.current_thread())
        return finish(inflater)

    monkeypatch.setattr(inflate_module, "_finish", recording_finish)
    assert await inflate_async(gzip.compress(b"small"), "gzip", 100) == b"small"
    assert not threads  # small: inline, no thread hop
    assert len(await inflate_async(BOMB, "gzip", 64 << 20)) == 64 << 20
    assert threads
    assert threading.main_thread() not in threads


async def test_decompress_maps_to_grpc_statuses() -> None:
    limits = MessageLimits(max_message_bytes=1 << 20, max_decompressed_bytes=1 << 20)
    with pytest.raises(GrpcError, match=r"larger than max \(> 1048576 bytes decompressed\)") as caught:
        await decompress(BOMB, "gzip", limits)
    assert caught.value.status is GrpcCode.RESOURCE_EXHAUSTED
    with pytest.raises(GrpcError, match="cannot decompress") as bad:
        await decompress(b"junk", "deflate", limits)
    assert bad.value.status is GrpcCode.INTERNAL
    with pytest.raises(GrpcError, match="without a grpc-encoding") as missing:
        await decompress(b"junk", None, limits)
    assert missing.value.status is GrpcCode.INTERNAL


def test_encodings_statuses_and_trailers() -> None:
    assert check_encoding(None) is None
    assert check_encoding(b"identity") is None
    assert check_encoding(b"gzip") == "gzip"
    with pytest.raises(GrpcError, match="'zstd' not supported") as caught:
        check_encoding(b"zstd")
    assert caught.value.status is GrpcCode.UNIMPLEMENTED
    block = status_block(GrpcCode.RESOURCE_EXHAUSTED, "over 50% of the limit", trailers_only=True)
    fields = [(bytes(n), bytes(v)) for n, v in hpack.Decoder().decode(block, raw=True)]
    assert (b":status", b"200") in fields
    assert trailers_status(fields) == (GrpcCode.RESOURCE_EXHAUSTED, "over 50% of the limit")
    assert trailers_status([(b"grpc-status", b"x")])[0] is GrpcCode.UNKNOWN
    assert reset_status(ErrorCode.REFUSED_STREAM) is GrpcCode.UNAVAILABLE
    assert reset_status(ErrorCode.PROTOCOL_ERROR) is GrpcCode.INTERNAL
