"""The dynamic batcher of one model version (and its one-request-per-execution form without batching).

Event-driven and split by thread: on the event loop, :meth:`Scheduler.submit` queues a request
(limits, priority, timeout) and waits for its future; the instance threads form and run batches
(:mod:`.executor`); finished batches come back in one loop callback that records statistics and
settles each request's future. Nothing polls, and the loop never waits for an instance to be free.
A version whose executions take a few µs runs its batches on the loop instead (:mod:`.inline`).
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import Sequence

from sonic.protocol.errors import InternalError, UnavailableError
from sonic.server.metrics.stats import ModelStats, RequestTiming
from sonic.server.runtime.executor import Execution, Executor, ModelInstance
from sonic.server.runtime.inline import InlinePolicy
from sonic.server.runtime.policy import BatchPolicy
from sonic.server.runtime.ragged import RaggedPlan
from sonic.server.runtime.rate_limiter import no_active_instance
from sonic.server.work import ItemOutputs, ItemState, WorkItem


class Scheduler:
    """Queues requests for one model version and feeds them to its instances; create it on the event loop."""

    def __init__(
        self,
        *,
        model_name: str,
        policy: BatchPolicy,
        instances: Sequence[ModelInstance],
        output_names: Sequence[str],
        stats: ModelStats,
        ragged: RaggedPlan | None = None,
        inline: InlinePolicy | None = None,
    ) -> None:
        """``inline``: the batches may run on the event loop while they are tiny (:mod:`.inline`), where
        every active instance's backend allows it and no rate limiter decides when an instance runs."""
        self._model = model_name
        self._policy = policy
        self._instances = [instance for instance in instances if not instance.passive]
        self._stats = stats
        if not all(i.backend.runs_on_any_thread and i.limiter is None for i in self._instances):
            inline = None
        self._executor = Executor(
            model_name=model_name,
            policy=policy,
            output_names=output_names,
            loop=asyncio.get_running_loop(),
            on_finished=self._deliver_finished,
            ragged=ragged,
            instances=self._instances,
            inline=inline,
        )
        self._workers: list[asyncio.Future[None]] = []
        self._closing = False
        # preserve_ordering: executions finished ahead of an earlier one wait here for their turn.
        self._next_sequence = 1
        self._held: dict[int, Execution] = {}

    def start(self) -> None:
        for instance in self._instances:
            self._workers.append(instance.thread.run(self._executor.serve, instance))

    @property
    def queued(self) -> int:
        return self._executor.queues.size

    @property
    def executor(self) -> Executor:
        """Where the batches run (its ``gate``, ``inline_executions``): for tests and benchmarks."""
        return self._executor

    # --- intake (event loop) ------------------------------------------------------------------------------

    async def submit(self, item: WorkItem) -> tuple[ItemOutputs, RequestTiming]:
        if self._closing:
            raise UnavailableError(f"model '{self._model}' is unloading and accepts no new requests")
        if not self._instances:
            raise UnavailableError(no_active_instance(self._model))
        level = self._policy.level_for(item.priority)
        queue_policy = self._policy.queue_policies[level]
        timeout_us = queue_policy.timeout_us(item.timeout_us)
        item.level = level
        with self._executor.locked():
            queues = self._executor.queues
            if queue_policy.max_queue_size and queues.level_size(level) >= queue_policy.max_queue_size:
                raise UnavailableError(
                    f"Exceeds maximum queue size: model '{self._model}' already has {queues.level_size(level)} "
                    f"requests queued at priority level {level + 1} (max_queue_size {queue_policy.max_queue_size})"
                )
            item.enqueued_ns = time.perf_counter_ns()
            queues.push(item)
            self._executor.queued()
        if timeout_us:
            item.timer = asyncio.get_running_loop().call_later(
                timeout_us / 1e6, self._expire, item, queue_policy.delay_on_timeout
            )
        try:
            return await item.future
        finally:
            if item.state is ItemState.QUEUED:  # the caller went away (cancelled): drop it from the queue
                self._drop(item)

    def _drop(self, item: WorkItem) -> bool:
        """Take a still-queued request out; False when an instance took it first."""
        with self._executor.locked():
            if item.state is not ItemState.QUEUED:
                return False
            self._executor.queues.drop(item)
        if item.timer is not None:
            item.timer.cancel()
        return True

    def _expire(self, item: WorkItem, delay: bool) -> None:
        if delay:
            with self._executor.locked():
                if item.state is ItemState.QUEUED:
                    self._executor.queues.delay(item)
                    self._executor.queued()
            return
        if self._drop(item) and not item.future.done():
            item.future.set_exception(
                UnavailableError(
                    f"Request timeout expired: request for model '{self._model}' waited in the queue"
                )
            )

    # --- delivery (event loop) ----------------------------------------------------------------------------

    def _deliver_finished(self) -> None:
        for execution in self._executor.collect():
            if not self._policy.preserve_ordering:
                self._deliver(execution)
                continue
            self._held[execution.sequence] = execution
            while (ready := self._held.pop(self._next_sequence, None)) is not None:
                self._next_sequence += 1
                self._deliver(ready)

    def _deliver(self, execution: Execution) -> None:
        batch, result = execution.batch, execution.result
        for item in batch:
            if item.timer is not None:
                item.timer.cancel()
            # A request taken from the middle of a queue stays there until it reaches the head:
            # drop its tensors now so they do not outlive the execution.
            item.inputs = {}
        if result is None:
            error = execution.error or InternalError(f"model '{self._model}' produced no result")
            for item in batch:
                if not item.future.done():
                    item.future.set_exception(error)
            return
        total = sum(item.batch_size for item in batch)
        self._stats.record_execution(total, result.input_ns, result.infer_ns, result.output_ns)
        for item, outputs in zip(batch, result.outputs, strict=True):
            if item.future.done():  # cancelled by its caller while executing
                continue
            if isinstance(outputs, Exception):
                item.future.set_exception(outputs)
                continue
            timing = RequestTiming(
                queue_ns=max(0, result.started_ns - item.enqueued_ns),
                compute_input_ns=result.input_ns,
                compute_infer_ns=result.infer_ns,
                compute_output_ns=result.output_ns,
                execution=execution.sequence,
                execution_batch_size=total,
            )
            item.future.set_result((outputs, timing))

    # --- shutdown (event loop) ----------------------------------------------------------------------------

    async def close(self, timeout_s: float) -> None:
        """Stop intake, finish what is queued and executing, then fail stragglers after ``timeout_s``."""
        self._closing = True
        self._executor.close()
        if not self._workers:
            self._fail_queued()
            return
        _, running = await asyncio.wait(self._workers, timeout=timeout_s)
        self._deliver_finished()  # what finished after the last wake-up was scheduled
        if running:
            # The instances end after the batch they are running; nobody waits for it any more.
            self._fail_queued()
            for item in self._executor.running():
                if not item.future.done():
                    item.future.set_exception(UnavailableError(f"model '{self._model}' was unloaded"))

    def _fail_queued(self) -> None:
        with self._executor.locked():
            queued = list(self._executor.queues)
            for item in queued:
                self._executor.queues.drop(item)
        for item in queued:
            if item.timer is not None:
                item.timer.cancel()
            if not item.future.done():
                item.future.set_exception(UnavailableError(f"model '{self._model}' was unloaded"))
