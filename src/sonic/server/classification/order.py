"""The order Triton 2.51 lists classes in: libstdc++'s ``std::sort`` of the indices, largest value first.

Triton's ``TopkClassifications`` sorts a row's indices with ``std::sort`` and ``probs[i] > probs[j]``.
Where the k classes kept and the next one all differ in value, any sort gives that answer, and numpy's
does it (:func:`top_indices`' fast path). Where values are equal among them, ``std::sort`` (not stable)
decides which index comes first: introsort, median-of-three pivots, heap sort past a depth of
2·log2(n), a final insertion sort over blocks of 16. :class:`StdSort` replays it step by step on that
row (Python, O(n log n)), so equal values come out in Triton's order exactly. A row with NaN (which no
order ranks) is replayed too when it has at most 16 elements; in a longer one ``std::sort``'s unguarded
loops would run past the row's ends, and sonic lists NaN first (docs/triton-differences.md).
"""

from __future__ import annotations

from typing import Any

import numpy as np
import numpy.typing as npt

_INSERTION_BLOCK = 16  # libstdc++'s _S_threshold


def top_indices(rows: npt.NDArray[Any], kept: int) -> npt.NDArray[np.intp]:
    """The first ``kept`` indices of each row (rows by elements) in Triton's order."""
    width = rows.shape[1]
    # A stable ascending sort of the reversed row, read backwards: largest first, equal values by index
    # (no negation, which unsigned types would wrap).
    order = (width - 1 - np.argsort(rows[:, ::-1], axis=1, kind="stable")[:, ::-1]).astype(np.intp)
    floats = rows.dtype.kind == "f"
    for row in range(rows.shape[0]):
        values = rows[row]
        leading = values[order[row, : kept + 1]]
        has_nan = floats and bool(np.isnan(values).any())
        if has_nan and width > _INSERTION_BLOCK:
            continue
        if has_nan or bool((leading[:-1] == leading[1:]).any()):
            order[row] = StdSort(values.tolist()).indices()
    return order[:, :kept]


class StdSort:
    """libstdc++'s ``std::sort`` (bits/stl_algo.h, bits/stl_heap.h) of indices with ``v[i] > v[j]``."""

    def __init__(self, values: list[Any]) -> None:
        self.values = values
        self.idx = list(range(len(values)))

    def indices(self) -> list[int]:
        n = len(self.idx)
        if n:
            self._introsort(0, n, 2 * (n.bit_length() - 1))
            if n > _INSERTION_BLOCK:
                self._insertion(0, _INSERTION_BLOCK)
                for i in range(_INSERTION_BLOCK, n):
                    self._linear_insert(i)
            else:
                self._insertion(0, n)
        return self.idx

    def _before(self, a: int, b: int) -> bool:
        return bool(self.values[a] > self.values[b])

    def _introsort(self, first: int, last: int, depth: int) -> None:
        while last - first > _INSERTION_BLOCK:
            if depth == 0:
                self._heap_sort(first, last)
                return
            depth -= 1
            self._median_to_first(first, first + 1, first + (last - first) // 2, last - 1)
            cut = self._partition(first + 1, last, first)
            self._introsort(cut, last, depth)
            last = cut

    def _median_to_first(self, result: int, a: int, b: int, c: int) -> None:
        idx, before = self.idx, self._before
        if before(idx[a], idx[b]):
            pick = b if before(idx[b], idx[c]) else (c if before(idx[a], idx[c]) else a)
        elif before(idx[a], idx[c]):
            pick = a
        else:
            pick = c if before(idx[b], idx[c]) else b
        idx[result], idx[pick] = idx[pick], idx[result]

    def _partition(self, first: int, last: int, pivot: int) -> int:
        idx, before, p = self.idx, self._before, self.idx[pivot]
        while True:
            while before(idx[first], p):
                first += 1
            last -= 1
            while before(p, idx[last]):
                last -= 1
            if first >= last:
                return first
            idx[first], idx[last] = idx[last], idx[first]
            first += 1

    def _linear_insert(self, last: int) -> None:
        idx, value = self.idx, self.idx[last]
        while self._before(value, idx[last - 1]):
            idx[last] = idx[last - 1]
            last -= 1
        idx[last] = value

    def _insertion(self, first: int, last: int) -> None:
        idx = self.idx
        for i in range(first + 1, last):
            if self._before(idx[i], idx[first]):
                value = idx[i]
                idx[first + 1 : i + 1] = idx[first:i]
                idx[first] = value
            else:
                self._linear_insert(i)

    def _heap_sort(self, first: int, last: int) -> None:
        """``std::partial_sort(first, last, last)``: make_heap, then sort_heap."""
        length = last - first
        if length >= 2:
            for parent in range((length - 2) // 2, -1, -1):
                self._adjust_heap(first, parent, length, self.idx[first + parent])
        while last - first > 1:
            last -= 1
            value = self.idx[last]
            self.idx[last] = self.idx[first]
            self._adjust_heap(first, 0, last - first, value)

    def _adjust_heap(self, first: int, hole: int, length: int, value: int) -> None:
        idx, before, top, child = self.idx, self._before, hole, hole
        while child < (length - 1) // 2:
            child = 2 * (child + 1)
            if before(idx[first + child], idx[first + child - 1]):
                child -= 1
            idx[first + hole] = idx[first + child]
            hole = child
        if length % 2 == 0 and child == (length - 2) // 2:
            child = 2 * (child + 1)
            idx[first + hole] = idx[first + child - 1]
            hole = child - 1
        parent = (hole - 1) // 2
        while hole > top and before(idx[first + parent], value):
            idx[first + hole] = idx[first + parent]
            hole = parent
            parent = (hole - 1) // 2
        idx[first + hole] = value
