"""The layout of ``sonic.h2`` holds: composition, not an inheritance tower; one core that knows no role;
applications that use its face (methods, a stream as a handle) and none of its fields.

Read from the source with ``ast`` (nothing is imported).
"""

from __future__ import annotations

import ast
from pathlib import Path

import sonic.h2

H2 = Path(sonic.h2.__file__).parent
MODULES = sorted(H2.glob("*.py"))
# What a class here may derive from: the stdlib's and hpack's, never another class of ours.
ALLOWED_BASES = {
    "Protocol",
    "Protocol[T]",
    "Generic[T]",
    "IntEnum",
    "Enum",
    "enum.Enum",
    "Exception",
    "ValueError",
    "HeaderTable",
    "hpack.Decoder",
    "asyncio.Protocol",
    "asyncio.BufferedProtocol",
}
# The modules that hold or drive a core, which the core and the modules below it must not import.
ABOVE_THE_CORE = {"server", "client", "aio"}


def _tree(path: Path) -> ast.Module:
    return ast.parse(path.read_text(encoding="utf-8"))


def test_no_class_inherits_from_another_of_ours() -> None:
    found = {}
    for path in MODULES:
        for node in ast.walk(_tree(path)):
            if isinstance(node, ast.ClassDef):
                found[f"{path.name}:{node.name}"] = {ast.unparse(base) for base in node.bases}
    assert found, "no classes found"
    wrong = {name: bases for name, bases in found.items() if not bases <= ALLOWED_BASES}
    assert not wrong, f"classes of sonic.h2 with bases beyond {sorted(ALLOWED_BASES)}: {wrong}"


def test_no_hook_is_left_to_a_subclass() -> None:
    raising = [
        path.name
        for path in MODULES
        for node in ast.walk(_tree(path))
        if isinstance(node, ast.Raise) and "NotImplementedError" in ast.unparse(node)
    ]
    assert raising == []


def test_the_core_imports_no_role_and_no_adapter() -> None:
    for path in MODULES:
        if path.stem in ABOVE_THE_CORE:
            continue
        imported = {
            node.module for node in ast.walk(_tree(path)) if isinstance(node, ast.ImportFrom) and node.module
        }
        above = {name for name in imported if name.removeprefix("sonic.h2.") in ABOVE_THE_CORE}
        assert not above, f"{path.name} imports {sorted(above)}"


def _imported_modules(path: Path) -> set[str]:
    names: set[str] = set()
    for node in ast.walk(_tree(path)):
        if isinstance(node, ast.Import):
            names.update(alias.name for alias in node.names)
        elif isinstance(node, ast.ImportFrom) and node.module:
            names.add(node.module)
    return names


def test_http2_imports_nothing_of_grpc_and_asyncio_only_in_its_adapter() -> None:
    # gRPC sits above (sonic.grpc); the sans-I/O modules stay testable without an event loop.
    wrong = {}
    for path in MODULES:
        names = _imported_modules(path)
        grpc = {name for name in names if name.split(".")[0] == "grpc" or name.startswith("sonic.grpc")}
        loop = {name for name in names if name == "asyncio" and path.stem != "aio"}
        if grpc | loop:
            wrong[path.name] = sorted(grpc | loop)
    assert not wrong, f"sonic.h2 modules importing gRPC or asyncio: {wrong}"


def _stream_slots() -> set[str]:
    """``Stream.__slots__`` as written in ``h2/stream.py`` (read from the source: compiled, a class has none)."""
    for node in ast.walk(_tree(H2 / "stream.py")):
        if isinstance(node, ast.ClassDef) and node.name == "Stream":
            for item in node.body:
                if isinstance(item, ast.Assign) and any(
                    isinstance(t, ast.Name) and t.id == "__slots__" for t in item.targets
                ):
                    return set(ast.literal_eval(item.value))
    raise AssertionError("h2/stream.py has no Stream.__slots__")


# What a stream and a connection core keep for themselves: ``Stream``'s slots but ``app`` (the
# application's) and ``state`` (a name the connection's read-only ``state`` shares; its writes are checked
# below); ``Connection``'s attributes that are not its face.
STREAM_FIELDS = _stream_slots() - {"app", "state"}
CONNECTION_FIELDS = {
    "blocks",
    "closed_streams",
    "counters",
    "last_stream_id",
    "on_close",
    "output",
    "peer_max_streams",
    "receive",
    "role",
    "sink",
    "stream_closed",
    "streams",
    "timers",
}
# The modules that take streams and cores (the events' handlers, whoever drives a core).
CORE_MODULES = {"sonic.h2.stream", "sonic.h2.connection", "sonic.h2.server", "sonic.h2.client"}


def test_no_module_outside_touches_a_stream_or_a_connection_field() -> None:
    src = H2.parent
    users = [
        path
        for path in sorted(src.rglob("*.py"))
        if H2 not in path.parents and _imported_modules(path) & CORE_MODULES
    ]
    assert users, "no module drives a core"
    touched = {
        f"{path.relative_to(src)}:{node.lineno}": node.attr
        for path in users
        for node in ast.walk(_tree(path))
        if isinstance(node, ast.Attribute) and node.attr in STREAM_FIELDS | CONNECTION_FIELDS
    }
    assert not touched, f"fields of sonic.h2's streams or connections used outside it: {touched}"
    # A connection's ``state`` is read there (a plain attribute, for speed) and written by the core alone.
    written = [
        f"{path.relative_to(src)}:{node.lineno}"
        for path in users
        for node in ast.walk(_tree(path))
        if isinstance(node, (ast.Assign, ast.AugAssign, ast.AnnAssign))
        for target in (node.targets if isinstance(node, ast.Assign) else [node.target])
        if isinstance(target, ast.Attribute) and target.attr == "state"
    ]
    assert not written, f"a connection's state written outside sonic.h2: {written}"
