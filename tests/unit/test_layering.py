"""``sonic.testing`` holds test helpers only: no module of the package outside it imports it."""

from __future__ import annotations

import ast
from pathlib import Path

import sonic

PACKAGE = Path(sonic.__file__).parent
TESTING = "sonic.testing"


def imported_modules(source: str, module: str) -> set[str]:
    """Every module ``source`` (the text of ``module``) imports, relative imports resolved, names included."""
    package = module.split(".")
    found: set[str] = set()
    for node in ast.walk(ast.parse(source)):
        if isinstance(node, ast.Import):
            found.update(alias.name for alias in node.names)
        elif isinstance(node, ast.ImportFrom):
            base = package[: len(package) - node.level] if node.level else []
            origin = ".".join([*base, *([node.module] if node.module else [])])
            found.add(origin)
            # ``from sonic import testing`` imports the module sonic.testing
            found.update(f"{origin}.{alias.name}" for alias in node.names)
    return found


def imports_testing(source: str, module: str) -> bool:
    return any(name == TESTING or name.startswith(f"{TESTING}.") for name in imported_modules(source, module))


def test_the_scan_sees_every_way_to_import_it() -> None:
    module = "sonic.client.fallback"
    for source in (
        "import sonic.testing.triton",
        "from sonic.testing import repository",
        "from sonic import testing",
        "from ..testing.h2 import parse_frames",
        "def f():\n    from sonic.testing.repository import MODELS\n",
    ):
        assert imports_testing(source, module), source
    for source in ("import sonic.testing_tools", "from sonic.launch import ServerProcess", "from . import x"):
        assert not imports_testing(source, module), source


def test_nothing_outside_sonic_testing_imports_it() -> None:
    offenders = []
    for path in sorted(PACKAGE.rglob("*.py")):
        relative = path.relative_to(PACKAGE.parent).with_suffix("")
        module = ".".join(relative.parts[:-1] if relative.name == "__init__" else relative.parts)
        if module == TESTING or module.startswith(f"{TESTING}."):
            continue
        if imports_testing(path.read_text(encoding="utf-8"), module):
            offenders.append(module)
    assert offenders == [], f"production modules importing {TESTING}: {offenders}"


# Inside the server the arrow between scheduling and backends goes one way: runtime/ calls backends/,
# and what both use (the work item and scheduler interface, a decoupled request's response channel)
# sits below both. The ensemble's registry entry therefore lives in runtime/ensemble.py.
RUNTIME = "sonic.server.runtime"
BACKENDS = "sonic.server.backends"
BOTTOM = ("sonic.server.work", "sonic.server.responses")


def _modules_under(prefix: str) -> list[tuple[str, str]]:
    """(module name, source) of ``prefix`` itself and of every module below it."""
    found = []
    for path in sorted(PACKAGE.rglob("*.py")):
        relative = path.relative_to(PACKAGE.parent).with_suffix("")
        module = ".".join(relative.parts[:-1] if relative.name == "__init__" else relative.parts)
        if module == prefix or module.startswith(f"{prefix}."):
            found.append((module, path.read_text(encoding="utf-8")))
    return found


def _imports_any(source: str, module: str, packages: tuple[str, ...]) -> list[str]:
    return sorted(
        name
        for name in imported_modules(source, module)
        if any(name == package or name.startswith(f"{package}.") for package in packages)
    )


def test_the_scan_sees_type_checking_and_relative_imports_of_the_runtime() -> None:
    module = "sonic.server.backends.base"
    for source in (
        "from typing import TYPE_CHECKING\nif TYPE_CHECKING:\n    from sonic.server.runtime.work import X\n",
        "from ..runtime import executor",
        "from sonic.server import runtime",
        "import sonic.server.runtime.ensemble",
    ):
        assert _imports_any(source, module, (RUNTIME,)), source
    assert not _imports_any("from sonic.server.work import WorkItem", module, (RUNTIME,))


def test_backends_never_import_the_runtime() -> None:
    modules = _modules_under(BACKENDS)
    assert len(modules) > 5  # the scan found the package
    offenders = {m: found for m, source in modules if (found := _imports_any(source, m, (RUNTIME,)))}
    assert offenders == {}, f"backends importing the runtime (the runtime calls the backends): {offenders}"


def test_the_shared_bottom_imports_neither_runtime_nor_backends() -> None:
    offenders = {}
    for bottom in BOTTOM:
        ((module, source),) = _modules_under(bottom)
        if found := _imports_any(source, module, (RUNTIME, BACKENDS)):
            offenders[module] = found
    assert offenders == {}, f"modules below both runtime/ and backends/ importing them: {offenders}"
