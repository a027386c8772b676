"""Batches of tiny models on the event loop (``--inline-execution-us``, issue 37 item 3).

The gate's rules by calling it; then the scheduler with in-process backends that record the thread
each execution ran on: tiny ones move to the loop, slow ones stay on their threads, one that turns
slow goes back at once and the loop keeps answering, and the batches and statistics are those of
the threads.
"""

from __future__ import annotations

import asyncio
import threading
import time
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

import numpy as np
import numpy.typing as npt
import pytest
from tests.unit.test_batcher import _item  # a request of rows of one value

from sonic.cli import serve
from sonic.cli.main import build_parser
from sonic.models.simple import IDENTITY_CONFIG, identity_model
from sonic.protocol.types import InferRequest, InputTensor
from sonic.server.backends.base import Backend
from sonic.server.config import ServerConfig
from sonic.server.metrics.stats import ModelStats
from sonic.server.models.instance_thread import InstanceThread
from sonic.server.models.manager import ModelManager
from sonic.server.runtime.executor import ModelInstance
from sonic.server.runtime.inline import DEFAULT_INLINE_EXECUTION_US, InlineGate, InlinePolicy, Place
from sonic.server.runtime.policy import BatchPolicy
from sonic.server.runtime.rate_limiter import CPU_DEVICE, InstanceLimits, RateLimiter
from sonic.server.runtime.scheduler import Scheduler

pytestmark = pytest.mark.unit

US = 1000  # ns

# --- the gate, by itself ------------------------------------------------------------------------------


def test_gate_promotes_after_a_window_of_fast_executions() -> None:
    gate = InlineGate(InlinePolicy(threshold_us=50, window=20))
    for _ in range(19):
        assert not gate.on_thread(10 * US, 10 * US)
    assert gate.on_thread(10 * US, 10 * US)
    assert gate.place is Place.LOOP


def test_gate_judges_the_95th_percentile_of_cpu_time() -> None:
    gate = InlineGate(InlinePolicy(threshold_us=50, window=20))
    # One execution in 20 above half the threshold: the 95th percentile is still within it.
    assert [gate.on_thread((30 if i == 0 else 10) * US, 10 * US) for i in range(20)][-1]
    gate = InlineGate(InlinePolicy(threshold_us=50, window=20))
    assert not any(gate.on_thread((30 if i % 20 < 2 else 10) * US, 10 * US) for i in range(40))
    assert gate.place is Place.THREADS


def test_gate_never_promotes_a_model_that_only_waits() -> None:
    """Little CPU but long wall times (a sleep, a device): no execution was fast, so it stays."""
    gate = InlineGate(InlinePolicy(threshold_us=50, window=4))
    assert not any(gate.on_thread(1 * US, 2_000 * US) for _ in range(40))


def test_gate_demotes_at_once_on_one_slow_execution_then_asks_for_more_windows() -> None:
    gate = InlineGate(InlinePolicy(threshold_us=50, window=40, slow_factor=4, stall_us=20_000))
    assert [gate.on_thread(1 * US, 1 * US) for _ in range(40)][-1]
    assert not gate.on_loop(190 * US, 190 * US)  # above the threshold, within slow_factor x threshold
    assert not gate.on_loop(10 * US, 5_000 * US)  # preempted in the middle: 10 µs of CPU
    assert gate.on_loop(201 * US, 201 * US)
    assert (gate.place, gate.demotions) == (Place.THREADS, 1)
    # Two fast windows in a row now, then four after the next demotion.
    assert not any(gate.on_thread(1 * US, 1 * US) for _ in range(79))
    assert gate.on_thread(1 * US, 1 * US)
    assert gate.on_loop(1 * US, 20_001 * US)  # little CPU, but it held the loop past stall_us
    assert not any(gate.on_thread(1 * US, 1 * US) for _ in range(159))
    assert gate.on_thread(1 * US, 1 * US)
    assert gate.demotions == 2


