"""Fuzzing the HTTP/REST front end end to end: raw HTTP/1.1 requests over a socket to a real
:class:`HttpFrontend` (127.0.0.1, port 0) over a data plane with a loaded model.

Requests are built valid for each endpoint (inference in JSON and with binary tensors and
``Inference-Header-Content-Length``, metadata, config, readiness, repository index and load with a
``config`` override, shared-memory register and status), then their request line, headers and body are
changed. Whatever arrives, the answer is an HTTP status, and never 500: a client's mistake is a 4xx.
"""

from __future__ import annotations

import asyncio
import json
import uuid
from collections.abc import Iterator
from dataclasses import dataclass
from datetime import timedelta

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from tests.fuzz.served import identity_plane

from sonic.server.config import ModelControlMode
from sonic.server.frontends.base import FrontendSettings
from sonic.server.frontends.http import HttpFrontend
from sonic.testing.fuzz import mutated, one_in

MAX_MESSAGE_BYTES = 1 << 16


@dataclass(frozen=True)
class Served:
    port: int
    runner: asyncio.Runner


@pytest.fixture(scope="module")
def served(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Served]:
    # Explicit model control: loads (with a ``config`` override from the request) are open to clients.
    with identity_plane(tmp_path_factory.mktemp("repository"), ModelControlMode.EXPLICIT) as plane:
        settings = FrontendSettings("127.0.0.1", max_message_bytes=MAX_MESSAGE_BYTES)
        frontend = HttpFrontend(plane.dataplane, plane.gate, 0, settings, budget=plane.budget)
        plane.runner.run(frontend.start())
        yield Served(frontend.port, plane.runner)
        plane.runner.run(frontend.stop(1.0))


def _json_infer() -> tuple[bytes, dict[str, str]]:
    body = {"inputs": [{"name": "INPUT0", "datatype": "FP32", "shape": [1, 16], "data": [0.5] * 16}]}
    return json.dumps(body).encode(), {}


def _binary_infer() -> tuple[bytes, dict[str, str]]:
    head = json.dumps(
        {
            "inputs": [
                {
                    "name": "INPUT0",
                    "datatype": "FP32",
                    "shape": [2, 16],
                    "parameters": {"binary_data_size": 128},
                }
            ],
            "outputs": [{"name": "OUTPUT0", "parameters": {"binary_data": True}}],
        }
    ).encode()
    return head + np.ones((2, 16), np.float32).tobytes(), {"Inference-Header-Content-Length": str(len(head))}


# (method, path, body and extra headers): one valid request per endpoint a client reaches.
ENDPOINTS = [
    ("POST", "/v2/models/identity/infer", _json_infer()),
    ("POST", "/v2/models/identity/versions/1/infer", _binary_infer()),
    ("GET", "/v2/models/identity", (b"", {})),
    ("GET", "/v2/models/identity/config", (b"", {})),
    ("GET", "/v2/models/identity/ready", (b"", {})),
    ("GET", "/v2/models/identity/stats", (b"", {})),
    ("GET", "/v2/health/ready", (b"", {})),
    ("GET", "/v2", (b"", {})),
    ("POST", "/v2/repository/index", (b'{"ready": true}', {})),
    (
        "POST",
        "/v2/repository/models/identity/load",
        (json.dumps({"parameters": {"config": json.dumps({"max_batch_size": 8})}}).encode(), {}),
    ),
    # Keys under a prefix nothing else uses: the registry never touches another process's segment.
    (
        "POST",
        "/v2/systemsharedmemory/region/fuzz/register",
        (
            json.dumps(
                {"key": f"/sonic_fuzz_absent_{uuid.uuid4().hex}", "offset": 0, "byte_size": 64}
            ).encode(),
            {},
        ),
    ),
    ("GET", "/v2/systemsharedmemory/status", (b"", {})),
    ("POST", "/v2/cudasharedmemory/region/x/register", (b"{}", {})),
]


@st.composite
def http_requests(draw: st.DrawFn) -> bytes:
    method, path, (body, headers) = draw(st.sampled_from(ENDPOINTS))
    headers = dict(headers)
    if draw(one_in(4)):
        path = (
            draw(mutated(path.encode()))
            .decode("latin-1")
            .replace(" ", "%20")
            .replace("\r", "")
            .replace("\n", "")
        )
    if draw(one_in(6)):
        method = draw(st.sampled_from(["GET", "POST", "PUT", "DELETE"]))
    if draw(one_in(3)):
        body = draw(mutated(body))
    if draw(one_in(5)):
        headers["Inference-Header-Content-Length"] = draw(
            st.sampled_from(["-1", "0", "99999999999", " 12 ", "1_0", "\u0661", "x", "9" * 5000])
        )
    if draw(one_in(6)):
        headers["Content-Encoding"] = draw(st.sampled_from(["gzip", "deflate", "br", "identity"]))
    lines = [f"{method} {path} HTTP/1.1", "Host: localhost", "Connection: close"]
    lines += [f"{name}: {value}" for name, value in headers.items()]
    lines.append(f"Content-Length: {len(body)}")
    return ("\r\n".join(lines) + "\r\n\r\n").encode("utf-8", errors="surrogateescape") + body


async def _exchange(port: int, request: bytes) -> bytes:
    reader, writer = await asyncio.open_connection("127.0.0.1", port)
    try:
        writer.write(request)
        await writer.drain()
        return await reader.read()  # to EOF: every request says Connection: close
    finally:
        writer.close()
        await writer.wait_closed()


# A load request reloads the model (an ONNX session: a few hundred ms here): more than a decode's deadline.
@settings(deadline=timedelta(seconds=20))
@given(http_requests())
def test_every_request_gets_a_status_never_500(served: Served, request: bytes) -> None:
    answer = served.runner.run(asyncio.wait_for(_exchange(served.port, request), timeout=10))
    status_line = answer.split(b"\r\n", 1)[0]
    assert status_line.startswith((b"HTTP/1.1 ", b"HTTP/1.0 ")), answer[
        :200
    ]  # aiohttp answers a bad request line in 1.0
    status = int(status_line.split()[1])
    assert status < 500 or status in {501, 503}, answer[:600]
