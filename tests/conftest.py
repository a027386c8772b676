"""Every test is marked by its folder: ``tests/unit`` -> ``unit``, ``tests/integration`` -> ``integration``.

So ``pytest -m unit`` runs every unit test, marked in its file or not, and a test file placed anywhere else
under ``tests/`` is refused instead of silently falling outside both selections.
"""

from __future__ import annotations

from pathlib import Path

import pytest

TESTS = Path(__file__).parent
KINDS = ("unit", "integration")


def pytest_collection_modifyitems(items: list[pytest.Item]) -> None:
    for item in items:
        if TESTS not in item.path.parents:
            continue  # collected from elsewhere (benchmarks/tests marks its own)
        kind = item.path.relative_to(TESTS).parts[0]
        if kind not in KINDS:
            raise pytest.UsageError(f"{item.path}: tests go under tests/unit or tests/integration")
        item.add_marker(kind)
