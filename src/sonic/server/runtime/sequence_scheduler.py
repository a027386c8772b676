"""The sequence batcher: stateful models get each sequence's requests in order, with control inputs.

The rules (admission, slots, batch choice, control and state tensors) are the pure functions of
:mod:`.sequences`; this class applies them on the event loop. An execution is handed to the chosen
instance's own thread (merge, run, split as for every batch) and its end comes back as a callback
on the loop, which stores each sequence's implicit state, answers the requests, and starts the next
batch. Idle sequences are released by one timer set for the earliest possible expiry.
"""

from __future__ import annotations

import asyncio
import dataclasses
import functools
import time
from collections.abc import Sequence as Seq

import numpy as np

from sonic.protocol.errors import InternalError, SonicError, UnavailableError
from sonic.server.metrics.stats import ModelStats, RequestTiming
from sonic.server.runtime.executor import ModelInstance
from sonic.server.runtime.rate_limiter import call_limited, no_active_instance
from sonic.server.runtime.sequences import (
    Flags,
    Sequence,
    SequencePolicy,
    SequenceTable,
    choose_sequences,
    control_tensors,
    state_tensors,
)
from sonic.server.runtime.tensors import BatchResult, run_batch
from sonic.server.work import ItemOutputs, ItemState, WorkItem

# One position of an execution: the sequence, its request and flags (None: an empty direct slot).
Position = tuple[Sequence, WorkItem, Flags] | None


