"""A method the path does not take: 405 with ``Allow`` and a message naming what to use (Triton answers
405 too); a path that is no route: 404, whatever the method."""

from __future__ import annotations

import http.client
import json

import pytest

from sonic.launch import ServerProcess

pytestmark = pytest.mark.integration

WRONG_METHODS = [
    ("POST", "/v2/health/live", "GET"),
    ("PUT", "/v2/health/ready", "GET"),
    ("DELETE", "/v2", "GET"),
    ("GET", "/v2/repository/index", "POST"),
    ("PUT", "/v2/logging", "GET, POST"),
    ("DELETE", "/v2/logging", "GET, POST"),
    ("GET", "/v2/repository/models/add_sub/load", "POST"),
    ("POST", "/v2/models/add_sub", "GET"),
    ("GET", "/v2/models/add_sub/infer", "POST"),
    ("PUT", "/v2/models/no_such_model/infer", "POST"),  # the route, not the model, is judged first
    ("POST", "/v2/models/add_sub/ready", "GET"),
    ("POST", "/v2/models/stats", "GET"),
    ("PUT", "/v2/models/add_sub/config", "GET"),
    ("GET", "/v2/models/add_sub/versions/1/infer", "POST"),
    ("POST", "/v2/models/add_sub/versions/1/stats", "GET"),
    ("PATCH", "/v2/systemsharedmemory/status", "GET"),
    ("GET", "/v2/systemsharedmemory/region/r/register", "POST"),
    ("GET", "/v2/systemsharedmemory/unregister", "POST"),
    ("POST", "/v2/cudasharedmemory/status", "GET"),
    ("POST", "/v2/cudasharedmemory/region/r/status", "GET"),
    ("GET", "/v2/cudasharedmemory/unregister", "POST"),
    ("GET", "/v2/cudasharedmemory/region/r/register", "POST"),
    ("OPTIONS", "/v2/health/live", "GET"),
]
NO_ROUTE = [
    ("GET", "/v2/no/such/endpoint"),
    ("POST", "/v2/models/add_sub/versions/v1"),  # versions are digits only
    ("GET", "/v2/models/add_sub/versions/one/infer"),
    ("GET", "/v2/cudasharedmemory/foo"),
    ("DELETE", "/v3/health/live"),
]


def _ask(address: str, method: str, path: str) -> tuple[int, str | None, bytes]:
    host, port = address.rsplit(":", 1)
    connection = http.client.HTTPConnection(host, int(port), timeout=10)
    try:
        connection.request(method, path, body=b"" if method in {"POST", "PUT", "PATCH"} else None)
        response = connection.getresponse()
        return response.status, response.getheader("Allow"), response.read()
    finally:
        connection.close()


def test_wrong_method_is_405_with_allow(http_server: ServerProcess) -> None:
    for method, path, allow in WRONG_METHODS:
        status, allowed, body = _ask(http_server.http_address, method, path)
        assert (status, allowed) == (405, allow), (method, path, body)
        use = allow.replace(", ", " or ")
        assert json.loads(body) == {"error": f"method not allowed: {method} {path} (use {use})"}


def test_head_is_405_without_a_body(http_server: ServerProcess) -> None:
    for path, allow in (("/v2/health/live", "GET"), ("/v2/models/add_sub/infer", "POST")):
        assert _ask(http_server.http_address, "HEAD", path) == (405, allow, b"")


def test_no_route_is_404_whatever_the_method(http_server: ServerProcess) -> None:
    for method, path in NO_ROUTE:
        status, allowed, body = _ask(http_server.http_address, method, path)
        assert (status, allowed) == (404, None), (method, path, body)
        outside = "" if path.startswith("/v2/") else " (every endpoint is under /v2)"
        assert json.loads(body) == {"error": f"no such endpoint: {method} {path}{outside}"}


def test_right_methods_still_answer(http_server: ServerProcess) -> None:
    address = http_server.http_address
    assert _ask(address, "GET", "/v2/health/live")[0] == 200
    assert _ask(address, "GET", "/v2/cudasharedmemory/status") == (200, None, b"[]")
    assert _ask(address, "POST", "/v2/cudasharedmemory/region/r/unregister")[0] == 200
    assert _ask(address, "POST", "/v2/cudasharedmemory/region/r/register")[0] == 501
