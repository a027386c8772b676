"""Request scheduling: the dynamic batcher and the default (one request per execution) scheduler.

Event-driven: the scheduler task sleeps on an idle model instance, then on the arrival of requests
or the queue-delay deadline of the oldest one; nothing polls. Merging, execution and splitting run
in the instance's own thread so the event loop only moves references.
"""

from __future__ import annotations

import asyncio
import contextlib
import enum
import time
from collections import deque
from collections.abc import Iterator, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

import numpy as np
import numpy.typing as npt
from tritonclient.grpc import model_config_pb2

from sonic.protocol.errors import InternalError, SonicError, UnavailableError
from sonic.server.backends.base import Backend, Request, RequestBackend
from sonic.server.instance_thread import InstanceThread
from sonic.server.stats import ModelStats, RequestTiming

ItemOutputs = dict[str, npt.NDArray[Any]]


@dataclass(frozen=True)
class QueuePolicy:
    max_queue_size: int = 0  # 0: unbounded
    default_timeout_us: int = 0  # 0: no timeout
    allow_timeout_override: bool = False
    delay_on_timeout: bool = False  # Triton's timeout_action DELAY; else REJECT

    @classmethod
    def from_proto(cls, proto: model_config_pb2.ModelQueuePolicy) -> QueuePolicy:
        return cls(
            max_queue_size=int(proto.max_queue_size),
            default_timeout_us=int(proto.default_timeout_microseconds),
            allow_timeout_override=bool(proto.allow_timeout_override),
            delay_on_timeout=proto.timeout_action == model_config_pb2.ModelQueuePolicy.DELAY,
        )


@dataclass(frozen=True)
class BatchPolicy:
    max_batch_size: int  # 0: the model takes no batch dimension
    dynamic: bool = False
    preferred_batch_sizes: tuple[int, ...] = ()
    max_queue_delay_us: int = 0
    preserve_ordering: bool = False
    default_priority_level: int = 1
    queue_policies: tuple[QueuePolicy, ...] = (QueuePolicy(),)  # index: priority level - 1

    @classmethod
    def from_config(cls, config: model_config_pb2.ModelConfig) -> BatchPolicy:
        if not config.HasField("dynamic_batching"):
            return cls(max_batch_size=int(config.max_batch_size))
        batching = config.dynamic_batching
        levels = max(1, int(batching.priority_levels))
        default = QueuePolicy.from_proto(batching.default_queue_policy)
        policies = tuple(
            QueuePolicy.from_proto(batching.priority_queue_policy[level])
            if level in batching.priority_queue_policy
            else default
            for level in range(1, levels + 1)
        )
        return cls(
            max_batch_size=int(config.max_batch_size),
            dynamic=True,
            preferred_batch_sizes=tuple(sorted(int(s) for s in batching.preferred_batch_size)),
            max_queue_delay_us=int(batching.max_queue_delay_microseconds),
            preserve_ordering=bool(batching.preserve_ordering),
            default_priority_level=int(batching.default_priority_level) or levels // 2 + levels % 2,
            queue_policies=policies,
        )

    def level_for(self, priority: int) -> int:
        """Queue index for a request priority (0: default; 1 is the highest)."""
        if priority <= 0:
            return self.default_priority_level - 1
        return min(priority, len(self.queue_policies)) - 1


class _State(enum.Enum):
    QUEUED = 1
    TAKEN = 2
    DROPPED = 3


@dataclass(eq=False, slots=True)
class WorkItem:
    """One request waiting for, or taking part in, an execution."""

    inputs: dict[str, npt.NDArray[Any]]
    batch_size: int
    shape_key: tuple[object, ...]
    future: asyncio.Future[tuple[ItemOutputs, RequestTiming]]
    priority: int = 0
    timeout_us: int = 0
    request_id: str = ""
    output_names: tuple[str, ...] | None = None  # None: every output
    output_buffers: dict[str, npt.NDArray[Any]] | None = None  # shared memory to run into (alone only)
    parameters: Mapping[str, object] = field(default_factory=dict)  # the request's, for RequestBackends
    enqueued_ns: int = 0
    level: int = 0
    state: _State = _State.QUEUED
    timer: asyncio.TimerHandle | None = None


