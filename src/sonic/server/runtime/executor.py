"""The instance threads' side of the batcher: each forms its next batch itself, runs it, hands it back.

An instance thread does not wait for the event loop between batches: as soon as one execution ends it
takes the next batch from the queues (under one lock shared with the loop's intake), so a batch that
was queued while the previous one ran starts at once. Finished executions go back to the loop in one
``call_soon_threadsafe`` per loop wake-up, however many finished meanwhile.

Model code runs only here, never on the event loop.
"""

from __future__ import annotations

import asyncio
import threading
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass

from sonic.protocol.errors import InternalError, SonicError
from sonic.server.backends.base import Backend
from sonic.server.models.instance_thread import InstanceThread
from sonic.server.runtime.policy import BatchPolicy, choose_batch
from sonic.server.runtime.queues import RequestQueues
from sonic.server.runtime.ragged import RaggedPlan
from sonic.server.runtime.rate_limiter import RateLimiter
from sonic.server.runtime.tensors import BatchResult, run_batch
from sonic.server.work import WorkItem


@dataclass(eq=False)
class ModelInstance:
    """A backend object and the single thread that owns it.

    ``passive`` (Triton's ``instance_group.passive``): loaded and warmed up, never given requests.
    ``limiter``: the server's rate limiter, when it is on; the instance is registered with it.
    """

    name: str
    backend: Backend
    thread: InstanceThread
    passive: bool = False
    limiter: RateLimiter | None = None


@dataclass(eq=False, slots=True)
class Execution:
    """One finished batch, on its way back to the event loop."""

    sequence: int  # order of batch formation (preserve_ordering delivers in this order)
    batch: list[WorkItem]
    result: BatchResult | None
    error: SonicError | None


class Executor:
    """Queues shared by the loop (intake) and the instance threads (batch formation), under one lock."""

    def __init__(
        self,
        *,
        model_name: str,
        policy: BatchPolicy,
        output_names: Sequence[str],
        loop: asyncio.AbstractEventLoop,
        on_finished: Callable[[], None],
        ragged: RaggedPlan | None = None,
    ) -> None:
        self._model = model_name
        self._ragged = ragged
        self._policy = policy
        self._output_names = tuple(output_names)
        self._batched = policy.max_batch_size > 0
        self._loop = loop
        self._on_finished = on_finished  # run on the loop; it calls collect()
        self._lock = threading.Lock()
        self.queues = RequestQueues(len(policy.queue_policies))  # touch only inside locked()
        # Idle instance threads, each asleep on its own held lock; notify() releases one. At most one
        # is woken and not yet looking at the queues: it takes what it can and wakes the next itself
        # if requests remain, so a burst of arrivals does not wake threads that find nothing to do.
        self._idle: list[threading.Lock] = []
        self._woken = False
        self._closing = False
        self._sequence = 0
        self._finished: list[Execution] = []
        self._running: dict[int, list[WorkItem]] = {}  # batches taken and not yet finished, by sequence
        self._wake_pending = False

    def locked(self) -> threading.Lock:
        """``with executor.locked():`` around any use of :attr:`queues` from the event loop."""
        return self._lock

    def notify(self) -> None:
        """Queues changed (call with the lock held): an instance waiting for requests looks again."""
        if self._idle and not self._woken:
            self._woken = True
            self._idle.pop().release()

    def close(self) -> None:
        """Instances finish what is queued, then their serve loops end."""
        with self._lock:
            self._closing = True
            while self._idle:
                self._idle.pop().release()

    def running(self) -> list[WorkItem]:
        """The requests of the batches executing now."""
        with self._lock:
            return [item for batch in self._running.values() for item in batch]

    def collect(self) -> list[Execution]:
        """The executions finished since the last call (on the loop)."""
        with self._lock:
            finished, self._finished = self._finished, []
            self._wake_pending = False
        return finished

    # --- on the instance thread ---------------------------------------------------------------------------

    def serve(self, instance: ModelInstance) -> None:
        """Take, run and hand back batches until closed and drained (the instance thread's job)."""
        waker = threading.Lock()
        waker.acquire()  # held while this thread is idle; notify() releases it
        while (taken := self._take(waker, instance)) is not None:
            sequence, batch = taken
            result: BatchResult | None = None
            error: SonicError | None = None
            try:
                result = run_batch(
                    self._model, instance.backend, batch, self._output_names, self._batched, self._ragged
                )
            except SonicError as exc:
                error = exc
            except Exception as exc:  # noqa: BLE001  (any backend failure fails this batch only)
                error = InternalError(f"model '{self._model}' instance {instance.name} failed: {exc!r}")
            finally:
                if instance.limiter is not None:
                    instance.limiter.release(instance)
            self._finish(Execution(sequence, batch, result, error))

    def _take(self, waker: threading.Lock, instance: ModelInstance) -> tuple[int, list[WorkItem]] | None:
        limiter = instance.limiter
        holding = False  # the rate limiter granted this instance its resources
        with self._lock:
            while True:
                batch, deadline_ns = choose_batch(self._policy, self.queues, time.perf_counter_ns())
                if batch and limiter is not None and not holding:
                    # Wait for resources only once a batch is ready, outside the queues' lock; then form
                    # the batch again, as requests that came meanwhile may join it (or another took it).
                    self._lock.release()
                    try:
                        limiter.acquire(instance)
                    finally:
                        self._lock.acquire()
                    holding = True
                    continue
                if holding and not batch:
                    assert limiter is not None
                    limiter.release(instance)
                    holding = False
                if batch:
                    for item in batch:
                        self.queues.take(item)
                    if self.queues.size:
                        self.notify()  # another idle instance may take what is left
                    self._sequence += 1
                    self._running[self._sequence] = batch
                    return self._sequence, batch
                if self._closing and deadline_ns is None:
                    return None
                timeout_s = (
                    None if deadline_ns is None else max(0.0, (deadline_ns - time.perf_counter_ns()) / 1e9)
                )
                self._idle.append(waker)
                self._lock.release()
                try:
                    waker.acquire(timeout=-1 if timeout_s is None else timeout_s)
                finally:
                    self._lock.acquire()
                if waker in self._idle:  # timed out (the batch delay ended) before anyone woke it
                    self._idle.remove(waker)
                else:  # woken: its lock was released under self._lock, so take it back for the next wait
                    self._woken = False
                    waker.acquire(blocking=False)

    def _finish(self, execution: Execution) -> None:
        with self._lock:
            del self._running[execution.sequence]
            self._finished.append(execution)
            wake = not self._wake_pending
            self._wake_pending = True
        if wake:
            try:
                self._loop.call_soon_threadsafe(self._on_finished)
            except RuntimeError:  # the loop is closed: nobody waits for these results any more
                return
