"""The HTTP route table's matching: placeholders, digits-only versions, 405 (with the methods to use) vs 404."""

from __future__ import annotations

import pytest

from sonic.protocol.errors import MethodNotAllowedError, NotFoundError
from sonic.server.frontends.http_routes import Route, RouteTable, with_versions
from sonic.server.guard import CallKind

pytestmark = pytest.mark.unit

ROUTES = RouteTable(
    with_versions(
        (
            Route("GET", ("models", "stats"), CallKind.CONTROL, "all-stats"),
            Route("GET", ("models", "{name}"), CallKind.CONTROL, "metadata"),
            Route("POST", ("models", "{name}", "infer"), CallKind.INFER, "infer"),
            Route("POST", ("shm", "region", "{name+}", "register"), CallKind.CONTROL, "register"),
            Route("GET", ("logging",), CallKind.CONTROL, "get"),
            Route("POST", ("logging",), CallKind.CONTROL, "post"),
        )
    )
)


def test_first_match_wins_and_placeholders_capture() -> None:
    assert ROUTES.match("GET", ["models", "stats"], lambda: "GET /v2/models/stats")[0].handler == "all-stats"
    route, params = ROUTES.match("POST", ["models", "m", "versions", "12", "infer"], lambda: "")
    assert (route.handler, params) == ("infer", {"name": "m", "version": "12"})
    assert ROUTES.match("GET", ["models", ""], lambda: "")[1] == {"name": ""}  # the handler judges the name


def test_a_path_with_routes_for_other_methods_is_a_405_naming_them() -> None:
    with pytest.raises(
        MethodNotAllowedError, match=r"^method not allowed: GET /v2/models/m/infer \(use POST\)$"
    ) as info:
        ROUTES.match("GET", ["models", "m", "infer"], lambda: "GET /v2/models/m/infer")
    assert info.value.allowed == ("POST",)
    with pytest.raises(MethodNotAllowedError, match=r"\(use GET or POST\)$") as info:
        ROUTES.match("PUT", ["logging"], lambda: "PUT /v2/logging")
    assert info.value.allowed == ("GET", "POST")
    # Each method once, in the table's order, whichever routes of the path take it; versions as well.
    with pytest.raises(MethodNotAllowedError) as info:
        ROUTES.match("POST", ["models", "stats"], lambda: "X")
    assert info.value.allowed == ("GET",)
    for method in ("HEAD", "OPTIONS", "DELETE", "get"):  # HEAD too: Triton's routes answer it 405
        with pytest.raises(MethodNotAllowedError) as info:
            ROUTES.match(method, ["models", "m", "versions", "3"], lambda: "X")
        assert info.value.allowed == ("GET",)
    assert issubclass(MethodNotAllowedError, NotFoundError)  # NOT_FOUND wherever HTTP is not the answer


def test_a_path_without_routes_is_a_404() -> None:
    for method, parts in (
        ("GET", ["models", "m", "versions", "v1"]),  # versions are digits only
        ("POST", ["shm", "region", "", "register"]),  # {name+}: not empty
        ("GET", ["shm", "region", "", "register"]),  # ... under any method
        ("GET", ["models", "m", "generate"]),
        ("GET", []),
    ):
        with pytest.raises(NotFoundError, match=r"^no such endpoint: X$") as info:
            ROUTES.match(method, parts, lambda: "X")
        assert not isinstance(info.value, MethodNotAllowedError), (method, parts)
