"""The HTTP front end's route table: ``(method, pattern) → handler``, matched against a split path.

A pattern is a tuple of path segments: literals, or placeholders that capture the segment under their
name: ``{name}`` (any segment, the empty one included: the handler judges the name), ``{name+}`` (not
empty), ``{version}`` (ASCII digits only, as Triton's routes: anything else is no route). The first route
whose pattern matches wins; a path that some route matches under another method is a 404 that names the
method to use.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Generic, TypeVar

from sonic.protocol.errors import NotFoundError
from sonic.server.guard import CallKind

H = TypeVar("H")


@dataclass(frozen=True, slots=True)
class Route(Generic[H]):
    method: str  # GET or POST
    pattern: tuple[str, ...]
    kind: CallKind  # what the guard calls it
    handler: H


def _capture(pattern: tuple[str, ...], parts: Sequence[str]) -> dict[str, str] | None:
    """The placeholders' segments when ``parts`` fits ``pattern``, else None."""
    if len(pattern) != len(parts):
        return None
    params: dict[str, str] = {}
    for segment, part in zip(pattern, parts, strict=True):
        if not segment.startswith("{"):
            if segment != part:
                return None
            continue
        name = segment.strip("{}+")
        if segment.endswith("+}") and not part:
            return None
        if name == "version" and not (part.isascii() and part.isdigit()):
            return None
        params[name] = part
    return params


def match(
    routes: Sequence[Route[H]], method: str, parts: Sequence[str], where: str
) -> tuple[Route[H], dict[str, str]]:
    """The route for ``method`` and ``parts`` with its captured segments; NotFoundError naming ``where``
    (the request's method and path) when there is none."""
    allowed: list[str] = []
    for route in routes:
        params = _capture(route.pattern, parts)
        if params is None:
            continue
        if route.method == method:
            return route, params
        if route.method not in allowed:
            allowed.append(route.method)
    hint = f" (use {' or '.join(allowed)})" if allowed else ""
    raise NotFoundError(f"no such endpoint: {where}{hint}")


def with_versions(routes: Sequence[Route[H]]) -> tuple[Route[H], ...]:
    """Each ``models/{name}/...`` route, and the same under ``models/{name}/versions/{version}/...``."""
    result: list[Route[H]] = []
    for route in routes:
        result.append(route)
        if route.pattern[:2] == ("models", "{name}"):
            pattern = (*route.pattern[:2], "versions", "{version}", *route.pattern[2:])
            result.append(Route(route.method, pattern, route.kind, route.handler))
    return tuple(result)
