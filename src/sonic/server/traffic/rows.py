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
from sonic.server.metrics.stats import RequestTiming
from sonic.traffic.signatures import Signatures

Pending = tuple[Any, ...]  # request_row's record, PENDING_FIELDS; made a table by traffic_table


class TrafficRecorder(Protocol):
    """What a model needs of the recorder (:class:`sonic.server.traffic.switch.TrafficSwitch`)."""

    @property
    def enabled(self) -> bool: ...

    @property
    def signatures(self) -> Signatures: ...  # numbers the input signatures of the records it is handed

    def wants_contents(self) -> bool: ...

    def record(self, pending: Pending) -> None: ...


def _nbytes(tensor: InputTensor) -> int:
    if tensor.raw is not None:
        return len(tensor.raw)
    if tensor.array is not None:
        return array_bytes(tensor.array)
    return tensor.shm.byte_size if tensor.shm is not None else 0


def array_bytes(array: npt.NDArray[Any]) -> int:
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
    signatures: Signatures | None = None,
    responses: int | None = None,
    output_bytes: int | None = None,
) -> Pending:
    """What the event loop keeps of a request: scalars in :data:`PENDING_FIELDS` order, the input
    signature (names, datatypes and shapes: repeated request after request, converted once per flush by
    :mod:`.table`) and the sampled contents; no reference to a tensor. With ``signatures`` the
    signature is its number there, so the record holds no nested tuple (why: :mod:`sonic.traffic.signatures`).

    ``responses`` and ``output_bytes``: what a decoupled request's stream carried (counted as it went);
    by default one response of ``outputs``, none on error."""
    status = "OK"
    if error is not None:
        status = error.code.name if isinstance(error, SonicError) else "CANCELLED"
    parameters = request.parameters
    sequence_id = parameters.get("sequence_id", "")
    timing = timing or _NO_TIMING
    signature = tuple((t.name, t.datatype, t.shape) for t in request.inputs)
    return (
        time.time_ns() - total_ns,
        request.model_name,
        version,
        request.request_id,
        status,
        batch_size,
        signature if signatures is None else signatures.number(signature),
        sum(_nbytes(t) for t in request.inputs),
        sum(array_bytes(a) for a in outputs) if output_bytes is None else output_bytes,
        "" if sequence_id in ("", 0) else str(sequence_id),
        parameters.get("sequence_start") is True,
        parameters.get("sequence_end") is True,
        request.priority,
        request.timeout_us,
        timing.queue_ns,
        timing.compute_input_ns,
        timing.compute_infer_ns,
        timing.compute_output_ns,
        total_ns,
        timing.execution,
        timing.execution_batch_size,
        (0 if error is not None else 1) if responses is None else responses,
        _contents(request) if keep_contents else None,
    )


_NO_TIMING = RequestTiming(0, 0, 0, 0)
# request_row's fields; "signature" stands for input_names, input_datatypes and input_shapes, times are ns.
PENDING_FIELDS = (
    "arrival_unix_ns",
    "model",
    "version",
    "request_id",
    "status",
    "batch_size",
    "signature",
    "input_bytes",
    "output_bytes",
    "sequence_id",
    "sequence_start",
    "sequence_end",
    "priority",
    "timeout_us",
    "queue_ns",
    "compute_input_ns",
    "compute_infer_ns",
    "compute_output_ns",
    "total_ns",
    "executed_batch_id",
    "executed_batch_size",
    "responses",
    "contents",
)
