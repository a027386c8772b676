"""The one asyncio adapter of our sans-I/O HTTP/2 core (:mod:`sonic.protocol.h2connection`).

It owns what the core must not: the transport, the event loop and its clock. Received bytes go to
:meth:`~Http2Core.receive_data`; queued output leaves in one ``writelines`` per loop iteration
(scheduled by the core's ``_output_ready``); the core's deadline is one timer handle, and the calls'
deadlines (gRPC's ``grpc-timeout``) share one more, armed at the earliest; the transport's
high-water mark holds our output in the core (DATA in its streams, the rest in the queue), where a
peer that does not read runs into ``max_queued_control_frames`` instead of growing our memory.

Server and client both subclass :class:`Http2Protocol` together with their role (server:
:mod:`sonic.server.frontends.h2`, client: :mod:`sonic.client.transport.h2_connection`).
"""

from __future__ import annotations

import asyncio
import logging
import math
from typing import cast

from sonic.protocol.h2connection import Http2Core
from sonic.protocol.h2limits import Http2Limits, MemoBudget

log = logging.getLogger(__name__)


class Http2Protocol(Http2Core, asyncio.Protocol):
    """An :class:`Http2Core` on an asyncio transport. Roles call ``start`` from ``connection_made``."""

    def __init__(
        self, *, expect_preface: bool, limits: Http2Limits, memo_budget: MemoBudget | None = None
    ) -> None:
        super().__init__(expect_preface=expect_preface, limits=limits, memo_budget=memo_budget)
        self._loop = asyncio.get_running_loop()
        self._transport: asyncio.Transport | None = None
        self._timer: asyncio.TimerHandle | None = None
        self._deadline_timer: asyncio.TimerHandle | None = None  # at the earliest call deadline watched
        self._deadline_at = math.inf
        self._write_scheduled = False
        self.closed = asyncio.Event()

    # --- asyncio.Protocol ---------------------------------------------------------------------------

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        # uvloop's transports are not asyncio.Transport subclasses, hence a cast and not a check.
        self._transport = cast("asyncio.Transport", transport)
        self.start()
        self.start_timers(self._loop.time())
        self._arm_timer()

    def data_received(self, data: bytes) -> None:
        self.receive_data(data)

    def connection_lost(self, exc: Exception | None) -> None:
        if exc is not None:
            log.debug("HTTP/2 connection with %s lost: %s", self.peer, exc)
        if self._timer is not None:
            self._timer.cancel()
            self._timer = None
        self._disarm_deadline()
        self.transport_lost()
        self.closed.set()

    def pause_writing(self) -> None:
        # Reading goes on: two ends that both stopped reading while their output waits would wait
        # on each other forever (a large request and a large response on one connection). What the
        # core queues meanwhile is bounded instead (max_queued_control_frames).
        self.pause_output(True)

    def resume_writing(self) -> None:
        self.pause_output(False)
        self._write_out()

    # --- the core's outputs -------------------------------------------------------------------------

    def _output_ready(self) -> None:
        if not self._write_scheduled:
            self._write_scheduled = True
            self._loop.call_soon(self._write_out)

    def _write_out(self) -> None:
        self._write_scheduled = False
        transport = self._transport
        if transport is None or transport.is_closing():
            return
        if not self._paused or self.close_wanted:
            out = self.data_to_send()
            if out:
                transport.writelines(out)
        if self.abort_wanted:
            transport.abort()
        elif self.close_wanted:
            transport.close()

    def _close(self) -> None:
        super()._close()
        self._write_out()  # at once: nothing more is read or sent on this connection

    def _arm_timer(self) -> None:
        deadline = self.next_deadline()
        if deadline is not None:
            self._timer = self._loop.call_at(deadline, self._timer_fired)

    def _timer_fired(self) -> None:
        self._timer = None
        self.on_timer(self._loop.time())
        if not self.close_wanted:
            self._arm_timer()

    # --- call deadlines -----------------------------------------------------------------------------
    # One timer per connection, not one per call: a TimerHandle made and cancelled per call was a
    # measurable share of a small request's cost. A call only stores its deadline; the timer fires at
    # the earliest one watched, and the role fails the calls past theirs in one walk over its streams
    # (at most MAX_CONCURRENT_STREAMS), returning the next deadline to wait for.

    def watch_deadline(self, deadline: float) -> None:
        """A call must end by ``deadline`` (loop time): :meth:`deadlines_due` runs once it passed."""
        if deadline < self._deadline_at:
            self._disarm_deadline()
            self._deadline_at = deadline
            self._deadline_timer = self._loop.call_at(deadline, self._deadline_fired)

    def deadlines_due(self, now: float) -> float:  # noqa: ARG002  (the roles' hook)
        """End the calls whose deadline is at or before ``now``; the earliest deadline left (inf: none)."""
        return math.inf

    def _deadline_fired(self) -> None:
        self._deadline_timer, self._deadline_at = None, math.inf
        following = self.deadlines_due(self._loop.time())
        if following < math.inf:
            self.watch_deadline(following)

    def _disarm_deadline(self) -> None:
        if self._deadline_timer is not None:
            self._deadline_timer.cancel()
            self._deadline_timer, self._deadline_at = None, math.inf

    # --- for the application ------------------------------------------------------------------------

    @property
    def peer(self) -> str:
        """The peer as gRPC spells it: ``ipv4:127.0.0.1:5000``, ``ipv6:[::1]:5000``."""
        address = self._transport.get_extra_info("peername") if self._transport is not None else None
        if not address:
            return "unknown"
        host, port = address[0], address[1]
        return f"ipv6:[{host}]:{port}" if ":" in host else f"ipv4:{host}:{port}"

    def abort(self) -> None:
        if self._transport is not None:
            self._transport.abort()

    def flush_now(self) -> None:
        """Write what is queued at once (before a close that must not wait for the next iteration)."""
        self._write_out()
