"""The instance threads' side of the batcher: each forms its next batch itself, runs it, hands it back.

An instance thread does not wait for the event loop between batches: as soon as one execution ends it
takes the next batch from the queues (under one lock shared with the loop's intake), so a batch that
was queued while the previous one ran starts at once. Finished executions go back to the loop in one
``call_soon_threadsafe`` per loop wake-up, however many finished meanwhile.

Model code runs here, or on the event loop for a version whose executions take a few µs
(:mod:`.inline`): then the loop forms and runs its batches itself, one per loop turn, through the
same queues, batch choice, timings and delivery, with an instance no thread is running (the threads
take nothing while the version runs on the loop), so at most ``count`` batches still run at once.
"""

from __future__ import annotations

import asyncio
import logging
import threading
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass

from sonic.protocol.errors import InternalError, SonicError
from sonic.server.backends.base import Backend
from sonic.server.models.instance_thread import InstanceThread
from sonic.server.runtime.inline import InlineGate, InlinePolicy, Place
from sonic.server.runtime.policy import BatchPolicy, choose_batch
from sonic.server.runtime.queues import RequestQueues
from sonic.server.runtime.ragged import RaggedPlan
from sonic.server.runtime.rate_limiter import RateLimiter
from sonic.server.runtime.tensors import BatchResult, run_batch
from sonic.server.work import WorkItem

