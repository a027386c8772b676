"""An HTTP/REST response body given as pieces (aiohttp), written one by one and never joined.

A binary-tensor response is the JSON header followed by each binary output's bytes; the outputs are views
of the model's arrays (:func:`sonic.protocol.http_json.encode_infer_response_parts`). Joining them into one
``bytes`` would copy every output once more; :class:`PartsPayload` hands each piece to aiohttp's writer
instead, which passes it to the transport as it is (a scatter-gather write of the output arrays).
"""

from __future__ import annotations

from collections.abc import Sequence

from aiohttp import payload
from aiohttp.abc import AbstractStreamWriter

from sonic.protocol.wire import parts_size


class PartsPayload(payload.Payload):
    """The pieces of a body, in order; its size is their sum (the response's Content-Length)."""

    def __init__(self, parts: Sequence[bytes | memoryview], content_type: str) -> None:
        super().__init__(parts, content_type=content_type)
        self._parts = parts
        self._bytes = self._size = parts_size(parts)

    async def write(self, writer: AbstractStreamWriter) -> None:
        for part in self._parts:
            await writer.write(part)

    async def write_with_length(self, writer: AbstractStreamWriter, content_length: int | None) -> None:
        """aiohttp 3.12 and later: the response's Content-Length is this payload's size, never less."""
        if content_length is not None and content_length < self._bytes:
            msg = f"a body of {self._bytes} bytes cut to {content_length}"
            raise ValueError(msg)
        await self.write(writer)

    def decode(self, encoding: str = "utf-8", errors: str = "strict") -> str:
        return b"".join(self._parts).decode(encoding, errors)
