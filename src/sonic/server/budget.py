"""The server-wide budget of buffered request bytes, shared by the HTTP/1.1 and HTTP/2 front ends.

A request body is charged as its bytes arrive (never from an announced length) and released when the
request is finished, failed or cancelled, or its connection closes. A charge never fails: the bytes are
already in memory. What the budget decides is whether *more* bytes are read: while it is spent
(``in_use >= capacity_bytes``), the HTTP/1.1 front end stops reading the body (aiohttp then pauses the
transport at its high-water mark) and the HTTP/2 front end holds back its WINDOW_UPDATEs, so senders
are throttled by TCP and HTTP/2 flow control instead of growing the server's memory. Waiting is bounded
by ``wait_s`` (an HTTP/1.1 body: all its waits together; an HTTP/2 connection: each wait); past it the
request fails with :class:`~sonic.protocol.errors.RequestBufferBusyError` (503 with ``Retry-After`` /
RESOURCE_EXHAUSTED).

Beyond ``capacity_bytes``, memory can still hold what was in flight when the budget ran out: per HTTP/2
connection at most its connection window (``Http2Limits.connection_window_bytes``), per HTTP/1.1
connection one read and aiohttp's buffer. docs/security.md states the bound.
"""

from __future__ import annotations

import asyncio
import functools
import os
from collections.abc import Callable
from pathlib import Path

from sonic.protocol.errors import RequestBufferBusyError

MiB = 1 << 20
# Default: a quarter of the memory this process may use, between these two.
DEFAULT_FRACTION = 4
DEFAULT_MIN_BYTES = 64 * MiB
DEFAULT_MAX_BYTES = 16 << 30
DEFAULT_WAIT_S = 30.0


def default_budget_bytes(cgroup: Path = Path("/sys/fs/cgroup/memory.max")) -> int:
    """A quarter of physical memory, or of the container's memory limit when that is lower, clamped to
    [64 MiB, 16 GiB]."""
    memory = os.sysconf("SC_PAGE_SIZE") * os.sysconf("SC_PHYS_PAGES")
    try:
        limit = cgroup.read_text().strip()
    except OSError:
        limit = "max"
    if limit.isdigit():
        memory = min(memory, int(limit))
    return max(DEFAULT_MIN_BYTES, min(DEFAULT_MAX_BYTES, memory // DEFAULT_FRACTION))


def _wake(room: asyncio.Future[None]) -> None:
    if not room.done():
        room.set_result(None)


class RequestBudget:
    """Bytes of request bodies that every connection together may hold; who waits for room."""

    __slots__ = ("_waiters", "capacity_bytes", "in_use", "wait_s")

    def __init__(self, capacity_bytes: int, wait_s: float = DEFAULT_WAIT_S) -> None:
        if capacity_bytes < 1 or wait_s <= 0:
            msg = f"a request budget needs capacity_bytes >= 1 and wait_s > 0, got {capacity_bytes}, {wait_s}"
            raise ValueError(msg)
        self.capacity_bytes = capacity_bytes
        self.wait_s = wait_s
        self.in_use = 0
        # Called, all of them, once room appears; each looks again (a woken sender may spend it at once).
        self._waiters: dict[object, Callable[[], None]] = {}

    @property
    def has_room(self) -> bool:
        return self.in_use < self.capacity_bytes

    def charge(self, size: int) -> None:
        self.in_use += size

    def release(self, size: int) -> None:
        self.in_use -= size
        if self._waiters and self.in_use < self.capacity_bytes:
            waiters, self._waiters = self._waiters, {}
            for wake in waiters.values():
                wake()

    def when_room(self, key: object, wake: Callable[[], None]) -> None:
        """Call ``wake`` once, when room appears (``key`` identifies the waiter for :meth:`forget`)."""
        self._waiters[key] = wake

    def forget(self, key: object) -> None:
        self._waiters.pop(key, None)

    def busy_error(self, waited: str) -> RequestBufferBusyError:
        return RequestBufferBusyError(
            f"{waited} waited {self.wait_s:g} s in all for room in the server's request buffer budget of "
            f"{self.capacity_bytes} bytes (--request-buffer-budget-mb), held by other requests; retry later"
        )


class BudgetHold:
    """What one request has charged; :meth:`release` gives it all back (idempotent)."""

    __slots__ = ("_budget", "_room", "held", "waited_s")

    def __init__(self, budget: RequestBudget) -> None:
        self._budget = budget
        self.held = 0
        self._room: asyncio.Future[None] | None = None  # while waiting in :meth:`room`
        # Time waited for room so far, all waits together. Bounding each wait alone would let a body be
        # woken (room freed by another request), read a little and wait again afresh, for ever: a client
        # whose sends are stuck in TCP buffers (a paused connection does not see its close) would hold
        # its bytes one whole ``wait_s`` per request that ends meanwhile.
        self.waited_s = 0.0

    @property
    def capacity_bytes(self) -> int:
        return self._budget.capacity_bytes

    def charge(self, size: int) -> None:
        self.held += size
        self._budget.charge(size)

    def release(self) -> None:
        if self.held:
            held, self.held = self.held, 0
            self._budget.release(held)

    async def room(self, what: str) -> None:
        """Return once the budget has room; :class:`RequestBufferBusyError` once this request has waited
        ``wait_s`` in all (over every call)."""
        budget = self._budget
        if budget.has_room:
            return
        left_s = budget.wait_s - self.waited_s
        if left_s <= 0:
            raise budget.busy_error(what)
        loop = asyncio.get_running_loop()
        room = loop.create_future()
        # A partial, not a nested function (compiled: sonic.compiled, no nested functions).
        budget.when_room(room, functools.partial(_wake, room))
        self._room = room
        started = loop.time()
        try:
            await asyncio.wait_for(room, left_s)
        except TimeoutError:
            raise budget.busy_error(what) from None
        finally:
            self.waited_s += loop.time() - started
            self._room = None
            budget.forget(room)

    def abandon(self) -> None:
        """The request's connection is gone: a wait in :meth:`room` ends with ConnectionResetError."""
        if self._room is not None and not self._room.done():
            self._room.set_exception(ConnectionResetError("the connection closed while its body waited"))
