"""The server's request-buffer budget: accounting, bounded waits, and an HTTP/2 connection under it.

The connection tests run a real server-role core (:class:`sonic.h2.server.ServerRole`) with its
:class:`~sonic.server.frontends.request_windows.RequestWindows` on the test's loop, sans I/O: what the
core would write is taken from ``data_to_send()``.
"""

from __future__ import annotations

import asyncio
import dataclasses
import struct
from pathlib import Path
from typing import Any

import pytest

from sonic.h2.frames import PREFACE, Flag, FrameType, frame, settings_frame
from sonic.h2.headers import Headers, encode_headers
from sonic.h2.limits import SERVER_LIMITS
from sonic.h2.server import ServerRole
from sonic.h2.stream import Stream
from sonic.protocol.errors import RequestBufferBusyError
from sonic.server.budget import (
    DEFAULT_MAX_BYTES,
    DEFAULT_MIN_BYTES,
    BudgetHold,
    RequestBudget,
    default_budget_bytes,
)
from sonic.server.frontends.request_windows import RequestWindows
from sonic.testing.h2 import parse_frames

MiB = 1 << 20
BLOCK = encode_headers(
    [(b":method", b"POST"), (b":scheme", b"http"), (b":path", b"/u"), (b":authority", b"x")]
)
CHUNK = b"x" * 16_384


def test_charges_and_releases_balance_and_wake_waiters_once_there_is_room() -> None:
    budget = RequestBudget(100)
    woken: list[str] = []
    budget.charge(150)  # a charge never fails: the bytes are already here
    assert not budget.has_room
    budget.when_room("a", lambda: woken.append("a"))
    budget.when_room("b", lambda: woken.append("b"))
    budget.forget("b")
    budget.release(40)  # 110: still no room
    assert woken == []
    budget.release(10)  # 100: exactly spent, still no room
    assert woken == []
    budget.release(1)
    assert woken == ["a"]
    budget.release(99)
    assert woken == ["a"]  # once
    assert budget.in_use == 0


def test_a_hold_releases_what_it_charged_once() -> None:
    budget = RequestBudget(1000)
    hold = BudgetHold(budget)
    hold.charge(300)
    hold.charge(200)
    assert budget.in_use == 500
    hold.release()
    hold.release()
    assert budget.in_use == 0


async def test_waiting_for_room_ends_when_room_appears() -> None:
    budget = RequestBudget(100, wait_s=30)
    other = BudgetHold(budget)
    other.charge(100)
    waiting = asyncio.ensure_future(BudgetHold(budget).room("the body"))
    await asyncio.sleep(0)  # let it start waiting (the test's one yield, not a synchronisation)
    assert not waiting.done()
    other.release()
    await asyncio.wait_for(waiting, 5)


async def test_waiting_for_room_is_bounded() -> None:
    budget = RequestBudget(100, wait_s=0.05)
    BudgetHold(budget).charge(100)
    with pytest.raises(RequestBufferBusyError, match=r"waited 0.05 s in all .* budget of 100 bytes"):
        await BudgetHold(budget).room("the body")


async def test_the_bound_is_on_all_the_waits_of_a_body_together() -> None:
    """Woken by room another request freed, a body that reads a little and waits again does not get a
    fresh ``wait_s``: its hold is bounded however often it is woken."""
    budget = RequestBudget(100, wait_s=60)
    other = BudgetHold(budget)
    other.charge(100)
    body = BudgetHold(budget)
    waiting = asyncio.ensure_future(body.room("the body"))
    await asyncio.sleep(0.2)  # the time waited is what is counted: some must pass
    other.release()
    await asyncio.wait_for(waiting, 5)
    assert body.waited_s >= 0.1
    body.charge(100)  # read what there was room for: spent again
    body.waited_s = 59.9  # as if woken and spent again many times
    with pytest.raises(RequestBufferBusyError, match=r"waited 60 s in all"):
        await asyncio.wait_for(body.room("the body"), 30)  # what is left (0.1 s), not a fresh 60 s
    assert body.waited_s >= 60
    with pytest.raises(RequestBufferBusyError):
        await body.room("the body")  # nothing left: refused at once


@pytest.mark.parametrize(
    ("limit", "expected"),
    [("max", None), (str(256 * MiB), DEFAULT_MIN_BYTES), (str(1 << 40), None), (str(8 << 30), 2 << 30)],
)
def test_the_default_is_a_quarter_of_memory_or_of_the_container_limit(
    tmp_path: Path, limit: str, expected: int | None
) -> None:
    path = tmp_path / "memory.max"
    path.write_text(limit + "\n")
    value = default_budget_bytes(path)
    assert DEFAULT_MIN_BYTES <= value <= DEFAULT_MAX_BYTES
    if expected is not None:
        assert value == min(expected, default_budget_bytes(tmp_path / "absent"))


class Capture:
    """What the connection core wrote."""

    def __init__(self) -> None:
        self.out = bytearray()


