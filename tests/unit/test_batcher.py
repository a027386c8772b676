"""The scheduler with a real in-process backend whose execution a test can hold and release."""

from __future__ import annotations

import asyncio
import threading
from collections.abc import Mapping, Sequence
from typing import Any

import numpy as np
import numpy.typing as npt
import pytest

from sonic.protocol.errors import InternalError, InvalidArgumentError, SonicError, UnavailableError
from sonic.server.backends.base import Backend, Batch
from sonic.server.metrics.stats import ModelStats
from sonic.server.models.instance_thread import InstanceThread
from sonic.server.runtime.executor import ModelInstance
from sonic.server.runtime.policy import BatchPolicy, QueuePolicy
from sonic.server.runtime.scheduler import Scheduler
from sonic.server.work import WorkItem

pytestmark = pytest.mark.unit


class GatedDoubler(Backend):
    """Doubles its input; each execution waits until the test opens the gate."""

    name = "gated"
    default_filename = "none"

    def __init__(self, anyone_started: threading.Event | None = None) -> None:
        self.gate = threading.Event()
        self.gate.set()
        self.started = threading.Event()
        self.anyone_started = anyone_started or threading.Event()  # shared by the instances of a test
        self.second_started = threading.Event()
        self.batches: list[list[float]] = []  # first value of each merged row, per execution

    def execute(
        self, inputs: Mapping[str, npt.NDArray[Any]], output_names: Sequence[str]
    ) -> dict[str, npt.NDArray[Any]]:
        if self.started.is_set():
            self.second_started.set()
        self.started.set()
        self.anyone_started.set()
        self.gate.wait(timeout=30)
        self.batches.append([float(row[0]) for row in inputs["x"]])
        return {"y": inputs["x"] * 2}


def _scheduler(policy: BatchPolicy, instances: int = 1) -> tuple[Scheduler, list[GatedDoubler]]:
    anyone_started = threading.Event()
    backends = [GatedDoubler(anyone_started) for _ in range(instances)]
    scheduler = Scheduler(
        model_name="m",
        policy=policy,
        instances=[ModelInstance(f"m_{i}", b, InstanceThread(f"t_{i}")) for i, b in enumerate(backends)],
        output_names=["y"],
        stats=ModelStats(),
    )
    scheduler.start()
    return scheduler, backends


def _item(
    value: float,
    rows: int = 1,
    width: int = 2,
    priority: int = 0,
    timeout_us: int = 0,
    parameters: dict[str, object] | None = None,
) -> WorkItem:
    x = np.full((rows, width), value, dtype=np.float32)
    return WorkItem(
        inputs={"x": x},
        batch_size=rows,
        shape_key=(("x", x.shape[1:]),),
        future=asyncio.get_running_loop().create_future(),
        priority=priority,
        timeout_us=timeout_us,
        request_id=f"r{value:g}",
        parameters=parameters or {},
    )


DYNAMIC = BatchPolicy(max_batch_size=8, dynamic=True)


async def _hold_first(scheduler: Scheduler, backend: GatedDoubler) -> asyncio.Task[Any]:
    """Occupy the only instance with one request held at the gate; return its task."""
    backend.gate.clear()
    first = asyncio.create_task(scheduler.submit(_item(-1)))
    assert await asyncio.to_thread(backend.started.wait, 10)
    return first


async def _until_queued(scheduler: Scheduler, count: int) -> None:
    """Let the submit tasks just created run up to their enqueue (their first step: one loop turn)."""
    await asyncio.sleep(0)
    assert scheduler.queued == count


async def test_merge_and_split() -> None:
    scheduler, (backend,) = _scheduler(DYNAMIC)
    first = await _hold_first(scheduler, backend)
    tasks = [asyncio.create_task(scheduler.submit(_item(v, rows=2))) for v in (1, 2, 3)]
    await _until_queued(scheduler, 3)
    backend.gate.set()
    results = await asyncio.gather(first, *tasks)
    assert backend.batches == [[-1], [1, 1, 2, 2, 3, 3]]
    for value, (outputs, timing) in zip((1, 2, 3), results[1:], strict=True):
        np.testing.assert_array_equal(outputs["y"], np.full((2, 2), value * 2, dtype=np.float32))
        assert timing.queue_ns > 0
    await scheduler.close(5)


