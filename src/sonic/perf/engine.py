"""The load generator behind ``sonic perf`` and ``sonic analyze``.

Two ways to load a server, as perf_analyzer:

- closed loop (``concurrency``): N callers, each sends its next request when the previous answer
  is back (optionally after a think time that stands for the client's own per-event CPU work);
- open loop (``request_rate_per_s``): requests leave on a schedule, evenly spaced or Poisson,
  whatever the answers do; a request sent more than 1 ms behind schedule counts as delayed.

Load runs without pause across consecutive measurement windows. After each window the
ModelStatistics of the model are read, so every window has a server-side breakdown. A level ends
when the last ``stable_windows`` windows agree within ``stability_percentage`` (throughput and
mean latency), or after ``max_windows``; its figures come from those last windows.

Latency is measured around the call (send until the whole response is received); the response is
then parsed as :mod:`sonic.client` parses one (its head decoded, its tensors views of the received message,
not copied), and that parse time is reported as client deserialize time. Requests are serialized
before the load starts, and the per-request serialize cost measured then is reported. gRPC does
not expose when a request finished sending, so client send+receive time (``client_wire_us``) is
the mean latency less the server's own time per request.

With system shared memory (:mod:`sonic.perf.shm`) the inputs are written into regions once, before the
load, and the requests name them; the serialize time reported then is that of the one write and the encoding.
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from enum import StrEnum
from pathlib import Path

import numpy as np
from tritonclient.grpc import service_pb2

from sonic.perf.inputs import (
    Arrays,
    ModelInfo,
    check_batch_size,
    inputs_from_file,
    model_info,
    resolve_shapes,
    synthetic_inputs,
)
from sonic.perf.shm import SharedMemoryConfig, SystemSharedMemory
from sonic.perf.stats import (
    LatencySummary,
    ServerBreakdown,
    Window,
    is_stable,
    server_breakdown,
    summarize_latencies,
)
from sonic.perf.transport import TRANSPORTS, PerfError, RequestFailed, Transport
from sonic.protocol.grpc_codec import split_response

LATE_NS = 1_000_000  # open loop: a request sent this far behind its slot counts as delayed


@dataclass(frozen=True)
class LoadLevel:
    """One point of a sweep: closed loop (``concurrency`` > 0) or open loop (``request_rate_per_s``)."""

    concurrency: int = 0
    request_rate_per_s: float = 0.0
    distribution: str = "constant"  # open loop: "constant" or "poisson"
    think_time_s: float = 0.0  # closed loop: pause after each answer

    def __post_init__(self) -> None:
        if (self.concurrency > 0) == (self.request_rate_per_s > 0):
            raise PerfError(
                f"a load level needs exactly one of concurrency > 0 or request rate > 0, got concurrency "
                f"{self.concurrency} and rate {self.request_rate_per_s}"
            )
        if self.distribution not in {"constant", "poisson"}:
            raise PerfError(
                f"request distribution must be 'constant' or 'poisson', got {self.distribution!r}"
            )

    @property
    def label(self) -> str:
        if self.concurrency:
            return f"concurrency {self.concurrency}"
        return f"{self.request_rate_per_s:g} req/s ({self.distribution})"


@dataclass(frozen=True)
class MeasurementConfig:
    window_s: float = 5.0
    stability_percentage: float = 10.0
    stable_windows: int = 3
    max_windows: int = 10
    max_outstanding: int = 1024  # open loop: requests in flight at most; beyond, sends wait
    warmup_s: float = 0.0  # load before the first window, measured by nothing


@dataclass(frozen=True)
class LevelResult:
    level: LoadLevel
    batch_size: int
    stable: bool
    windows: int  # measured in all, including those before the stable ones
    duration_s: float  # of the windows the figures come from
    requests: int
    errors: int  # failed requests in the windows the figures come from
    delayed_requests: int
    latency: LatencySummary
    client_serialize_us: float
    client_deserialize_us: float
    server: ServerBreakdown | None  # None where the server keeps no statistics
    errors_all_windows: int = 0  # failed requests in every window of the level (the exit status follows it)
    last_error: str = ""  # the last failure's message, for the summary

    @property
    def requests_per_s(self) -> float:
        return self.requests / self.duration_s if self.duration_s > 0 else 0.0

    @property
    def inferences_per_s(self) -> float:
        return self.requests_per_s * self.batch_size

    @property
    def client_wire_us(self) -> float:
        if self.server is None:
            return 0.0
        return max(0.0, self.latency.mean_us - self.server.request_us)


WindowCallback = Callable[[LoadLevel, int, Window, bool], None]


@dataclass
class _Recorder:
    """What completed during one window; swapped at each boundary (one event-loop thread)."""

    latencies_ns: list[int] = field(default_factory=list)
    deserialize_ns: int = 0
    errors: int = 0
    delayed: int = 0
    last_error: str = ""


class LevelEnd(StrEnum):
    """What becomes of the requests in flight when a level's last window closes."""

    CANCEL = "cancel"  # cancelled at once (the default)
    # Answered first: with shared memory, a server that goes on running a cancelled request (Triton)
    # holds its regions until it ends, and refuses to unregister them meanwhile.
    FINISH = "finish"


