"""Idle timeout and PING keepalive of one HTTP/2 connection, as deadlines (no clock in here).

The adapter (:mod:`sonic.h2.aio`) arms :meth:`ConnectionTimers.next_deadline` on its loop
and reports it with :meth:`~sonic.h2.connection.Connection.on_timer`; the core sets ``active``
whenever bytes arrive, which is all the bookkeeping a received frame costs. Both checks work on whole
periods: a connection is closed as idle after one to two ``idle_timeout_s`` without streams,
and pinged after one to two ``keepalive_interval_s`` without frames.
"""

from __future__ import annotations

import enum

from sonic.h2.limits import Http2Limits


class TimerAction(enum.Enum):
    PING = "ping"  # send a PING, its answer is due by the ping deadline
    PING_TIMEOUT = "ping timeout"  # no answer: the peer is gone
    IDLE = "idle"  # no stream and no frame for a whole period: GOAWAY


class ConnectionTimers:
    __slots__ = (
        "_active_for_ping",
        "_idle_at",
        "_idle_mark",
        "_idle_s",
        "_interval_s",
        "_ping_at",
        "_ping_deadline",
        "_ping_timeout_s",
        "active",
        "ping_payload",
    )

    def __init__(self, limits: Http2Limits) -> None:
        self._idle_s = limits.idle_timeout_s
        self._interval_s = limits.keepalive_interval_s
        self._ping_timeout_s = limits.ping_timeout_s
        self._idle_at: float | None = None
        self._ping_at: float | None = None
        self._ping_deadline: float | None = None
        self.ping_payload = b""  # of the PING awaiting its ACK ("" when none)
        self.active = False  # bytes arrived since the last check (set by the core)
        self._active_for_ping = False
        self._idle_mark = 0  # the last stream id seen by the idle check

    def start(self, now: float) -> None:
        if self._idle_s is not None:
            self._idle_at = now + self._idle_s
        if self._interval_s is not None:
            self._ping_at = now + self._interval_s

    def next_deadline(self) -> float | None:
        times = [t for t in (self._idle_at, self._ping_at, self._ping_deadline) if t is not None]
        return min(times) if times else None

    def due(self, now: float, *, has_streams: bool, last_stream_id: int) -> list[TimerAction]:
        """What is due at ``now``. Idle means no stream open and none opened for a whole period (PINGs
        and their answers do not count: keepalive must not keep an unused connection alive)."""
        actions = []
        if self.active:
            self.active = False
            self._active_for_ping = True
        if self._ping_deadline is not None and now >= self._ping_deadline:
            self._ping_deadline = None
            actions.append(TimerAction.PING_TIMEOUT)
        if self._ping_at is not None and now >= self._ping_at and self._interval_s is not None:
            self._ping_at = now + self._interval_s
            active, self._active_for_ping = self._active_for_ping, False
            if not active and not self.ping_payload:
                self.ping_payload = int(now * 1e6).to_bytes(8, "big", signed=False)
                self._ping_deadline = now + self._ping_timeout_s
                actions.append(TimerAction.PING)
        if self._idle_at is not None and now >= self._idle_at and self._idle_s is not None:
            self._idle_at = now + self._idle_s
            opened, self._idle_mark = last_stream_id != self._idle_mark, last_stream_id
            if not opened and not has_streams:
                actions.append(TimerAction.IDLE)
        return actions

    def pong(self, payload: bytes) -> None:
        """A PING ACK: the answer to ours clears its deadline."""
        if payload == self.ping_payload:
            self.ping_payload = b""
            self._ping_deadline = None
