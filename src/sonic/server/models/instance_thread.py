"""The one thread that owns a model instance's backend: it loads it, runs its batches and closes it.

One thread per instance keeps thread-bound runtimes (CUDA contexts, libraries that are not thread
safe) on the thread that created them. A call costs one ``SimpleQueue.put`` and one
``call_soon_threadsafe`` back: about half of ``run_in_executor`` on a ``ThreadPoolExecutor``, which
matters for models that run in microseconds.
"""

from __future__ import annotations

import asyncio
import queue
import threading
from collections.abc import Callable
from typing import Any, TypeVar

T = TypeVar("T")

_Job = tuple[asyncio.AbstractEventLoop, "asyncio.Future[Any]", Callable[..., Any], tuple[Any, ...]]


def _settle(future: asyncio.Future[Any], result: Any, error: BaseException | None) -> None:
    if future.cancelled():  # the caller stopped waiting; the work was done anyway
        return
    if error is not None:
        future.set_exception(error)
    else:
        future.set_result(result)


class InstanceThread:
    def __init__(self, name: str) -> None:
        self._jobs: queue.SimpleQueue[_Job | None] = queue.SimpleQueue()
        # Daemon: a thread whose model was never closed must not keep the process alive at exit.
        self._thread = threading.Thread(target=self._serve, name=name, daemon=True)
        self._thread.start()

    def run(self, function: Callable[..., T], *args: Any) -> asyncio.Future[T]:
        """``function(*args)`` on this thread; the future completes on the calling loop."""
        loop = asyncio.get_running_loop()
        future: asyncio.Future[T] = loop.create_future()
        self._jobs.put((loop, future, function, args))
        return future

    def shutdown(self) -> None:
        """The thread ends after the jobs already queued."""
        self._jobs.put(None)

    def _serve(self) -> None:
        while (job := self._jobs.get()) is not None:
            loop, future, function, args = job
            result: Any = None
            error: BaseException | None = None
            try:
                result = function(*args)
            except BaseException as exc:  # noqa: BLE001  (handed to the waiting caller)
                error = exc
            try:
                loop.call_soon_threadsafe(_settle, future, result, error)
            except RuntimeError:  # the loop is closed: nobody is waiting any more
                continue
