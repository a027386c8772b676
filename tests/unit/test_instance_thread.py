"""The instance thread: every call on one thread, results and errors back on the loop."""

from __future__ import annotations

import asyncio
import threading

import pytest

from sonic.server.models.instance_thread import InstanceThread


async def test_calls_run_on_one_thread_and_errors_come_back() -> None:
    thread = InstanceThread("sonic-test")
    try:
        names = {await thread.run(lambda: threading.current_thread().name) for _ in range(5)}
        assert names == {"sonic-test"}
        assert await thread.run(pow, 2, 10) == 1024
        with pytest.raises(ZeroDivisionError):
            await thread.run(divmod, 1, 0)
    finally:
        thread.shutdown()


async def test_a_caller_that_stops_waiting_does_not_break_the_thread() -> None:
    thread = InstanceThread("sonic-test")
    release = threading.Event()
    try:
        blocked = thread.run(release.wait)
        blocked.cancel()
        release.set()
        assert await thread.run(len, "abc") == 3  # runs after the abandoned call finished
        assert blocked.cancelled()
    finally:
        thread.shutdown()


async def test_shutdown_ends_the_thread_after_queued_work() -> None:
    thread = InstanceThread("sonic-test")
    done = thread.run(sum, [1, 2, 3])
    thread.shutdown()
    assert await done == 6
    await asyncio.to_thread(thread._thread.join, 10)
    assert not thread._thread.is_alive()
