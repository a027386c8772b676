"""Prometheus metrics with Triton's names and labels, rendered from ModelStats at scrape time.

Nothing is counted twice: the counters Triton exports (``nv_inference_*``) are the statistics the
server keeps anyway. The only per-request addition is the latency histograms (two bisects and
increments in :meth:`ModelStats.record_success`). CPU and memory gauges come from ``/proc``; GPU
gauges from NVML when ``nvidia-ml-py`` is installed and a GPU is present.
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

from sonic.server.budget import RequestBudget
from sonic.server.metrics.stats import LATENCY_BUCKETS_US, Histogram, ModelStats
from sonic.server.models.manager import ModelManager

log = logging.getLogger(__name__)

# (name, help, how to read it from ModelStats): counters and the pending gauge, as Triton names them.
_COUNTERS: tuple[tuple[str, str, Callable[[ModelStats], int]], ...] = (
    ("nv_inference_request_success", "Number of successful inference requests, all batch sizes",
     lambda s: s.success.count),
    ("nv_inference_count", "Number of inferences performed (does not include cached requests)",
     lambda s: s.inference_count),
    ("nv_inference_exec_count", "Number of model executions performed (does not include cached requests)",
     lambda s: s.execution_count),
    ("nv_inference_request_duration_us", "Cumulative inference request duration in microseconds (includes cached requests)", lambda s: s.success.ns // 1000),
    ("nv_inference_queue_duration_us", "Cumulative inference queuing duration in microseconds (includes cached requests)", lambda s: s.queue.ns // 1000),
    ("nv_inference_compute_input_duration_us", "Cumulative compute input duration in microseconds (does not include cached requests)", lambda s: s.compute_input.ns // 1000),
    ("nv_inference_compute_infer_duration_us", "Cumulative compute inference duration in microseconds (does not include cached requests)", lambda s: s.compute_infer.ns // 1000),
    ("nv_inference_compute_output_duration_us", "Cumulative inference compute output duration in microseconds (does not include cached requests)", lambda s: s.compute_output.ns // 1000),
    ("nv_cache_num_hits_per_model", "Number of cache hits per model", lambda s: s.cache_hit.count),
    ("nv_cache_num_misses_per_model", "Number of cache misses per model", lambda s: s.cache_miss.count),
)  # fmt: skip

FAILURE_REASONS = ("REJECTED", "CANCELED", "BACKEND", "OTHER")

_HISTOGRAMS: tuple[tuple[str, str, Callable[[ModelStats], Histogram | None]], ...] = (
    ("sonic_inference_request_duration_us", "Histogram of successful request durations in microseconds",
     lambda s: s.request_histogram),
    ("sonic_inference_queue_duration_us", "Histogram of queue durations of successful requests in microseconds", lambda s: s.queue_histogram),
)  # fmt: skip


def _escape(value: str) -> str:
    return value.replace("\\", "\\\\").replace('"', '\\"').replace("\n", "\\n")


def _model_rows(models: ModelManager) -> list[tuple[str, ModelStats]]:
    return [
        (f'model="{_escape(name)}",version="{model.version}"', model.stats)
        for name in models.loaded_models()
        for model in models.ready_versions(name)
    ]


def _header(name: str, help_text: str, kind: str) -> Iterator[str]:
    yield f"# HELP {name} {help_text}"
    yield f"# TYPE {name} {kind}"


def _model_lines(rows: list[tuple[str, ModelStats]]) -> Iterator[str]:
    for name, help_text, read in _COUNTERS:
        yield from _header(name, help_text, "counter")
        for labels, stats in rows:
            yield f"{name}{{{labels}}} {read(stats)}"
    yield from _header("nv_inference_request_failure", "Number of failed inference requests, all batch sizes",
                       "counter")  # fmt: skip
    for labels, stats in rows:
        for reason in FAILURE_REASONS:
            count = stats.failures_by_reason.get(reason, 0)
            model, version = labels.split(",")
            yield f'nv_inference_request_failure{{{model},reason="{reason}",{version}}} {count}'
    yield from _header("nv_inference_pending_request_count", "Instantaneous number of pending requests awaiting execution per-model.", "gauge")  # fmt: skip
    for labels, stats in rows:
        yield f"nv_inference_pending_request_count{{{labels}}} {stats.pending_requests}"
    for hist_name, hist_help, read_histogram in _HISTOGRAMS:
        present = [(labels, h) for labels, stats in rows if (h := read_histogram(stats)) is not None]
        if not present:
            continue
        name = hist_name
        yield from _header(name, hist_help, "histogram")
        for labels, histogram in present:
            cumulative = 0
            for bound_us, count in zip(LATENCY_BUCKETS_US, histogram.counts, strict=False):
                cumulative += count
                yield f'{name}_bucket{{{labels},le="{bound_us}"}} {cumulative}'
            cumulative += histogram.counts[-1]
            yield f'{name}_bucket{{{labels},le="+Inf"}} {cumulative}'
            yield f"{name}_sum{{{labels}}} {histogram.sum_ns / 1000:.3f}"
            yield f"{name}_count{{{labels}}} {cumulative}"


class CpuSampler:
    """System CPU utilisation between scrapes and memory use, from /proc (Linux); absent elsewhere."""

    def __init__(self, proc: Path = Path("/proc")) -> None:
        self._proc = proc
        self._last: tuple[int, int] | None = None

    def _cpu_times(self) -> tuple[int, int] | None:
        try:
            first = (self._proc / "stat").read_text().split("\n", 1)[0].split()
        except OSError:
            return None
        values = [int(v) for v in first[1:]]
        idle = values[3] + (values[4] if len(values) > 4 else 0)  # idle + iowait
        return sum(values), idle

    def lines(self) -> Iterator[str]:
        times = self._cpu_times()
        if times is not None:
            previous = self._last or (0, 0)
            self._last = times
            total, idle = times[0] - previous[0], times[1] - previous[1]
            utilization = (total - idle) / total if total > 0 else 0.0
            yield from _header("nv_cpu_utilization", "CPU utilization rate [0.0 - 1.0]", "gauge")
            yield f"nv_cpu_utilization {utilization:.6f}"
        try:
            meminfo = {
                line.split(":")[0]: int(line.split()[1]) * 1024
                for line in (self._proc / "meminfo").read_text().splitlines()
                if line.endswith("kB")
            }
        except (OSError, ValueError, IndexError):
            return
        if "MemTotal" in meminfo and "MemAvailable" in meminfo:
            total_bytes = meminfo["MemTotal"]
            yield from _header("nv_cpu_memory_total_bytes", "CPU total memory (RAM), in bytes", "gauge")
            yield f"nv_cpu_memory_total_bytes {total_bytes}"
            yield from _header("nv_cpu_memory_used_bytes", "CPU used memory (RAM), in bytes", "gauge")
            yield f"nv_cpu_memory_used_bytes {total_bytes - meminfo['MemAvailable']}"


class GpuSampler:
    """GPU utilisation and memory through NVML; yields nothing without ``nvidia-ml-py`` or a GPU."""

    def __init__(self) -> None:
        self._nvml: Any = None
        try:
            import pynvml  # type: ignore[import-not-found]  # noqa: PLC0415  (optional: pip install nvidia-ml-py)

            pynvml.nvmlInit()
        except Exception:  # noqa: BLE001  (ImportError, or NVMLError when no driver/GPU is present)
            return
        self._nvml = pynvml

    def lines(self) -> Iterator[str]:
        nvml = self._nvml
        if nvml is None:
            return
        rows = []
        try:
            for index in range(nvml.nvmlDeviceGetCount()):
                handle = nvml.nvmlDeviceGetHandleByIndex(index)
                uuid = nvml.nvmlDeviceGetUUID(handle)
                uuid = uuid.decode() if isinstance(uuid, bytes) else str(uuid)
                memory = nvml.nvmlDeviceGetMemoryInfo(handle)
                rate = nvml.nvmlDeviceGetUtilizationRates(handle)
                rows.append((f'gpu_uuid="{_escape(uuid)}"', rate.gpu / 100.0, memory.total, memory.used))
        except nvml.NVMLError:
            log.warning("NVML query failed; GPU metrics left out of this scrape", exc_info=True)
            return
        for name, help_text, column in (
            ("nv_gpu_utilization", "GPU utilization rate [0.0 - 1.0)", 1),
            ("nv_gpu_memory_total_bytes", "GPU total memory, in bytes", 2),
            ("nv_gpu_memory_used_bytes", "GPU used memory, in bytes", 3),
        ):
            yield from _header(name, help_text, "gauge")
            for row in rows:
                yield f"{name}{{{row[0]}}} {row[column]}"

    def close(self) -> None:
        if self._nvml is not None:
            self._nvml.nvmlShutdown()
            self._nvml = None


def _budget_lines(budget: RequestBudget) -> Iterator[str]:
    yield from _header(
        "sonic_request_buffer_bytes", "Bytes of request bodies buffered now (HTTP and native gRPC)", "gauge"
    )
    yield f"sonic_request_buffer_bytes {budget.in_use}"
    yield from _header(
        "sonic_request_buffer_capacity_bytes",
        "The request buffer budget: past it, senders are throttled (--request-buffer-budget-mb)",
        "gauge",
    )
    yield f"sonic_request_buffer_capacity_bytes {budget.capacity_bytes}"


class Metrics:
    """The Prometheus text of a server's models, CPU and GPUs, rendered at each scrape."""

    def __init__(self, models: ModelManager, budget: RequestBudget | None = None) -> None:
        self._models = models
        self._budget = budget
        self._cpu = CpuSampler()
        self._gpu = GpuSampler()

    def render(self) -> str:
        lines = [*_model_lines(_model_rows(self._models)), *self._cpu.lines(), *self._gpu.lines()]
        lines.extend(self._models.custom_metrics.lines())  # Python models' pb_utils.MetricFamily
        if self._budget is not None:
            lines.extend(_budget_lines(self._budget))
        return "\n".join(lines) + "\n"

    def close(self) -> None:
        self._gpu.close()
