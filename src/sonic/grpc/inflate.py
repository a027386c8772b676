"""Bounded gzip/deflate inflation: a cap on the decompressed size, enforced while inflating.

A compressed message is a promise the sender makes about nothing: 1 MiB of gzip can inflate to 1 GiB
(zlib's ratio tops out near 1:1032). So output is produced in chunks of at most ``chunk_bytes`` and
counted as it comes, and inflation stops one byte past ``max_bytes``. Small outputs are inflated
inline (cheaper than a thread hop); once the output passes ``inline_bytes`` the rest is inflated in a
worker thread so the event loop keeps serving everyone else (:func:`inflate_async`).

Used by the gRPC call layer on both ends (``grpc-encoding``) and by the HTTP/REST frontend
(``Content-Encoding``).
"""

from __future__ import annotations

import asyncio
import zlib

# zlib's wbits for each encoding name, as gRPC and HTTP spell them: 31 = gzip header, 15 = zlib header.
WBITS = {"gzip": 31, "deflate": 15}
CHUNK_BYTES = 1 << 20  # output per zlib call: bounds the memory past the limit and the time per step
INLINE_BYTES = 1 << 20  # output inflated on the caller's thread before moving to a worker thread


class InflateLimitError(ValueError):
    """The decompressed data would exceed the limit."""

    def __init__(self, limit: int) -> None:
        super().__init__(f"decompressed message larger than the limit of {limit} bytes")
        self.limit = limit


class InflateError(ValueError):
    """The data is not valid for its encoding (or is truncated)."""


class BoundedInflater:
    """One message's inflation, resumable: :meth:`step` until :attr:`done`, then :meth:`result`."""

    __slots__ = ("_inflater", "_left", "_max_bytes", "_out", "_size", "done")

    def __init__(self, data: bytes | bytearray | memoryview, encoding: str, max_bytes: int) -> None:
        wbits = WBITS.get(encoding)
        if wbits is None:
            msg = f"unsupported encoding {encoding!r}: expected one of {', '.join(WBITS)}"
            raise InflateError(msg)
        self._inflater = zlib.decompressobj(wbits)
        self._left: bytes | memoryview = memoryview(data).cast("B")
        self._max_bytes = max_bytes
        self._out: list[bytes] = []
        self._size = 0
        self.done = False

    def step(self, budget_bytes: int) -> None:
        """Inflate up to about ``budget_bytes`` more output (whole chunks)."""
        produced = 0
        inflater = self._inflater
        while not self.done and produced < budget_bytes:
            try:
                chunk = inflater.decompress(self._left, CHUNK_BYTES)
            except zlib.error as exc:
                raise InflateError(f"cannot decompress the message: {exc}") from None
            self._left = inflater.unconsumed_tail
            self._size += len(chunk)
            produced += len(chunk)
            if self._size > self._max_bytes:
                raise InflateLimitError(self._max_bytes)
            if chunk:
                self._out.append(chunk)
            if inflater.eof:
                self.done = True
            elif not chunk and not self._left:
                msg = "cannot decompress the message: the compressed data is truncated"
                raise InflateError(msg)

    def result(self) -> bytes:
        return self._out[0] if len(self._out) == 1 else b"".join(self._out)


def inflate(data: bytes | bytearray | memoryview, encoding: str, max_bytes: int) -> bytes:
    """All of ``data`` inflated on this thread; InflateLimitError past ``max_bytes``, InflateError if bad."""
    inflater = BoundedInflater(data, encoding, max_bytes)
    inflater.step(max_bytes + 1)
    return inflater.result()


def _finish(inflater: BoundedInflater) -> bytes:
    while not inflater.done:
        inflater.step(CHUNK_BYTES)
    return inflater.result()


async def inflate_async(
    data: bytes | bytearray | memoryview, encoding: str, max_bytes: int, *, inline_bytes: int = INLINE_BYTES
) -> bytes:
    """:func:`inflate`, with output past ``inline_bytes`` produced in a worker thread."""
    inflater = BoundedInflater(data, encoding, max_bytes)
    inflater.step(inline_bytes)
    if inflater.done:
        return inflater.result()
    return await asyncio.get_running_loop().run_in_executor(None, _finish, inflater)
