"""Event sources: synthetic generators (numpy, seeded per event) and, in :mod:`sonic.workflow.io`, ROOT files."""

from __future__ import annotations

from collections.abc import Callable, Iterator, Mapping
from dataclasses import dataclass
from typing import Any

import numpy as np

from sonic.workflow.event import Event


@dataclass(frozen=True)
class SyntheticSource:
    """``count`` events whose products ``make(index, rng)`` returns; event ``i`` uses seed ``(seed, i)``.

    The per-event seed makes every event the same whichever stream, job or mode processes it, so
    runs can be compared output by output.
    """

    make: Callable[[int, np.random.Generator], Mapping[str, Any]]
    count: int
    seed: int = 0
    first: int = 0

    def __iter__(self) -> Iterator[Event]:
        for index in range(self.first, self.first + self.count):
            rng = np.random.default_rng((self.seed, index))
            yield Event(index, self.make(index, rng))
