"""Per model-version statistics in the shape of Triton's statistics extension.

All updates happen on the event loop thread, so plain integers suffice.
"""

from __future__ import annotations

import time
from bisect import bisect_left
from dataclasses import dataclass, field

from tritonclient.grpc import service_pb2


@dataclass(slots=True)
class Duration:
    count: int = 0
    ns: int = 0

    def add(self, ns: int) -> None:
        self.count += 1
        self.ns += ns

    def to_proto(self, target: service_pb2.StatisticDuration) -> None:
        target.count = self.count
        target.ns = self.ns


# Histogram bucket upper bounds: 100 us .. 10 s, roughly 1-2.5-5 per decade (Prometheus' usual spacing).
LATENCY_BUCKETS_US: tuple[int, ...] = (
    100, 250, 500, 1_000, 2_500, 5_000, 10_000, 25_000, 50_000,
    100_000, 250_000, 500_000, 1_000_000, 2_500_000, 5_000_000, 10_000_000,
)  # fmt: skip


@dataclass(slots=True)
class Histogram:
    """Per-bucket counts (not cumulative: one increment per observation); cumulated at scrape time."""

    bounds_ns: tuple[int, ...] = tuple(us * 1000 for us in LATENCY_BUCKETS_US)
    counts: list[int] = field(default_factory=lambda: [0] * (len(LATENCY_BUCKETS_US) + 1))
    sum_ns: int = 0

    def observe(self, ns: int) -> None:
        # Prometheus buckets are "<= le": bisect_left finds the first bound >= ns.
        self.counts[bisect_left(self.bounds_ns, ns)] += 1
        self.sum_ns += ns


@dataclass(slots=True)
class BatchDurations:
    compute_input: Duration = field(default_factory=Duration)
    compute_infer: Duration = field(default_factory=Duration)
    compute_output: Duration = field(default_factory=Duration)


@dataclass(slots=True)
class RequestTiming:
    """Where one request's time went, in nanoseconds."""

    queue_ns: int
    compute_input_ns: int
    compute_infer_ns: int
    compute_output_ns: int
    execution: int = 0  # which execution of the model version it joined (0: not known)
    execution_batch_size: int = 0  # that execution's batch size (its requests' sizes summed)

    def __init__(  # written out: compiled (sonic.protocol.types.InputTensor says why)
        self,
        queue_ns: int,
        compute_input_ns: int,
        compute_infer_ns: int,
        compute_output_ns: int,
        execution: int = 0,
        execution_batch_size: int = 0,
    ) -> None:
        self.queue_ns = queue_ns
        self.compute_input_ns = compute_input_ns
        self.compute_infer_ns = compute_infer_ns
        self.compute_output_ns = compute_output_ns
        self.execution = execution
        self.execution_batch_size = execution_batch_size


@dataclass(slots=True)
class ModelStats:
    success: Duration = field(default_factory=Duration)
    fail: Duration = field(default_factory=Duration)
    queue: Duration = field(default_factory=Duration)
    compute_input: Duration = field(default_factory=Duration)
    compute_infer: Duration = field(default_factory=Duration)
    compute_output: Duration = field(default_factory=Duration)
    inference_count: int = 0
    execution_count: int = 0
    last_inference_ms: int = 0
    batch_stats: dict[int, BatchDurations] = field(default_factory=dict)
    pending_requests: int = 0  # queued or executing now; the pending-request gauge
    failures_by_reason: dict[str, int] = field(
        default_factory=dict
    )  # Triton's REJECTED/CANCELED/BACKEND/OTHER
    request_histogram: Histogram | None = None  # set when the metrics endpoint wants histograms
    queue_histogram: Histogram | None = None
    cache_hit: Duration = field(default_factory=Duration)  # response cache lookups that answered
    cache_miss: Duration = field(default_factory=Duration)  # lookups that missed (time: lookup + insert)

    def enable_histograms(self) -> None:
        self.request_histogram = Histogram()
        self.queue_histogram = Histogram()

    def record_success(self, total_ns: int, timing: RequestTiming, batch_size: int) -> None:
        self.success.add(total_ns)
        self.queue.add(timing.queue_ns)
        self.compute_input.add(timing.compute_input_ns)
        self.compute_infer.add(timing.compute_infer_ns)
        self.compute_output.add(timing.compute_output_ns)
        self.inference_count += batch_size
        self.last_inference_ms = time.time_ns() // 1_000_000
        if self.request_histogram is not None and self.queue_histogram is not None:
            self.request_histogram.observe(total_ns)
            self.queue_histogram.observe(timing.queue_ns)

    def record_failure(self, total_ns: int, reason: str = "OTHER") -> None:
        self.fail.add(total_ns)
        self.failures_by_reason[reason] = self.failures_by_reason.get(reason, 0) + 1
        self.last_inference_ms = time.time_ns() // 1_000_000

    def record_execution(self, batch_size: int, input_ns: int, infer_ns: int, output_ns: int) -> None:
        self.execution_count += 1
        durations = self.batch_stats.get(batch_size)
        if durations is None:
            durations = self.batch_stats[batch_size] = BatchDurations()
        durations.compute_input.add(input_ns)
        durations.compute_infer.add(infer_ns)
        durations.compute_output.add(output_ns)

    def to_proto(self, name: str, version: int) -> service_pb2.ModelStatistics:
        proto = service_pb2.ModelStatistics(
            name=name,
            version=str(version),
            last_inference=self.last_inference_ms,
            inference_count=self.inference_count,
            execution_count=self.execution_count,
        )
        stats = proto.inference_stats
        for attr in (
            "success",
            "fail",
            "queue",
            "compute_input",
            "compute_infer",
            "compute_output",
            "cache_hit",
            "cache_miss",
        ):
            getattr(self, attr).to_proto(getattr(stats, attr))
        for batch_size in sorted(self.batch_stats):
            durations = self.batch_stats[batch_size]
            entry = proto.batch_stats.add(batch_size=batch_size)
            durations.compute_input.to_proto(entry.compute_input)
            durations.compute_infer.to_proto(entry.compute_infer)
            durations.compute_output.to_proto(entry.compute_output)
        return proto