@dataclass(eq=False)
class ModelInstance:
    """A backend object and the single thread that owns it."""

    name: str
    backend: Backend
    thread: InstanceThread


@dataclass(eq=False)
class _Level:
    main: deque[WorkItem] = field(default_factory=deque)
    delayed: deque[WorkItem] = field(default_factory=deque)
    size: int = 0  # queued items (dropped ones may still sit in the deques)


@dataclass(slots=True)
class _BatchResult:
    outputs: list[ItemOutputs | SonicError]  # an error here fails that request only
    started_ns: int
    input_ns: int
    infer_ns: int
    output_ns: int


class Scheduler:
    """Queues requests for one model version and feeds them to its instances."""

    def __init__(
        self,
        *,
        model_name: str,
        policy: BatchPolicy,
        instances: Sequence[ModelInstance],
        output_names: Sequence[str],
        stats: ModelStats,
    ) -> None:
        self._model = model_name
        self._policy = policy
        self._instances = list(instances)
        self._output_names = list(output_names)
        self._stats = stats
        self._levels = [_Level() for _ in policy.queue_policies]
        self._wakeup = asyncio.Event()
        self._idle: asyncio.Queue[ModelInstance] = asyncio.Queue()
        for instance in self._instances:
            self._idle.put_nowait(instance)
        self._executions: set[asyncio.Task[None]] = set()
        self._last_delivery: asyncio.Future[None] | None = None
        self._closing = False
        self._loop_task: asyncio.Task[None] | None = None
        self._max_merge = policy.max_batch_size if policy.dynamic else 0
        self._largest_preferred = max(policy.preferred_batch_sizes, default=0)

    # --- intake -------------------------------------------------------------------------------------

    def start(self) -> None:
        self._loop_task = asyncio.get_running_loop().create_task(self._run(), name=f"scheduler:{self._model}")

    @property
    def queued(self) -> int:
        return sum(level.size for level in self._levels)

    async def submit(self, item: WorkItem) -> tuple[ItemOutputs, RequestTiming]:
        if self._closing:
            raise UnavailableError(f"model '{self._model}' is unloading and accepts no new requests")
        level_index = self._policy.level_for(item.priority)
        queue_policy = self._policy.queue_policies[level_index]
        level = self._levels[level_index]
        if queue_policy.max_queue_size and level.size >= queue_policy.max_queue_size:
            raise UnavailableError(
                f"Exceeds maximum queue size: model '{self._model}' already has {level.size} requests queued "
                f"at priority level {level_index + 1} (max_queue_size {queue_policy.max_queue_size})"
            )
        timeout_us = queue_policy.default_timeout_us
        if item.timeout_us and queue_policy.allow_timeout_override:
            # As in Triton, a request may shorten the default timeout but never lengthen it.
            timeout_us = min(item.timeout_us, timeout_us) if timeout_us else item.timeout_us
        item.level = level_index
        item.enqueued_ns = time.perf_counter_ns()
        level.main.append(item)
        level.size += 1
        if timeout_us:
            item.timer = asyncio.get_running_loop().call_later(
                timeout_us / 1e6, self._expire, item, queue_policy.delay_on_timeout
            )
        self._wakeup.set()
        try:
            return await item.future
        finally:
            if item.state is _State.QUEUED:  # the caller went away (cancelled): drop it from the queue
                self._drop(item)

    def _drop(self, item: WorkItem) -> None:
        item.state = _State.DROPPED
        item.inputs = {}
        self._levels[item.level].size -= 1
        if item.timer is not None:
            item.timer.cancel()

    def _expire(self, item: WorkItem, delay: bool) -> None:
        if item.state is not _State.QUEUED:
            return
        if delay:
            level = self._levels[item.level]
            level.main.remove(item)
            level.delayed.append(item)
            return
        self._drop(item)
        if not item.future.done():
            item.future.set_exception(
                UnavailableError(
                    f"Request timeout expired: request for model '{self._model}' waited in the queue"
                )
            )

    # --- batch formation ------------------------------------------------------------------------------

    def _queued_items(self) -> Iterator[WorkItem]:
        for level in self._levels:
            for queue in (level.main, level.delayed):
                while queue and queue[0].state is not _State.QUEUED:
                    queue.popleft()
                for item in queue:
                    if item.state is _State.QUEUED:
                        yield item

    def _form_batch(self, now_ns: int) -> tuple[list[WorkItem] | None, int | None]:
        """The batch to run now, or (None, deadline) to wait until, or (None, None) to wait for requests."""
        selected: list[WorkItem] = []
        total = 0
        full = False
        preferred_prefix = 0
        for item in self._queued_items():
            if not self._max_merge:
                selected.append(item)
                full = True
                break
            if selected and item.shape_key != selected[0].shape_key:
                if self._policy.preserve_ordering:
                    full = True
                    break
                # Another shape waits for a later batch; the oldest request still leads this one, so
                # nothing starves, and mixed-shape traffic (variable multiplicities) still merges.
                continue
            if selected and total + item.batch_size > self._max_merge:
                full = True
                break
            selected.append(item)
            total += item.batch_size
            if total in self._policy.preferred_batch_sizes:
                preferred_prefix = len(selected)
            if total >= self._max_merge or (self._largest_preferred and total >= self._largest_preferred):
                full = True
                break
        if not selected:
            return None, None
        delay_ns = self._policy.max_queue_delay_us * 1000
        if not full and delay_ns:
            deadline = min(item.enqueued_ns for item in selected) + delay_ns
            if now_ns < deadline:
                return None, deadline
            if preferred_prefix:
                selected = selected[:preferred_prefix]
        for item in selected:
            item.state = _State.TAKEN
            self._levels[item.level].size -= 1
            if item.timer is not None:
                item.timer.cancel()
        return selected, None

    async def _next_batch(self) -> list[WorkItem] | None:
        while True:
            batch, deadline_ns = self._form_batch(time.perf_counter_ns())
            if batch is not None:
                return batch
            if self._closing and deadline_ns is None:
                return None
            self._wakeup.clear()
            timeout_s = (
                None if deadline_ns is None else max(0.0, (deadline_ns - time.perf_counter_ns()) / 1e9)
            )
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(self._wakeup.wait(), timeout_s)

    async def _run(self) -> None:
        loop = asyncio.get_running_loop()
        while True:
            instance = await self._idle.get()
            batch = await self._next_batch()
            if batch is None:
                self._idle.put_nowait(instance)
                return
            task = loop.create_task(self._execute(instance, batch))
            self._executions.add(task)
            task.add_done_callback(self._executions.discard)

    # --- execution ------------------------------------------------------------------------------------

    async def _execute(self, instance: ModelInstance, batch: list[WorkItem]) -> None:
        loop = asyncio.get_running_loop()
        previous = self._last_delivery if self._policy.preserve_ordering else None
        delivered: asyncio.Future[None] | None = None
        if self._policy.preserve_ordering:
            delivered = self._last_delivery = loop.create_future()
        result: _BatchResult | None = None
        error: SonicError | None = None
        try:
            result = await instance.thread.run(self._run_batch, instance.backend, batch)
        except SonicError as exc:
            error = exc
        except Exception as exc:  # noqa: BLE001  (any backend failure fails this batch only)
            error = InternalError(f"model '{self._model}' instance {instance.name} failed: {exc!r}")
        finally:
            self._idle.put_nowait(instance)
        if previous is not None:
            await asyncio.shield(previous)
        try:
            self._deliver(batch, result, error)
        finally:
            for item in batch:
                # A request taken from the middle of a queue stays there until it reaches the head:
                # drop its tensors now so they do not outlive the execution.
                item.inputs = {}
            if delivered is not None:
                delivered.set_result(None)

    def _deliver(self, batch: list[WorkItem], result: _BatchResult | None, error: SonicError | None) -> None:
        if result is None:
            for item in batch:
                if not item.future.done():
                    item.future.set_exception(
                        error or InternalError(f"model '{self._model}' produced no result")
                    )
            return
        total = sum(item.batch_size for item in batch)
        self._stats.record_execution(total, result.input_ns, result.infer_ns, result.output_ns)
        for item, outputs in zip(batch, result.outputs, strict=True):
            if item.future.done():  # cancelled by its caller while executing
                continue
            if isinstance(outputs, SonicError):
                item.future.set_exception(outputs)
                continue
            timing = RequestTiming(
                queue_ns=max(0, result.started_ns - item.enqueued_ns),
                compute_input_ns=result.input_ns,
                compute_infer_ns=result.infer_ns,
                compute_output_ns=result.output_ns,
            )
            item.future.set_result((outputs, timing))

    def _run_requests(self, backend: RequestBackend, batch: list[WorkItem]) -> _BatchResult:
        """Hand the batch's requests to the backend as a list, unmerged; runs in the instance's thread."""
        started = time.perf_counter_ns()
        requests = [
            Request(
                item.inputs, item.output_names or tuple(self._output_names), item.request_id, item.parameters
            )
            for item in batch
        ]
        results = backend.execute_requests(requests)
        executed = time.perf_counter_ns()
        if len(results) != len(batch):
            raise InternalError(
                f"model '{self._model}' returned {len(results)} responses for {len(batch)} requests"
            )
        outputs: list[ItemOutputs | SonicError] = []
        for request, result in zip(requests, results, strict=True):
            if isinstance(result, SonicError):
                outputs.append(result)
            elif isinstance(result, Exception):
                outputs.append(InternalError(f"model '{self._model}': {result}"))
            elif missing := [name for name in request.output_names if name not in result]:
                outputs.append(
                    InternalError(f"model '{self._model}' did not produce output(s) {', '.join(missing)}")
                )
            else:
                outputs.append(result)
        return _BatchResult(outputs, started, 0, executed - started, 0)

    def _run_batch(self, backend: Backend, batch: list[WorkItem]) -> _BatchResult:
        """Merge, execute and split; runs in the instance's thread."""
        if isinstance(backend, RequestBackend):
            return self._run_requests(backend, batch)
        started = time.perf_counter_ns()
        if len(batch) == 1:
            inputs = batch[0].inputs
        else:
            inputs = {name: np.concatenate([item.inputs[name] for item in batch]) for name in batch[0].inputs}
        merged = time.perf_counter_ns()
        buffers = batch[0].output_buffers
        if len(batch) == 1 and buffers:
            outputs = backend.execute_into(inputs, self._output_names, buffers)
        else:
            outputs = backend.execute(inputs, self._output_names)
        executed = time.perf_counter_ns()
        missing = [name for name in self._output_names if name not in outputs]
        if missing:
            raise InternalError(f"model '{self._model}' did not produce output(s) {', '.join(missing)}")
        split: list[ItemOutputs | SonicError]
        if self._policy.max_batch_size == 0:
            split = [outputs]
        else:
            total = sum(item.batch_size for item in batch)
            for name, array in outputs.items():
                if array.ndim == 0 or array.shape[0] != total:
                    raise InternalError(
                        f"model '{self._model}' output '{name}' has shape {list(array.shape)}, expected batch "
                        f"dimension {total} first"
                    )
            split = []
            offset = 0
            for item in batch:
                end = offset + item.batch_size
                split.append({name: array[offset:end] for name, array in outputs.items()})
                offset = end
        done = time.perf_counter_ns()
        return _BatchResult(split, started, merged - started, executed - merged, done - executed)

    # --- shutdown -------------------------------------------------------------------------------------

    async def close(self, timeout_s: float) -> None:
        """Stop intake, finish what is queued and executing, then fail stragglers after ``timeout_s``."""
        self._closing = True
        self._wakeup.set()
        pending = [t for t in (self._loop_task, *self._executions) if t is not None]
        if pending:
            _, still_running = await asyncio.wait(pending, timeout=timeout_s)
            for task in still_running:
                task.cancel()
            for item in list(self._queued_items()):
                self._drop(item)
                if not item.future.done():
                    item.future.set_exception(UnavailableError(f"model '{self._model}' was unloaded"))
            if still_running:
                await asyncio.wait(still_running)
            # Executions started by the loop after the first wait also have to finish.
            if self._executions:
                await asyncio.wait(list(self._executions), timeout=timeout_s)
