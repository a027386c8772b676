"""Where results go: the machine they were measured on, JSON under benchmarks/results/, Markdown tables,
and a generated block of a document between two markers."""

from __future__ import annotations

import json
import os
import platform
import time
from collections.abc import Sequence
from dataclasses import asdict
from pathlib import Path
from typing import Any

RESULTS = Path(__file__).resolve().parent.parent / "results"


def machine() -> dict[str, Any]:
    return {"cpus": os.cpu_count(), "platform": platform.platform(), "python": platform.python_version()}


def save(name: str, payload: dict[str, Any]) -> Path:
    """``benchmarks/results/NAME.json``: the payload with the benchmark's name and the time (UTC)."""
    RESULTS.mkdir(parents=True, exist_ok=True)
    path = RESULTS / f"{name}.json"
    payload = {"benchmark": name, "time": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()), **payload}
    path.write_text(json.dumps(payload, indent=2, default=asdict))
    return path


def markdown_table(
    header: Sequence[str], rows: Sequence[Sequence[str]], *, numeric_from: int = 1
) -> list[str]:
    """A Markdown table; columns from ``numeric_from`` on are right-aligned."""
    align = ["---" if i < numeric_from else "---:" for i in range(len(header))]
    return [f"| {' | '.join(header)} |", f"|{'|'.join(align)}|", *(f"| {' | '.join(row)} |" for row in rows)]


def replace_between(path: Path, start: str, end: str, lines: Sequence[str]) -> bool:
    """Replace what lies between the ``start`` and ``end`` marker lines of ``path``; False (and the file
    untouched) when a marker is missing."""
    text = path.read_text()
    if start not in text or end not in text:
        return False
    head, rest = text.split(start, 1)
    _, tail = rest.split(end, 1)
    path.write_text(head + start + "\n" + "\n".join(lines) + "\n" + end + tail)
    return True
