"""Request bodies: encodings, JSON that cannot be parsed however it fails, bodies over the size limit."""

from __future__ import annotations

import gzip
import http.client
import json
import zlib
from pathlib import Path

import numpy as np
import pytest

from sonic.launch import ServerProcess


def _post(
    address: str, path: str, body: bytes, headers: dict[str, str] | None = None, *, chunked: bool = False
) -> tuple[int, dict[str, object]]:
    host, port = address.rsplit(":", 1)
    connection = http.client.HTTPConnection(host, int(port), timeout=10)
    try:
        payload: bytes | list[bytes] = (
            [body[i : i + 65536] for i in range(0, len(body), 65536)] if chunked else body
        )
        connection.request("POST", path, body=payload, headers=headers or {}, encode_chunked=chunked)
        response = connection.getresponse()
        text = response.read()
        return response.status, json.loads(text) if text else {}
    finally:
        connection.close()


def _infer_json(data: object) -> bytes:
    return json.dumps(
        {"inputs": [{"name": "INPUT0", "shape": [1, 16], "datatype": "FP32", "data": data}]}
    ).encode()


@pytest.mark.parametrize(
    ("encoding", "compress"),
    [("gzip", gzip.compress), ("deflate", zlib.compress)],
)
def test_compressed_json_body(http_server: ServerProcess, encoding: str, compress) -> None:  # type: ignore[no-untyped-def]
    body = compress(_infer_json(list(range(16))))
    status, reply = _post(
        http_server.http_address, "/v2/models/identity/infer", body, {"Content-Encoding": encoding}
    )
    assert status == 200, reply
    assert reply["outputs"][0]["data"] == list(range(16))  # type: ignore[index]


@pytest.mark.parametrize(
    ("body", "headers", "fragment"),
    [
        (b"\x1f\x8b not gzip at all", {"Content-Encoding": "gzip"}, "gzip request body"),
        (gzip.compress(_infer_json([0] * 16))[:-12], {"Content-Encoding": "gzip"}, "truncated"),
        (b'{"inputs": ' + b"[" * 50_000 + b"]" * 50_000 + b"}", {}, "nested too deeply"),
        (_infer_json([[[[[[0]]]]], [1]]), {}, "not a regular nested list"),
    ],
    ids=["bad-gzip", "truncated-gzip", "deep-json", "ragged-data"],
)
def test_bad_bodies_are_400(
    http_server: ServerProcess, body: bytes, headers: dict[str, str], fragment: str
) -> None:
    status, reply = _post(http_server.http_address, "/v2/models/identity/infer", body, headers)
    assert status == 400, reply
    assert fragment in str(reply["error"])


def test_unknown_encoding_is_501_in_tritons_words(http_server: ServerProcess) -> None:
    status, reply = _post(
        http_server.http_address, "/v2/models/identity/infer", b"{}", {"Content-Encoding": "br"}
    )
    assert status == 501, reply
    assert str(reply["error"]).startswith("Unsupported compression type: Content-Encoding 'br'")


@pytest.mark.parametrize("length", ["1_0", "\u0661\u0662", "+5", "0x1"])
def test_header_length_is_ascii_digits_only(http_server: ServerProcess, length: str) -> None:
    """Found by fuzzing: int() took underscores, signs and other scripts' digits as a header length
    (surrounding spaces are not part of an HTTP field value: the parser drops them)."""
    headers = {"Inference-Header-Content-Length": length.encode().decode("latin-1")}
    status, reply = _post(
        http_server.http_address, "/v2/models/identity/infer", _infer_json([0] * 16), headers
    )
    assert status == 400, reply
    assert "Inference-Header-Content-Length must be an integer" in str(reply["error"])


@pytest.mark.parametrize("field", ["offset", "byte_size"])
def test_a_boolean_is_no_shared_memory_offset_or_size(http_server: ServerProcess, field: str) -> None:
    payload = {"key": "/sonic_no_such_key", "offset": 0, "byte_size": 64} | {field: True}
    path = "/v2/systemsharedmemory/region/r/register"
    status, reply = _post(http_server.http_address, path, json.dumps(payload).encode())
    assert status == 400, reply
    assert "expected {'key': str, 'offset': int, 'byte_size': int}" in str(reply["error"])


def test_deep_json_on_a_control_endpoint_is_400(http_server: ServerProcess) -> None:
    status, reply = _post(http_server.http_address, "/v2/repository/index", b"[" * 100_000)
    assert status == 400, reply
    assert "nested too deeply" in str(reply["error"])


def test_large_json_body_is_parsed(http_server: ServerProcess) -> None:
    """Above the size that moves JSON parsing to a thread: the same answer."""
    values = np.arange(64 * 16, dtype=np.float32).reshape(64, 16)
    header = {"inputs": [{"name": "INPUT0", "shape": [64, 16], "datatype": "FP32", "data": values.tolist()}]}
    body = json.dumps(header).encode() + b" " * (1 << 19)  # padding: over the off-loop threshold
    status, reply = _post(http_server.http_address, "/v2/models/identity/infer", body)
    assert status == 200, reply
    assert np.array(reply["outputs"][0]["data"]).reshape(64, 16).tolist() == values.tolist()  # type: ignore[index]


def test_chunked_body_over_the_limit_is_413(test_repository: Path) -> None:
    args = ["--http-port", "0", "--max-message-bytes", "65536"]
    with ServerProcess.start([test_repository], extra_args=args) as process:
        body = _infer_json([0.0] * 16) + b" " * 100_000
        status, reply = _post(process.http_address, "/v2/models/identity/infer", body, chunked=True)
        assert status == 413, reply
        assert "65536" in str(reply["error"])
        status, reply = _post(
            process.http_address, "/v2/models/identity/infer", _infer_json([0.0] * 16), chunked=True
        )
        assert status == 200, reply


@pytest.mark.parametrize("content_length", ["whole", "json", "short"])
def test_chunked_body_with_a_content_length_is_400_saying_why(
    http_server: ServerProcess, content_length: str
) -> None:
    """Both framings (Python ``requests`` sends them for a generator body with a length): Triton serves
    the request; sonic refuses it (docs/triton-differences.md, ``chunked-with-content-length``), in words
    that name the two headers, as JSON like every other error, and serves the next request."""
    body = _infer_json(list(range(16)))
    chunked = f"{len(body):x}\r\n".encode() + body + b"\r\n0\r\n\r\n"
    length = {"whole": len(chunked), "json": len(body), "short": 5}[content_length]
    headers = {
        "Content-Type": "application/json",
        "Transfer-Encoding": "chunked",
        "Content-Length": str(length),
    }
    status, reply = _post(http_server.http_address, "/v2/models/identity/infer", chunked, headers)
    assert status == 400
    error = str(reply["error"])
    assert "both 'Transfer-Encoding: chunked' and 'Content-Length'" in error
    assert "RFC 9112 section 6.1" in error
    status, reply = _post(http_server.http_address, "/v2/models/identity/infer", body)
    assert status == 200, reply