async def test_max_batch_size_never_splits_a_request() -> None:
    scheduler, (backend,) = _scheduler(DYNAMIC)
    first = await _hold_first(scheduler, backend)
    tasks = [asyncio.create_task(scheduler.submit(_item(v, rows=3))) for v in range(5)]
    await _until_queued(scheduler, 5)
    backend.gate.set()
    await asyncio.gather(first, *tasks)
    assert [len(b) for b in backend.batches[1:]] == [6, 6, 3]  # 3+3 fit in 8, a third would not
    await scheduler.close(5)


async def test_priorities() -> None:
    policy = BatchPolicy(
        max_batch_size=1, dynamic=True, default_priority_level=2, queue_policies=(QueuePolicy(),) * 2
    )
    scheduler, (backend,) = _scheduler(policy)
    first = await _hold_first(scheduler, backend)
    low = [asyncio.create_task(scheduler.submit(_item(v, priority=2))) for v in (10, 11)]
    high = asyncio.create_task(scheduler.submit(_item(99, priority=1)))
    await _until_queued(scheduler, 3)
    backend.gate.set()
    await asyncio.gather(first, high, *low)
    assert backend.batches == [[-1], [99], [10], [11]]
    await scheduler.close(5)


async def test_queue_limit() -> None:
    scheduler, (backend,) = _scheduler(
        BatchPolicy(max_batch_size=8, dynamic=True, queue_policies=(QueuePolicy(max_queue_size=2),))
    )
    first = await _hold_first(scheduler, backend)
    queued = [asyncio.create_task(scheduler.submit(_item(v))) for v in (1, 2)]
    await _until_queued(scheduler, 2)
    with pytest.raises(UnavailableError, match="Exceeds maximum queue size"):
        await scheduler.submit(_item(3))
    backend.gate.set()
    await asyncio.gather(first, *queued)
    await scheduler.close(5)


async def test_timeout_rejects_and_override_only_shortens() -> None:
    policy = BatchPolicy(
        max_batch_size=8,
        dynamic=True,
        queue_policies=(QueuePolicy(default_timeout_us=5_000_000, allow_timeout_override=True),),
    )
    scheduler, (backend,) = _scheduler(policy)
    first = await _hold_first(scheduler, backend)
    with pytest.raises(UnavailableError, match="timeout"):
        await scheduler.submit(_item(1, timeout_us=2_000))
    backend.gate.set()
    await first
    assert backend.batches == [[-1]]  # the timed-out request never ran
    await scheduler.close(5)


async def test_delay_timeout_moves_request_behind_others() -> None:
    policy = BatchPolicy(
        max_batch_size=1,
        dynamic=True,
        queue_policies=(
            QueuePolicy(default_timeout_us=10_000_000, delay_on_timeout=True, allow_timeout_override=True),
        ),
    )
    scheduler, (backend,) = _scheduler(policy)
    first = await _hold_first(scheduler, backend)
    delayed = asyncio.create_task(scheduler.submit(_item(1, timeout_us=1_000)))  # shortens the 10 s default
    await _until_queued(scheduler, 1)
    # Not a wait for time to pass: the loop runs timers in deadline order, so once this later
    # timer fires, the request's 1 ms timeout has fired and moved it behind the delayed line.
    await asyncio.sleep(0.002)
    fresh = asyncio.create_task(scheduler.submit(_item(2)))
    await _until_queued(scheduler, 2)
    backend.gate.set()
    await asyncio.gather(first, delayed, fresh)
    assert backend.batches == [[-1], [2], [1]]
    await scheduler.close(5)


async def test_queue_delay_gathers_a_batch() -> None:
    scheduler, (backend,) = _scheduler(
        BatchPolicy(max_batch_size=8, dynamic=True, max_queue_delay_us=200_000)
    )
    # The idle instance wakes at the first request and, the batch not being full, waits out the delay
    # instead of running it alone; the other two arrive meanwhile.
    await asyncio.gather(*(scheduler.submit(_item(value)) for value in (1, 2, 3)))
    assert backend.batches == [[1, 2, 3]]
    await scheduler.close(5)


