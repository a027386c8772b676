"""The places in sonic that word a refusal a client can get on a request path: the suite's reach is counted by them.

A *site* is a construction of a :class:`sonic.protocol.errors.SonicError` subclass (``raise
InvalidArgumentError(f"...")``, or an error built and returned) in one of :data:`SITE_FILES`. Its
message expression is read from the source (an f-string, a concatenation, a local ``msg = ...``) into a
*template*: the literal text, with ``{}`` where a value goes. The differential harness matches every
error message sonic answers against the templates (:meth:`SiteTable.sites_of`), so a run can say which
sites its cases reached, and whether the message was compared with Triton's there or only the status.
``tools/mutate_messages.py`` changes one site at a time (its words, or its status) and runs the suite
against each change.
"""

from __future__ import annotations

import ast
import re
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import sonic.protocol.errors as errors_module
import sonic.protocol.model_config  # noqa: F401  (its error classes: VersionConfigError, ModelCodeError)
from sonic.protocol.errors import SonicError

SONIC_ROOT = Path(errors_module.__file__).resolve().parent.parent
# The modules a request (inference, metadata, model control, shared memory, log settings, HTTP routing
# and bodies, the Python backend's outputs) passes through on its way to a refusal; backends other than
# Python's, ensembles, the rate limiter and start-up configuration are not reached by the differential
# models.
SITE_FILES = (
    "protocol/dtypes.py",
    "protocol/grpc_codec.py",
    "protocol/http_json.py",
    "protocol/http_raw.py",
    "protocol/model_config.py",
    "protocol/types.py",
    "protocol/wire.py",
    "server/backends/python.py",
    "server/dataplane.py",
    "server/frontends/grpc_methods.py",
    "server/frontends/http.py",
    "server/frontends/http_body.py",
    "server/frontends/http_routes.py",
    "server/log_settings.py",
    "server/models/load_config.py",
    "server/models/manager.py",
    "server/models/version.py",
    "server/models/repository.py",
    "server/runtime/sequences.py",
    "server/runtime/tensors.py",
    "server/shm/regions.py",
    "server/shm/opening.py",
    "server/shm/request.py",
)
WILD = "{}"
# A template with less literal text than this matches too much to name a site (``f"{where}: {text}"``).
MIN_LITERAL_CHARS = 8


def _error_names() -> set[str]:
    names: set[str] = set()
    todo: list[type[SonicError]] = [SonicError]
    while todo:
        cls = todo.pop()
        names.add(cls.__name__)
        todo.extend(cls.__subclasses__())
    return names


@dataclass(frozen=True)
class Site:
    path: str  # under src/sonic
    line: int
    error: str  # the exception class
    template: str  # literal text, WILD for each value; "" where the message is not readable from source

    @property
    def id(self) -> str:
        return f"{self.path}:{self.line}"

    @property
    def literal_chars(self) -> int:
        return len(self.template.replace(WILD, ""))

    def pattern(self) -> re.Pattern[str] | None:
        if self.literal_chars < MIN_LITERAL_CHARS:
            return None
        parts = [re.escape(p) for p in self.template.split(WILD)]
        return re.compile(".*?".join(parts), re.DOTALL)


Scopes = list[dict[str, list[ast.Assign]]] | tuple[()]


def _assignments(function: ast.AST) -> dict[str, list[ast.Assign]]:
    found: dict[str, list[ast.Assign]] = {}
    for node in ast.walk(function):
        if isinstance(node, ast.Assign) and len(node.targets) == 1 and isinstance(node.targets[0], ast.Name):
            found.setdefault(node.targets[0].id, []).append(node)
    return found


def message_node(call: ast.Call, scopes: Scopes) -> ast.expr | None:
    """The expression that words ``call``'s message: its first argument, through one local name."""
    if not call.args:
        return None
    node = call.args[0]
    if isinstance(node, ast.Name):
        for scope in scopes:  # innermost first: the last assignment before the call
            earlier = [a for a in scope.get(node.id, []) if a.lineno <= call.lineno]
            if earlier:
                return earlier[-1].value
        return None
    return node


