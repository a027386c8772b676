"""Latency percentiles, per-window figures, the stability rule and the server-side breakdown.

The server-side breakdown is the difference of two ModelStatistics snapshots (Triton's statistics
extension), so it works against our server and against any Triton: cumulative counts and
nanoseconds per phase, divided by the number of successful requests in between.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field

import numpy as np
from tritonclient.grpc import service_pb2

PERCENTILES = (50, 90, 95, 99)


@dataclass(frozen=True)
class LatencySummary:
    count: int
    mean_us: float
    min_us: float
    p50_us: float
    p90_us: float
    p95_us: float
    p99_us: float
    max_us: float


def summarize_latencies(latencies_ns: Sequence[int]) -> LatencySummary:
    """Percentiles by the nearest-rank rule (the value at or above the q-th fraction), as perf_analyzer."""
    if not latencies_ns:
        return LatencySummary(0, 0.0, 0.0, 0.0, 0.0, 0.0, 0.0, 0.0)
    values = np.sort(np.asarray(latencies_ns, dtype=np.float64)) / 1000.0
    ranks = [min(len(values) - 1, int(np.ceil(q / 100 * len(values))) - 1) for q in PERCENTILES]
    p50, p90, p95, p99 = (float(values[max(0, r)]) for r in ranks)
    return LatencySummary(
        len(values), float(values.mean()), float(values[0]), p50, p90, p95, p99, float(values[-1])
    )


@dataclass(frozen=True)
class Window:
    """One measurement window: what completed in it and how long it lasted."""

    duration_s: float
    requests: int
    errors: int
    mean_latency_us: float

    @property
    def requests_per_s(self) -> float:
        return self.requests / self.duration_s if self.duration_s > 0 else 0.0


def is_stable(windows: Sequence[Window], *, percentage: float, count: int = 3) -> bool:
    """The last ``count`` windows agree: throughput and mean latency each within ``percentage`` % of
    their mean over those windows (perf_analyzer's rule). A window that completed nothing is never
    stable: the load has not reached the server yet, or the server stalls. Nor is one in which requests
    failed: its figures describe a server answering errors, not the model."""
    if len(windows) < count:
        return False
    last = windows[-count:]
    if any(w.requests == 0 or w.errors for w in last):
        return False
    for values in ([w.requests_per_s for w in last], [w.mean_latency_us for w in last]):
        mean = sum(values) / count
        if any(abs(v - mean) > percentage / 100 * mean for v in values):
            return False
    return True


PHASES = ("queue", "compute_input", "compute_infer", "compute_output", "cache_hit", "cache_miss")


@dataclass(frozen=True)
class PhaseAverages:
    """Each server phase's time over that phase's own count, whole nanoseconds (perf_analyzer's rule).

    A response-cache hit counts as a successful request without queue or compute, so these averages
    differ from the per-request ones of ``ServerBreakdown`` on a cached model; elsewhere they agree.
    """

    queue_ns: int = 0
    compute_input_ns: int = 0
    compute_infer_ns: int = 0
    compute_output_ns: int = 0
    compute_ns: int = 0  # the three compute phases together, over the compute input count
    cache_hit_ns: int = 0
    cache_miss_ns: int = 0


@dataclass(frozen=True)
class ServerBreakdown:
    """Average time per successful request in each server phase, microseconds, between two snapshots.

    ``overhead_us`` is the request time not in queue or compute: decoding, validation, batching
    and response encoding on our server; the same residual on Triton.
    """

    requests: int
    inferences: int
    executions: int
    failures: int
    request_us: float
    queue_us: float
    compute_input_us: float
    compute_infer_us: float
    compute_output_us: float
    overhead_us: float
    per_count: PhaseAverages = field(default_factory=PhaseAverages)

    @property
    def average_batch(self) -> float:
        return self.inferences / self.executions if self.executions else 0.0


def _totals(response: service_pb2.ModelStatisticsResponse) -> dict[str, int]:
    """Sum over the versions in one response (Triton answers per version)."""
    keys = ["success_count", "success_ns", "fail_count", "inference_count", "execution_count"]
    keys += [f"{phase}_{unit}" for phase in PHASES for unit in ("ns", "count")]
    totals = dict.fromkeys(keys, 0)
    for stats in response.model_stats:
        inference = stats.inference_stats
        totals["success_count"] += inference.success.count
        totals["success_ns"] += inference.success.ns
        totals["fail_count"] += inference.fail.count
        for phase in PHASES:
            duration = getattr(inference, phase)
            totals[f"{phase}_ns"] += duration.ns
            totals[f"{phase}_count"] += duration.count
        totals["inference_count"] += stats.inference_count
        totals["execution_count"] += stats.execution_count
    return totals


def server_breakdown(
    before: service_pb2.ModelStatisticsResponse, after: service_pb2.ModelStatisticsResponse
) -> ServerBreakdown:
    start, end = _totals(before), _totals(after)
    delta = {key: end[key] - start[key] for key in end}
    requests = delta["success_count"]

    def per_request_us(key: str) -> float:
        return delta[key] / requests / 1000.0 if requests else 0.0

    phases = [
        per_request_us(k) for k in ("queue_ns", "compute_input_ns", "compute_infer_ns", "compute_output_ns")
    ]
    request_us = per_request_us("success_ns")

    def per_count_ns(phase: str) -> int:
        count = delta[f"{phase}_count"]
        return delta[f"{phase}_ns"] // count if count > 0 else 0

    compute_ns = sum(delta[f"compute_{step}_ns"] for step in ("input", "infer", "output"))
    compute_count = delta["compute_input_count"]
    per_count = PhaseAverages(
        queue_ns=per_count_ns("queue"),
        compute_input_ns=per_count_ns("compute_input"),
        compute_infer_ns=per_count_ns("compute_infer"),
        compute_output_ns=per_count_ns("compute_output"),
        compute_ns=compute_ns // compute_count if compute_count > 0 else 0,
        cache_hit_ns=per_count_ns("cache_hit"),
        cache_miss_ns=per_count_ns("cache_miss"),
    )
    return ServerBreakdown(
        requests=requests,
        inferences=delta["inference_count"],
        executions=delta["execution_count"],
        failures=delta["fail_count"],
        request_us=request_us,
        queue_us=phases[0],
        compute_input_us=phases[1],
        compute_infer_us=phases[2],
        compute_output_us=phases[3],
        overhead_us=max(0.0, request_us - sum(phases)),
        per_count=per_count,
    )
