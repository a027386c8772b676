"""gzip/deflate inflation with a cap on the decompressed size, enforced while inflating.

A compressed body of a few MiB can inflate to many GiB (a "zip bomb"); ``zlib.decompress`` would build
all of it before anyone could look at its size. Here zlib writes at most ``CHUNK_BYTES`` per step and
the running total is checked after each one, so memory never goes past the cap plus one chunk.
zlib releases the GIL while it works, so callers with large inputs run this in a thread.
"""

from __future__ import annotations

import zlib

# zlib's window bits: 31 is the gzip wrapper; 15 the zlib wrapper that HTTP and gRPC call "deflate".
WBITS = {"gzip": 31, "deflate": 15}
CHUNK_BYTES = 1 << 20


class InflateError(ValueError):
    """The data is not a valid stream of the named encoding."""


class InflateLimitError(ValueError):
    """The data inflates to more than the cap."""

    def __init__(self, limit: int) -> None:
        super().__init__(f"the body inflates to more than the limit of {limit} bytes decompressed")
        self.limit = limit


def inflate(data: bytes | bytearray | memoryview, encoding: str, max_bytes: int) -> bytes:
    """``data`` decompressed; InflateLimitError as soon as the output passes ``max_bytes``."""
    inflater = zlib.decompressobj(WBITS[encoding])
    pieces: list[bytes] = []
    size = 0
    pending: bytes | bytearray | memoryview = data
    try:
        while True:
            piece = inflater.decompress(pending, CHUNK_BYTES)
            size += len(piece)
            if size > max_bytes:
                raise InflateLimitError(max_bytes)
            pieces.append(piece)
            pending = inflater.unconsumed_tail
            # A full chunk may leave output inside zlib even when all input was taken: go round again.
            if not pending and len(piece) < CHUNK_BYTES:
                break
    except zlib.error as exc:
        raise InflateError(f"cannot {encoding}-decompress the body: {exc}") from None
    if not inflater.eof:
        raise InflateError(f"the {encoding} stream is truncated")
    return b"".join(pieces)
