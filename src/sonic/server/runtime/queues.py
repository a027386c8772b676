"""The request queues of one model version: one per priority level, each with its delayed tail.

Not thread safe by itself: the scheduler holds its lock around every call. Requests that leave a
queue out of turn (cancelled, timed out, taken from behind another shape) are only marked; they are
removed when they reach the head, so no call walks a queue to delete.
"""

from __future__ import annotations

from collections import deque
from collections.abc import Iterator
from dataclasses import dataclass, field

from sonic.server.work import ItemState, WorkItem


@dataclass(eq=False)
class _Level:
    main: deque[WorkItem] = field(default_factory=deque)
    delayed: deque[WorkItem] = field(default_factory=deque)  # timed out with timeout_action DELAY
    size: int = 0  # queued items (marked ones may still sit in the deques)


class RequestQueues:
    def __init__(self, levels: int) -> None:
        self._levels = [_Level() for _ in range(levels)]
        self.size = 0  # queued items over every level

    def level_size(self, level: int) -> int:
        return self._levels[level].size

    def push(self, item: WorkItem) -> None:
        level = self._levels[item.level]
        item.state = ItemState.QUEUED
        level.main.append(item)
        level.size += 1
        self.size += 1

    def delay(self, item: WorkItem) -> None:
        """Move a queued request behind every request of its level that has not timed out."""
        level = self._levels[item.level]
        level.main.remove(item)
        level.delayed.append(item)

    def drop(self, item: WorkItem) -> None:
        """Take a queued request out without running it."""
        self._leave(item, ItemState.DROPPED)
        item.inputs = {}

    def take(self, item: WorkItem) -> None:
        """Take a queued request out to run it."""
        self._leave(item, ItemState.TAKEN)

    def _leave(self, item: WorkItem, state: ItemState) -> None:
        item.state = state
        self._levels[item.level].size -= 1
        self.size -= 1

    def __iter__(self) -> Iterator[WorkItem]:
        """Queued requests, highest priority first, oldest first within a level (delayed ones last)."""
        for level in self._levels:
            for queue in (level.main, level.delayed):
                while queue and queue[0].state is not ItemState.QUEUED:
                    queue.popleft()
                for item in queue:
                    if item.state is ItemState.QUEUED:
                        yield item
