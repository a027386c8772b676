"""The one asyncio adapter of our sans-I/O HTTP/2 core (:class:`sonic.h2.connection.Connection`).

:class:`H2Protocol` *holds* a core (server or client role alike) and owns what the core must not: the
transport, the event loop and its clock. Received bytes go to :meth:`~Connection.receive_data`; queued
output leaves in one ``writelines`` per loop iteration (scheduled when the core's output says it has
some), or sooner, every ``MESSAGES_PER_WRITE`` whole messages the application queued in one turn
(:meth:`H2Protocol.message_queued`: a peer with many calls in flight is not kept waiting for the turn's
last answer); the core's deadline is one timer handle, and the calls' deadlines (gRPC's ``grpc-timeout``) share
one more, armed at the earliest; the transport's high-water mark holds our output in the core (DATA in
its streams, the rest in the queue), where a peer that does not read runs into
``max_queued_control_frames`` instead of growing our memory. When the core ends the connection and its
limits ask for it (``linger_s``, the server's), the close lingers: what is queued is written, writing
is shut down, and the peer's bytes are read and dropped until it closes, ``linger_s`` passes or more
than ``linger_bytes`` came.

Used by the server front end (:mod:`sonic.server.frontends.grpc_h2`) and the client transport
(:mod:`sonic.client.transport.h2`); each gives the adapter its core and, optionally, what to run when the
connection is made or lost and when call deadlines pass.
"""

from __future__ import annotations

import asyncio
import logging
import math
from collections.abc import Callable
from typing import Any, cast

from sonic.h2.connection import Connection
from sonic.h2.frames import FRAME_HEADER_BYTES
from sonic.h2.lifecycle import ConnectionState

log = logging.getLogger(__name__)
# What one read into the adapter's own buffer takes at most (uvloop's own read buffer is as large).
RECEIVE_BUFFER_BYTES = 256 << 10
# Whole messages queued in one loop turn before they are written at once, not at the turn's end. A turn
# that answers 32 requests read together and writes them last leaves the peer idle until then, and the
# peer's next 32 then arrive together: the two ends take turns (lockstep) instead of overlapping. Writing
# every few answers lets the peer work on those while we encode the rest: identity b1 with 32 in flight,
# 1.2-1.4x the requests/s for ~10 % more server CPU per request (docs/benchmarks.md, issue 37).
MESSAGES_PER_WRITE = 8


def _no_deadlines(now: float) -> float:  # noqa: ARG001  (the signature of a deadlines_due callback)
    return math.inf


