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