def test_gate_demotes_once_5_percent_of_a_window_took_over_the_threshold() -> None:
    gate = InlineGate(InlinePolicy(threshold_us=50, window=20))
    assert [gate.on_thread(1 * US, 1 * US) for _ in range(20)][-1]
    # One in 20 over the threshold, window after window: the 95th percentile is within it.
    for _ in range(3):
        assert not gate.on_loop(60 * US, 60 * US)
        assert not any(gate.on_loop(10 * US, 10 * US) for _ in range(19))
    assert not gate.on_loop(10 * US, 900 * US)  # preempted: its CPU time is what counts
    assert not gate.on_loop(60 * US, 60 * US)
    assert gate.on_loop(60 * US, 60 * US)  # a second one in the same window
    assert gate.place is Place.THREADS


@pytest.mark.parametrize(("given", "expected"), [((), DEFAULT_INLINE_EXECUTION_US), (("7",), 7), (("0",), 0)])
def test_serve_flag_reaches_the_config(tmp_path: Path, given: tuple[str, ...], expected: int) -> None:
    flag = ("--inline-execution-us", *given) if given else ()
    args = build_parser().parse_args(["serve", "--model-repository", str(tmp_path), "--gpus", "0", *flag])
    assert serve.config_from_args(args).inline_execution_us == expected


def test_policy_refuses_a_negative_threshold(tmp_path: Path) -> None:
    args = build_parser().parse_args(
        ["serve", "--model-repository", str(tmp_path), "--gpus", "0", "--inline-execution-us", "-1"]
    )
    with pytest.raises(ValueError, match="--inline-execution-us must be >= 0"):
        serve.config_from_args(args)
    with pytest.raises(ValueError, match="got -1"):
        InlinePolicy(threshold_us=-1)
    with pytest.raises(ValueError, match="--inline-execution-us must be >= 0"):
        ServerConfig(model_repositories=(Path(),), inline_execution_us=-5)


# --- the scheduler ------------------------------------------------------------------------------------


class Recorder(Backend):
    """Doubles its input and records, per execution, the thread it ran on and its first values.

    ``delay_s``: each execution waits this long; ``spin_s``: each execution computes this long (CPU
    time); ``hold``: the next execution waits for ``gate`` and says so in ``started``.
    """

    name = "recorder"
    default_filename = "none"

    def __init__(self, any_thread: bool = True, started: threading.Event | None = None) -> None:
        self.any_thread = any_thread
        self.threads: list[int] = []
        self.batches: list[list[float]] = []
        self.delay_s = 0.0
        self.spin_s = 0.0
        self.hold = False
        self.gate = threading.Event()
        self.started = started or threading.Event()  # may be shared by the instances of a test
        self._running = threading.Lock()
        self.overlapped = False  # an execution began while another of this backend object was running

    @property
    def runs_on_any_thread(self) -> bool:
        return self.any_thread

    def execute(
        self, inputs: Mapping[str, npt.NDArray[Any]], output_names: Sequence[str]
    ) -> dict[str, npt.NDArray[Any]]:
        if not self._running.acquire(blocking=False):
            self.overlapped = True
            self._running.acquire()
        try:
            return self._execute(inputs)
        finally:
            self._running.release()

    def _execute(self, inputs: Mapping[str, npt.NDArray[Any]]) -> dict[str, npt.NDArray[Any]]:
        self.threads.append(threading.get_ident())
        self.batches.append([float(row[0]) for row in inputs["x"]])
        if self.hold:
            self.started.set()
            self.gate.wait(timeout=10)
        if self.delay_s:
            threading.Event().wait(self.delay_s)  # the model's own time, not a synchronisation
        if self.spin_s:  # CPU time, whatever else runs on the machine
            end = time.thread_time() + self.spin_s
            while time.thread_time() < end:
                pass
        return {"y": inputs["x"] * 2}


DYNAMIC = BatchPolicy(max_batch_size=8, dynamic=True)
# Generous bounds: a tiny execution is µs, these tests' slow ones are tens of ms.
TINY = InlinePolicy(threshold_us=100_000, window=4)