class H2Protocol(asyncio.Protocol):
    """A :class:`Connection` core on an asyncio transport."""

    def __init__(
        self,
        core: Connection[Any],
        *,
        deadlines_due: Callable[[float], float] = _no_deadlines,
        on_made: Callable[[], None] | None = None,
        on_lost: Callable[[], None] | None = None,
    ) -> None:
        """``deadlines_due(now)`` ends the calls whose deadline passed and returns the earliest one left
        (inf: none); ``on_made``/``on_lost`` run once the transport is there, and once it is gone (after
        the core reset every open stream)."""
        self.core = core
        self._deadlines_due = deadlines_due
        self._on_made = on_made
        self._on_lost = on_lost
        self.loop = asyncio.get_running_loop()
        self._transport: asyncio.Transport | None = None
        self._timer: asyncio.TimerHandle | None = None
        self._deadline_timer: asyncio.TimerHandle | None = None  # at the earliest call deadline watched
        self._deadline_at = math.inf
        self._write_scheduled = False
        self._messages_queued = 0  # whole messages queued since the last write (MESSAGES_PER_WRITE)
        self._linger_timer: asyncio.TimerHandle | None = None  # set while a close lingers
        self._linger_bytes_left = core.limits.linger_bytes
        self.closed = asyncio.Event()
        core.output.ready = self._output_ready
        core.on_close = self._write_out  # at once: nothing more is read or sent on this connection

    # --- asyncio.Protocol ---------------------------------------------------------------------------

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        # uvloop's transports are not asyncio.Transport subclasses, hence a cast and not a check.
        self._transport = cast("asyncio.Transport", transport)
        self.core.start(self.loop.time(), self._peer())
        self._arm_timer()
        if self._on_made is not None:
            self._on_made()

    def data_received(self, data: bytes | memoryview) -> None:
        if self._linger_timer is None:
            self.core.receive_data(data)
            return
        # A lingering close reads only to keep the kernel from resetting; the bytes are dropped, and a
        # peer that keeps sending past linger_bytes is dropped too (a flood is not read for long).
        self._linger_bytes_left -= len(data)
        if self._linger_bytes_left < 0 and self._transport is not None:
            self._transport.abort()

    def connection_lost(self, exc: Exception | None) -> None:
        if exc is not None:
            log.debug("HTTP/2 connection with %s lost: %s", self.core.peer, exc)
        for timer in (self._timer, self._linger_timer):
            if timer is not None:
                timer.cancel()
        self._timer = None
        self._disarm_deadline()
        self.core.transport_lost()
        self.closed.set()
        if self._on_lost is not None:
            self._on_lost()

    def pause_writing(self) -> None:
        # Reading goes on: two ends that both stopped reading while their output waits would wait
        # on each other forever (a large request and a large response on one connection). What the
        # core queues meanwhile is bounded instead (max_queued_control_frames).
        self.core.pause_output(True)

    def resume_writing(self) -> None:
        self.core.pause_output(False)
        self._write_out()

    @property
    def lingering(self) -> bool:
        """A lingering close reads on only to drop what comes."""
        return self._linger_timer is not None

    # --- the core's outputs -------------------------------------------------------------------------

    def _output_ready(self) -> None:
        if not self._write_scheduled:
            self._write_scheduled = True
            self.loop.call_soon(self._write_out)

    def message_queued(self) -> None:
        """The application queued a whole message (an answer, a request): every MESSAGES_PER_WRITE of
        them are written at once rather than at the end of the loop turn."""
        self._messages_queued += 1
        if self._messages_queued >= MESSAGES_PER_WRITE:
            self._write_queued()  # the turn's scheduled write still takes what is queued after this

    def _write_out(self) -> None:
        self._write_scheduled = False
        self._write_queued()

    def _write_queued(self) -> None:
        self._messages_queued = 0
        transport = self._transport
        if transport is None or transport.is_closing() or self._linger_timer is not None:
            return
        core = self.core
        ended = core.state.ended
        if not core.output.paused or ended:
            out = core.data_to_send()
            if out:
                transport.writelines(out)
        if not ended:
            return
        linger_s = core.limits.linger_s
        if linger_s > 0:
            self._linger(transport, linger_s)
        elif core.state is ConnectionState.ABORTING:
            transport.abort()
        else:
            transport.close()

    def _linger(self, transport: asyncio.Transport, linger_s: float) -> None:
        # Abort, not close, when the time is up: close() would wait without end for a peer that does
        # not read what is still buffered (an abusive one); by then it had linger_s to read the GOAWAY.
        self._linger_timer = self.loop.call_later(linger_s, transport.abort)
        transport.resume_reading()
        if transport.can_write_eof():  # TLS cannot half-close: the peer still has linger_s to read
            transport.write_eof()  # after what is buffered: the peer reads our GOAWAY, then EOF
        # The peer's EOF ends the linger early: asyncio's default eof_received closes the transport.

    def _arm_timer(self) -> None:
        deadline = self.core.next_deadline()
        if deadline is not None:
            self._timer = self.loop.call_at(deadline, self._timer_fired)

    def _timer_fired(self) -> None:
        self._timer = None
        self.core.on_timer(self.loop.time())
        if not self.core.state.ended:
            self._arm_timer()

    # --- call deadlines -----------------------------------------------------------------------------
    # One timer per connection, not one per call: a TimerHandle made and cancelled per call was a
    # measurable share of a small request's cost. A call only stores its deadline; the timer fires at
    # the earliest one watched, and ``deadlines_due`` fails the calls past theirs in one walk over the
    # streams (at most MAX_CONCURRENT_STREAMS), returning the next deadline to wait for.

    def watch_deadline(self, deadline: float) -> None:
        """A call must end by ``deadline`` (loop time): ``deadlines_due`` runs once it passed."""
        if deadline < self._deadline_at:
            self._disarm_deadline()
            self._deadline_at = deadline
            self._deadline_timer = self.loop.call_at(deadline, self._deadline_fired)

    def _deadline_fired(self) -> None:
        self._deadline_timer, self._deadline_at = None, math.inf
        following = self._deadlines_due(self.loop.time())
        if following < math.inf:
            self.watch_deadline(following)

    def _disarm_deadline(self) -> None:
        if self._deadline_timer is not None:
            self._deadline_timer.cancel()
            self._deadline_timer, self._deadline_at = None, math.inf

    # --- for the application ------------------------------------------------------------------------

    def _peer(self) -> str:
        """The peer as gRPC spells it: ``ipv4:127.0.0.1:5000``, ``ipv6:[::1]:5000``."""
        address = self._transport.get_extra_info("peername") if self._transport is not None else None
        if not address:
            return "unknown"
        host, port = address[0], address[1]
        return f"ipv6:[{host}]:{port}" if ":" in host else f"ipv4:{host}:{port}"

    def get_extra_info(self, name: str) -> object:
        """The transport's (``ssl_object`` for TLS's ALPN, ...); None before it is made."""
        return self._transport.get_extra_info(name) if self._transport is not None else None

    def abort(self) -> None:
        if self._transport is not None:
            self._transport.abort()


