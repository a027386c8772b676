"""The in-flight bound (sonic.client.inflight): free slots at once, waiters in order, cancellation."""

from __future__ import annotations

import asyncio

import pytest

from sonic.client.inflight import InFlight

pytestmark = pytest.mark.unit


def test_slots_are_handed_to_waiters_in_order_and_survive_cancellation() -> None:
    async def scenario() -> list[str]:
        slots = InFlight(1)
        order: list[str] = []
        assert slots.take()
        assert not slots.take()

        async def waiter(name: str) -> None:
            await slots.wait()
            order.append(name)
            slots.give()

        first = asyncio.create_task(waiter("first"))
        cancelled = asyncio.create_task(waiter("cancelled"))
        last = asyncio.create_task(waiter("last"))
        await asyncio.sleep(0)  # let all three queue (a yield, not a timing guess)
        cancelled.cancel()
        slots.give()
        await asyncio.gather(first, last)
        assert cancelled.cancelled()
        assert slots.take()  # the slot came back to the pool
        assert not slots.take()
        return order

    assert asyncio.run(scenario()) == ["first", "last"]


def test_a_waiter_cancelled_after_it_was_handed_a_slot_passes_it_on() -> None:
    async def scenario() -> bool:
        slots = InFlight(1)
        assert slots.take()
        handed = asyncio.create_task(slots.wait())
        following = asyncio.create_task(slots.wait())
        await asyncio.sleep(0)
        slots.give()  # handed to the first waiter ...
        handed.cancel()  # ... which is cancelled before it runs
        await following  # the slot reached the next waiter
        slots.give()
        return slots.take()

    assert asyncio.run(scenario())
