"""The HTTP front end's route table: ``(method, pattern) → handler``, matched against a split path.

A pattern is a tuple of path segments: literals, or placeholders that capture the segment under their
name: ``{name}`` (any segment, the empty one included: the handler judges the name), ``{name+}`` (not
empty), ``{version}`` (ASCII digits only, as Triton's routes: anything else is no route). The first route
whose pattern matches wins (:class:`RouteTable` looks only at the routes of the path's length and first
segment). A path that no route matches is a 404 (:class:`NotFoundError`); one that some route matches
under another method is a 405 (:class:`MethodNotAllowedError`, as Triton answers) that names the methods
to use; both are worked out only on a miss.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Generic, TypeVar

from sonic.protocol.errors import MethodNotAllowedError, NotFoundError
from sonic.server.guard import CallKind

H = TypeVar("H")


@dataclass(frozen=True, slots=True)
class Route(Generic[H]):
    method: str  # GET or POST
    pattern: tuple[str, ...]
    kind: CallKind  # what the guard calls it
    handler: H


@dataclass(frozen=True, slots=True)
class _Compiled(Generic[H]):
    route: Route[H]
    literals: tuple[tuple[int, str], ...]  # (position, text) that must be equal, past the first segment
    captures: tuple[tuple[int, str, str], ...]  # (position, name, rule: "", "+" not empty, "digits")


def _compile(route: Route[H]) -> _Compiled[H]:
    literals, captures = [], []
    for position, segment in enumerate(route.pattern):
        if not segment.startswith("{"):
            if position:  # the first segment is the table's key: already equal
                literals.append((position, segment))
            continue
        name = segment.strip("{}+")
        rule = "+" if segment.endswith("+}") else "digits" if name == "version" else ""
        captures.append((position, name, rule))
    return _Compiled(route, tuple(literals), tuple(captures))


def _capture(compiled: _Compiled[H], parts: Sequence[str]) -> dict[str, str] | None:
    """The placeholders' segments when ``parts`` (of the pattern's length) fits, else None."""
    for position, text in compiled.literals:
        if parts[position] != text:
            return None
    params: dict[str, str] = {}
    for position, name, rule in compiled.captures:
        part = parts[position]
        if (rule == "+" and not part) or (rule == "digits" and not (part.isascii() and part.isdigit())):
            return None
        params[name] = part
    return params


class RouteTable(Generic[H]):
    """The routes, in order, looked up by path length and first segment (every pattern starts with a
    literal), so a request is checked against the few routes of its shape only."""

    def __init__(self, routes: Sequence[Route[H]]) -> None:
        self.routes = tuple(routes)
        self._by_shape: dict[tuple[int, str], list[_Compiled[H]]] = {}
        for route in self.routes:
            first = route.pattern[0] if route.pattern else ""
            self._by_shape.setdefault((len(route.pattern), first), []).append(_compile(route))

    def match(
        self, method: str, parts: Sequence[str], where: Callable[[], str]
    ) -> tuple[Route[H], dict[str, str]]:
        """The route for ``method`` and ``parts`` with its captured segments. When there is none:
        MethodNotAllowedError if routes of the path take other methods (``allowed``), else
        NotFoundError; either names ``where()`` (the request's method and path, written only then)."""
        allowed: list[str] = []
        for compiled in self._by_shape.get((len(parts), parts[0] if parts else ""), ()):
            params = _capture(compiled, parts)
            if params is None:
                continue
            if compiled.route.method == method:
                return compiled.route, params
            if compiled.route.method not in allowed:
                allowed.append(compiled.route.method)
        if allowed:
            use = " or ".join(allowed)
            raise MethodNotAllowedError(f"method not allowed: {where()} (use {use})", tuple(allowed))
        raise NotFoundError(f"no such endpoint: {where()}")


def with_versions(routes: Sequence[Route[H]]) -> list[Route[H]]:
    """Each ``models/{name}/...`` route, and the same under ``models/{name}/versions/{version}/...``."""
    result: list[Route[H]] = []
    for route in routes:
        result.append(route)
        if route.pattern[:2] == ("models", "{name}"):
            pattern = (*route.pattern[:2], "versions", "{version}", *route.pattern[2:])
            result.append(Route(route.method, pattern, route.kind, route.handler))
    return result
