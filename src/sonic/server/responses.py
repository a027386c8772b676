"""The responses of one request to a decoupled model: sent from model threads, read on the event loop.

A decoupled model (``model_transaction_policy { decoupled: true }``) answers a request with zero or
more responses and then the final flag, from ``execute`` or from threads of its own after ``execute``
returned. Each request gets a :class:`ResponseChannel`: the model's response sender puts into it (any
thread but the event loop's), the front end takes out of it on the event loop, in the order sent.

Memory is bounded by back-pressure: at most ``max_queued`` responses wait unread; a sender past that
blocks until the reader takes one (so a model that sends forever to a slow client waits for the client
at the pace of the transport). When the reader goes away (the client cancelled the stream or
disconnected) the channel is cancelled: blocked senders wake, later responses are dropped, and the
model sees ``is_cancelled()``.
"""

from __future__ import annotations

import asyncio
import threading
from collections import deque
from dataclasses import dataclass
from typing import Any

import numpy.typing as npt

from sonic.protocol.errors import FailedPreconditionError, SonicError

# Responses waiting unread per request before a sender blocks: enough to keep a fast reader busy.
DEFAULT_MAX_QUEUED_RESPONSES = 64


@dataclass(frozen=True, slots=True)
class Streamed:
    """One thing a decoupled model sent: a response (outputs or an error), the final flag, or both."""

    outputs: dict[str, npt.NDArray[Any]] | None  # None: no response (the final flag alone, or an error)
    error: SonicError | None = None
    final: bool = False


class ChannelClosedError(Exception):
    """Sent after the final flag (the sender reports it in Triton's words)."""


class ResponseChannel:
    """One request's responses, in order; create it on the event loop that reads it."""

    def __init__(self, max_queued: int = DEFAULT_MAX_QUEUED_RESPONSES) -> None:
        if max_queued < 1:
            raise ValueError(f"max_queued must be at least 1, got {max_queued}")
        self._loop = asyncio.get_running_loop()
        self._loop_thread = threading.get_ident()
        self._max_queued = max_queued
        self._lock = threading.Condition()
        self._queue: deque[Streamed] = deque()
        self._cancelled = False
        self._final_sent = False
        self._reader: asyncio.Future[None] | None = None  # set while the reader waits for a response

    # --- the model's side (any thread but the event loop's) ----------------------------------------------

    @property
    def cancelled(self) -> bool:
        return self._cancelled

    @property
    def final_sent(self) -> bool:
        return self._final_sent

    def send(self, item: Streamed) -> None:
        """Queue ``item``, waiting while ``max_queued`` responses are unread; dropped once cancelled.

        Raises :class:`ChannelClosedError` after the final flag was sent.
        """
        if threading.get_ident() == self._loop_thread:
            # Waiting here would stop the loop that has to read.
            msg = "a decoupled response was sent from the event loop thread; send from the model's threads"
            raise FailedPreconditionError(msg)
        with self._lock:
            if self._final_sent:
                raise ChannelClosedError
            self._lock.wait_for(lambda: self._cancelled or len(self._queue) < self._max_queued)
            if self._final_sent:  # another thread of the model sent the final flag meanwhile
                raise ChannelClosedError
            self._final_sent = item.final
            if self._cancelled:
                return
            self._queue.append(item)
            reader, self._reader = self._reader, None
        if reader is not None:
            self._loop.call_soon_threadsafe(_wake, reader)

    # --- either side ---------------------------------------------------------------------------------------

    def end_with(self, error: SonicError) -> None:
        """End the request with ``error`` unless its final flag was sent (any thread; past the bound).

        For an ``execute`` that failed, and for a model that let go of the request without the final flag.
        """
        with self._lock:
            if self._final_sent:
                return
            self._final_sent = True
            self._queue.append(Streamed(None, error, final=True))
            reader, self._reader = self._reader, None
        if reader is None:
            return
        if threading.get_ident() == self._loop_thread:
            _wake(reader)
            return
        try:
            self._loop.call_soon_threadsafe(_wake, reader)
        except RuntimeError:  # the loop is closed: nobody reads any more
            return

    # --- the event loop's side -----------------------------------------------------------------------------

    def cancel(self) -> None:
        """The reader went away: wake blocked senders, drop what is queued and what comes."""
        with self._lock:
            self._cancelled = True
            self._queue.clear()
            self._lock.notify_all()

    async def get(self) -> Streamed:
        """The next response, in the order sent; waits for it."""
        return (await self.get_all(1))[0]

    async def get_all(self, most: int | None = None) -> list[Streamed]:
        """Every response queued (at most ``most``), in the order sent; waits for one at least.

        Taking them together costs the sender and the loop one hand-off for many responses.
        """
        while True:
            with self._lock:
                if self._queue:
                    queue = self._queue
                    if most is None or len(queue) <= most:
                        items = list(queue)
                        queue.clear()
                    else:
                        items = [queue.popleft() for _ in range(most)]
                    self._lock.notify_all()  # a sender waiting on the bound may go on
                    return items
                reader = self._reader = self._loop.create_future()
            await reader


def _wake(reader: asyncio.Future[None]) -> None:
    if not reader.done():
        reader.set_result(None)
