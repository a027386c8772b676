"""Reading an HTTP/REST request body within the server's limits (aiohttp), bounded as it grows.

A Content-Length over the message limit (or the whole request-buffer budget) is refused before a byte
is read; a body grows as its bytes arrive, each charged to the server's request-buffer budget
(:mod:`sonic.server.budget`); chunked bodies are cut off as soon as they pass a limit; gzip/deflate
bodies inflate through :mod:`sonic.grpc.inflate` under the decompressed-size cap. Over a limit:
:class:`PayloadTooLargeError` (413, connection closed).
"""

from __future__ import annotations

import json
from http import HTTPStatus

from aiohttp import web

from sonic.grpc.inflate import WBITS, InflateError, InflateLimitError, inflate_async
from sonic.protocol.errors import (
    InvalidArgumentError,
    RequestBufferBusyError,
    ResourceExhaustedError,
    UnimplementedError,
)
from sonic.server.budget import BudgetHold

# A body that waited its bound for room in the request buffer budget: when to try again (seconds).
RETRY_AFTER_S = "1"


class PayloadTooLargeError(ResourceExhaustedError):
    """A request body over a size limit: answered 413 (not the 429 of its gRPC status) and the connection
    closed."""


async def refuse_body(
    request: web.BaseRequest, exc: PayloadTooLargeError | RequestBufferBusyError
) -> web.StreamResponse:
    """413 (too large) or 503 (no room in the request buffer budget), then close: aiohttp would otherwise
    read (and drop) the rest of the body for up to 10 s."""
    too_large = isinstance(exc, PayloadTooLargeError)
    response = web.Response(
        body=json.dumps({"error": exc.message}, separators=(",", ":")).encode(),
        status=HTTPStatus.REQUEST_ENTITY_TOO_LARGE if too_large else HTTPStatus.SERVICE_UNAVAILABLE,
        content_type="application/json",
    )
    if not too_large:
        response.headers["Retry-After"] = RETRY_AFTER_S
    response.force_close()
    await response.prepare(request)
    await response.write_eof()
    request.protocol.force_close()  # closes once the response is written; nothing more is read
    return response


async def read_body(
    request: web.BaseRequest, max_message_bytes: int, max_decompressed_bytes: int, hold: BudgetHold
) -> bytes | bytearray:
    """The body, inflated if it came with a Content-Encoding; each size limit checked as it grows, every
    byte charged to ``hold`` (the caller releases it when the request is done)."""
    encoding = request.headers.get("Content-Encoding", "identity").strip().lower()
    if encoding not in {"identity", *WBITS}:
        raise UnimplementedError(  # Triton's status and words, then what came and what is taken
            f"Unsupported compression type: Content-Encoding {encoding!r} (expected identity, gzip or deflate)"
        )
    body = await receive(request, max_message_bytes, hold)
    if encoding == "identity" or not body:
        return body
    limit = max_decompressed_bytes
    try:
        inflated = await inflate_async(body, encoding, limit)
    except InflateLimitError:
        raise PayloadTooLargeError(
            f"the {encoding} request body inflates to more than the server limit of {limit} bytes "
            "decompressed"
        ) from None
    except InflateError as exc:
        raise InvalidArgumentError(f"{encoding} request body: {exc}") from None
    hold.charge(len(inflated))  # held as long as the request: the next bodies wait while it is spent
    return inflated


async def receive(request: web.BaseRequest, limit: int, hold: BudgetHold) -> bytes | bytearray:
    """The body as sent, grown as its bytes arrive (an announced Content-Length reserves nothing).

    Before each read past the first the budget must have room: while it has none the body is not read,
    aiohttp's buffer fills and it pauses the transport, so the sender is held back by TCP, for at most
    the budget's ``wait_s``. A Content-Length over the message limit or over the whole budget is refused
    before a byte is read.
    """
    length = request.content_length
    if length is not None and length > limit:
        raise PayloadTooLargeError(
            f"request body of {length} bytes (Content-Length) is over the server limit of {limit} "
            "bytes; it was not read"
        )
    capacity = hold.capacity_bytes
    if length is not None and length > capacity:
        raise PayloadTooLargeError(
            f"request body of {length} bytes (Content-Length) is over the server's whole request buffer "
            f"budget of {capacity} bytes (--request-buffer-budget-mb); it was not read"
        )
    if length == 0:
        return b""
    first = await request.content.readany()
    hold.charge(len(first))
    if length is not None and len(first) == length:
        return first  # a small body arrives whole: no copy
    most = min(limit, capacity)  # for chunked bodies, checked as they grow (a Content-Length was above)
    # Chunks kept as they come and joined once: one copy in all (a bytearray grown by += is copied again
    # at each of its ~12 % steps, ~8 copies of a large body; one allocated from the announced length
    # would let a client reserve memory it never sends).
    chunks = [first]
    size = len(first)
    del first
    while size <= most:
        if request.content.at_eof():
            return bytearray().join(chunks)  # no room needed to learn that the body is whole
        await hold.room("the request body")
        chunk = await request.content.readany()
        if not chunk:
            return bytearray().join(chunks)
        hold.charge(len(chunk))
        chunks.append(chunk)
        size += len(chunk)
    which = "limit" if size > limit else "request buffer budget (--request-buffer-budget-mb)"
    raise PayloadTooLargeError(f"request body (chunked) is over the server {which} of {most} bytes")