log = logging.getLogger(__name__)


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
    """Queues shared by the loop (intake) and the instance threads (batch formation), under one lock.

    ``instances``: the active instances; ``inline``: the policy that may move the version's batches onto
    the event loop (None: always on the threads; the scheduler passes it only where that is safe).
    """

    def __init__(
        self,
        *,
        model_name: str,
        policy: BatchPolicy,
        output_names: Sequence[str],
        loop: asyncio.AbstractEventLoop,
        on_finished: Callable[[], None],
        ragged: RaggedPlan | None = None,
        instances: Sequence[ModelInstance] = (),
        inline: InlinePolicy | None = None,
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
        self._instances = list(instances)
        self._busy: set[ModelInstance] = set()  # instances running a batch (on their thread or the loop)
        self.gate = InlineGate(inline) if inline is not None and inline.enabled and self._instances else None
        self.inline_executions = 0  # batches the loop ran (tests, benchmarks)
        self._inline_pending = False  # a loop turn is scheduled to run the next batch
        self._inline_timer: asyncio.TimerHandle | None = None  # the queue delay of a waiting batch
        self._inline_deadline_ns = 0

    def locked(self) -> threading.Lock:
        """``with executor.locked():`` around any use of :attr:`queues` from the event loop."""
        return self._lock

    def notify(self) -> None:
        """Queues changed (call with the lock held): an instance waiting for requests looks again."""
        if self._idle and not self._woken:
            self._woken = True
            self._idle.pop().release()

    def queued(self) -> None:
        """Requests were queued or delayed (on the loop, with the lock held): whoever runs batches now looks."""
        if self.gate is not None and self.gate.place is Place.LOOP:
            self._schedule_inline()
        else:
            self.notify()

    def close(self) -> None:
        """Instances finish what is queued, then their serve loops end."""
        with self._lock:
            self._closing = True
            if self.gate is not None:
                self.gate.to_threads()  # the threads drain the queues, as for any version
            while self._idle:
                self._idle.pop().release()
        if self._inline_timer is not None:
            self._inline_timer.cancel()
            self._inline_timer = None

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

    def _execute(self, instance: ModelInstance, sequence: int, batch: list[WorkItem]) -> Execution:
        """Run one taken batch with ``instance``'s backend (on its thread or on the loop)."""
        result: BatchResult | None = None
        error: SonicError | None = None
        try:
            result = run_batch(
                self._model, instance.backend, batch, self._output_names, self._batched, self._ragged
            )
        except SonicError as exc:
            error = exc
        except Exception as failure:  # noqa: BLE001  (any backend failure fails this batch only)
            # ``failure``, not ``exc``: mypyc gives a name one type in a function.
            error = InternalError(f"model '{self._model}' instance {instance.name} failed: {failure!r}")
        finally:
            if instance.limiter is not None:
                instance.limiter.release(instance)
        return Execution(sequence, batch, result, error)

    def _took(self, instance: ModelInstance, batch: list[WorkItem]) -> int:
        """Mark ``batch`` taken by ``instance`` (lock held); its sequence number."""
        for item in batch:
            self.queues.take(item)
        self._sequence += 1
        self._running[self._sequence] = batch
        self._busy.add(instance)
        return self._sequence

    def _done(self, instance: ModelInstance, execution: Execution) -> None:
        """Hand a finished execution over to delivery (lock held)."""
        del self._running[execution.sequence]
        self._busy.discard(instance)
        self._finished.append(execution)

    # --- on the event loop, for a version whose executions are tiny (:mod:`.inline`) ---------------------

    def _schedule_inline(self) -> None:
        if not self._inline_pending:
            self._inline_pending = True
            self._loop.call_soon(self._run_inline)

    def _run_inline(self) -> None:
        """One batch on the loop, if the version runs there and one is ready; the next in a later loop turn."""
        self._inline_pending = False
        gate = self.gate
        assert gate is not None
        with self._lock:
            if gate.place is not Place.LOOP:
                return  # moved back to the threads, which were woken then
            instance = next((i for i in self._instances if i not in self._busy), None)
            if instance is None:  # threads finishing batches they took before the move: the next one wakes us
                return
            batch, deadline_ns = choose_batch(self._policy, self.queues, time.perf_counter_ns())
            if not batch:
                if deadline_ns is not None:
                    self._inline_at(deadline_ns)
                return
            sequence = self._took(instance, batch)
        cpu_ns = time.thread_time_ns()
        wall_ns = time.perf_counter_ns()
        execution = self._execute(instance, sequence, batch)
        wall_ns = time.perf_counter_ns() - wall_ns
        cpu_ns = time.thread_time_ns() - cpu_ns
        self.inline_executions += 1
        with self._lock:
            self._done(instance, execution)
            demoted = gate.on_loop(cpu_ns, wall_ns)
            if self.queues.size:
                self.queued()  # the threads when demoted, else the loop's next turn
        if demoted:
            log.info(
                "model '%s': %s; its batches run on its instance threads again", self._model, gate.reason
            )
        self._on_finished()

    def _inline_at(self, deadline_ns: int) -> None:
        """Run the loop's next batch when the queue delay of the waiting one ends."""
        if self._inline_timer is not None:
            if self._inline_deadline_ns <= deadline_ns:
                return
            self._inline_timer.cancel()
        self._inline_deadline_ns = deadline_ns
        delay_s = max(0.0, (deadline_ns - time.perf_counter_ns()) / 1e9)
        self._inline_timer = self._loop.call_later(delay_s, self._inline_delay_over)

    def _inline_delay_over(self) -> None:
        self._inline_timer = None
        self._run_inline()

    def _woke(self) -> None:
        """On the loop, after instance threads finished executions: deliver them, and run the next batch
        here if the version just moved to the loop."""
        self._on_finished()
        if self.gate is not None and self.gate.place is Place.LOOP:
            with self._lock:
                if self.queues.size:
                    self._schedule_inline()

    # --- on the instance thread ---------------------------------------------------------------------------

    def serve(self, instance: ModelInstance) -> None:
        """Take, run and hand back batches until closed and drained (the instance thread's job)."""
        waker = threading.Lock()
        waker.acquire()  # held while this thread is idle; notify() releases it
        timed = self.gate is not None  # the gate needs each execution's times
        while (taken := self._take(waker, instance)) is not None:
            sequence, batch = taken
            cpu_ns = time.thread_time_ns() if timed else 0
            wall_ns = time.perf_counter_ns() if timed else 0
            execution = self._execute(instance, sequence, batch)
            if timed:
                cpu_ns = time.thread_time_ns() - cpu_ns
                wall_ns = time.perf_counter_ns() - wall_ns
            self._finish(instance, execution, cpu_ns, wall_ns)

    def _take(self, waker: threading.Lock, instance: ModelInstance) -> tuple[int, list[WorkItem]] | None:
        limiter = instance.limiter
        holding = False  # the rate limiter granted this instance its resources
        gate = self.gate
        batch: list[WorkItem]
        deadline_ns: int | None
        with self._lock:
            while True:
                if gate is not None and gate.place is Place.LOOP:
                    batch, deadline_ns = [], None  # the loop runs this version's batches now
                else:
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
                    sequence = self._took(instance, batch)
                    if self.queues.size:
                        self.notify()  # another idle instance may take what is left
                    return sequence, batch
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

    def _finish(self, instance: ModelInstance, execution: Execution, cpu_ns: int, wall_ns: int) -> None:
        promoted = False
        with self._lock:
            self._done(instance, execution)
            if self.gate is not None and not self._closing:
                promoted = self.gate.on_thread(cpu_ns, wall_ns)
            wake = not self._wake_pending
            self._wake_pending = True
        if promoted:
            log.info(
                "model '%s': its executions take a few µs; its batches run on the event loop", self._model
            )
        if wake:
            try:
                self._loop.call_soon_threadsafe(self._woke)
            except RuntimeError:  # the loop is closed: nobody waits for these results any more
                return
