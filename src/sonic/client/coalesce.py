"""Opt-in client-side batching: concurrent small calls for one model merged into one wire request.

Without timers: at most ``max_in_flight`` merged requests per input signature are on the wire; calls
that arrive meanwhile wait and leave together (up to the model's ``max_batch_size`` rows) as soon as
one of those returns. An idle client therefore adds no delay, and a busy one sends fewer, bigger
requests, which is what both ends of gRPC are cheaper at. Each caller gets its own rows back; if the
merged request fails, every caller in it gets the error (after the usual retries).
"""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Callable, Hashable
from dataclasses import dataclass
from typing import Any

import numpy as np
import numpy.typing as npt

Arrays = dict[str, npt.NDArray[Any]]


@dataclass(eq=False)
class _Item:
    arrays: Arrays
    rows: int
    future: asyncio.Future[tuple[Arrays, Any]]


class Coalescer:
    def __init__(
        self, send: Callable[[Arrays], Awaitable[tuple[Arrays, Any]]], max_rows: int, max_in_flight: int
    ) -> None:
        self._send = send
        self._max_rows = max_rows
        self._limit = max_in_flight
        self._waiting: dict[Hashable, list[_Item]] = {}
        self._in_flight: dict[Hashable, int] = {}
        self._tasks: set[asyncio.Task[None]] = set()

    async def submit(self, key: Hashable, arrays: Arrays, rows: int) -> tuple[Arrays, Any]:
        """This call's rows of the merged result, and the merged request's extra (timing)."""
        future: asyncio.Future[tuple[Arrays, Any]] = asyncio.get_running_loop().create_future()
        self._waiting.setdefault(key, []).append(_Item(arrays, rows, future))
        if self._in_flight.get(key, 0) < self._limit:
            self._start(key)
        return await future

    def _start(self, key: Hashable) -> None:
        waiting = self._waiting.get(key)
        if not waiting:
            return
        taken: list[_Item] = []
        rows = 0
        while waiting and (not taken or rows + waiting[0].rows <= self._max_rows):
            item = waiting.pop(0)
            if item.future.done():
                continue  # the caller was cancelled while waiting
            taken.append(item)
            rows += item.rows
        if not taken:
            return
        self._in_flight[key] = self._in_flight.get(key, 0) + 1
        task = asyncio.create_task(self._run(key, taken))
        self._tasks.add(task)
        task.add_done_callback(self._tasks.discard)

    async def _run(self, key: Hashable, items: list[_Item]) -> None:
        try:
            if len(items) == 1:
                merged = items[0].arrays
            else:
                merged = {n: np.concatenate([i.arrays[n] for i in items]) for n in items[0].arrays}
            outputs, extra = await self._send(merged)
        except Exception as exc:  # noqa: BLE001  (handed to every caller of the merged request)
            for item in items:
                if not item.future.done():
                    item.future.set_exception(exc)
        else:
            offset = 0
            for item in items:
                if not item.future.done():
                    part = {n: o[offset : offset + item.rows] for n, o in outputs.items()}
                    item.future.set_result((part, extra))
                offset += item.rows
        finally:
            self._in_flight[key] -= 1
            self._start(key)

    async def close(self) -> None:
        """Cancel merged requests still running (their callers get CancelledError)."""
        tasks = list(self._tasks)
        for task in tasks:
            task.cancel()
        await asyncio.gather(*tasks, return_exceptions=True)
        for waiting in self._waiting.values():
            for item in waiting:
                item.future.cancel()
        self._waiting.clear()
