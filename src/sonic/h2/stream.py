"""One HTTP/2 stream's state (RFC 9113 section 5.1) as one transition table, and recently closed ids.

A stream's :class:`StreamState` changes only through :meth:`Stream.apply` and :data:`TRANSITIONS`, the
``(state, event) -> next state`` table after python-hyper h2's ``H2StreamStateMachine``; the core and
the roles apply the events (:class:`StreamEvent`), nobody else. An event the table does not hold for
the state is refused: from the peer, with the code RFC 9113 names (STREAM_CLOSED, a
:class:`~sonic.h2.frames.ProtocolError`); from us, as a bug (``RuntimeError``). ``local_closed``/``remote_closed`` are
the state read as the hot path asks it (a slot, not a computation), written by :meth:`Stream.apply` alone.

:class:`Stream` is private to :mod:`sonic.h2`: an application holds one as a handle (the events of
:class:`~sonic.h2.events.Handler` hand it over, the methods of :class:`~sonic.h2.connection.Connection`
take it back) and uses one slot of it, ``app``: its own object for the stream, of the type the
connection is generic in. Everything else (state, windows, queued DATA) is the core's; the application
asks the connection (``ended``, ``queued_bytes``, ``peer_reset_code``, ...).
"""

from __future__ import annotations

import enum
from collections import deque
from collections.abc import Callable
from typing import Generic, TypeVar

from sonic.h2.frames import ErrorCode, ProtocolError

T = TypeVar("T")  # what the application hangs on a stream


class StreamState(enum.Enum):
    """RFC 9113 section 5.1, for a stream that was opened (idle and reserved states are never held).

    Each state answers the hot path's two questions as plain attributes: have we ended our side
    (``local_closed``), has the peer ended its (``remote_closed``)."""

    # Set below from each member's value, after the class exists: an enum ``__init__`` compiled by
    # mypyc refuses its own members while the class is being built.
    label: str
    local_closed: bool
    remote_closed: bool
    # TRANSITIONS' row for this state, indexed by StreamEvent.index (filled in below): an
    # attribute and a tuple index per transition, where a dict keyed by enums would hash two
    # enums in Python on every frame that ends a stream.
    next: tuple[StreamState | None, ...]

    OPEN = ("open", False, False)
    HALF_CLOSED_LOCAL = ("half-closed (local)", True, False)
    HALF_CLOSED_REMOTE = ("half-closed (remote)", False, True)
    CLOSED = ("closed", True, True)


class StreamEvent(enum.Enum):
    """What moves a stream: END_STREAM or RST_STREAM sent or received, or the peer's GOAWAY."""

    SEND_END_STREAM = ("send END_STREAM", 0)
    RECV_END_STREAM = ("receive END_STREAM", 1)
    SEND_RST_STREAM = ("send RST_STREAM", 2)
    RECV_RST_STREAM = ("receive RST_STREAM", 3)
    # The peer's GOAWAY names a last stream id below this one: it was never processed, and ends
    # without a frame (RFC 9113 section 6.8).
    RECV_GOAWAY = ("receive GOAWAY", 4)

    label: str  # set below, as StreamState's
    index: int


for _state in StreamState:
    _state.label, _state.local_closed, _state.remote_closed = _state.value
for _event in StreamEvent:
    _event.label, _event.index = _event.value


_S, _E = StreamState, StreamEvent
_RESETS = (_E.SEND_RST_STREAM, _E.RECV_RST_STREAM)
_OPEN_STATES = (_S.OPEN, _S.HALF_CLOSED_LOCAL, _S.HALF_CLOSED_REMOTE)

TRANSITIONS: dict[tuple[StreamState, StreamEvent], StreamState] = {
    (_S.OPEN, _E.SEND_END_STREAM): _S.HALF_CLOSED_LOCAL,
    (_S.OPEN, _E.RECV_END_STREAM): _S.HALF_CLOSED_REMOTE,
    (_S.HALF_CLOSED_LOCAL, _E.RECV_END_STREAM): _S.CLOSED,
    (_S.HALF_CLOSED_REMOTE, _E.SEND_END_STREAM): _S.CLOSED,
    # A reset ends a stream that is not closed yet, from either side (a closed stream has left the
    # connection: a late RST_STREAM finds nothing, and the core resets no closed stream).
    **{(state, event): _S.CLOSED for state in _OPEN_STATES for event in _RESETS},
    # A GOAWAY below a stream we opened: our request may still be going out, the answer never came.
    (_S.OPEN, _E.RECV_GOAWAY): _S.CLOSED,
    (_S.HALF_CLOSED_LOCAL, _E.RECV_GOAWAY): _S.CLOSED,
}

for _state in _S:
    _state.next = tuple(TRANSITIONS.get((_state, event)) for event in _E)

# The members the core and the roles use, bound once: on Python 3.11 each ``StreamState.X`` read in a
# hot path is a class lookup of about 100 ns (measured), several per request.
CLOSED = _S.CLOSED
SEND_END_STREAM, RECV_END_STREAM, SEND_RST_STREAM, RECV_RST_STREAM, RECV_GOAWAY = _E


class Stream(Generic[T]):
    """One stream's state in a connection (:mod:`sonic.h2.connection`), either end; ``app`` is the
    application's (see the module docstring: the rest is the core's)."""

    __slots__ = (
        "app",
        "drained",
        "local_closed",
        "pending",
        "recv_released",
        "recv_unacked",
        "remote_closed",
        "reset_code",
        "send_credit",
        "state",
        "stream_id",
        "trailers",
    )

    def __init__(self, stream_id: int, app: T) -> None:
        self.stream_id = stream_id
        # The send window relative to the peer's SETTINGS_INITIAL_WINDOW_SIZE (window = credit + initial),
        # so a change of that setting costs O(1), not a walk over every stream.
        self.send_credit = 0
        self.recv_unacked = 0  # DATA received that our WINDOW_UPDATEs have not given back yet
        self.recv_released = 0  # of those, released by the application and not yet given back
        self.state = StreamState.OPEN
        self.local_closed = False  # we sent END_STREAM or RST_STREAM (set by apply only)
        self.remote_closed = False  # the peer did (set by apply only)
        self.pending: deque[memoryview] = deque()  # DATA not yet allowed out by flow control
        # Sent once ``pending`` is empty: a header block with END_STREAM, or b"": an empty DATA frame
        # with END_STREAM (a request ends so; it has no trailers).
        self.trailers: bytes | None = None
        self.app = app  # the application's per-stream object: the one slot it reads and writes
        self.reset_code = 0  # the peer's RST_STREAM error code
        # Called once when ``pending`` has all left (set by an application that waits for that).
        self.drained: Callable[[], None] | None = None

    def apply(self, event: StreamEvent) -> StreamState:
        """Move by :data:`TRANSITIONS`; returns the new state. Refused: see the module docstring."""
        state = self.state.next[event.index]
        if state is None:
            if event is StreamEvent.RECV_END_STREAM:
                msg = f"stream {self.stream_id} ended again by the peer ({self.state.label})"
                # The core answers the cases it knows with RST_STREAM before it applies the event; one
                # past it ends the connection, as RFC 9113 section 5.4.1 allows for any stream error.
                raise ProtocolError(ErrorCode.STREAM_CLOSED, msg)
            msg = f"stream {self.stream_id}: {event.label} in state {self.state.label}"
            raise RuntimeError(msg)
        self.state = state
        self.local_closed = state.local_closed
        self.remote_closed = state.remote_closed
        return state


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