def _scheduler(
    backends: Sequence[Recorder],
    inline: InlinePolicy | None,
    policy: BatchPolicy = DYNAMIC,
    stats: ModelStats | None = None,
    limiter: RateLimiter | None = None,
) -> Scheduler:
    instances = [ModelInstance(f"m_{i}", b, InstanceThread(f"t_{i}")) for i, b in enumerate(backends)]
    if limiter is not None:
        for instance in instances:
            limiter.register(instance, InstanceLimits((), 0, CPU_DEVICE))
            instance.limiter = limiter
    scheduler = Scheduler(
        model_name="m",
        policy=policy,
        instances=instances,
        output_names=["y"],
        stats=stats or ModelStats(),
        inline=inline,
    )
    scheduler.start()
    return scheduler


async def _one_by_one(scheduler: Scheduler, count: int, start: float = 0) -> None:
    for value in range(count):
        outputs, _ = await scheduler.submit(_item(start + value))
        np.testing.assert_array_equal(outputs["y"], np.full((1, 2), 2 * (start + value), np.float32))


async def test_tiny_model_runs_on_the_loop() -> None:
    backend = Recorder()
    scheduler = _scheduler([backend], TINY)
    await _one_by_one(scheduler, 10)
    loop_thread = threading.get_ident()
    # The first window ran on the instance thread, the rest on the loop.
    assert [t == loop_thread for t in backend.threads] == [False] * 4 + [True] * 6
    assert scheduler.executor.inline_executions == 6
    await scheduler.close(5)


async def test_zero_threshold_never_runs_on_the_loop() -> None:
    backend = Recorder()
    scheduler = _scheduler([backend], InlinePolicy(threshold_us=0, window=4))
    await _one_by_one(scheduler, 10)
    assert threading.get_ident() not in backend.threads
    assert scheduler.executor.gate is None
    await scheduler.close(5)


@pytest.mark.parametrize("why", ["waits", "computes"])
async def test_slow_model_keeps_its_threads(why: str) -> None:
    backend = Recorder()
    if why == "waits":
        backend.delay_s = 0.07  # little CPU, long wall time: a device or a lock
    else:
        backend.spin_s = 0.07  # CPU time above half the threshold
    scheduler = _scheduler([backend], TINY)
    await _one_by_one(scheduler, 12)
    assert threading.get_ident() not in backend.threads
    gate = scheduler.executor.gate
    assert gate is not None
    assert (gate.place, gate.promotions) == (Place.THREADS, 0)
    await scheduler.close(5)


async def test_backends_that_do_not_say_so_and_rate_limited_ones_keep_their_threads() -> None:
    bound = Recorder(any_thread=False)
    scheduler = _scheduler([bound], TINY)
    await _one_by_one(scheduler, 10)
    assert scheduler.executor.gate is None
    assert threading.get_ident() not in bound.threads
    await scheduler.close(5)
    limited = Recorder()
    scheduler = _scheduler([limited], TINY, limiter=RateLimiter())
    await _one_by_one(scheduler, 10)
    assert scheduler.executor.gate is None
    assert threading.get_ident() not in limited.threads
    await scheduler.close(5)


@pytest.mark.parametrize("why", ["computes", "waits"])
async def test_model_that_turns_slow_goes_back_to_its_threads_and_the_loop_keeps_answering(why: str) -> None:
    backend = Recorder()
    scheduler = _scheduler([backend], TINY)
    await _one_by_one(scheduler, 4)
    gate = scheduler.executor.gate
    assert gate is not None
    assert gate.place is Place.LOOP
    loop_thread = threading.get_ident()
    # One execution on the loop computing above 4 x 100 ms of CPU, or holding it as long: back at once.
    if why == "computes":
        backend.spin_s = 0.45
    else:
        backend.delay_s = 0.45
    await scheduler.submit(_item(100))
    assert backend.threads[-1] == loop_thread
    assert (gate.place, gate.demotions) == (Place.THREADS, 1)
    # The next slow execution runs on the instance thread, held there until the loop opens its gate:
    # were it on the loop, nothing could open it and it would end by its 10 s timeout instead.
    backend.spin_s = backend.delay_s = 0.0
    backend.hold = True
    slow = asyncio.create_task(scheduler.submit(_item(200)))
    assert await asyncio.to_thread(backend.started.wait, 10)
    # A concurrent health check while the model executes: answered by the loop within a bound.
    answered = asyncio.Event()
    asked = time.perf_counter()
    asyncio.get_running_loop().call_soon(answered.set)
    await asyncio.wait_for(answered.wait(), timeout=1.0)
    assert time.perf_counter() - asked < 1.0
    assert not slow.done()
    backend.gate.set()
    outputs, _ = await slow
    np.testing.assert_array_equal(outputs["y"], np.full((1, 2), 400, np.float32))
    assert backend.threads[-1] != loop_thread
    await scheduler.close(5)


