"""Shared pieces of the benchmark scripts: a lean gRPC load generator, latency statistics, RSS."""

from __future__ import annotations

import asyncio
import json
import os
import platform
import statistics
import time
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

import grpc
import numpy as np
from tritonclient.grpc import service_pb2

RESULTS = Path(__file__).parent / "results"
MAX_MESSAGE = 2**31 - 1
INFER_METHOD = "/inference.GRPCInferenceService/ModelInfer"


def infer_request_bytes(model: str, inputs: dict[str, np.ndarray], datatypes: dict[str, str]) -> bytes:
    """A serialized ModelInferRequest, built once and sent many times."""
    request = service_pb2.ModelInferRequest(model_name=model)
    for name, array in inputs.items():
        request.inputs.add(name=name, datatype=datatypes[name], shape=list(array.shape))
        request.raw_input_contents.append(np.ascontiguousarray(array).tobytes())
    return request.SerializeToString()


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


def summarize(latencies_s: list[float], seconds: float, concurrency: int, batch: int) -> LoadResult:
    ordered = sorted(latencies_s)

    def pct(q: float) -> float:
        return ordered[min(len(ordered) - 1, int(q * len(ordered)))] * 1000

    rate = len(ordered) / seconds
    return LoadResult(
        concurrency=concurrency,
        requests=len(ordered),
        seconds=round(seconds, 3),
        requests_per_s=round(rate, 1),
        inferences_per_s=round(rate * batch, 1),
        p50_ms=round(pct(0.50), 3),
        p90_ms=round(pct(0.90), 3),
        p99_ms=round(pct(0.99), 3),
        mean_ms=round(statistics.fmean(ordered) * 1000, 3),
    )


async def grpc_load(
    address: str, payload: bytes, *, concurrency: int, batch: int, duration_s: float, warmup_s: float
) -> LoadResult:
    """Closed loop: ``concurrency`` callers each send the next request when the previous returns.

    Throughput counts completions inside the measurement window; latencies are those of the requests
    completed in it. Calls still in flight at the end are cancelled (the server drops them).
    """
    options = [
        ("grpc.max_send_message_length", MAX_MESSAGE),
        ("grpc.max_receive_message_length", MAX_MESSAGE),
    ]
    async with grpc.aio.insecure_channel(address, options=options) as channel:
        call = channel.unary_unary(INFER_METHOD)
        loop = asyncio.get_running_loop()
        measure_from = loop.time() + warmup_s
        stop_at = measure_from + duration_s
        latencies: list[float] = []

        async def caller() -> None:
            while True:
                sent = loop.time()
                await call(payload)
                done = loop.time()
                if measure_from <= done <= stop_at:
                    latencies.append(done - sent)

        callers = [asyncio.create_task(caller()) for _ in range(concurrency)]
        await asyncio.sleep(stop_at - loop.time())
        for task in callers:
            task.cancel()
        await asyncio.gather(*callers, return_exceptions=True)
        if not latencies:
            raise RuntimeError(f"no request completed in the {duration_s} s window; make it longer")
        return summarize(latencies, duration_s, concurrency, batch)


def peak_rss_mb(pid: int) -> float:
    """VmHWM: the process's peak resident set size."""
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith("VmHWM:"):
            return int(line.split()[1]) / 1024
    return float("nan")


def machine() -> dict[str, Any]:
    return {"cpus": os.cpu_count(), "platform": platform.platform(), "python": platform.python_version()}


def save(name: str, payload: dict[str, Any]) -> Path:
    RESULTS.mkdir(parents=True, exist_ok=True)
    path = RESULTS / f"{name}.json"
    payload = {"benchmark": name, "time": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()), **payload}
    path.write_text(json.dumps(payload, indent=2, default=asdict))
    return path
