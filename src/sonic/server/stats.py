"""Per model-version statistics in the shape of Triton's statistics extension.

All updates happen on the event loop thread, so plain integers suffice.
"""

from __future__ import annotations

import time
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

    def record_success(self, total_ns: int, timing: RequestTiming, batch_size: int) -> None:
        self.success.add(total_ns)
        self.queue.add(timing.queue_ns)
        self.compute_input.add(timing.compute_input_ns)
        self.compute_infer.add(timing.compute_infer_ns)
        self.compute_output.add(timing.compute_output_ns)
        self.inference_count += batch_size
        self.last_inference_ms = time.time_ns() // 1_000_000

    def record_failure(self, total_ns: int) -> None:
        self.fail.add(total_ns)
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
        for attr in ("success", "fail", "queue", "compute_input", "compute_infer", "compute_output"):
            getattr(self, attr).to_proto(getattr(stats, attr))
        for batch_size in sorted(self.batch_stats):
            durations = self.batch_stats[batch_size]
            entry = proto.batch_stats.add(batch_size=batch_size)
            durations.compute_input.to_proto(entry.compute_input)
            durations.compute_infer.to_proto(entry.compute_infer)
            durations.compute_output.to_proto(entry.compute_output)
        return proto