async def test_queue_delay_on_the_loop() -> None:
    policy = BatchPolicy(max_batch_size=8, dynamic=True, max_queue_delay_us=20_000)
    backend = Recorder()
    scheduler = _scheduler([backend], TINY, policy=policy)
    await _one_by_one(scheduler, 4)
    assert scheduler.executor.gate is not None
    assert scheduler.executor.gate.place is Place.LOOP
    # Two requests a loop turn apart wait for the delay together, then run as one batch on the loop.
    first = asyncio.create_task(scheduler.submit(_item(10)))
    await asyncio.sleep(0)
    second = asyncio.create_task(scheduler.submit(_item(11)))
    await asyncio.gather(first, second)
    assert backend.batches[-1] == [10, 11]
    assert backend.threads[-1] == threading.get_ident()
    await scheduler.close(5)


# Rows, width and priority of a queued set: two shapes, two priority levels, sizes that do not tile 8.
QUEUED = [(1, 2, 0), (3, 2, 0), (2, 3, 0), (5, 2, 0), (1, 2, 1), (1, 3, 0), (4, 2, 0), (2, 2, 1), (1, 2, 0)]
LEVELS = BatchPolicy(
    max_batch_size=8, dynamic=True, default_priority_level=2, queue_policies=(DYNAMIC.queue_policies * 2)
)


async def _batches_of_queued_set(inline: bool) -> tuple[list[list[float]], list[bool]]:
    backend = Recorder()
    scheduler = _scheduler([backend], TINY if inline else None, policy=LEVELS)
    if inline:
        await _one_by_one(scheduler, 4, start=-10)
        assert scheduler.executor.gate is not None
        assert scheduler.executor.gate.place is Place.LOOP
    else:  # the instance held on one request while the set queues behind it
        backend.hold = True
        first = asyncio.create_task(scheduler.submit(_item(-1)))
        assert await asyncio.to_thread(backend.started.wait, 10)
        backend.hold = False
    before = len(backend.batches)
    tasks = [
        asyncio.create_task(scheduler.submit(_item(value, rows, width, priority)))
        for value, (rows, width, priority) in enumerate(QUEUED)
    ]
    await asyncio.sleep(0)  # their first steps: each queues its request
    assert scheduler.queued == len(QUEUED)
    if not inline:
        backend.gate.set()
        await first
    results = await asyncio.wait_for(asyncio.gather(*tasks), 30)  # a batch left queued fails here
    for value, ((outputs, _), (rows, width, _)) in enumerate(zip(results, QUEUED, strict=True)):
        np.testing.assert_array_equal(outputs["y"], np.full((rows, width), 2 * value, np.float32))
    await scheduler.close(5)
    loop_thread = threading.get_ident()
    return backend.batches[before:], [t == loop_thread for t in backend.threads[before:]]


async def test_batching_is_the_same_on_the_loop_and_on_the_threads() -> None:
    threads, on_loop_off = await _batches_of_queued_set(inline=False)
    loop, on_loop_on = await _batches_of_queued_set(inline=True)
    assert loop == threads
    assert len(loop) > 2  # the set needs several batches: merging and the shape rule both played
    assert not any(on_loop_off)
    assert all(on_loop_on)


