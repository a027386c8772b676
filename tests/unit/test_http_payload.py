"""A binary-tensor HTTP response written as pieces (issue 37 item 2): the same bytes on the wire as the body
joined into one ``bytes``, and the output arrays handed to aiohttp as views (no copy on the way out)."""

from __future__ import annotations

import asyncio
from typing import Any

import numpy as np
from aiohttp import web

from sonic.protocol.http_json import HEADER_LENGTH, OutputChoice, encode_infer_response_parts
from sonic.protocol.types import InferResponse, OutputTensor
from sonic.server.frontends.http_payload import PartsPayload


def _response() -> InferResponse:
    large = np.arange(300_000, dtype=np.float32).reshape(-1, 16 * 5)  # 1.2 MB: several writes
    small = np.array([[1, 2, 3]], np.int64)
    outputs = [
        OutputTensor("OUTPUT0", "FP32", large.shape, large),
        OutputTensor("OUTPUT1", "INT64", small.shape, small),
    ]
    return InferResponse("identity", "1", "r1", outputs)


async def _raw_response(app: web.Application, path: str) -> bytes:
    """What the server writes for ``GET path``, read off a plain socket."""
    runner = web.AppRunner(app, access_log=None)
    await runner.setup()
    site = web.TCPSite(runner, "127.0.0.1", 0)
    await site.start()
    try:
        port = runner.addresses[0][1]
        reader, writer = await asyncio.open_connection("127.0.0.1", port)
        writer.write(f"GET {path} HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n".encode())
        data = await reader.read()
        writer.close()
        await writer.wait_closed()
        return data
    finally:
        await runner.cleanup()


def _without_date(raw: bytes) -> bytes:
    return b"\r\n".join(line for line in raw.split(b"\r\n") if not line.lower().startswith(b"date:"))


def test_pieces_go_out_as_the_joined_body_would() -> None:
    parts, json_length = encode_infer_response_parts(_response(), OutputChoice(True, {}))
    assert json_length is not None
    headers = {HEADER_LENGTH: str(json_length)}

    async def joined(_: web.Request) -> web.Response:
        return web.Response(body=b"".join(parts), content_type="application/octet-stream", headers=headers)

    async def pieces(_: web.Request) -> web.Response:
        return web.Response(body=PartsPayload(parts, "application/octet-stream"), headers=headers)

    app = web.Application()
    app.router.add_get("/joined", joined)
    app.router.add_get("/pieces", pieces)

    async def both() -> tuple[bytes, bytes]:
        return await _raw_response(app, "/joined"), await _raw_response(app, "/pieces")

    expected, written = asyncio.run(both())
    assert written.startswith(b"HTTP/1.1 200 OK\r\n")
    assert _without_date(written) == _without_date(expected)


def test_binary_outputs_are_views_of_the_arrays() -> None:
    response = _response()
    parts, _ = encode_infer_response_parts(response, OutputChoice(True, {}))
    arrays: list[Any] = [output.array for output in response.outputs]
    assert len(parts) == 1 + len(arrays)
    for part, array in zip(parts[1:], arrays, strict=True):
        assert isinstance(part, memoryview)
        assert np.shares_memory(np.frombuffer(part, np.uint8), array)