class LoadGenerator:
    """Sends pre-encoded requests through a transport and measures one level at a time."""

    def __init__(
        self,
        transport: Transport,
        payloads: Sequence[bytes],
        *,
        batch_size: int,
        measurement: MeasurementConfig,
        serialize_ns_per_request: float = 0.0,
        on_window: WindowCallback | None = None,
        seed: int = 0,
        level_end: LevelEnd = LevelEnd.CANCEL,
    ) -> None:
        if not payloads:
            msg = "no request to send"
            raise PerfError(msg)
        self._transport = transport
        self._payloads = list(payloads)
        self._batch_size = batch_size
        self._measurement = measurement
        self._serialize_ns = serialize_ns_per_request
        self._on_window = on_window
        self._rng = np.random.default_rng(seed)
        self._recorder = _Recorder()
        self._level_end = level_end
        self._stopping = False  # LevelEnd.FINISH: closed-loop callers send nothing more once set
        self.notes: list[str] = []  # what the report should say about missing figures

    async def _send(self, payload: bytes) -> None:
        sent = time.perf_counter_ns()
        try:
            response = await self._transport.infer(payload)
        except RequestFailed as exc:
            self._recorder.errors += 1
            self._recorder.last_error = str(exc)
            return
        done = time.perf_counter_ns()
        split_response(response)
        recorder = self._recorder  # the window in which the request completed
        recorder.latencies_ns.append(done - sent)
        recorder.deserialize_ns += time.perf_counter_ns() - done

    async def _closed_loop(self, first: int, stride: int, think_time_s: float) -> None:
        index = first
        while not self._stopping:
            await self._send(self._payloads[index % len(self._payloads)])
            index += stride
            if think_time_s > 0:
                await asyncio.sleep(think_time_s)  # stands for the client's own CPU time per event

    async def _open_loop(
        self, level: LoadLevel, group: asyncio.TaskGroup, tasks: set[asyncio.Task[None]]
    ) -> None:
        slots = asyncio.Semaphore(self._measurement.max_outstanding)
        mean_gap_ns = 1e9 / level.request_rate_per_s
        next_ns = float(time.perf_counter_ns())
        index = 0

        async def one(payload: bytes) -> None:
            try:
                await self._send(payload)
            finally:
                slots.release()

        while True:
            wait_ns = next_ns - time.perf_counter_ns()
            if wait_ns > 0:
                await asyncio.sleep(wait_ns / 1e9)  # the schedule itself: the next request's slot
            await slots.acquire()
            if time.perf_counter_ns() - next_ns > LATE_NS:
                self._recorder.delayed += 1
            task = group.create_task(one(self._payloads[index % len(self._payloads)]))
            tasks.add(task)
            task.add_done_callback(tasks.discard)
            index += 1
            gap = mean_gap_ns if level.distribution == "constant" else self._rng.exponential(mean_gap_ns)
            next_ns += gap

    async def _statistics(self) -> service_pb2.ModelStatisticsResponse | None:
        try:
            return await self._transport.statistics()
        except PerfError as exc:
            # a server without (or restricting) the statistics extension: client figures only
            if not self.notes:
                self.notes.append(f"no server-side breakdown: {exc}")
            return None

    async def run(self, level: LoadLevel) -> LevelResult:
        tasks: set[asyncio.Task[None]] = set()
        self._stopping = False
        cancelled = False
        async with asyncio.TaskGroup() as group:
            scheduler = None
            if level.concurrency:
                for worker in range(level.concurrency):
                    tasks.add(
                        group.create_task(self._closed_loop(worker, level.concurrency, level.think_time_s))
                    )
            else:
                scheduler = group.create_task(self._open_loop(level, group, tasks))
                tasks.add(scheduler)
            failure: PerfError | None = None
            try:
                result = await self._measure(level)
            except PerfError as exc:
                failure = exc  # raised below, not wrapped in the task group's ExceptionGroup
            except asyncio.CancelledError:
                if self._level_end is LevelEnd.CANCEL:
                    raise
                cancelled = True  # raised again once the requests in flight are answered (as perf_analyzer)
            finally:
                self._stopping = True
                if self._level_end is LevelEnd.CANCEL:
                    for task in list(tasks):
                        task.cancel()
                elif scheduler is not None:
                    scheduler.cancel()  # it sends nothing itself; the requests it started are awaited
            # LevelEnd.FINISH: the task group waits here for the requests in flight (a second
            # cancellation cancels them too)
        if cancelled:
            raise asyncio.CancelledError
        if failure is not None:
            raise failure
        return result

    async def _measure(self, level: LoadLevel) -> LevelResult:
        config = self._measurement
        if config.warmup_s > 0:
            await asyncio.sleep(config.warmup_s)  # the warm-up's length, by design
        snapshots = [await self._statistics()]
        self._recorder = _Recorder()
        recorders: list[_Recorder] = []
        windows: list[Window] = []
        started = time.perf_counter()
        boundary = started
        stable = False
        while len(windows) < config.max_windows and not stable:
            target = started + (len(windows) + 1) * config.window_s
            await asyncio.sleep(max(0.0, target - time.perf_counter()))  # the window's length, by design
            now = time.perf_counter()
            recorder, self._recorder = self._recorder, _Recorder()
            snapshots.append(await self._statistics())
            if recorder.errors and not recorder.latencies_ns:
                raise PerfError(
                    f"{level.label}: all {recorder.errors} requests in window {len(windows) + 1} failed; "
                    f"last error {recorder.last_error}"
                )
            latencies = recorder.latencies_ns
            window = Window(
                duration_s=now - boundary,
                requests=len(latencies),
                errors=recorder.errors,
                mean_latency_us=sum(latencies) / len(latencies) / 1000 if latencies else 0.0,
            )
            boundary = now
            recorders.append(recorder)
            windows.append(window)
            stable = is_stable(windows, percentage=config.stability_percentage, count=config.stable_windows)
            if self._on_window is not None:
                self._on_window(level, len(windows), window, stable)
        used = min(config.stable_windows, len(windows))
        chosen = recorders[-used:]
        latencies = [ns for r in chosen for ns in r.latencies_ns]
        before, after = snapshots[-used - 1], snapshots[-1]
        return LevelResult(
            level=level,
            batch_size=self._batch_size,
            stable=stable,
            windows=len(windows),
            duration_s=sum(w.duration_s for w in windows[-used:]),
            requests=len(latencies),
            errors=sum(r.errors for r in chosen),
            delayed_requests=sum(r.delayed for r in chosen),
            latency=summarize_latencies(latencies),
            client_serialize_us=self._serialize_ns / 1000,
            client_deserialize_us=sum(r.deserialize_ns for r in chosen) / len(latencies) / 1000
            if latencies
            else 0.0,
            server=None if before is None or after is None else server_breakdown(before, after),
            errors_all_windows=sum(r.errors for r in recorders),
            last_error=next((r.last_error for r in reversed(recorders) if r.last_error), ""),
        )


