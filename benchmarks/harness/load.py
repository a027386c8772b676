"""One window of load: ``sonic perf``'s generator (pre-serialized requests), ``tritonclient.grpc.aio`` as an
application calls it, or any client's call in a closed loop; and the CPU a window cost the server and the
load generator."""

from __future__ import annotations

import asyncio
import time
from collections.abc import Awaitable, Callable, Sequence
from dataclasses import dataclass
from typing import Any

import numpy.typing as npt
import tritonclient.grpc.aio as triton_aio
from tritonclient.grpc import InferInput
from tritonclient.utils import np_to_triton_dtype

from benchmarks.harness.processes import cpu_seconds
from sonic.perf.engine import LevelEnd, LevelResult, LoadGenerator, LoadLevel, MeasurementConfig
from sonic.perf.inputs import model_info
from sonic.perf.shm import DEFAULT_OUTPUT_BYTES, SystemSharedMemory
from sonic.perf.transport import Transport
from sonic.protocol.grpc_codec import encode_infer_request


def infer_request_bytes(model: str, inputs: dict[str, npt.NDArray[Any]], datatypes: dict[str, str]) -> bytes:
    """A serialized ModelInferRequest, built once and sent many times."""
    return encode_infer_request(model, "", inputs, datatypes)


async def closed_loop(
    call: Callable[[], Awaitable[object]], concurrency: int, seconds: float
) -> tuple[int, float]:
    """``concurrency`` tasks awaiting ``call`` back to back until ``seconds`` have passed: the calls that
    completed and the wall time until the last one did (the caller's own client, as an application
    calls it; :func:`grpc_load` is the pre-serialized generator)."""
    count = 0
    start = time.perf_counter()
    deadline = start + seconds

    async def worker() -> None:
        nonlocal count
        while time.perf_counter() < deadline:
            await call()
            count += 1

    async with asyncio.TaskGroup() as group:
        for _ in range(concurrency):
            group.create_task(worker())
    return count, time.perf_counter() - start


@dataclass
class LoadResult:
    concurrency: int
    requests: int
    seconds: float
    requests_per_s: float
    inferences_per_s: float
    p50_ms: float
    p90_ms: float
    p99_ms: float
    mean_ms: float


@dataclass(frozen=True)
class SharedMemoryLoad:
    """Requests whose tensors travel in system shared memory, as ``sonic perf --shared-memory system``
    sends them (:mod:`sonic.perf.shm`): ``inputs`` written once into a region, each output into a slot of
    perf_analyzer's size (``output_bytes`` per sample where the model does not fix it)."""

    model: str
    inputs: dict[str, npt.NDArray[Any]]
    output_bytes: int = DEFAULT_OUTPUT_BYTES


async def grpc_load(
    address: str,
    payload: bytes | Sequence[bytes] | SharedMemoryLoad,
    *,
    concurrency: int,
    batch: int,
    duration_s: float,
    warmup_s: float,
    transport: str = "grpcio",
    timeout_s: float = 600.0,
) -> LoadResult:
    """Closed loop with ``concurrency`` callers: one window of ``duration_s`` after ``warmup_s`` of load.

    The engine of ``sonic perf`` (src/sonic/perf/engine.py) with a single window, so the benchmark
    scripts and the CLI measure the same way. ``payload`` is the serialized request(s), or a
    :class:`SharedMemoryLoad`: regions created and registered with this server for this call, unregistered
    and unlinked when it returns (or fails). ``timeout_s``: each call's deadline (a wedged server costs a
    window that long, not more).
    """
    measurement = MeasurementConfig(window_s=duration_s, stable_windows=1, max_windows=1, warmup_s=warmup_s)
    level = LoadLevel(concurrency=concurrency)
    if isinstance(payload, SharedMemoryLoad):
        async with Transport(address, model=payload.model, kind=transport, timeout_s=timeout_s) as channel:
            info = model_info(await channel.model_metadata(), await channel.model_config())
            async with SystemSharedMemory(channel) as memory:
                payloads, _ = await memory.encode(
                    info, "", [payload.inputs], batch_size=batch, output_bytes=payload.output_bytes
                )
                generator = LoadGenerator(
                    channel, payloads, batch_size=batch, measurement=measurement, level_end=LevelEnd.FINISH
                )
                result = await generator.run(level)
        return _load_result(result, concurrency, duration_s)
    async with Transport(address, model="", kind=transport, timeout_s=timeout_s) as channel:
        payloads = [payload] if isinstance(payload, bytes) else list(payload)  # several: sent in random order
        generator = LoadGenerator(channel, payloads, batch_size=batch, measurement=measurement)
        result = await generator.run(level)
    return _load_result(result, concurrency, duration_s)