async def test_preferred_size_dispatches_without_waiting_for_the_delay() -> None:
    policy = BatchPolicy(
        max_batch_size=8, dynamic=True, preferred_batch_sizes=(4,), max_queue_delay_us=60_000_000
    )
    scheduler, (backend,) = _scheduler(policy)
    tasks = [asyncio.create_task(scheduler.submit(_item(v))) for v in range(4)]
    await asyncio.wait_for(asyncio.gather(*tasks), timeout=10)
    assert backend.batches == [[0, 1, 2, 3]]
    await scheduler.close(5)


async def test_requests_merge_only_with_their_own_shape() -> None:
    scheduler, (backend,) = _scheduler(DYNAMIC)
    first = await _hold_first(scheduler, backend)
    tasks = [asyncio.create_task(scheduler.submit(_item(v, width=2 + v % 2))) for v in range(4)]
    await _until_queued(scheduler, 4)
    backend.gate.set()
    results = await asyncio.gather(first, *tasks)
    # Shapes alternate on arrival; each batch is led by the oldest request and takes its own shape only.
    assert backend.batches[1:] == [[0, 2], [1, 3]]
    for value, (outputs, _) in zip(range(4), results[1:], strict=True):
        np.testing.assert_array_equal(outputs["y"], np.full((1, 2 + value % 2), value * 2, dtype=np.float32))
    await scheduler.close(5)


async def test_preserve_ordering_keeps_first_in_first_out_across_shapes() -> None:
    scheduler, (backend,) = _scheduler(BatchPolicy(max_batch_size=8, dynamic=True, preserve_ordering=True))
    first = await _hold_first(scheduler, backend)
    tasks = [asyncio.create_task(scheduler.submit(_item(v, width=2 + v % 2))) for v in range(4)]
    await _until_queued(scheduler, 4)
    backend.gate.set()
    await asyncio.gather(first, *tasks)
    assert backend.batches[1:] == [[0], [1], [2], [3]]
    await scheduler.close(5)


async def test_no_dynamic_batching_runs_requests_one_by_one() -> None:
    scheduler, (backend,) = _scheduler(BatchPolicy(max_batch_size=8))
    first = await _hold_first(scheduler, backend)
    tasks = [asyncio.create_task(scheduler.submit(_item(v))) for v in (1, 2)]
    await _until_queued(scheduler, 2)
    backend.gate.set()
    await asyncio.gather(first, *tasks)
    assert backend.batches == [[-1], [1], [2]]
    await scheduler.close(5)


async def test_preserve_ordering_across_instances() -> None:
    scheduler, backends = _scheduler(
        BatchPolicy(max_batch_size=1, dynamic=True, preserve_ordering=True), instances=2
    )
    for backend in backends:
        backend.gate.clear()
    done: list[int] = []

    async def submit(value: int) -> None:
        await scheduler.submit(_item(value))
        done.append(value)

    slow = asyncio.create_task(submit(1))
    assert await asyncio.to_thread(backends[0].anyone_started.wait, 10)
    held, free = backends if backends[0].started.is_set() else backends[::-1]
    free.gate.set()  # the other instance runs requests 2 and 3 while request 1 is held
    fast = [asyncio.create_task(submit(value)) for value in (2, 3)]
    # The free instance starts request 3 only after handing request 2 back to the loop, and this
    # wait ends with a loop callback queued after that hand-back: request 2 is back, and held.
    assert await asyncio.to_thread(free.second_started.wait, 10)
    assert done == []
    held.gate.set()
    await asyncio.gather(slow, *fast)
    assert done == [1, 2, 3]
    await scheduler.close(5)


async def test_cancelled_request_is_dropped_from_the_queue() -> None:
    scheduler, (backend,) = _scheduler(DYNAMIC)
    first = await _hold_first(scheduler, backend)
    cancelled = asyncio.create_task(scheduler.submit(_item(7)))
    kept = asyncio.create_task(scheduler.submit(_item(8)))
    await _until_queued(scheduler, 2)
    cancelled.cancel()
    await asyncio.sleep(0)
    assert scheduler.queued == 1
    backend.gate.set()
    await asyncio.gather(first, kept)
    assert backend.batches == [[-1], [8]]
    await scheduler.close(5)


