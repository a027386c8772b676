"""Input signatures by number: what a pending traffic record carries instead of a nested tuple.

A record waits up to a flush interval (a second) on the event loop's queue. A tuple of only numbers,
strings and flags is untracked by Python's garbage collector at the first collection that sees it; one
holding nested tuples (the signature: ``((name, datatype, shape), ...)``) stays tracked for as many
collections as it is deep, is promoted to the older generations meanwhile, and makes the full
collections that walk the whole heap come several times as often: measured, about a tenth of the
server's CPU at 3,000 small requests/s (docs/benchmarks.md). Numbered, the signature leaves the record
flat. No pyarrow here: the event loop's side imports it.
"""

from __future__ import annotations

Signature = tuple[tuple[str, str, tuple[int, ...]], ...]  # (name, datatype, shape) per input


class Signatures:
    """Distinct input signatures, numbered in order of first sight; at most ``limit`` of them.

    The event loop numbers (:meth:`number`); the writer thread reads :attr:`known` for numbers it was
    handed after they were appended. Past ``limit`` distinct signatures (a client sending ever new
    shapes) the signature itself is handed over: correct, only without the saving, and memory stays
    bounded.
    """

    def __init__(self, limit: int = 4096) -> None:
        self.limit = limit
        self.known: list[Signature] = []
        self._numbers: dict[Signature, int] = {}

    def number(self, signature: Signature) -> int | Signature:
        found = self._numbers.get(signature)
        if found is not None:
            return found
        if len(self.known) >= self.limit:
            return signature
        number = len(self.known)
        self.known.append(signature)  # before the number is handed out: the writer finds it there
        self._numbers[signature] = number
        return number

    def resolve(self, value: int | Signature) -> Signature:
        """A record's signature field back to the signature (a number, or a signature past the limit)."""
        return self.known[value] if isinstance(value, int) else value