@dataclass(frozen=True)
class PerfConfig:
    """One ``sonic perf`` run: where, what, and the levels to measure."""

    url: str
    model: str
    levels: tuple[LoadLevel, ...]
    version: str = ""
    batch_size: int = 1
    input_data: str = "random"  # "random", "zero", or a .json / .npz file
    shapes: tuple[tuple[str, tuple[int, ...]], ...] = ()
    distinct_requests: int = 16
    measurement: MeasurementConfig = MeasurementConfig()
    seed: int = 0
    transport: str = "h2"  # "h2" (sonic.client's HTTP/2, lighter) or "grpcio" (grpc.aio)
    shared_memory: SharedMemoryConfig = field(
        default_factory=SharedMemoryConfig
    )  # in requests, or system shm

    def __post_init__(self) -> None:
        if self.transport not in TRANSPORTS:
            msg = f"transport '{self.transport}': expected one of {', '.join(TRANSPORTS)}"
            raise PerfError(msg)


@dataclass(frozen=True)
class PerfReport:
    config: PerfConfig
    model: ModelInfo
    results: tuple[LevelResult, ...]
    notes: tuple[str, ...] = ()


def build_inputs(config: PerfConfig, info: ModelInfo) -> list[Arrays]:
    """The input tensors of the distinct requests ``config`` asks for."""
    check_batch_size(info, config.batch_size)
    shapes = resolve_shapes(info, dict(config.shapes))
    if config.input_data in {"random", "zero"}:
        return synthetic_inputs(
            info,
            shapes,
            config.batch_size,
            kind=config.input_data,
            count=config.distinct_requests,
            seed=config.seed,
        )
    return inputs_from_file(
        Path(config.input_data), info, shapes, config.batch_size, count=config.distinct_requests
    )


