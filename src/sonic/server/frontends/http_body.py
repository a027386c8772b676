"""Reading an HTTP/REST request body within the server's limits (aiohttp), bounded as it grows.

A Content-Length over the message limit is refused before a byte is read; chunked bodies are cut off as
soon as they pass it; gzip/deflate bodies inflate through :mod:`sonic.protocol.inflate` under the
decompressed-size cap. Over a limit: :class:`PayloadTooLargeError` (413, connection closed).
"""

from __future__ import annotations

from aiohttp import web

from sonic.protocol.errors import InvalidArgumentError, ResourceExhaustedError
from sonic.protocol.inflate import WBITS, InflateError, InflateLimitError, inflate_async


class PayloadTooLargeError(ResourceExhaustedError):
    """A request body over a size limit: answered 413 (not the 429 of its gRPC status) and the connection
    closed."""


async def read_body(
    request: web.BaseRequest, max_message_bytes: int, max_decompressed_bytes: int
) -> bytes | bytearray:
    """The body, inflated if it came with a Content-Encoding; each size limit checked as it grows."""
    encoding = request.headers.get("Content-Encoding", "identity").strip().lower()
    if encoding not in {"identity", *WBITS}:
        raise InvalidArgumentError(
            f"Content-Encoding {encoding!r} is not supported (expected identity, gzip or deflate)"
        )
    body = await receive(request, max_message_bytes)
    if encoding == "identity" or not body:
        return body
    limit = max_decompressed_bytes
    try:
        return await inflate_async(body, encoding, limit)
    except InflateLimitError:
        raise PayloadTooLargeError(
            f"the {encoding} request body inflates to more than the server limit of {limit} bytes "
            "decompressed"
        ) from None
    except InflateError as exc:
        raise InvalidArgumentError(f"{encoding} request body: {exc}") from None


async def receive(request: web.BaseRequest, limit: int) -> bytes | bytearray:
    """The body as sent; a Content-Length over the limit is refused before a byte is read."""
    length = request.content_length
    if length is not None and length > limit:
        raise PayloadTooLargeError(
            f"request body of {length} bytes (Content-Length) is over the server limit of {limit} "
            "bytes; it was not read"
        )
    if length == 0:
        return b""
    first = await request.content.readany()
    if length is not None and len(first) == length:
        return first  # a small body arrives whole: no copy
    if length is not None:
        # Each chunk goes into its place as it arrives: one buffer, never the chunks and their join.
        buffer = bytearray(length)
        filled = len(first)
        buffer[:filled] = first
        del first
        while filled < length and (chunk := await request.content.readany()):
            buffer[filled : filled + len(chunk)] = chunk
            filled += len(chunk)
        return buffer
    # Chunked transfer: the size is known only at the end.
    chunks: list[bytes] = []
    size = 0
    chunk = first
    while chunk:
        size += len(chunk)
        if size > limit:
            raise PayloadTooLargeError(f"request body (chunked) is over the server limit of {limit} bytes")
        chunks.append(chunk)
        chunk = await request.content.readany()
    return b"".join(chunks)
