"""Rounds of a paired design: every round visits every (workload, server), in an order that changes.

Servers all run at once; load from elsewhere on a shared machine then falls on every server of a round
alike, and a ratio taken within a round cancels it. The order changes between rounds so that no server
always goes first (after an idle spell) or last.
"""

from __future__ import annotations

import random
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass
from typing import Generic, TypeVar

W = TypeVar("W")

ORDERS = ("rotate", "alternate", "shuffle")


def ordered(names: Sequence[str], round_index: int, how: str, rng: random.Random | None = None) -> list[str]:
    """``names`` in round ``round_index``'s order: ``rotate`` shifts by one per round, ``alternate``
    reverses every other round, ``shuffle`` draws from ``rng``."""
    items = list(names)
    if how == "rotate":
        shift = round_index % len(items) if items else 0
        return items[shift:] + items[:shift]
    if how == "alternate":
        return items if round_index % 2 == 0 else items[::-1]
    if how == "shuffle":
        (rng or random.Random(round_index)).shuffle(items)
        return items
    raise ValueError(f"order {how!r}: expected one of {', '.join(ORDERS)}")


@dataclass(frozen=True)
class Visit(Generic[W]):
    """One measurement: which round, which workload, which server."""

    round: int
    workload: W
    server: str


def visits(
    rounds: int,
    workloads: Sequence[W],
    servers: Sequence[str] | Callable[[W], Sequence[str]],
    *,
    how: str = "rotate",
    seed: int = 0,
) -> Iterator[Visit[W]]:
    """Round by round, workload by workload, each workload's servers in the round's order.

    ``servers`` is one list for all workloads, or a function giving each workload's own."""
    rng = random.Random(seed)
    for round_index in range(rounds):
        for workload in workloads:
            names = servers(workload) if callable(servers) else servers
            for server in ordered(names, round_index, how, rng):
                yield Visit(round_index, workload, server)
