"""Traces written the way ``sonic serve --traffic-log`` writes them, for the replay and tuning tests."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import numpy as np

from sonic.protocol.dtypes import serialize_bytes_tensor
from sonic.traffic.config import TrafficLogConfig
from sonic.traffic.schema import COLUMN_NAMES
from sonic.traffic.writer import TrafficLog

START_NS = 1_700_000_000_000_000_000
# Three bursts a quarter second apart, batch sizes mixed; every fifth request keeps its contents.
ARRIVALS_MS = [burst * 250 + i * 2 for burst in range(3) for i in range(10)]


def record(
    arrival_ms: float,
    model: str,
    inputs: dict[str, tuple[str, np.ndarray[Any, Any]]],
    *,
    request_id: str = "",
    keep_contents: bool = True,
    status: str = "OK",
) -> dict[str, Any]:
    """One record as the recorder leaves it: ``inputs`` by name, each (datatype, array); BYTES arrays are
    written as the wire carries them (length-prefixed elements)."""
    batch = next(iter(inputs.values()))[1].shape[0] if inputs else 1
    contents = [
        serialize_bytes_tensor(array) if datatype == "BYTES" else array.tobytes()
        for datatype, array in inputs.values()
    ]
    return dict.fromkeys(COLUMN_NAMES, 0) | {
        "arrival_unix_ns": START_NS + int(arrival_ms * 1_000_000),
        "model": model,
        "version": "1",
        "request_id": request_id,
        "status": status,
        "batch_size": batch,
        "input_names": list(inputs),
        "input_datatypes": [datatype for datatype, _ in inputs.values()],
        "input_shapes": [list(array.shape) for _, array in inputs.values()],
        "sequence_id": "",
        "sequence_start": False,
        "sequence_end": False,
        "contents": contents if keep_contents else None,
        "executed_batch_size": batch,
    }


def write_records(directory: Path, records: list[dict[str, Any]]) -> None:
    """Records (:func:`record`) written by the recorder itself, as ``sonic serve --traffic-log`` leaves them."""
    log = TrafficLog(TrafficLogConfig(directory, flush_interval_s=3600))
    log.start()
    for values in records:
        log.record(tuple(values[name] for name in COLUMN_NAMES))
    log.close()


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
    records = []
    for index, arrival_ms in enumerate(arrivals_ms):
        batch = batches[index % len(batches)]
        values = np.full((batch, dims), index, np.float32)
        row = record(
            arrival_ms,
            model,
            {"INPUT0": ("FP32", values)},
            request_id=f"r{index}",
            keep_contents=index % 5 == 0,
        )
        records.append(row | {"compute_infer_us": compute_us, "total_us": compute_us})
    write_records(directory, records)
