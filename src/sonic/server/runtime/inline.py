"""Where a model version's batches run: on its instance threads, or on the event loop when they are tiny.

Handing a batch to an instance thread and its result back costs two thread wake-ups and a GIL
hand-over each way: more than the execution itself for identity, small trees or FACILE at small
batches (a few µs). A version whose executions stay short is run by the event loop itself, between
reads (``sonic serve --inline-execution-us T``, 0: never). :class:`InlineGate` decides, from the
time of every execution; it is pure (no clock, no thread) and the executor calls it under its lock.

- **Promotion** (threads → loop): a window of ``window`` executions on the threads whose 95th
  percentile of thread CPU time is at most ``T/2`` (CPU time, not wall time: under load a thread
  waits for the GIL after the model returns, which is not the model's cost) and one of which, at
  least, took at most ``T/2`` of wall time (a model that only waits, a sleep or a device, never
  looks fast). After ``k`` demotions, ``2**k`` such windows in a row (at most ``max_backoff_windows``).
- **Demotion** (loop → threads): at once when one execution on the loop takes more than
  ``slow_factor * T`` of CPU time, or holds the loop longer than ``stall_us`` however it spends it;
  and as soon as more than 5 % of a window's executions took more than ``T`` of CPU time (its 95th
  percentile exceeds ``T``: traffic that grew the merged batches). CPU time, because the backends
  that may run on the loop compute rather than wait, and on a busy machine the loop thread is
  preempted now and then, for milliseconds, in the middle of a 10 µs execution: that is not the
  model's cost (and would move it back for nothing). The half-threshold gap and the doubling keep a
  version whose times straddle ``T`` from flapping; a version that is slow only now and then costs
  the loop, in the end, at most one such execution per ``max_backoff_windows * window`` fast ones.
"""

from __future__ import annotations

import enum
from dataclasses import dataclass

DEFAULT_INLINE_EXECUTION_US = 100


class Place(enum.Enum):
    """Where a version's next batch runs."""

    THREADS = "threads"
    LOOP = "loop"


@dataclass(frozen=True)
class InlinePolicy:
    """``sonic serve --inline-execution-us``: ``threshold_us`` 0 keeps every version on its threads."""

    threshold_us: int = DEFAULT_INLINE_EXECUTION_US
    window: int = 64  # executions judged together
    slow_factor: int = 4  # one loop execution above slow_factor x threshold of CPU moves it back at once
    stall_us: int = 20_000  # one loop execution holding the loop longer moves it back at once
    max_backoff_windows: int = 1024  # fast windows in a row asked for after many demotions, at most

    def __post_init__(self) -> None:
        if self.threshold_us < 0:
            raise ValueError(
                f"inline execution threshold must be >= 0 µs (0: never), got {self.threshold_us}"
            )
        if min(self.window, self.slow_factor, self.max_backoff_windows, self.stall_us) < 1:
            raise ValueError(
                f"inline policy: window, slow_factor, max_backoff_windows and stall_us must be >= 1, got "
                f"{self.window}, {self.slow_factor}, {self.max_backoff_windows} and {self.stall_us}"
            )

    @property
    def enabled(self) -> bool:
        return self.threshold_us > 0


class InlineGate:
    """The place of one version's batches, moved by the times of its executions (see the module doc)."""

    def __init__(self, policy: InlinePolicy) -> None:
        threshold_ns = policy.threshold_us * 1000
        self.place = Place.THREADS
        self.promotions = 0
        self.demotions = 0
        self.reason = ""  # why it last moved back to its threads, for the log
        self._window = policy.window
        self._allowed_over = policy.window // 20  # above the bound, in a window whose p95 is within it
        self._promote_ns = threshold_ns // 2
        self._threshold_ns = threshold_ns
        self._slow_ns = threshold_ns * policy.slow_factor
        self._stall_ns = max(policy.stall_us * 1000, self._slow_ns)
        self._max_backoff = policy.max_backoff_windows
        self._windows_needed = 1
        self._fast_windows = 0
        self._count = 0
        self._over = 0
        self._fastest_wall_ns = -1  # -1: none in this window yet

    def on_thread(self, cpu_ns: int, wall_ns: int) -> bool:
        """An execution on an instance thread ended; True when the version moves to the loop now."""
        if self.place is Place.LOOP:  # a batch taken before the move
            return False
        self._count += 1
        if cpu_ns > self._promote_ns:
            self._over += 1
        if self._fastest_wall_ns < 0 or wall_ns < self._fastest_wall_ns:
            self._fastest_wall_ns = wall_ns
        if self._count < self._window:
            return False
        fast = self._over <= self._allowed_over and self._fastest_wall_ns <= self._promote_ns
        self._new_window()
        if not fast:
            self._fast_windows = 0
            return False
        self._fast_windows += 1
        if self._fast_windows < self._windows_needed:
            return False
        self.place = Place.LOOP
        self.promotions += 1
        self._fast_windows = 0
        return True

    def on_loop(self, cpu_ns: int, wall_ns: int) -> bool:
        """An execution on the event loop ended; True when the version moves back to its threads now."""
        if cpu_ns > self._slow_ns or wall_ns > self._stall_ns:
            self._demote(
                f"one execution took {cpu_ns // 1000} µs of CPU and held the loop {wall_ns // 1000} µs"
            )
            return True
        self._count += 1
        if cpu_ns > self._threshold_ns:
            self._over += 1
            if self._over > self._allowed_over:  # this window's 95th percentile is above the threshold
                self._demote(
                    f"{self._over} of its last {self._count} executions took over "
                    f"{self._threshold_ns // 1000} µs of CPU on the loop"
                )
                return True
        if self._count == self._window:
            self._new_window()
        return False

    def to_threads(self) -> None:
        """Back to the threads for good (the version is closing: its threads drain the queues)."""
        self.place = Place.THREADS

    def _demote(self, reason: str) -> None:
        self.reason = reason
        self.place = Place.THREADS
        self.demotions += 1
        self._windows_needed = min(self._windows_needed * 2, self._max_backoff)
        self._fast_windows = 0
        self._new_window()

    def _new_window(self) -> None:
        self._count = 0
        self._over = 0
        self._fastest_wall_ns = -1