async def test_close_fails_nothing_that_was_queued() -> None:
    scheduler, (backend,) = _scheduler(DYNAMIC)
    first = await _hold_first(scheduler, backend)
    queued = asyncio.create_task(scheduler.submit(_item(1)))
    await _until_queued(scheduler, 1)
    closing = asyncio.create_task(scheduler.close(10))
    await asyncio.sleep(0)
    with pytest.raises(UnavailableError, match="unloading"):
        await scheduler.submit(_item(2))
    backend.gate.set()
    await asyncio.gather(first, queued, closing)
    assert backend.batches == [[-1], [1]]


class ContextRecorder(GatedDoubler):
    """Sees each merged batch with its requests: what a backend needing per-request context gets."""

    def __init__(self) -> None:
        super().__init__()
        self.seen: list[Batch] = []

    def execute_batch(self, batch: Batch) -> dict[str, npt.NDArray[Any]]:
        self.started.set()
        self.gate.wait(timeout=30)
        self.seen.append(batch)
        # Each request's rows of the merged input scaled by its own parameter: context per request.
        scales = [float(str(r.parameters.get("scale", 1))) for r in batch.requests]
        x = batch.inputs["x"]
        return {
            "y": np.concatenate([x[rows] * scale for rows, scale in zip(batch.rows, scales, strict=True)])
        }


async def test_backend_sees_the_requests_of_a_merged_batch() -> None:
    backend = ContextRecorder()
    scheduler = Scheduler(
        model_name="m",
        policy=DYNAMIC,
        instances=[ModelInstance("m_0", backend, InstanceThread("t_0"))],
        output_names=["y"],
        stats=ModelStats(),
    )
    scheduler.start()
    first = await _hold_first(scheduler, backend)
    tasks = [
        asyncio.create_task(scheduler.submit(_item(v, rows=v, parameters={"scale": 10 * v}))) for v in (1, 2)
    ]
    await _until_queued(scheduler, 2)
    backend.gate.set()
    results = await asyncio.gather(*tasks)
    await first
    merged = backend.seen[-1]
    assert [r.request_id for r in merged.requests] == ["r1", "r2"]
    assert [dict(r.parameters) for r in merged.requests] == [{"scale": 10}, {"scale": 20}]
    assert merged.rows == [slice(0, 1), slice(1, 3)]
    assert merged.inputs["x"].shape == (3, 2)
    for value, (outputs, _) in zip((1, 2), results, strict=True):
        np.testing.assert_array_equal(outputs["y"], np.full((value, 2), 10 * value * value, dtype=np.float32))
    await scheduler.close(5)


class Failing(GatedDoubler):
    """Raises what it was given, from the instance's thread."""

    def __init__(self, error: Exception) -> None:
        super().__init__()
        self.error = error

    def execute(
        self, inputs: Mapping[str, npt.NDArray[Any]], output_names: Sequence[str]
    ) -> dict[str, npt.NDArray[Any]]:
        raise self.error


@pytest.mark.parametrize(
    ("error", "expected", "message"),
    [
        (RuntimeError("boom"), InternalError, r"^model 'm' instance m_0 failed: RuntimeError\('boom'\)$"),
        (InvalidArgumentError("bad input"), InvalidArgumentError, r"^bad input$"),
    ],
)
async def test_a_backend_failure_fails_its_batch_with_its_error(
    error: Exception, expected: type[SonicError], message: str
) -> None:
    """Ours as raised; anything else as INTERNAL naming the instance: the failure path of the executor,
    which is compiled (both modes run this file)."""
    scheduler = Scheduler(
        model_name="m",
        policy=DYNAMIC,
        instances=[ModelInstance("m_0", Failing(error), InstanceThread("t_0"))],
        output_names=["y"],
        stats=ModelStats(),
    )
    scheduler.start()
    with pytest.raises(expected, match=message):
        await scheduler.submit(_item(1))
    await scheduler.close(5)