def build_payloads(transport: Transport, config: PerfConfig, info: ModelInfo) -> tuple[list[bytes], float]:
    """Encoded requests and the serialize time per request, nanoseconds."""
    requests = build_inputs(config, info)
    started = time.perf_counter_ns()
    payloads = [transport.encode(arrays, info.datatypes) for arrays in requests]
    return payloads, (time.perf_counter_ns() - started) / len(payloads)


async def run_perf(
    config: PerfConfig, *, transport: Transport | None = None, on_window: WindowCallback | None = None
) -> PerfReport:
    """Measure every level of ``config`` in turn against one server."""
    transport = transport or Transport(config.url, config.model, config.version, kind=config.transport)
    async with transport:
        info = model_info(await transport.model_metadata(), await transport.model_config())
        if not config.shared_memory.used:
            payloads, serialize_ns = build_payloads(transport, config, info)
            return await _measure_levels(config, info, transport, payloads, serialize_ns, on_window)
        async with SystemSharedMemory(transport) as memory:  # unregistered and unlinked however it ends
            payloads, serialize_ns = await memory.encode(
                info,
                config.version,
                build_inputs(config, info),
                batch_size=config.batch_size,
                output_bytes=config.shared_memory.output_bytes,
            )
            return await _measure_levels(config, info, transport, payloads, serialize_ns, on_window)


async def _measure_levels(
    config: PerfConfig,
    info: ModelInfo,
    transport: Transport,
    payloads: Sequence[bytes],
    serialize_ns: float,
    on_window: WindowCallback | None,
) -> PerfReport:
    # With shared memory, no region may be unregistered while the server still runs a request naming it.
    level_end = LevelEnd.FINISH if config.shared_memory.used else LevelEnd.CANCEL
    generator = LoadGenerator(
        transport,
        payloads,
        batch_size=config.batch_size,
        measurement=config.measurement,
        serialize_ns_per_request=serialize_ns,
        on_window=on_window,
        seed=config.seed,
        level_end=level_end,
    )
    results = [await generator.run(level) for level in config.levels]
    return PerfReport(config, info, tuple(results), tuple(generator.notes))