class SequenceScheduler:
    """Feeds a stateful model version's instances from its live sequences; create it on the event loop."""

    def __init__(
        self,
        *,
        model_name: str,
        policy: SequencePolicy,
        instances: Seq[ModelInstance],
        output_names: Seq[str],
        stats: ModelStats,
    ) -> None:
        self._model = model_name
        self._policy = policy
        self._instances = [instance for instance in instances if not instance.passive]
        self._output_names = tuple(dict.fromkeys((*output_names, *policy.state_outputs)))
        # A state output the configuration also lists as an output is the client's too (Triton's rule).
        self._hidden = tuple(name for name in policy.state_outputs if name not in output_names)
        self._stats = stats
        self._table = SequenceTable(policy, len(self._instances))
        self._loop = asyncio.get_running_loop()
        self._idle = list(range(len(self._instances)))  # instances with no execution running
        self._running: set[asyncio.Future[BatchResult]] = set()
        self._wake: asyncio.TimerHandle | None = None  # oldest: a batch's queue delay ends
        self._expiry: asyncio.TimerHandle | None = None
        self._closing = False

    def start(self) -> None:
        """Nothing to start: executions are handed to the instance threads one by one."""

    @property
    def queued(self) -> int:
        return sum(len(s.pending) for s in self._table.sequences.values())

    async def submit(self, item: WorkItem) -> tuple[ItemOutputs, RequestTiming]:
        if self._closing:
            raise UnavailableError(f"model '{self._model}' is unloading and accepts no new requests")
        if not self._instances:
            raise UnavailableError(no_active_instance(self._model))
        flags = Flags.from_parameters(self._model, item.parameters)
        item.enqueued_ns = time.perf_counter_ns()
        sequence = self._table.admit(item, flags, item.enqueued_ns)
        item.state = ItemState.QUEUED
        self._pump()
        try:
            return await item.future
        finally:
            if item.state is ItemState.QUEUED:  # the caller went away before it ran
                item.state = ItemState.DROPPED
                self._table.withdraw(sequence, item)

    # --- batch formation (event loop) ---------------------------------------------------------------------

    def _pump(self) -> None:
        now = time.perf_counter_ns()
        for instance in list(self._idle):
            positions, deadline = choose_sequences(self._table, instance, now)
            if not positions:
                if deadline is not None:
                    self._wake_at(deadline)
                if not self._policy.direct:
                    break  # oldest: the other idle instances would choose the same nothing
                continue
            self._idle.remove(instance)
            self._execute(instance, positions)
        self._arm_expiry()

    def _wake_at(self, deadline_ns: int) -> None:
        if self._wake is not None:
            self._wake.cancel()
        delay = max(0.0, (deadline_ns - time.perf_counter_ns()) / 1e9)
        self._wake = self._loop.call_later(delay, self._pump)

    def _execute(self, instance: int, chosen: list[Sequence | None]) -> None:
        batched = self._policy.max_batch_size > 0
        positions: list[Position] = []
        for sequence in chosen:
            if sequence is None:
                positions.append(None)
                continue
            item, flags = sequence.pending.popleft()
            item.state = ItemState.TAKEN
            sequence.running = True
            positions.append((sequence, item, flags))
        template = next(p[1] for p in positions if p is not None)
        items = []
        for position in positions:
            if position is None:  # an empty slot: zeros shaped like a real request, READY false
                inputs = {name: np.zeros_like(array) for name, array in template.inputs.items()}
                inputs |= control_tensors(self._policy, None, batched)
                inputs |= state_tensors(self._policy, None, None, batched)
                items.append(
                    dataclasses.replace(template, inputs=inputs, output_names=None, output_buffers=None)
                )
                continue
            sequence, item, flags = position
            inputs = {**item.inputs}
            inputs |= control_tensors(self._policy, flags, batched)
            inputs |= state_tensors(self._policy, sequence, flags, batched)
            items.append(dataclasses.replace(item, inputs=inputs, output_names=None, output_buffers=None))
        owner = self._instances[instance]
        future = owner.thread.run(
            call_limited,
            owner.limiter,
            owner,
            run_batch,
            self._model,
            owner.backend,
            items,
            self._output_names,
            batched,
        )
        self._running.add(future)
        future.add_done_callback(functools.partial(self._finished, instance, positions))

    # --- delivery (event loop) ----------------------------------------------------------------------------

    def _finished(
        self, instance: int, positions: list[Position], future: asyncio.Future[BatchResult]
    ) -> None:
        self._running.discard(future)
        self._idle.append(instance)
        now = time.perf_counter_ns()
        result: BatchResult | None = None
        error: SonicError | None = None
        if future.cancelled():
            error = UnavailableError(f"model '{self._model}' was unloaded")
        elif (exc := future.exception()) is not None:
            error = (
                exc
                if isinstance(exc, SonicError)
                else InternalError(f"model '{self._model}' failed: {exc!r}")
            )
        else:
            result = future.result()
            self._stats.record_execution(len(positions), result.input_ns, result.infer_ns, result.output_ns)
        for index, position in enumerate(positions):
            if position is None:
                continue
            sequence, item, flags = position
            outcome: ItemOutputs | SonicError = error if result is None else result.outputs[index]  # type: ignore[assignment]
            self._answer(sequence, item, outcome, result)
            self._table.finished(sequence, flags.end, now)
        if not self._closing:
            self._pump()

    def _answer(
        self,
        sequence: Sequence,
        item: WorkItem,
        outcome: ItemOutputs | SonicError,
        result: BatchResult | None,
    ) -> None:
        item.inputs = {}
        if isinstance(outcome, SonicError) or result is None:
            if not item.future.done():
                item.future.set_exception(outcome)  # type: ignore[arg-type]
            return
        batched = self._policy.max_batch_size > 0
        for name in self._policy.state_outputs:
            value = outcome[name]
            sequence.state[name] = np.array(value[0] if batched else value)  # a copy: the batch is freed
        outputs = {name: array for name, array in outcome.items() if name not in self._hidden}
        if not item.future.done():
            timing = RequestTiming(
                queue_ns=max(0, result.started_ns - item.enqueued_ns),
                compute_input_ns=result.input_ns,
                compute_infer_ns=result.infer_ns,
                compute_output_ns=result.output_ns,
            )
            item.future.set_result((outputs, timing))

    # --- idle sequences -----------------------------------------------------------------------------------

    def _arm_expiry(self) -> None:
        idle = [s.last_ns for s in self._table.sequences.values() if s.idle]
        if self._expiry is not None or not idle:
            return  # a busy sequence is looked at again when its request finishes
        earliest = min(idle) + self._policy.idle_ns
        delay = max(0.0, (earliest - time.perf_counter_ns()) / 1e9)
        self._expiry = self._loop.call_later(delay, self._expire)

    def _expire(self) -> None:
        self._expiry = None
        if self._table.expire(time.perf_counter_ns()):
            self._pump()  # freed direct slots may start waiting sequences
        else:
            self._arm_expiry()

    # --- shutdown (event loop) ----------------------------------------------------------------------------

    async def close(self, timeout_s: float) -> None:
        """Stop intake, fail what is queued, let running executions finish (up to ``timeout_s``)."""
        self._closing = True
        for handle in (self._wake, self._expiry):
            if handle is not None:
                handle.cancel()
        for sequence in list(self._table.sequences.values()):
            while sequence.pending:
                item, _ = sequence.pending.popleft()
                item.state = ItemState.DROPPED
                if not item.future.done():
                    item.future.set_exception(UnavailableError(f"model '{self._model}' was unloaded"))
        if self._running:
            await asyncio.wait(list(self._running), timeout=timeout_s)
