"""Medians and spreads over rounds, and ratios paired within a round.

A ratio of medians mixes rounds measured under different background load; the median of per-round
ratios does not: each ratio compares two servers measured minutes apart under the same load.
"""

from __future__ import annotations

import statistics
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

Row = Mapping[str, Any]


@dataclass(frozen=True)
class Spread:
    """Median, minimum and maximum of per-round values, and the values themselves."""

    median: float
    min: float
    max: float
    values: tuple[float, ...]

    def as_dict(self, *, digits: int | None = None) -> dict[str, Any]:
        def shown(value: float) -> float:
            return value if digits is None else round(value, digits)

        return {
            "median": shown(self.median),
            "min": shown(self.min),
            "max": shown(self.max),
            "rounds": [shown(v) for v in self.values],
        }

    def text(self, fmt: str = ".2f") -> str:
        return f"{self.median:{fmt}} [{self.min:{fmt}}-{self.max:{fmt}}]"


def spread(values: Iterable[float]) -> Spread:
    items = tuple(float(v) for v in values)
    if not items:
        raise ValueError("no values to summarize")
    return Spread(statistics.median(items), min(items), max(items), items)


def per_server(rows: Sequence[Row], metric: str, *, who: str = "server") -> dict[str, Spread]:
    """Each server's spread of ``metric`` over the rows (one workload's), in order of appearance."""
    values: dict[str, list[float]] = {}
    for row in rows:
        values.setdefault(row[who], []).append(float(row[metric]))
    return {name: spread(items) for name, items in values.items()}


def paired_ratios(
    rows: Sequence[Row], metric: str, ours: str, reference: str, *, who: str = "server"
) -> Spread | None:
    """``ours``/``reference`` of ``metric`` in each round both measured (reference above zero); None if
    no round has both."""
    by_round = {(row["round"], row[who]): float(row[metric]) for row in rows}
    rounds = sorted({row["round"] for row in rows})
    ratios = [
        by_round[(index, ours)] / by_round[(index, reference)]
        for index in rounds
        if (index, ours) in by_round and by_round.get((index, reference), 0.0) > 0
    ]
    return spread(ratios) if ratios else None