class Uploads:
    """Holds each stream's DATA until the test finishes the stream; fails its uploads when told to (the
    handler of a server-role core, ``h2``, its DATA charged to the budget by ``windows``)."""

    def __init__(self, budget: RequestBudget, transport: Capture) -> None:
        limits = dataclasses.replace(SERVER_LIMITS, connection_window_bytes=1 << 17)
        self.h2 = ServerRole(self, limits=limits).connection
        loop = asyncio.get_running_loop()
        self.windows = RequestWindows(self.h2, budget, loop, self.budget_wait_over)
        self.h2.start(loop.time())
        self.transport = transport
        self.held: dict[int, int] = {}
        self.wait_over = asyncio.Event()

    def data_received(self, data: bytes) -> None:
        self.h2.receive_data(data)

    def write_out(self) -> None:
        self.transport.out += b"".join(self.h2.data_to_send())

    def connection_lost(self, exc: Exception | None) -> None:
        self.h2.transport_lost()
        self.windows.connection_lost()

    def headers_received(self, stream: Stream[Any], headers: Headers, end_stream: bool) -> None:
        self.held[stream.stream_id] = 0

    def stream_data(self, stream: Stream[Any], data: memoryview) -> None:
        self.held[stream.stream_id] += len(data)
        self.windows.hold(stream, len(data))

    def stream_ended(self, stream: Stream[Any]) -> None:
        pass

    def stream_reset(self, stream: Stream[Any]) -> None:
        self.finish(stream.stream_id)

    def finish(self, stream_id: int) -> None:
        self.windows.release(self.held.pop(stream_id, 0))

    def budget_wait_over(self) -> None:
        self.wait_over.set()
        for stream_id in list(self.held):
            self.finish(stream_id)

    def goaway_received(self, last_stream_id: int, code: int, unprocessed: list[Stream[Any]]) -> None:
        pass


def connection_updates(transport: Capture) -> int:
    frames = parse_frames(bytes(transport.out))
    transport.out.clear()
    return sum(struct.unpack(">I", f[3])[0] for f in frames if f[0] == FrameType.WINDOW_UPDATE and f[2] == 0)


def open_connection(budget: RequestBudget) -> tuple[Uploads, Capture]:
    transport = Capture()
    connection = Uploads(budget, transport)
    connection.data_received(PREFACE + settings_frame({}))
    connection.write_out()
    transport.out.clear()
    return connection, transport


async def test_a_connection_over_the_budget_gets_no_window_until_bytes_are_released() -> None:
    budget = RequestBudget(100_000, wait_s=30)
    connection, transport = open_connection(budget)
    connection.data_received(
        frame(FrameType.HEADERS, Flag.END_HEADERS, 1, BLOCK) + frame(FrameType.DATA, 0, 1, CHUNK) * 5
    )
    connection.write_out()
    assert connection_updates(transport) == 5 * len(CHUNK)  # room: given back as usual
    connection.data_received(frame(FrameType.DATA, 0, 1, CHUNK) * 3)  # past the budget from the 2nd on
    connection.write_out()
    assert budget.in_use == 8 * len(CHUNK)
    assert connection_updates(transport) == 0  # owed: 48 KiB, of which 32 KiB wait for room
    connection.finish(1)
    connection.write_out()
    assert budget.in_use == 0
    assert connection_updates(transport) == 0  # all released, but under half a window owed yet
    connection.data_received(
        frame(FrameType.HEADERS, Flag.END_HEADERS, 3, BLOCK) + frame(FrameType.DATA, 0, 3, CHUNK) * 2
    )
    connection.write_out()
    # Every byte since the first update came back (3 of stream 1, 2 of stream 3): no window leaked.
    assert connection_updates(transport) == 5 * len(CHUNK)
    connection.connection_lost(None)
    assert budget.in_use == 0


async def test_a_connection_that_waits_too_long_fails_its_uploads_and_gives_the_bytes_back() -> None:
    budget = RequestBudget(50_000, wait_s=0.05)
    connection, transport = open_connection(budget)
    connection.data_received(
        frame(FrameType.HEADERS, Flag.END_HEADERS, 1, BLOCK) + frame(FrameType.DATA, 0, 1, CHUNK) * 5
    )
    connection.write_out()
    assert budget.in_use == 5 * len(CHUNK)
    assert connection_updates(transport) == 0  # 48 KiB given back so far (under half), 32 KiB owed
    await asyncio.wait_for(connection.wait_over.wait(), 5)
    assert budget.in_use == 0
    connection.write_out()
    assert connection_updates(transport) == 5 * len(CHUNK)
    connection.connection_lost(None)


async def test_a_lost_connection_releases_everything_and_stops_waiting() -> None:
    budget = RequestBudget(10_000, wait_s=30)
    connection, _ = open_connection(budget)
    connection.data_received(
        frame(FrameType.HEADERS, Flag.END_HEADERS, 1, BLOCK) + frame(FrameType.DATA, 0, 1, CHUNK) * 2
    )
    assert budget.in_use == 2 * len(CHUNK)
    connection.connection_lost(None)
    assert budget.in_use == 0
    budget.charge(20_000)
    budget.release(20_000)  # no waiter left to call on a closed connection
