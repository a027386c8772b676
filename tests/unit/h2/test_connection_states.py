"""A connection's lifecycle (:mod:`sonic.h2.lifecycle`): the table is total, and its moves are reached by
bytes fed to real cores (server and client role), each read from ``state`` before and after."""

from __future__ import annotations

from typing import Any

import pytest

from sonic.h2.client import ClientRole
from sonic.h2.connection import Connection
from sonic.h2.frames import PREFACE, ErrorCode, Flag, FrameType, frame, goaway, settings_frame
from sonic.h2.headers import encode_headers
from sonic.h2.lifecycle import TRANSITIONS, ConnectionEvent, ConnectionState, next_state
from sonic.h2.server import ServerRole
from sonic.testing.h2 import SilentHandler

S, E = ConnectionState, ConnectionEvent
REQUEST = encode_headers(
    [(b":method", b"POST"), (b":scheme", b"http"), (b":path", b"/m"), (b":authority", b"x")]
)


def state(core: Connection[Any]) -> ConnectionState:
    """The core's state, read afresh (a plain attribute read would be narrowed by mypy after an assert)."""
    return core.state


def server() -> tuple[ServerRole[Any], Connection[Any]]:
    role = ServerRole(SilentHandler())
    core = role.connection
    core.start(0.0)
    core.receive_data(PREFACE + settings_frame({}))
    core.data_to_send()
    return role, core


def test_the_table_answers_every_pair() -> None:
    assert {(state, event) for state in S for event in E} == set(TRANSITIONS)
    assert all(next_state(S.LOST, event) is S.LOST for event in E)
    assert [state for state in S if state.opens_streams] == [S.OPEN]
    assert {state for state in S if state.ended} == {S.CLOSING, S.ABORTING, S.LOST}


def test_a_graceful_shutdown_goes_away_then_closes_when_the_last_stream_ends() -> None:
    role, core = server()
    core.receive_data(frame(FrameType.HEADERS, Flag.END_HEADERS | Flag.END_STREAM, 1, REQUEST))
    role.start_shutdown()
    assert state(core) is S.GOING_AWAY
    core.receive_data(frame(FrameType.HEADERS, Flag.END_HEADERS | Flag.END_STREAM, 3, REQUEST))  # refused
    assert set(core.streams) == {1}
    core.reset(core.streams[1], ErrorCode.CANCEL)  # the last stream ends
    assert state(core) is S.CLOSING


def test_a_shutdown_with_no_stream_closes_at_once() -> None:
    role, core = server()
    role.start_shutdown()
    assert core.state is S.CLOSING


PROTOCOL_ERROR = [frame(FrameType.DATA, 0, 0, b"x")]  # DATA on stream 0: GOAWAY, then close
FLOOD = [frame(FrameType.SETTINGS, 0, 0) * 2000, frame(FrameType.SETTINGS, 0, 0) * 2000]  # ACKs never read


@pytest.mark.parametrize("shutting_down", [False, True], ids=["open", "going-away"])
@pytest.mark.parametrize(
    ("sent", "after"), [(PROTOCOL_ERROR, S.CLOSING), (FLOOD, S.ABORTING)], ids=["error", "flood"]
)
def test_a_peer_at_fault_ends_the_connection(
    shutting_down: bool, sent: list[bytes], after: ConnectionState
) -> None:
    role, core = server()
    if shutting_down:
        core.receive_data(frame(FrameType.HEADERS, Flag.END_HEADERS, 1, REQUEST))
        role.start_shutdown()
    for data in sent:
        core.receive_data(data)
        core.pause_output(True)  # the peer reads nothing
    assert core.state is after


def test_a_closing_connection_whose_peer_stops_answering_pings_is_dropped() -> None:
    _, core = server()
    core.close()
    assert state(core) is S.CLOSING
    core.close(abort=True)  # the keepalive's verdict comes while the close is under way
    assert state(core) is S.ABORTING


@pytest.mark.parametrize("before", [S.OPEN, S.GOING_AWAY, S.CLOSING], ids=lambda s: s.name)
def test_the_transport_can_go_at_any_time(before: ConnectionState) -> None:
    role, core = server()
    core.receive_data(frame(FrameType.HEADERS, Flag.END_HEADERS, 1, REQUEST))
    if before is not S.OPEN:
        role.start_shutdown()
    if before is S.CLOSING:
        core.close()
    assert core.state is before
    core.transport_lost()
    assert core.state is S.LOST
    assert not core.streams
    core.close()  # a late close changes nothing
    assert core.state is S.LOST


def test_a_client_stops_opening_streams_on_goaway_and_once_again_changes_nothing() -> None:
    role = ClientRole(SilentHandler())
    core = role.connection
    core.start(0.0)
    core.receive_data(settings_frame({}))
    role.open_stream(REQUEST, [b"request"], None)  # stream 1: processed (the GOAWAY's last id), it finishes
    core.receive_data(goaway(1, ErrorCode.NO_ERROR))
    assert core.state is S.GOING_AWAY
    core.receive_data(goaway(1, ErrorCode.NO_ERROR))
    assert core.state is S.GOING_AWAY


def test_a_client_with_no_stream_left_closes_on_goaway() -> None:
    role = ClientRole(SilentHandler())
    core = role.connection
    core.start(0.0)
    core.receive_data(settings_frame({}))
    role.open_stream(REQUEST, [b"request"], None)  # stream 1: above the GOAWAY's last id, never processed
    core.receive_data(goaway(0, ErrorCode.NO_ERROR))
    assert core.state is S.CLOSING
    assert not core.streams
