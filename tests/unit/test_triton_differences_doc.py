"""docs/triton-differences.md and the differential harness's table of intended differences agree."""

from __future__ import annotations

import re
from pathlib import Path

from tests.integration.differential.intended import INTENDED

DOC = Path(__file__).parents[2] / "docs" / "triton-differences.md"
ROW = re.compile(r"^\| `([^`]+)` \| (.+) \| (.+) \|$")


def doc_rows() -> list[tuple[str, str, str]]:
    rows = []
    for line in DOC.read_text(encoding="utf-8").splitlines():
        match = ROW.match(line)
        if match:
            rows.append((match.group(1), match.group(2), match.group(3)))
    return rows


def test_doc_lists_the_table_rows_in_order_with_the_same_words() -> None:
    assert doc_rows() == [(row.id, row.what, row.why) for row in INTENDED]


def test_row_ids_are_unique() -> None:
    ids = [row.id for row in INTENDED]
    assert len(ids) == len(set(ids))
