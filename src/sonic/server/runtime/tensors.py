"""Merge a batch's inputs, run the backend, split its outputs: the work of an instance thread.

Runs off the event loop, on the instance's own thread; the results carry the phase timings that
the statistics extension reports (compute input: merge, compute infer: the backend, compute output:
split and checks).
"""

from __future__ import annotations

import math
import time
from collections.abc import Iterator, Sequence
from dataclasses import dataclass
from typing import overload

import numpy as np
import numpy.typing as npt

from sonic.protocol.errors import InternalError, SonicError
from sonic.server.backends.base import Backend, Batch, Request, RequestBackend
from sonic.server.runtime.ragged import RaggedPlan, merge_inputs, scatter_output
from sonic.server.work import ItemOutputs, WorkItem

ALIGN_BYTES = 64  # TensorFlow (Eigen) takes a 64-byte-aligned input without copying it again
ALIGN_MIN_BYTES = 1 << 16  # below this, aligning costs more (~10 us) than the copy it saves


def concatenate(parts: Sequence[npt.NDArray[np.generic]]) -> npt.NDArray[np.generic]:
    """``np.concatenate`` along the batch dimension; a large result lands on :data:`ALIGN_BYTES`.

    numpy's own allocations are 16-byte aligned, so TensorFlow copied every large merged input again.
    """
    first = parts[0]
    rows = sum(part.shape[0] for part in parts)
    nbytes = rows * math.prod(first.shape[1:]) * first.itemsize
    if nbytes < ALIGN_MIN_BYTES or first.dtype.hasobject:
        return np.concatenate(parts)
    buffer = np.empty(nbytes + ALIGN_BYTES, np.uint8)
    offset = -buffer.__array_interface__["data"][0] % ALIGN_BYTES
    merged = buffer[offset : offset + nbytes].view(first.dtype).reshape((rows, *first.shape[1:]))
    return np.concatenate(parts, out=merged)


@dataclass(slots=True)
class BatchResult:
    outputs: list[ItemOutputs | SonicError]  # one per request; an error here fails that request only
    started_ns: int
    input_ns: int
    infer_ns: int
    output_ns: int


def _request(item: WorkItem, output_names: Sequence[str]) -> Request:
    return Request(
        item.inputs,
        item.output_names or tuple(output_names),
        item.request_id,
        item.parameters,
        item.responses,
        item.trace,
    )


class _Requests(Sequence[Request]):
    """A batch's :class:`Request` objects, made on first use: most backends never look at them."""

    def __init__(self, batch: Sequence[WorkItem], output_names: Sequence[str]) -> None:
        self._batch = batch
        self._output_names = output_names
        self._made: list[Request] | None = None

    def _requests(self) -> list[Request]:
        if self._made is None:
            self._made = [_request(item, self._output_names) for item in self._batch]
        return self._made

    def __len__(self) -> int:
        return len(self._batch)

    @overload
    def __getitem__(self, index: int) -> Request: ...

    @overload
    def __getitem__(self, index: slice) -> Sequence[Request]: ...

    def __getitem__(self, index: int | slice) -> Request | Sequence[Request]:
        return self._requests()[index]

    def __iter__(self) -> Iterator[Request]:
        return iter(self._requests())


def run_requests(
    model: str, backend: RequestBackend, batch: Sequence[WorkItem], output_names: Sequence[str]
) -> BatchResult:
    """Hand the batch's requests to the backend as a list, unmerged."""
    started = time.perf_counter_ns()
    requests = [_request(item, output_names) for item in batch]
    results = backend.execute_requests(requests)
    executed = time.perf_counter_ns()
    if len(results) != len(batch):
        raise InternalError(f"model '{model}' returned {len(results)} responses for {len(batch)} requests")
    outputs: list[ItemOutputs | SonicError] = []
    for request, result in zip(requests, results, strict=True):
        if isinstance(result, SonicError):
            outputs.append(result)
        elif isinstance(result, Exception):
            outputs.append(InternalError(f"model '{model}': {result}"))
        elif request.responses is not None:  # decoupled: the responses went to the channel
            outputs.append({})
        elif missing := [name for name in request.output_names if name not in result]:
            outputs.append(InternalError(f"model '{model}' did not produce output(s) {', '.join(missing)}"))
        else:
            outputs.append(result)
    return BatchResult(outputs, started, 0, executed - started, 0)


