"""``sonic perf`` results as flat rows, CSV, JSON and a PNG plot.

Every row has the same columns (``COLUMNS``), in the same order in CSV and JSON; server columns
are empty (CSV) or null (JSON) where the server keeps no statistics.
"""

from __future__ import annotations

import csv
import json
import os
import platform
import time
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from sonic.perf.engine import LevelResult, PerfReport
from sonic.perf.shm import SharedMemoryKind

# 2: failed requests counted over every window (errors_all_windows, errors); 3: shared_memory (column and
# the run's settings)
SCHEMA_VERSION = 3

COLUMNS = (
    "concurrency",
    "request_rate_per_s",
    "distribution",
    "batch_size",
    "shared_memory",
    "stable",
    "windows",
    "duration_s",
    "requests",
    "errors",
    "errors_all_windows",
    "delayed_requests",
    "inferences_per_s",
    "requests_per_s",
    "latency_mean_us",
    "latency_min_us",
    "latency_p50_us",
    "latency_p90_us",
    "latency_p95_us",
    "latency_p99_us",
    "latency_max_us",
    "client_serialize_us",
    "client_deserialize_us",
    "client_wire_us",
    "server_requests",
    "server_inferences",
    "server_executions",
    "server_average_batch",
    "server_request_us",
    "server_queue_us",
    "server_compute_input_us",
    "server_compute_infer_us",
    "server_compute_output_us",
    "server_overhead_us",
)

Row = dict[str, Any]


def _round(value: float) -> float:
    return round(value, 3)


def row(result: LevelResult, shared_memory: SharedMemoryKind) -> Row:
    """One level's figures; ``shared_memory`` says where the run's tensors travelled (``none``: in the
    requests and responses)."""
    level, latency, server = result.level, result.latency, result.server
    values: Row = {
        "concurrency": level.concurrency,
        "request_rate_per_s": level.request_rate_per_s,
        "distribution": level.distribution if level.request_rate_per_s else "",
        "batch_size": result.batch_size,
        "shared_memory": shared_memory.value,
        "stable": result.stable,
        "windows": result.windows,
        "duration_s": _round(result.duration_s),
        "requests": result.requests,
        "errors": result.errors,
        "errors_all_windows": result.errors_all_windows,
        "delayed_requests": result.delayed_requests,
        "inferences_per_s": _round(result.inferences_per_s),
        "requests_per_s": _round(result.requests_per_s),
        "latency_mean_us": _round(latency.mean_us),
        "latency_min_us": _round(latency.min_us),
        "latency_p50_us": _round(latency.p50_us),
        "latency_p90_us": _round(latency.p90_us),
        "latency_p95_us": _round(latency.p95_us),
        "latency_p99_us": _round(latency.p99_us),
        "latency_max_us": _round(latency.max_us),
        "client_serialize_us": _round(result.client_serialize_us),
        "client_deserialize_us": _round(result.client_deserialize_us),
        "client_wire_us": _round(result.client_wire_us) if server else None,
    }
    server_values: Row = dict.fromkeys(COLUMNS[len(values) :])
    if server is not None:
        server_values = {
            "server_requests": server.requests,
            "server_inferences": server.inferences,
            "server_executions": server.executions,
            "server_average_batch": _round(server.average_batch),
            "server_request_us": _round(server.request_us),
            "server_queue_us": _round(server.queue_us),
            "server_compute_input_us": _round(server.compute_input_us),
            "server_compute_infer_us": _round(server.compute_infer_us),
            "server_compute_output_us": _round(server.compute_output_us),
            "server_overhead_us": _round(server.overhead_us),
        }
    values.update(server_values)
    assert tuple(values) == COLUMNS
    return values


def to_json(report: PerfReport) -> dict[str, Any]:
    config = report.config
    return {
        "schema_version": SCHEMA_VERSION,
        "tool": "sonic perf",
        "time": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()),
        "url": config.url,
        "model": config.model,
        "model_version": config.version,
        "max_batch_size": report.model.max_batch_size,
        "inputs": [
            {"name": s.name, "datatype": s.datatype, "dims": list(s.dims)} for s in report.model.inputs
        ],
        "batch_size": config.batch_size,
        "input_data": config.input_data,
        "shared_memory": {
            "kind": config.shared_memory.kind.value,
            "output_shared_memory_size": config.shared_memory.output_bytes
            if config.shared_memory.used
            else None,
        },
        "measurement": {
            "window_s": config.measurement.window_s,
            "stability_percentage": config.measurement.stability_percentage,
            "stable_windows": config.measurement.stable_windows,
            "max_windows": config.measurement.max_windows,
        },
        "machine": {
            "cpus": os.cpu_count(),
            "platform": platform.platform(),
            "python": platform.python_version(),
        },
        "notes": list(report.notes),
        "errors": sum(r.errors_all_windows for r in report.results),
        "columns": list(COLUMNS),
        "results": [row(r, config.shared_memory.kind) for r in report.results],
    }


def write_json(report: PerfReport, path: Path) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(json.dumps(to_json(report), indent=2) + "\n", encoding="utf-8")


def write_csv(rows: Sequence[Row], path: Path) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    with path.open("w", newline="", encoding="utf-8") as handle:
        writer = csv.DictWriter(handle, fieldnames=COLUMNS)
        writer.writeheader()
        for values in rows:
            writer.writerow({k: "" if v is None else v for k, v in values.items()})


def summary_line(result: LevelResult, shared_memory: SharedMemoryKind) -> str:
    memory = f" ({shared_memory.value} shared memory)" if shared_memory is not SharedMemoryKind.NONE else ""
    text = (
        f"{result.level.label}{memory}: {result.inferences_per_s:,.1f} infer/s, {result.requests_per_s:,.1f} req/s, "
        f"latency mean {result.latency.mean_us:,.0f} us p50 {result.latency.p50_us:,.0f} "
        f"p90 {result.latency.p90_us:,.0f} p95 {result.latency.p95_us:,.0f} p99 {result.latency.p99_us:,.0f} us"
    )
    if result.server is not None:
        s = result.server
        text += (
            f"; server: queue {s.queue_us:,.0f} input {s.compute_input_us:,.0f} infer {s.compute_infer_us:,.0f} "
            f"output {s.compute_output_us:,.0f} overhead {s.overhead_us:,.0f} us, batch {s.average_batch:.1f}"
        )
    text += f"; {result.errors_all_windows} errors"
    if result.errors_all_windows:
        text += f" (last: {result.last_error})"
    if not result.stable:
        text += " [not stable]"
    return text
