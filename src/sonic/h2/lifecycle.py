"""One HTTP/2 connection's lifecycle: :class:`ConnectionState` and its one transition table.

After httpcore's ``HTTPConnectionState`` and h2's ``ConnectionState``: the core
(:class:`sonic.h2.connection.Connection`) holds the state and moves it by :data:`TRANSITIONS` through its
methods (``stop_new_streams``, ``close``, ``transport_lost``); adapters and applications read it, nobody
else writes it. The states, in the order a connection goes through them:

- ``OPEN``: streams open and finish.
- ``GOING_AWAY``: GOAWAY sent or received (or our stream ids spent): no new streams, open ones finish.
- ``CLOSING``: we end it; the adapter writes out what is queued, then closes (lingering where the
  limits ask for it).
- ``ABORTING``: we end it without waiting on the peer (a peer that answers no PING, an abusive one).
- ``LOST``: the transport is gone (every open stream was reset for its application).
"""

from __future__ import annotations

import enum


class ConnectionState(enum.Enum):
    """Where a connection is; ``opens_streams`` and ``ended`` are what the hot paths ask of it."""

    # Set below from each member's value, after the class exists: an enum ``__init__`` compiled by
    # mypyc refuses its own members while the class is being built.
    label: str
    opens_streams: bool  # a new stream may be opened (or accepted)
    ended: bool  # nothing more is read or sent: closed by us, or gone

    OPEN = ("open", True, False)
    GOING_AWAY = ("going away", False, False)
    CLOSING = ("closing", False, True)
    ABORTING = ("aborting", False, True)
    LOST = ("lost", False, True)


for _state in ConnectionState:
    _state.label, _state.opens_streams, _state.ended = _state.value


class ConnectionEvent(enum.Enum):
    STOP_NEW_STREAMS = "stop new streams"  # GOAWAY sent or received; our stream ids spent
    CLOSE = "close"  # a connection error, or going away with no stream left
    ABORT = "abort"  # ... without waiting for the peer to read
    TRANSPORT_LOST = "transport lost"


_S, _E = ConnectionState, ConnectionEvent

TRANSITIONS: dict[tuple[ConnectionState, ConnectionEvent], ConnectionState] = {
    (_S.OPEN, _E.STOP_NEW_STREAMS): _S.GOING_AWAY,
    (_S.GOING_AWAY, _E.STOP_NEW_STREAMS): _S.GOING_AWAY,
    (_S.OPEN, _E.CLOSE): _S.CLOSING,
    (_S.GOING_AWAY, _E.CLOSE): _S.CLOSING,
    (_S.OPEN, _E.ABORT): _S.ABORTING,
    (_S.GOING_AWAY, _E.ABORT): _S.ABORTING,
    (_S.CLOSING, _E.ABORT): _S.ABORTING,
    # Once ended, asking again changes nothing: a stream that finishes while the connection closes
    # asks to close once more, a GOAWAY may arrive after our own.
    **{
        (ended, event): ended
        for ended in (_S.CLOSING, _S.ABORTING)
        for event in (_E.STOP_NEW_STREAMS, _E.CLOSE)
    },
    (_S.ABORTING, _E.ABORT): _S.ABORTING,
    # The transport can go at any time, and after it nothing changes any more.
    **{(state, _E.TRANSPORT_LOST): _S.LOST for state in _S},
    **{(_S.LOST, event): _S.LOST for event in _E},
}


def next_state(state: ConnectionState, event: ConnectionEvent) -> ConnectionState:
    """The table's answer; every pair is in it (a connection can be asked anything at any time)."""
    return TRANSITIONS[state, event]
