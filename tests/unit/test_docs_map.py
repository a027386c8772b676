"""The maps stay true: each package's docstring names its modules, ``docs/architecture.md`` names every package.

Read from the source with ``pkgutil`` and ``ast`` (nothing is imported). A module counts as named when its
name is written as code in the docstring (``:mod:`~sonic.protocol.types```, ````types````, ``types.py``):
a plain word in a sentence ("the work of ...") does not count, so the check cannot pass by accident. A new
module, a moved one or a new package fails here until the map that a reader opens first says where it is.
"""

from __future__ import annotations

import ast
import pkgutil
import re
from pathlib import Path

import pytest

import sonic

pytestmark = pytest.mark.unit

ROOT = Path(sonic.__file__).parent
ARCHITECTURE = ROOT.parents[1] / "docs" / "architecture.md"
_CODE_SPAN = re.compile(r"`+([^`]+)`+")


def packages() -> dict[str, Path]:
    """Every package under ``src/sonic`` by dotted name, ``sonic`` itself included."""
    found = {"sonic": ROOT}
    for info in pkgutil.walk_packages([str(ROOT)], prefix="sonic."):
        if info.ispkg:
            found[info.name] = ROOT.joinpath(*info.name.split(".")[1:])
    return found


def members(package_dir: Path) -> list[str]:
    """The modules and subpackages directly inside one package (``__init__`` and ``__main__`` left out)."""
    return sorted(info.name for info in pkgutil.iter_modules([str(package_dir)]) if info.name != "__main__")


def code_names(text: str) -> set[str]:
    """Every identifier written inside a code span of ``text``, split at dots, slashes and spaces."""
    return {word for span in _CODE_SPAN.findall(text) for word in re.findall(r"\w+", span)}


def unnamed_members(package_dir: Path) -> list[str]:
    docstring = ast.get_docstring(ast.parse((package_dir / "__init__.py").read_text())) or ""
    named = code_names(docstring)
    return [name for name in members(package_dir) if name not in named]


def test_code_names_counts_only_code() -> None:
    text = "The work of :mod:`~sonic.server.runtime.policy`, ``queues``, `h2/` and ``tensors.py`` here."
    assert code_names(text) >= {"policy", "queues", "h2", "tensors"}
    assert "work" not in code_names(text)


def test_the_walk_sees_nested_packages() -> None:
    found = packages()
    assert {"sonic", "sonic.server", "sonic.server.runtime", "sonic.client.transport"} <= set(found)
    assert "scheduler" in members(found["sonic.server.runtime"])


@pytest.mark.parametrize("package", sorted(packages()))
def test_package_docstring_names_its_modules(package: str) -> None:
    missing = unnamed_members(packages()[package])
    assert not missing, f"{package}/__init__.py's docstring does not name {missing} (write each as code)"


def _named_in_architecture(dotted: str, text: str) -> bool:
    """``sonic.a.b`` is named by its dotted name or by its path (``a/b/`` for a package, ``a/b.py``)."""
    relative = dotted.split(".")[1:]
    return dotted in text or "/".join(relative) + "/" in text or "/".join(relative) + ".py" in text


def test_architecture_names_every_package_and_top_level_module() -> None:
    text = ARCHITECTURE.read_text()
    top_level = [f"sonic.{name}" for name in members(ROOT)]
    missing = [
        name for name in sorted(set(packages()) | set(top_level)) if not _named_in_architecture(name, text)
    ]
    assert not missing, f"docs/architecture.md does not name {missing}"
