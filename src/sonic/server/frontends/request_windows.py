"""One HTTP/2 connection's request DATA, charged to the server's request-buffer budget.

The gRPC front end (:mod:`sonic.server.frontends.grpc_h2`) reports what it keeps of the DATA its
connection core passes on (:meth:`RequestWindows.hold`, :meth:`~RequestWindows.drop`,
:meth:`~RequestWindows.release`). With a budget, the windows the peer's DATA used open again
(WINDOW_UPDATE, :meth:`sonic.h2.connection.Connection.acknowledge_received_data`) only while the budget
has room; otherwise once it has, so a sender is throttled by flow control, not by an error. A connection
that waits past the budget's ``wait_s`` has its front end fail the calls still receiving
(``wait_over``), which gives their bytes back.
"""

from __future__ import annotations

import asyncio
from collections.abc import Callable
from typing import Generic, TypeVar

from sonic.h2.connection import Connection
from sonic.h2.stream import Stream
from sonic.server.budget import RequestBudget

T = TypeVar("T")  # what the front end hangs on a stream


class RequestWindows(Generic[T]):
    """The budget's side of one connection (``budget`` None: windows open on receipt, as by default)."""

    def __init__(
        self,
        core: Connection[T],
        budget: RequestBudget | None,
        loop: asyncio.AbstractEventLoop,
        wait_over: Callable[[], None],
    ) -> None:
        self._core = core
        self._budget = budget
        self._loop = loop
        self._wait_over = wait_over
        core.set_window_release(on_receipt=budget is None)
        self._deferred: dict[Stream[T], int] = {}  # windows owed, by stream, until there is room
        self._budget_timer: asyncio.TimerHandle | None = None

    def hold(self, stream: Stream[T], size: int) -> None:
        """The front end keeps ``size`` bytes of ``stream``'s DATA (it gives them back with :meth:`release`)."""
        budget = self._budget
        if budget is None:
            return
        budget.charge(size)
        if not self._deferred and budget.has_room:
            self._core.acknowledge_received_data(stream, size)
            return
        if not self._deferred:
            budget.when_room(self, self._budget_room)
            self._budget_timer = self._loop.call_later(budget.wait_s, self._budget_timer_fired)
        self._deferred[stream] = self._deferred.get(stream, 0) + size

    def drop(self, stream: Stream[T], size: int) -> None:
        """The front end does not keep these bytes (a call already ended): the windows open at once."""
        if self._budget is not None:
            self._core.acknowledge_received_data(stream, size)

    def release(self, size: int) -> None:
        """Bytes given to :meth:`hold` are no longer held."""
        if self._budget is not None and size:
            self._budget.release(size)

    def _budget_room(self) -> None:
        deferred, self._deferred = self._deferred, {}
        if self._budget_timer is not None:
            self._budget_timer.cancel()
            self._budget_timer = None
        for stream, size in deferred.items():
            self._core.acknowledge_received_data(stream, size)

    def _budget_timer_fired(self) -> None:
        self._budget_timer = None
        self._wait_over()  # releases bytes: may give room, and _budget_room runs meanwhile
        if self._deferred and self._budget is not None:
            self._budget_timer = self._loop.call_later(self._budget.wait_s, self._budget_timer_fired)

    def connection_lost(self) -> None:
        """After the core reset every open stream (their holders released what they held)."""
        self._deferred.clear()
        if self._budget is not None:
            self._budget.forget(self)
        if self._budget_timer is not None:
            self._budget_timer.cancel()
            self._budget_timer = None
