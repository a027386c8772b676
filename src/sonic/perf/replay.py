"""``sonic perf --replay DIR``: a recorded traffic log (``sonic serve --traffic-log``) sent again, open loop.

Every recorded request leaves at its recorded arrival time (relative to the first, divided by
``time_scale``: 2 sends the same trace twice as fast), to its model, with the recorded input shapes and
datatypes; its contents are the recorded bytes where the log kept them, else synthetic data of the
same shape; sequence ids and flags, priority and timeout are sent as recorded. Requests are encoded before
the clock starts, once per distinct signature (sampled contents and sequence requests each have their own). What comes back is what ``sonic perf`` reports per model — throughput, latency
percentiles, the server's own breakdown — and the replay's fidelity: requests sent per second against
requests recorded per second, and how many left more than 1 ms behind their time.
"""

from __future__ import annotations

import asyncio
import time
from collections import Counter
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np

from sonic.perf.engine import LATE_NS
from sonic.perf.stats import LatencySummary, ServerBreakdown, server_breakdown, summarize_latencies
from sonic.perf.transport import PerfError, RequestFailed, Transport
from sonic.traffic.requests import Synthetic, recorded_arrays, recorded_parameters
from sonic.traffic.schema import read_traffic


@dataclass(frozen=True)
class ReplayConfig:
    traffic_dir: Path
    address: str
    time_scale: float = 1.0  # > 1 replays faster than recorded
    models: tuple[str, ...] = ()  # empty: every recorded model
    transport: str = "h2"
    synthetic: str = "random"  # for requests recorded without contents: "random" or "zero"
    use_contents: bool = True  # send recorded contents where the log kept them
    max_requests: int = 0  # 0: the whole trace
    max_outstanding: int = 1024  # requests in flight at once; beyond, sending waits (and runs late)
    timeout_s: float = 60.0
    seed: int = 0

    def __post_init__(self) -> None:
        if self.time_scale <= 0:
            raise ValueError(f"--time-scale must be > 0, got {self.time_scale}")
        if self.synthetic not in ("random", "zero"):
            raise ValueError(f"synthetic inputs are 'random' or 'zero', got {self.synthetic!r}")


@dataclass(frozen=True)
class Planned:
    offset_ns: int  # after the replay's start, already scaled
    model: str
    payload: bytes
    batch_size: int


@dataclass
class ModelResult:
    model: str
    sent: int = 0
    failed: int = 0
    inferences: int = 0
    latencies_ns: list[int] = field(default_factory=list)
    last_error: str = ""
    server: ServerBreakdown | None = None

    @property
    def latency(self) -> LatencySummary:
        return summarize_latencies(self.latencies_ns)


@dataclass(frozen=True)
class ReplayReport:
    duration_s: float
    models: dict[str, ModelResult]
    recorded_per_s: list[int]  # requests recorded in each second of the (scaled) trace
    sent_per_s: list[int]  # requests sent in each second of the replay
    late: int  # sent more than 1 ms behind their time

    @property
    def requests(self) -> int:
        return sum(result.sent for result in self.models.values())

    @property
    def fidelity(self) -> float:
        """1 - (sum of |sent - recorded| over the seconds) / (2 x requests): 1.0 is a perfect copy."""
        length = max(len(self.recorded_per_s), len(self.sent_per_s))
        recorded = self.recorded_per_s + [0] * (length - len(self.recorded_per_s))
        sent = self.sent_per_s + [0] * (length - len(self.sent_per_s))
        total = sum(recorded)
        if not total:
            return 1.0
        return 1.0 - sum(abs(a - b) for a, b in zip(sent, recorded, strict=True)) / (2 * total)