def _text_name(node: ast.expr, scopes: Scopes) -> ast.expr | None:
    """The text a function's local name inside a message holds (``f"{failed}{exc}"``), where it is
    assigned once (not a module's constant)."""
    if not isinstance(node, ast.FormattedValue) or not isinstance(node.value, ast.Name):
        return None
    for scope in scopes[:-1]:
        assigned = scope.get(node.value.id, [])
        if assigned:
            value = assigned[0].value
            text = isinstance(value, ast.JoinedStr) or (
                isinstance(value, ast.Constant) and isinstance(value.value, str)
            )
            return value if len(assigned) == 1 and text else None
    return None


def template_of(node: ast.expr | None, scopes: Scopes = ()) -> str:
    if node is None:
        return ""
    if isinstance(node, ast.Constant) and isinstance(node.value, str):
        # Braces are the message's own (``{'key': str}``); only a literal ``{}`` would read as a value.
        return node.value.replace(WILD, "()")
    if isinstance(node, ast.JoinedStr):
        parts = []
        for value in node.values:
            text = value if isinstance(value, ast.Constant) else _text_name(value, scopes)
            parts.append(WILD if text is None else template_of(text))
        return "".join(parts)
    if isinstance(node, ast.BinOp) and isinstance(node.op, ast.Add):
        return template_of(node.left, scopes) + template_of(node.right, scopes)
    return WILD


def error_calls(tree: ast.Module) -> Iterator[tuple[ast.Call, Scopes]]:
    """Every call of a SonicError class in ``tree``, with the assignments of its scopes (innermost first)."""
    names = _error_names()
    module_scope = _assignments(
        ast.Module(body=[s for s in tree.body if isinstance(s, ast.Assign)], type_ignores=[])
    )

    def visit(node: ast.AST, scopes: Scopes) -> Iterator[tuple[ast.Call, Scopes]]:
        for child in ast.iter_child_nodes(node):
            inner = scopes
            if isinstance(child, ast.FunctionDef | ast.AsyncFunctionDef):
                inner = [_assignments(child), *scopes]
            if isinstance(child, ast.Call) and isinstance(child.func, ast.Name) and child.func.id in names:
                yield child, inner
            yield from visit(child, inner)

    yield from visit(tree, [module_scope])


def find_sites(root: Path = SONIC_ROOT) -> list[Site]:
    """Every error construction in :data:`SITE_FILES`, in file and line order."""
    sites = []
    for path in SITE_FILES:
        tree = ast.parse((root / path).read_text(encoding="utf-8"))
        for call, scopes in error_calls(tree):
            assert isinstance(call.func, ast.Name)
            node = message_node(call, scopes)
            template = template_of(node)
            if Site(path, call.lineno, call.func.id, template).literal_chars < MIN_LITERAL_CHARS:
                # Too little text of its own (``f"{failed}{exc}"``): read the local names it holds. Only
                # then: a message that wraps another's would outrank the one it wraps.
                template = template_of(node, scopes)
            sites.append(Site(path, call.lineno, call.func.id, template))
    return sites


class SiteTable:
    """The sites, and which one words a given message: the matching site with the most literal text."""

    def __init__(self, sites: list[Site]) -> None:
        self.sites = sites
        self._patterns = [(s, p) for s in sites if (p := s.pattern()) is not None]
        self._patterns.sort(key=lambda sp: -sp[0].literal_chars)

    def matching(self, message: str) -> list[Site]:
        """Every site whose template matches ``message`` (a longer template may match another's words)."""
        return [site for site, pattern in self._patterns if pattern.search(message)]

    def sites_of(self, message: str) -> list[Site]:
        """The site whose template words ``message`` (every site with those same words), or none."""
        for site, pattern in self._patterns:
            if pattern.search(message):
                return [s for s in self.sites if s.template == site.template]
        return []
