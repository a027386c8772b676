"""Every test is marked by its folder: ``tests/unit`` -> ``unit``, ``tests/integration`` -> ``integration``,
``tests/fuzz`` -> ``fuzz`` (property-based fuzzing of the decoders, hypothesis profiles in its conftest).

So ``pytest -m unit`` runs every unit test, marked in its file or not, and a test file placed anywhere else
under ``tests/`` is refused instead of silently falling outside every selection.
"""

from __future__ import annotations

from pathlib import Path

import pytest

TESTS = Path(__file__).parent
KINDS = ("unit", "integration", "fuzz")


def pytest_collection_modifyitems(items: list[pytest.Item]) -> None:
    for item in items:
        if TESTS not in item.path.parents:
            continue  # collected from elsewhere (benchmarks/tests marks its own)
        kind = item.path.relative_to(TESTS).parts[0]
        if kind not in KINDS:
            raise pytest.UsageError(
                f"{item.path}: tests go under tests/unit, tests/integration or tests/fuzz"
            )
        item.add_marker(kind)