def _shape(stats: ModelStats) -> dict[str, Any]:
    """The statistics extension's message with every duration's ns and the last inference time left out."""
    proto = stats.to_proto("m", 1)
    proto.last_inference = 0
    for batch in proto.batch_stats:
        for duration in (batch.compute_input, batch.compute_infer, batch.compute_output):
            duration.ns = 0
    return {field.name: value for field, value in proto.ListFields()}


async def test_statistics_have_the_same_shape_on_the_loop() -> None:
    shapes = []
    for inline in (None, TINY):
        stats = ModelStats()
        scheduler = _scheduler([Recorder()], inline, stats=stats)
        await _one_by_one(scheduler, 10)
        if inline is not None:
            assert scheduler.executor.inline_executions == 6
        await scheduler.close(5)
        shapes.append(_shape(stats))
    assert shapes[0] == shapes[1]
    assert shapes[0]["execution_count"] == 10


async def test_close_drains_what_the_loop_had_queued() -> None:
    backend = Recorder()
    scheduler = _scheduler([backend], TINY)
    await _one_by_one(scheduler, 4)
    tasks = [asyncio.create_task(scheduler.submit(_item(v))) for v in range(5)]
    await asyncio.sleep(0)  # queued; the loop's turn to run them comes after close
    await scheduler.close(5)
    assert len(await asyncio.gather(*tasks)) == 5
    assert threading.get_ident() not in backend.threads[4:]


async def test_the_loop_borrows_only_an_instance_no_thread_is_running() -> None:
    """Two instances, both held on their threads; the second is let go and serves until the version
    moves to the loop, which then runs the second's backend, never the first's, still held there."""
    held, other = Recorder(), Recorder()
    scheduler = _scheduler([held, other], TINY, policy=BatchPolicy(max_batch_size=8))  # a request each
    held.hold = other.hold = True
    first = [asyncio.create_task(scheduler.submit(_item(v))) for v in (-1, -2)]
    assert await asyncio.to_thread(held.started.wait, 10)
    assert await asyncio.to_thread(other.started.wait, 10)
    other.hold = False
    other.gate.set()
    await _one_by_one(scheduler, 10)  # the second instance's thread, then the loop
    gate = scheduler.executor.gate
    assert gate is not None
    assert gate.place is Place.LOOP
    loop_thread = threading.get_ident()
    assert other.threads[-1] == loop_thread
    assert len(held.threads) == 1
    assert held.threads[0] != loop_thread
    held.hold = False
    held.gate.set()
    await asyncio.gather(*first)
    await _one_by_one(scheduler, 10, start=100)
    assert not held.overlapped
    assert not other.overlapped
    await scheduler.close(5)


# --- through the manager: a real onnxruntime model ----------------------------------------------------


def _identity_repository(root: Path) -> Path:
    identity_model(root / "identity" / "1" / "model.onnx")
    (root / "identity" / "config.pbtxt").write_text(IDENTITY_CONFIG)
    return root


@pytest.mark.parametrize("inline_us", [0, 5_000])
async def test_onnxruntime_identity_moves_to_the_loop_through_the_manager(
    tmp_path: Path, inline_us: int
) -> None:
    manager = ModelManager(
        ServerConfig(model_repositories=(_identity_repository(tmp_path),), inline_execution_us=inline_us)
    )
    await manager.poll()
    model = manager.get("identity")
    for value in range(80):
        data = np.full((1, 16), value, dtype=np.float32)
        request = InferRequest("identity", "", [InputTensor("INPUT0", "FP32", (1, 16), raw=data.tobytes())])
        response = await model.infer(request)
        np.testing.assert_array_equal(response.outputs[0].array, data)
    assert isinstance(model.scheduler, Scheduler)
    executor = model.scheduler.executor
    if inline_us:
        assert executor.gate is not None
        assert executor.gate.place is Place.LOOP
        assert executor.inline_executions >= 80 - 64
    else:
        assert executor.gate is None
        assert executor.inline_executions == 0
    proto = model.stats.to_proto("identity", 1)
    assert (proto.inference_count, proto.execution_count) == (80, 80)
    await manager.close()
