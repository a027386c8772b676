"""The HTTP route table's matching: placeholders, digits-only versions, the method to use."""

from __future__ import annotations

import pytest

from sonic.protocol.errors import NotFoundError
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


def test_no_route_is_a_404_naming_the_method_to_use() -> None:
    with pytest.raises(NotFoundError, match=r"^no such endpoint: GET /v2/models/m/infer \(use POST\)$"):
        ROUTES.match("GET", ["models", "m", "infer"], lambda: "GET /v2/models/m/infer")
    with pytest.raises(NotFoundError, match=r"\(use GET or POST\)$"):
        ROUTES.match("PUT", ["logging"], lambda: "PUT /v2/logging")
    with pytest.raises(NotFoundError, match=r"^no such endpoint: X$"):  # versions are digits only
        ROUTES.match("GET", ["models", "m", "versions", "v1"], lambda: "X")
    with pytest.raises(NotFoundError, match=r"^no such endpoint: X$"):  # {name+}: not empty
        ROUTES.match("POST", ["shm", "region", "", "register"], lambda: "X")
