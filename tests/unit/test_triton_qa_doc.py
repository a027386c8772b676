"""docs/triton-qa.md: one well-formed row per folder of Triton's QA suite, every cited test real, figures true.

The folder names come from the doc's own list (copied once from Triton's r24.10 branch), so the test needs
no network and no clone of Triton.
"""

from __future__ import annotations

import re
from collections import Counter
from pathlib import Path

from tests.unit.test_triton_differences_doc import doc_rows as differences_rows

ROOT = Path(__file__).parents[2]
DOC = ROOT / "docs" / "triton-qa.md"
FOLDER_COUNT = 145
STATUSES = ("covered", "partial", "in progress", "refused", "gap", "n/a")
ROW = re.compile(r"^\| (L0_\w+) \| ([^|]+) \| (yes|n/a: [^|]+) \| ([^|]+) \|([^|]*)\|$")
TEST_ID = re.compile(r"`(tests/[\w/]+\.py)(?:::(test_\w+))?`")
DIFFERENCE = re.compile(r"differs: ((?:`[\w-]+`(?:, )?)+)")
SUMMARY = re.compile(r"^- (folders|applicable|covered|partial|in progress|refused|gaps): (\d+)", re.MULTILINE)
COVERED_OF = re.compile(r"applicable and covered, fully or in part: (\d+) of (\d+)")


def _text() -> str:
    return DOC.read_text(encoding="utf-8")


def _rows() -> list[tuple[str, str, str, str, str]]:
    rows = []
    for line in _text().splitlines():
        if line.startswith("| L0_"):
            match = ROW.match(line)
            assert match, f"malformed row: {line[:120]}"
            folder, subject, applies, status, where = (part.strip() for part in match.groups())
            rows.append((folder, subject, applies, status, where))
    return rows


def _listed_folders() -> list[str]:
    block = _text().split("## The folders of r24.10", 1)[1].split("```text", 1)[1].split("```", 1)[0]
    return block.split()


def test_the_table_has_one_row_per_listed_folder_in_order() -> None:
    listed = _listed_folders()
    assert len(listed) == FOLDER_COUNT
    assert listed == sorted(set(listed))
    assert all(name.startswith("L0_") for name in listed)
    assert [row[0] for row in _rows()] == listed


def test_every_row_has_a_subject_and_a_status_that_agrees_with_applies() -> None:
    for folder, subject, applies, status, where in _rows():
        assert subject, folder
        assert status in STATUSES, f"{folder}: status {status!r} is none of {STATUSES}"
        assert (status == "n/a") == applies.startswith("n/a"), (
            f"{folder}: applies {applies!r}, status {status}"
        )
        if status in ("covered", "partial"):
            assert TEST_ID.search(where), f"{folder}: {status} without a test id"
        if status == "partial":
            assert "gap" in where or "n/a" in where, f"{folder}: partial without naming what is missing"
        if status == "in progress":
            assert "issue-32 work (in progress on another branch)" in where, folder


def test_every_cited_test_exists() -> None:
    for folder, *_, where in _rows():
        for path, name in TEST_ID.findall(where):
            file = ROOT / path
            assert file.is_file(), f"{folder}: {path} does not exist"
            if name:
                pattern = re.compile(rf"^(?:async )?def {name}\(", re.MULTILINE)
                assert pattern.search(file.read_text(encoding="utf-8")), f"{folder}: no {name} in {path}"


def test_cited_differences_are_rows_of_the_differences_doc() -> None:
    known = {row[0] for row in differences_rows()}
    for folder, *_, where in _rows():
        for group in DIFFERENCE.findall(where):
            for name in re.findall(r"`([\w-]+)`", group):
                assert name in known, f"{folder}: {name} is no row of docs/triton-differences.md"


def test_the_summary_figures_are_those_of_the_table() -> None:
    statuses = Counter(row[3] for row in _rows())
    applicable = FOLDER_COUNT - statuses["n/a"]
    expected = {
        "folders": FOLDER_COUNT,
        "applicable": applicable,
        "covered": statuses["covered"],
        "partial": statuses["partial"],
        "in progress": statuses["in progress"],
        "refused": statuses["refused"],
        "gaps": statuses["gap"],
    }
    assert {key: int(value) for key, value in SUMMARY.findall(_text())} == expected
    covered_of = COVERED_OF.search(_text())
    assert covered_of
    assert (int(covered_of.group(1)), int(covered_of.group(2))) == (
        statuses["covered"] + statuses["partial"],
        applicable,
    )