def receive_buffer() -> memoryview:
    """Memory for :class:`BufferedReads` to read into outside DATA payloads (one read's worth)."""
    return memoryview(bytearray(RECEIVE_BUFFER_BYTES))


class BufferedReads(asyncio.BufferedProtocol):
    """An :class:`H2Protocol` reading into memory it picks (asyncio's ``BufferedProtocol``), for a core
    with a sink (:meth:`~Connection.set_sink`); what the transport calls goes to the adapter it holds.

    Inside a DATA payload the sink has room for, the socket is read straight into the application's
    memory (:meth:`Connection.receive_target`), so a large message's bytes land once, where they stay;
    everything else is read into one reused buffer, parsed before the next read. A payload's rest is read
    with the next frame's header behind it when the message's memory goes on past the payload (the core
    takes the header back out, and the next payload overwrites it there), so the message's next DATA
    payload lands in place too, one read per DATA frame of up to 1 MiB; after a payload that ends the
    message's memory, the next read takes a frame header alone.

    ``receive_buffer`` (:func:`receive_buffer`) may be shared by every connection of a loop, as uvloop
    shares its own: a read is parsed, and what the core keeps of it copied, before the loop makes another."""

    def __init__(self, adapter: H2Protocol, receive_buffer: memoryview) -> None:
        self.adapter = adapter
        self._core = adapter.core
        self._receive_buffer = receive_buffer
        self._target = receive_buffer
        self._in_place = False

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        self.adapter.connection_made(transport)

    def connection_lost(self, exc: Exception | None) -> None:
        self.adapter.connection_lost(exc)

    def pause_writing(self) -> None:
        self.adapter.pause_writing()

    def resume_writing(self) -> None:
        self.adapter.resume_writing()

    def eof_received(self) -> bool | None:
        return self.adapter.eof_received()

    def get_buffer(self, sizehint: int) -> memoryview:  # noqa: ARG002  (the core decides the size)
        core = self._core
        target = None if self.adapter.lingering else core.receive_target()
        self._in_place = target is not None
        if target is None:
            buffer = self._receive_buffer
            target = buffer[:FRAME_HEADER_BYTES] if core.header_next else buffer
        self._target = target
        return target

    def buffer_updated(self, nbytes: int) -> None:
        if self._in_place:
            self._in_place = False
            self._core.received_in_place(nbytes)
        else:
            self.adapter.data_received(self._target[:nbytes])
