"""Traces written the way ``sonic serve --traffic-log`` writes them, for the replay and tuning tests."""

from __future__ import annotations

from pathlib import Path

import numpy as np

from sonic.traffic.config import TrafficLogConfig
from sonic.traffic.schema import COLUMN_NAMES
from sonic.traffic.writer import TrafficLog

START_NS = 1_700_000_000_000_000_000
# Three bursts a quarter second apart, batch sizes mixed; every fifth request keeps its contents.
ARRIVALS_MS = [burst * 250 + i * 2 for burst in range(3) for i in range(10)]


def write_trace(
    directory: Path,
    arrivals_ms: list[int],
    *,
    model: str,
    dims: int,
    batches: tuple[int, ...] = (1, 2, 3),
    compute_us: int = 0,
) -> None:
    """A trace as the recorder writes it: ``arrivals_ms`` after a fixed start, batch sizes cycling through
    ``batches``, FP32 inputs ``[batch, dims]``; every fifth request keeps its contents."""
    log = TrafficLog(TrafficLogConfig(directory, flush_interval_s=3600))
    log.start()
    for index, arrival_ms in enumerate(arrivals_ms):
        batch = batches[index % len(batches)]
        contents = [np.full((batch, dims), index, np.float32).tobytes()] if index % 5 == 0 else None
        values = dict.fromkeys(COLUMN_NAMES, 0) | {
            "arrival_unix_ns": START_NS + arrival_ms * 1_000_000,
            "model": model,
            "version": "1",
            "request_id": f"r{index}",
            "status": "OK",
            "batch_size": batch,
            "input_names": ["INPUT0"],
            "input_datatypes": ["FP32"],
            "input_shapes": [[batch, dims]],
            "sequence_id": "",
            "sequence_start": False,
            "sequence_end": False,
            "contents": contents,
            "compute_infer_us": compute_us,
            "total_us": compute_us,
            "executed_batch_size": batch,
        }
        log.record(tuple(values.values()))
    log.close()
