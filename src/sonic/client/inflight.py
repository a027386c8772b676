"""The bound on one client's requests in flight (``ClientConfig.max_in_flight``).

An ``asyncio.Semaphore`` costs every call two coroutines and a generator even when a slot is free,
and every call passes here. :class:`InFlight` takes a free slot with a compare and a decrement;
only a call that must wait makes a future. Waiters are served first come, first served, and a slot
freed while one waits goes straight to it.
"""

from __future__ import annotations

import asyncio
from collections import deque
from types import TracebackType


class InFlight:
    __slots__ = ("_free", "_waiters")

    def __init__(self, limit: int) -> None:
        self._free = limit
        self._waiters: deque[asyncio.Future[None]] = deque()

    def take(self) -> bool:
        """A slot now, without waiting (False: :meth:`wait` for one)."""
        if self._free > 0 and not self._waiters:
            self._free -= 1
            return True
        return False

    async def wait(self) -> None:
        """Until a slot is handed to this caller. Cancelled after one was, it passes the slot on."""
        waiter = asyncio.get_running_loop().create_future()
        self._waiters.append(waiter)
        try:
            await waiter
        except asyncio.CancelledError:
            if waiter.done() and not waiter.cancelled():
                self.give()  # handed a slot, then cancelled: the next waiter gets it
            else:
                self._waiters.remove(waiter)
            raise

    def give(self) -> None:
        """Free a slot: to the longest waiter, else back to the pool."""
        while self._waiters:
            waiter = self._waiters.popleft()
            if not waiter.done():
                waiter.set_result(None)
                return
        self._free += 1

    async def __aenter__(self) -> None:
        if not self.take():
            await self.wait()

    async def __aexit__(
        self, exc_type: type[BaseException] | None, exc: BaseException | None, tb: TracebackType | None
    ) -> None:
        self.give()
