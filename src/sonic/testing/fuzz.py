"""Property-based fuzzing helpers (``tests/fuzz``, ``./dev fuzz``): byte mutations and bounded decodes.

Fuzz inputs are built as valid messages first and then mutated (:func:`mutated`), so that most of them
get past the first length check and into the deep parts of a decoder; random bytes alone seldom do.
:func:`run_bounded` runs one decode and checks what every decoder an attacker reaches promises: it
fails only with the errors it documents (a :class:`~sonic.protocol.errors.SonicError` never carrying
INTERNAL, which would tell the client that the server broke), within a bound on the memory it takes.
"""

from __future__ import annotations

import tracemalloc
from collections.abc import Callable
from dataclasses import dataclass
from typing import Generic, TypeVar

from hypothesis import strategies as st

from sonic.protocol.errors import GrpcCode, SonicError

T = TypeVar("T")

# A byte-level edit of a valid message: what a fuzzer does to reach past the first checks.
_EDITS = ("flip", "set", "insert", "delete", "truncate", "duplicate")
INTERESTING_BYTES = (0x00, 0x01, 0x7F, 0x80, 0xFF, 0x0A, 0x12, 0x1A, 0x22, 0x3A)  # varints, tags


def one_in(n: int) -> st.SearchStrategy[bool]:
    """True about once in ``n`` draws. Not ``integers(0, n - 1) == 0``: hypothesis favours small
    integers (0 comes far more often than one time in n), but favours the first of ``sampled_from``."""
    return st.sampled_from([False] * (n - 1) + [True])


@st.composite
def mutated(draw: st.DrawFn, data: bytes, max_edits: int = 4) -> bytes:
    """``data`` with up to ``max_edits`` random edits: bit flips, bytes set to edge values, inserted or
    deleted runs, a cut, a duplicated slice (often none: the valid input itself is a case too)."""
    out = bytearray(data)
    for _ in range(draw(st.integers(0, max_edits))):
        edit = draw(st.sampled_from(_EDITS))
        pos = draw(st.integers(0, len(out)))
        if edit == "flip" and out:
            index = min(pos, len(out) - 1)
            out[index] ^= 1 << draw(st.integers(0, 7))
        elif edit == "set" and out:
            out[min(pos, len(out) - 1)] = draw(st.sampled_from(INTERESTING_BYTES) | st.integers(0, 255))
        elif edit == "insert":
            out[pos:pos] = draw(st.binary(min_size=1, max_size=16))
        elif edit == "delete":
            del out[pos : pos + draw(st.integers(1, 16))]
        elif edit == "truncate":
            del out[pos:]
        elif edit == "duplicate" and out:
            start = draw(st.integers(0, len(out) - 1))
            out[pos:pos] = out[start : start + draw(st.integers(1, 32))]
    return bytes(out)


@dataclass(frozen=True)
class Outcome(Generic[T]):
    """What one bounded decode gave: its value or its (allowed) error, and the memory it peaked at."""

    value: T | None
    error: BaseException | None
    peak_bytes: int


def check_error(error: BaseException) -> None:
    """A SonicError for bad input must not claim the server failed (INTERNAL / UNKNOWN, HTTP 500)."""
    if isinstance(error, SonicError):
        assert error.code not in {GrpcCode.INTERNAL, GrpcCode.UNKNOWN}, (
            f"bad input answered as a server failure ({error.code.name}): {error.message}"
        )
        assert error.message, "an error without a message"


def run_bounded(
    decode: Callable[[], T],
    *,
    allowed: tuple[type[BaseException], ...] = (SonicError,),
    max_peak_bytes: int,
) -> Outcome[T]:
    """Run ``decode`` under tracemalloc: it returns or raises one of ``allowed`` (anything else propagates
    with its traceback, a crash), within ``max_peak_bytes`` of Python-tracked memory."""
    tracemalloc.start()
    try:
        value: T | None = None
        error: BaseException | None = None
        try:
            value = decode()
        except allowed as exc:
            error = exc
        _, peak = tracemalloc.get_traced_memory()
    finally:
        tracemalloc.stop()
    if error is not None:
        check_error(error)
    assert peak <= max_peak_bytes, f"decode peaked at {peak} bytes of memory, bound {max_peak_bytes}"
    return Outcome(value, error, peak)
