"""HTTP/REST bodies as attacks: deep JSON, a huge Content-Length, a gzip bomb.

As for the HTTP/2 attacks, a well-behaved gRPC client keeps calling during each and must be answered
within the bound, and the server's resident memory may grow by at most a bound.
"""

from __future__ import annotations

import http.client
import json
import socket

from sonic.launch import ServerProcess
from sonic.testing.bomb import gzip_zeros

from .conftest import Bystander, rss_bytes

MiB = 1 << 20
# The bomb inflates to 1 GiB; the server may inflate up to its default cap (256 MiB), not much more.
BOMB_RSS_BOUND = 384 * MiB
INFER = "/v2/models/identity/infer"


def _post(address: str, body: bytes, headers: dict[str, str]) -> tuple[int, str]:
    host, port = address.rsplit(":", 1)
    connection = http.client.HTTPConnection(host, int(port), timeout=30)
    try:
        connection.request("POST", INFER, body=body, headers={"Content-Type": "application/json", **headers})
        response = connection.getresponse()
        return response.status, json.loads(response.read())["error"]
    finally:
        connection.close()


def test_deeply_nested_json_is_a_400(attacked: ServerProcess, bystander: Bystander) -> None:
    body = b'{"inputs": ' + b"[" * 100_000 + b"]" * 100_000 + b"}"
    before = rss_bytes(attacked.pid)
    status, error = bystander.during(lambda: _post(attacked.http_address, body, {}))
    assert status == 400, error
    assert "nested too deeply" in error
    assert rss_bytes(attacked.pid) - before < 64 * MiB


def test_oversized_content_length_is_refused_before_reading(
    attacked: ServerProcess, bystander: Bystander
) -> None:
    """3 GiB announced and none sent: 413 at once, and the connection closed (nothing more is read)."""
    host, port = attacked.http_address.rsplit(":", 1)

    def attack() -> bytes:
        with socket.create_connection((host, int(port)), timeout=10) as sock:
            sock.sendall(
                f"POST {INFER} HTTP/1.1\r\nHost: {host}\r\nContent-Type: application/json\r\n"
                f"Content-Length: {3 << 30}\r\n\r\n".encode()
            )
            received = b""
            while chunk := sock.recv(65536):  # until the server closes: it must, without the body
                received += chunk
            return received

    response = bystander.during(attack)
    head, _, body = response.partition(b"\r\n\r\n")
    assert head.startswith(b"HTTP/1.1 413"), response[:200]
    error = json.loads(body)["error"]
    assert str(3 << 30) in error
    assert "limit" in error


def test_http_gzip_bomb(attacked: ServerProcess, bystander: Bystander) -> None:
    bomb = gzip_zeros(1 << 30)
    before = rss_bytes(attacked.pid)
    status, error = bystander.during(lambda: _post(attacked.http_address, bomb, {"Content-Encoding": "gzip"}))
    assert status == 413, error
    assert "limit" in error
    assert any(c.isdigit() for c in error), f"the message does not say the limit: {error}"
    assert rss_bytes(attacked.pid) - before < BOMB_RSS_BOUND