def merge(
    batch: Sequence[WorkItem], output_names: Sequence[str], batched: bool, plan: RaggedPlan | None = None
) -> Batch:
    """One :class:`Batch` of the requests' inputs, concatenated along the batch dimension.

    With a ragged ``plan``, ragged inputs are concatenated flat and the batch inputs are added.
    """
    requests = _Requests(batch, output_names)
    if plan is not None:
        inputs = merge_inputs(plan, [item.inputs for item in batch])
        return Batch(inputs, output_names, requests, _rows(batch))
    if len(batch) == 1:
        inputs = batch[0].inputs
        rows = [slice(0, batch[0].batch_size) if batched else slice(None)]
        return Batch(inputs, output_names, requests, rows, batch[0].output_buffers)
    inputs = {name: concatenate([item.inputs[name] for item in batch]) for name in batch[0].inputs}
    return Batch(inputs, output_names, requests, _rows(batch))


def _rows(batch: Sequence[WorkItem]) -> list[slice]:
    rows = []
    offset = 0
    for item in batch:
        rows.append(slice(offset, offset + item.batch_size))
        offset += item.batch_size
    return rows


def split(
    model: str,
    outputs: ItemOutputs,
    merged: Batch,
    batched: bool,
    plan: RaggedPlan | None = None,
    batch: Sequence[WorkItem] = (),
) -> list[ItemOutputs | SonicError]:
    """Each request's rows of the outputs (views, no copy); a ragged ``plan`` needs the ``batch``."""
    missing = [name for name in merged.output_names if name not in outputs]
    if missing:
        raise InternalError(f"model '{model}' did not produce output(s) {', '.join(missing)}")
    if not batched:
        return [outputs]
    scattered = plan.scatter_outputs if plan is not None else {}
    rowed = {n: a for n, a in outputs.items() if n not in scattered} if scattered else outputs
    per_request = _split_rows(model, rowed, merged.rows)
    for name, spec in scattered.items():
        if name in outputs:
            shapes = [item.inputs[spec.source].shape for item in batch]
            parts = scatter_output(model, name, spec, outputs[name], shapes)
            for result, part in zip(per_request, parts, strict=True):
                result[name] = part
    return list(per_request)


def _split_rows(model: str, outputs: ItemOutputs, rows: Sequence[slice]) -> list[ItemOutputs]:
    """Each request's rows of outputs that have the batch dimension first."""
    total = rows[-1].stop
    for name, array in outputs.items():
        if array.ndim == 0 or array.shape[0] != total:
            raise InternalError(
                f"model '{model}' output '{name}' has shape {list(array.shape)}, expected batch "
                f"dimension {total} first"
            )
    if len(rows) == 1:
        return [outputs]
    return [{name: array[rows] for name, array in outputs.items()} for rows in rows]


def run_batch(
    model: str,
    backend: Backend,
    batch: Sequence[WorkItem],
    output_names: Sequence[str],
    batched: bool,
    plan: RaggedPlan | None = None,
) -> BatchResult:
    """Merge, execute and split one batch."""
    if isinstance(backend, RequestBackend):
        return run_requests(model, backend, batch, output_names)
    started = time.perf_counter_ns()
    merged = merge(batch, output_names, batched, plan)
    merge_done = time.perf_counter_ns()
    outputs = backend.execute_batch(merged)
    executed = time.perf_counter_ns()
    per_request = split(model, outputs, merged, batched, plan, batch)
    done = time.perf_counter_ns()
    return BatchResult(per_request, started, merge_done - started, executed - merge_done, done - executed)
