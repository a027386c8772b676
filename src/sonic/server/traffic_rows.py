"""One traffic record (:mod:`sonic.traffic.schema`) from a request the model saw, on the event loop.

Only what is at hand is read: the request's tensors, parameters and timing. Input contents are copied
only for the requests the recorder samples.
"""

from __future__ import annotations

import time
from collections.abc import Sequence
from typing import Any, Protocol

import numpy as np
import numpy.typing as npt

from sonic.protocol.errors import SonicError
from sonic.protocol.types import InferRequest, InputTensor
from sonic.server.stats import RequestTiming
from sonic.traffic.config import TrafficLogConfig

Pending = tuple[Any, ...]  # request_row's record: expanded to the schema's row by expand_row


class TrafficRecorder(Protocol):
    """What the server needs of the recorder (:class:`sonic.traffic.writer.TrafficLog`)."""

    enabled: bool

    def start(self) -> None: ...

    def wants_contents(self) -> bool: ...

    def record(self, pending: Pending) -> None: ...

    def close(self) -> None: ...


def open_traffic_log(config: TrafficLogConfig | None) -> TrafficRecorder | None:
    """The recorder ``sonic serve --traffic-log`` asks for (not started), or None."""
    if config is None:
        return None
    from sonic.traffic.writer import TrafficLog  # noqa: PLC0415  (pyarrow, only when recording)

    return TrafficLog(config, expand_row)


def _nbytes(tensor: InputTensor) -> int:
    if tensor.raw is not None:
        return len(tensor.raw)
    if tensor.array is not None:
        return _array_bytes(tensor.array)
    return tensor.shm.byte_size if tensor.shm is not None else 0


def _array_bytes(array: npt.NDArray[Any]) -> int:
    if array.dtype == np.object_:  # BYTES: the elements' own lengths, as on the wire
        return sum(len(x) if isinstance(x, bytes | str) else 0 for x in array.flat)
    return array.nbytes


def _contents(request: InferRequest) -> list[bytes] | None:
    pieces = []
    for tensor in request.inputs:
        if tensor.raw is not None:
            pieces.append(bytes(tensor.raw))
        elif tensor.array is not None and tensor.array.dtype != np.object_:
            pieces.append(tensor.array.tobytes())
        else:
            return None  # JSON BYTES or a region no longer mapped here: not kept
    return pieces


def request_row(
    request: InferRequest,
    version: int,
    batch_size: int,
    timing: RequestTiming | None,
    total_ns: int,
    outputs: Sequence[npt.NDArray[Any]] = (),
    error: BaseException | None = None,
    *,
    keep_contents: bool = False,
) -> Pending:
    """What the event loop keeps of a request: small values and references, no tensor (see expand_row)."""
    status = "OK"
    if error is not None:
        status = error.code.name if isinstance(error, SonicError) else "CANCELLED"
    return (
        time.time_ns() - total_ns,
        request.model_name,
        version,
        request.request_id,
        status,
        batch_size,
        tuple((t.name, t.datatype, t.shape, _nbytes(t)) for t in request.inputs),
        sum(_array_bytes(a) for a in outputs),
        request.parameters,
        timing,
        total_ns,
        _contents(request) if keep_contents else None,
    )


def expand_row(pending: Pending) -> tuple[Any, ...]:
    """The schema's row (:data:`sonic.traffic.schema.COLUMNS`) of a pending record, on the writer thread."""
    (
        arrival,
        model,
        version,
        request_id,
        status,
        batch_size,
        inputs,
        out_bytes,
        parameters,
        timing,
        total_ns,
        contents,
    ) = pending
    sequence_id = parameters.get("sequence_id", "")
    priority, timeout = parameters.get("priority", 0), parameters.get("timeout", 0)
    us = 1000
    return (
        arrival,
        model,
        str(version),
        request_id,
        status,
        batch_size,
        [name for name, _, _, _ in inputs],
        [datatype for _, datatype, _, _ in inputs],
        [list(shape) for _, _, shape, _ in inputs],
        sum(size for _, _, _, size in inputs),
        out_bytes,
        "" if sequence_id in ("", 0) else str(sequence_id),
        parameters.get("sequence_start") is True,
        parameters.get("sequence_end") is True,
        priority if isinstance(priority, int) else 0,
        timeout if isinstance(timeout, int) else 0,
        timing.queue_ns // us if timing else 0,
        timing.compute_input_ns // us if timing else 0,
        timing.compute_infer_ns // us if timing else 0,
        timing.compute_output_ns // us if timing else 0,
        total_ns // us,
        timing.execution if timing else 0,
        timing.execution_batch_size if timing else 0,
        contents,
    )
