"""Ragged batching as Triton documents it: ragged inputs, ``batch_input`` and ``batch_output``.

An input with ``allow_ragged_batch: true`` may differ in shape between the requests of one batch.
The backend then gets the requests' elements concatenated into one 1-D tensor (as Triton's
onnxruntime, TensorFlow and TensorRT backends do), plus the ``batch_input`` tensors the config asks
for, which tell the model where each request's elements are:

- ``BATCH_ELEMENT_COUNT``: ``[requests]``, each request's element count of the source input;
- ``BATCH_ACCUMULATED_ELEMENT_COUNT``: ``[requests]``, the running total (where each request ends);
- ``BATCH_ACCUMULATED_ELEMENT_COUNT_WITH_ZERO``: ``[requests + 1]``, the same with a leading 0;
- ``BATCH_MAX_ELEMENT_COUNT_AS_SHAPE``: shape ``[largest element count]`` (its values mean nothing);
- ``BATCH_ITEM_SHAPE``: ``[batch rows, rank - 1]``, each batch row's shape without the batch dimension;
- ``BATCH_ITEM_SHAPE_FLATTEN``: the same, flattened to 1-D.

A ``batch_output`` of kind ``BATCH_SCATTER_WITH_INPUT_SHAPE`` is read as the requests' elements one
after another: each request gets the next ``prod(shape)`` elements, its shape being the output's
config dims (batch dimension first) with every ``-1`` taken from the source input's shape.

Everything here is a pure function of arrays and shapes; :mod:`.tensors` calls it.
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np
import numpy.typing as npt
from tritonclient.grpc import model_config_pb2

from sonic.protocol import dtypes
from sonic.protocol.errors import InternalError, ModelConfigError

Kind = model_config_pb2.BatchInput.Kind
_KINDS = {
    Kind.BATCH_ELEMENT_COUNT,
    Kind.BATCH_ACCUMULATED_ELEMENT_COUNT,
    Kind.BATCH_ACCUMULATED_ELEMENT_COUNT_WITH_ZERO,
    Kind.BATCH_MAX_ELEMENT_COUNT_AS_SHAPE,
    Kind.BATCH_ITEM_SHAPE,
    Kind.BATCH_ITEM_SHAPE_FLATTEN,
}


@dataclass(frozen=True)
class BatchInputSpec:
    kind: int  # model_config_pb2.BatchInput.Kind
    target: str
    dtype: np.dtype[Any]
    source: str


@dataclass(frozen=True)
class ScatterSpec:
    source: str
    dims: tuple[int, ...]  # the output's config dims, batch dimension (-1) first


@dataclass(frozen=True)
class RaggedPlan:
    """What a config asks of merge and split beyond concatenating rows."""

    ragged_inputs: frozenset[str]
    batch_inputs: tuple[BatchInputSpec, ...]
    scatter_outputs: Mapping[str, ScatterSpec]

    @classmethod
    def from_config(cls, config: model_config_pb2.ModelConfig) -> RaggedPlan | None:
        """The plan of a config, None when it has no ragged input, batch input or batch output."""
        ragged = frozenset(t.name for t in config.input if t.allow_ragged_batch)
        if not ragged and not config.batch_input and not config.batch_output:
            return None
        model = config.name
        if config.max_batch_size <= 0:
            raise ModelConfigError(
                f"model '{model}': allow_ragged_batch, batch_input and batch_output need max_batch_size > 0"
            )
        inputs = {t.name for t in config.input}
        batch_inputs = []
        for entry in config.batch_input:
            if entry.kind not in _KINDS or len(entry.target_name) != 1 or len(entry.source_input) != 1:
                raise ModelConfigError(
                    f"model '{model}': batch_input {list(entry.target_name)} needs a known kind, one "
                    f"target_name and one source_input"
                )
            if entry.source_input[0] not in inputs:
                raise ModelConfigError(
                    f"model '{model}': batch_input '{entry.target_name[0]}' reads unknown input "
                    f"'{entry.source_input[0]}'"
                )
            if entry.data_type not in (model_config_pb2.TYPE_INT32, model_config_pb2.TYPE_FP32):
                raise ModelConfigError(
                    f"model '{model}': batch_input '{entry.target_name[0]}' data_type must be TYPE_INT32 "
                    f"or TYPE_FP32"
                )
            dtype = dtypes.from_config_enum(entry.data_type).numpy
            batch_inputs.append(
                BatchInputSpec(entry.kind, entry.target_name[0], dtype, entry.source_input[0])
            )
        outputs = {t.name: t for t in config.output}
        scatter = {}
        for entry in config.batch_output:
            if entry.kind != model_config_pb2.BatchOutput.BATCH_SCATTER_WITH_INPUT_SHAPE or not (
                len(entry.source_input) == 1 and entry.source_input[0] in inputs
            ):
                raise ModelConfigError(
                    f"model '{model}': batch_output {list(entry.target_name)} needs kind "
                    f"BATCH_SCATTER_WITH_INPUT_SHAPE and one known source_input"
                )
            for target in entry.target_name:
                if target not in outputs:
                    raise ModelConfigError(f"model '{model}': batch_output names unknown output '{target}'")
                dims = (-1, *(int(d) for d in outputs[target].dims))
                scatter[target] = ScatterSpec(entry.source_input[0], dims)
        return cls(ragged, tuple(batch_inputs), scatter)


def element_count(shape: Sequence[int]) -> int:
    return math.prod(shape)


def batch_input_tensor(spec: BatchInputSpec, shapes: Sequence[Sequence[int]]) -> npt.NDArray[Any]:
    """The ``batch_input`` tensor for requests whose source input has ``shapes`` (batch dimension first)."""
    counts = [element_count(shape) for shape in shapes]
    if spec.kind == Kind.BATCH_ELEMENT_COUNT:
        return np.array(counts, dtype=spec.dtype)
    if spec.kind == Kind.BATCH_ACCUMULATED_ELEMENT_COUNT:
        return np.cumsum(counts).astype(spec.dtype)
    if spec.kind == Kind.BATCH_ACCUMULATED_ELEMENT_COUNT_WITH_ZERO:
        return np.concatenate([[0], np.cumsum(counts)]).astype(spec.dtype)
    if spec.kind == Kind.BATCH_MAX_ELEMENT_COUNT_AS_SHAPE:
        # Triton leaves the values uninitialised: only the shape carries information.
        return np.zeros(max(counts), dtype=spec.dtype)
    rows = [list(shape[1:]) for shape in shapes for _ in range(shape[0])]
    item_shapes = np.array(rows, dtype=spec.dtype).reshape(len(rows), len(shapes[0]) - 1)
    if spec.kind == Kind.BATCH_ITEM_SHAPE:
        return item_shapes
    return item_shapes.reshape(-1)  # BATCH_ITEM_SHAPE_FLATTEN


def merge_inputs(
    plan: RaggedPlan, requests: Sequence[Mapping[str, npt.NDArray[Any]]]
) -> dict[str, npt.NDArray[Any]]:
    """The backend's inputs for a batch: ragged inputs flattened and concatenated, the rest by rows."""
    merged: dict[str, npt.NDArray[Any]] = {}
    for name in requests[0]:
        if name in plan.ragged_inputs:
            merged[name] = np.concatenate([request[name].reshape(-1) for request in requests])
        elif len(requests) == 1:
            merged[name] = requests[0][name]
        else:
            merged[name] = np.concatenate([request[name] for request in requests])
    for spec in plan.batch_inputs:
        merged[spec.target] = batch_input_tensor(spec, [request[spec.source].shape for request in requests])
    return merged


def scatter_output(
    model: str,
    name: str,
    spec: ScatterSpec,
    array: npt.NDArray[Any],
    source_shapes: Sequence[Sequence[int]],
) -> list[npt.NDArray[Any]]:
    """Each request's part of a ``BATCH_SCATTER_WITH_INPUT_SHAPE`` output (views, no copy)."""
    shapes = [
        tuple(shape[i] if d == -1 and i < len(shape) else d for i, d in enumerate(spec.dims))
        for shape in source_shapes
    ]
    needed = sum(element_count(shape) for shape in shapes)
    flat = array.reshape(-1)
    if flat.size != needed:
        raise InternalError(
            f"model '{model}' output '{name}' has {flat.size} elements, expected {needed} to scatter by "
            f"the shapes of input '{spec.source}' {[list(s) for s in source_shapes]}"
        )
    parts = []
    offset = 0
    for shape in shapes:
        count = element_count(shape)
        parts.append(flat[offset : offset + count].reshape(shape))
        offset += count
    return parts