def per_second(offsets_ns: Sequence[int]) -> list[int]:
    """How many offsets fall in each whole second from 0."""
    if not offsets_ns:
        return []
    counts = Counter(int(offset // 1_000_000_000) for offset in offsets_ns)
    return [counts.get(second, 0) for second in range(max(counts) + 1)]


def plan(config: ReplayConfig, rows: list[dict[str, Any]], transports: dict[str, Transport]) -> list[Planned]:
    """The requests of the trace, encoded, in arrival order (synthetic payloads shared per signature)."""
    if config.max_requests:
        rows = rows[: config.max_requests]
    start = rows[0]["arrival_unix_ns"]
    rng = np.random.default_rng(config.seed)
    synthetic = Synthetic(config.synthetic)
    shared: dict[tuple[Any, ...], bytes] = {}
    planned = []
    for row in rows:
        transport = transports[row["model"]]
        datatypes = dict(zip(row["input_names"], row["input_datatypes"], strict=True))
        parameters = recorded_parameters(row)
        if (config.use_contents and row["contents"] is not None) or parameters:
            # Sampled contents, or a sequence's request: a payload of its own.
            arrays = recorded_arrays(row, synthetic, rng, use_contents=config.use_contents)
            payload = transport.encode(arrays, datatypes, parameters)
        else:
            key = (
                row["model"],
                tuple(row["input_names"]),
                tuple(row["input_datatypes"]),
                str(row["input_shapes"]),
            )
            if key not in shared:
                arrays = recorded_arrays(row, synthetic, rng, use_contents=False)
                shared[key] = transport.encode(arrays, datatypes)
            payload = shared[key]
        offset = int((row["arrival_unix_ns"] - start) / config.time_scale)
        planned.append(Planned(offset, row["model"], payload, row["batch_size"]))
    return planned


async def _send(transport: Transport, request: Planned, result: ModelResult) -> None:
    sent = time.perf_counter_ns()
    try:
        await transport.infer(request.payload)
    except RequestFailed as exc:
        result.failed += 1
        result.last_error = str(exc)
        return
    result.latencies_ns.append(time.perf_counter_ns() - sent)
    result.inferences += request.batch_size


async def replay(config: ReplayConfig) -> ReplayReport:
    """Send the recorded trace to ``config.address`` and measure it."""
    table = read_traffic(config.traffic_dir, config.models)
    if not table.num_rows:
        wanted = f" for {', '.join(config.models)}" if config.models else ""
        raise PerfError(f"no traffic recorded under {config.traffic_dir}{wanted}")
    rows = table.to_pylist()
    models = sorted({row["model"] for row in rows})
    transports = {
        m: Transport(config.address, m, kind=config.transport, timeout_s=config.timeout_s) for m in models
    }
    try:
        requests = plan(config, rows, transports)
        return await _replay(config, requests, transports)
    finally:
        for transport in transports.values():
            await transport.close()


async def _replay(
    config: ReplayConfig, requests: list[Planned], transports: dict[str, Transport]
) -> ReplayReport:
    results = {model: ModelResult(model) for model in transports}
    before = {model: await transport.statistics() for model, transport in transports.items()}
    slots = asyncio.Semaphore(config.max_outstanding)
    sent_offsets: list[int] = []
    late = 0

    async def one(request: Planned) -> None:
        try:
            await _send(transports[request.model], request, results[request.model])
        finally:
            slots.release()

    start = time.perf_counter_ns()
    async with asyncio.TaskGroup() as group:
        for request in requests:
            wait_ns = start + request.offset_ns - time.perf_counter_ns()
            if wait_ns > 0:
                await asyncio.sleep(wait_ns / 1e9)  # the schedule itself: this request's recorded time
            await slots.acquire()
            now = time.perf_counter_ns()
            if now - (start + request.offset_ns) > LATE_NS:
                late += 1
            sent_offsets.append(now - start)
            results[request.model].sent += 1
            group.create_task(one(request))
    duration_s = (time.perf_counter_ns() - start) / 1e9
    for model, transport in transports.items():
        after = await transport.statistics()
        results[model].server = server_breakdown(before[model], after)
    return ReplayReport(
        duration_s=duration_s,
        models=results,
        recorded_per_s=per_second([r.offset_ns for r in requests]),
        sent_per_s=per_second(sent_offsets),
        late=late,
    )