def _load_result(result: LevelResult, concurrency: int, duration_s: float) -> LoadResult:
    if not result.requests:
        raise RuntimeError(f"no request completed in the {duration_s} s window; make it longer")
    latency = result.latency
    return LoadResult(
        concurrency=concurrency,
        requests=result.requests,
        seconds=round(result.duration_s, 3),
        requests_per_s=round(result.requests_per_s, 1),
        inferences_per_s=round(result.inferences_per_s, 1),
        p50_ms=round(latency.p50_us / 1000, 3),
        p90_ms=round(latency.p90_us / 1000, 3),
        p99_ms=round(latency.p99_us / 1000, 3),
        mean_ms=round(latency.mean_us / 1000, 3),
    )


@dataclass(frozen=True)
class CpuLoad:
    """A load window and the CPU it cost: the server's and this process's (the load generator's)."""

    result: LoadResult
    server_cpu_us_per_request: float
    client_cpu_us_per_request: float


def load_with_cpu(
    address: str,
    payload: bytes,
    pid: int,
    *,
    concurrency: int,
    window_s: float,
    transport: str = "grpcio",
    warmup_s: float = 1.0,
) -> CpuLoad:
    """One :func:`grpc_load` window (batch 1, after ``warmup_s`` of warm-up load) and the CPU µs per request
    of the server and of this process over the window alone (the warm-up runs first, outside the count)."""

    def window(seconds: float) -> LoadResult:
        return asyncio.run(
            grpc_load(
                address,
                payload,
                concurrency=concurrency,
                batch=1,
                duration_s=seconds,
                warmup_s=0.0,
                transport=transport,
            )
        )

    window(warmup_s)
    server_before, client_before = cpu_seconds(pid), time.process_time()
    result = window(window_s)
    requests = max(result.requests, 1)
    return CpuLoad(
        result,
        1e6 * (cpu_seconds(pid) - server_before) / requests,
        1e6 * (time.process_time() - client_before) / requests,
    )


def load_with_server_cpu(
    address: str, payload: bytes, pid: int, *, concurrency: int, window_s: float, warmup_s: float = 1.0
) -> tuple[LoadResult, float]:
    """:func:`load_with_cpu` without the load generator's share."""
    load = load_with_cpu(address, payload, pid, concurrency=concurrency, window_s=window_s, warmup_s=warmup_s)
    return load.result, load.server_cpu_us_per_request


def tritonclient_inputs(feeds: dict[str, npt.NDArray[Any]]) -> list[InferInput]:
    """The InferInputs of one call, built as an application builds them: per call."""
    tensors = []
    for name, array in feeds.items():
        tensor = InferInput(name, list(array.shape), np_to_triton_dtype(array.dtype))
        tensor.set_data_from_numpy(array)
        tensors.append(tensor)
    return tensors


async def tritonclient_run(
    address: str,
    model: str,
    feeds: dict[str, npt.NDArray[Any]],
    concurrency: int,
    window_s: float,
    warmup_s: float,
    timeout_s: float = 600.0,
) -> dict[str, float]:
    """``concurrency`` coroutines of tritonclient.grpc.aio, each building its InferInputs per call (each
    call's deadline ``timeout_s``)."""
    client = triton_aio.InferenceServerClient(address)
    latencies: list[float] = []
    measuring = False

    async def call() -> None:
        tensors = tritonclient_inputs(feeds)
        begin = time.perf_counter()
        await client.infer(model, tensors, client_timeout=timeout_s)
        if measuring:
            latencies.append(time.perf_counter() - begin)

    async def worker(deadline: float) -> None:
        while time.perf_counter() < deadline:
            await call()

    try:
        async with asyncio.TaskGroup() as group:
            for _ in range(concurrency):
                group.create_task(worker(time.perf_counter() + warmup_s))
        measuring = True
        start = time.perf_counter()
        async with asyncio.TaskGroup() as group:
            for _ in range(concurrency):
                group.create_task(worker(start + window_s))
        elapsed = time.perf_counter() - start
    finally:
        await client.close()
    batch = len(next(iter(feeds.values())))
    latencies.sort()
    return {
        "requests_per_s": len(latencies) / elapsed,
        "inferences_per_s": len(latencies) * batch / elapsed,
        "requests": len(latencies),
        "p50_ms": 1e3 * latencies[len(latencies) // 2],
        "p99_ms": 1e3 * latencies[int(len(latencies) * 0.99)],
    }


async def tritonclient_once(address: str, model: str, feeds: dict[str, npt.NDArray[Any]]) -> None:
    """One call: a server's first-call costs (imports, first thread, allocations) out of every window."""
    client = triton_aio.InferenceServerClient(address)
    try:
        await client.infer(model, tritonclient_inputs(feeds), client_timeout=120.0)
    finally:
        await client.close()
