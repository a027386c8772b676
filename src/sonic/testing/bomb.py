"""Compression bombs for the tests: gzip streams that inflate to far more than they weigh.

Deflating a GiB of zeros takes seconds; here one chunk is deflated once, after a full flush (which
resets the compressor, so every further identical chunk deflates to the same bytes), and its output
repeated. The gzip wrapper (header, CRC-32, size) is written by hand, so the stream is valid to the end.
"""

from __future__ import annotations

import struct
import zlib

_CHUNK_BYTES = 1 << 24


def gzip_zeros(size: int) -> bytes:
    """A valid gzip stream of ``size`` zero bytes (``size`` a multiple of 16 MiB), about size/1000 long."""
    if size <= 0 or size % _CHUNK_BYTES:
        msg = f"gzip_zeros: size must be a positive multiple of {_CHUNK_BYTES}, got {size}"
        raise ValueError(msg)
    chunk = bytes(_CHUNK_BYTES)
    deflater = zlib.compressobj(9, zlib.DEFLATED, -15)
    first = deflater.compress(chunk) + deflater.flush(zlib.Z_FULL_FLUSH)
    repeated = deflater.compress(chunk) + deflater.flush(zlib.Z_FULL_FLUSH)
    last = deflater.flush(zlib.Z_FINISH)
    count = size // _CHUNK_BYTES
    crc = zlib.crc32(chunk)
    for _ in range(count - 1):
        crc = zlib.crc32(chunk, crc)
    header = b"\x1f\x8b\x08\x00\x00\x00\x00\x00\x00\xff"  # gzip, deflate, no flags, no mtime, unknown OS
    trailer = struct.pack("<II", crc, size & 0xFFFFFFFF)
    return header + first + repeated * (count - 1) + last + trailer
