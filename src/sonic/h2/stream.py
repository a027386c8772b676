"""One HTTP/2 stream's state (RFC 9113 section 5.1), and the ids of recently closed streams.

The state is two flags, each set once (``local_closed``: we sent END_STREAM or RST_STREAM;
``remote_closed``: the peer did), read on every frame; :attr:`Stream.state` names the pair as the RFC does.
"""

from __future__ import annotations

import enum
from collections import deque
from collections.abc import Callable
from typing import Any


class StreamState(enum.Enum):
    """RFC 9113 section 5.1, for a stream that was opened (idle and reserved states are never held)."""

    OPEN = "open"
    HALF_CLOSED_LOCAL = "half-closed (local)"
    HALF_CLOSED_REMOTE = "half-closed (remote)"
    CLOSED = "closed"


class Stream:
    """One stream's state in a connection (:mod:`sonic.h2.connection`), either end."""

    __slots__ = (
        "call",
        "drained",
        "local_closed",
        "pending",
        "recv_released",
        "recv_unacked",
        "remote_closed",
        "reset_code",
        "send_credit",
        "stream_id",
        "trailers",
    )

    def __init__(self, stream_id: int) -> None:
        self.stream_id = stream_id
        # The send window relative to the peer's SETTINGS_INITIAL_WINDOW_SIZE (window = credit + initial),
        # so a change of that setting costs O(1), not a walk over every stream.
        self.send_credit = 0
        self.recv_unacked = 0  # DATA received that our WINDOW_UPDATEs have not given back yet
        self.recv_released = 0  # of those, released by the application and not yet given back
        self.remote_closed = False
        self.local_closed = False
        self.pending: deque[memoryview] = deque()  # DATA not yet allowed out by flow control
        # Sent once ``pending`` is empty: a header block with END_STREAM, or b"": an empty DATA frame
        # with END_STREAM (a request ends so; it has no trailers).
        self.trailers: bytes | None = None
        self.call: Any = None  # the application's per-stream state
        self.reset_code = 0  # the peer's RST_STREAM error code
        # Called once when ``pending`` has all left (set by an application that waits for that).
        self.drained: Callable[[], None] | None = None

    @property
    def state(self) -> StreamState:
        if self.local_closed:
            return StreamState.CLOSED if self.remote_closed else StreamState.HALF_CLOSED_LOCAL
        return StreamState.HALF_CLOSED_REMOTE if self.remote_closed else StreamState.OPEN


class ClosedStreams:
    """Ids of recently closed streams, and which of them we reset ourselves.

    RFC 9113 section 5.1: frames that arrive after we sent RST_STREAM are ignored (they may have been in
    flight); other frames on a closed stream are a STREAM_CLOSED error; a HEADERS frame on a lower id
    that was never opened is a PROTOCOL_ERROR. Bounded: the oldest ids are forgotten first.
    """

    def __init__(self, capacity: int) -> None:
        self._capacity = capacity
        self._order: deque[int] = deque()
        self._reset_by_us: dict[int, bool] = {}

    def add(self, stream_id: int, *, reset_by_us: bool) -> None:
        known = self._reset_by_us.get(stream_id)  # one lookup: this runs for every stream
        if known:
            return
        self._reset_by_us[stream_id] = reset_by_us
        if known is None:
            self._order.append(stream_id)
            if len(self._order) > self._capacity:
                del self._reset_by_us[self._order.popleft()]

    def __contains__(self, stream_id: int) -> bool:
        return stream_id in self._reset_by_us

    def reset_by_us(self, stream_id: int) -> bool:
        return self._reset_by_us.get(stream_id, False)
