"""Inputs (and request parameters) checked before sending; batches split to ``max_batch_size`` and joined back."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

import numpy as np
import numpy.typing as npt

from sonic.client.errors import ClientError, InputError
from sonic.client.transport.base import ModelInfo, TensorInfo
from sonic.protocol import dtypes
from sonic.protocol.errors import InvalidArgumentError
from sonic.protocol.types import ParameterValue, check_parameters

Arrays = dict[str, npt.NDArray[Any]]
Parameters = Mapping[str, ParameterValue]


def check_request_parameters(model: str, parameters: Parameters) -> None:
    """Parameters the server would refuse fail here, as :class:`InputError`, and are never sent."""
    try:
        check_parameters(parameters, f"model '{model}'")
    except InvalidArgumentError as exc:
        raise InputError(exc.message) from None


def check_class_counts(model: str, names: Sequence[str], class_counts: Mapping[str, int]) -> dict[str, int]:
    """``class_counts`` of outputs the call asks for, each a positive integer (the server refuses others)."""
    for name, given in class_counts.items():
        count: object = given  # from callers' code: checked, whatever its annotation says
        if name not in names:
            raise InputError(
                f"model '{model}': class_counts names output '{name}', which the call does not ask for "
                f"(outputs: {', '.join(names)})"
            )
        if isinstance(count, bool) or not isinstance(count, int) or count <= 0:
            raise InputError(
                f"model '{model}' output '{name}': class count must be a positive integer, got {count!r}"
            )
    return dict(class_counts)


def _dims_match(given: tuple[int, ...], expected: tuple[int, ...]) -> bool:
    return len(given) == len(expected) and all(e in (-1, g) for g, e in zip(given, expected, strict=True))


def _where(info: ModelInfo, spec: TensorInfo) -> str:
    """For error messages only (made when one is raised: these checks run on every call)."""
    return f"model '{info.name}' input '{spec.name}'"


def _check_dtype(array: npt.NDArray[Any], info: ModelInfo, spec: TensorInfo) -> None:
    if spec.datatype == "BYTES":
        if array.dtype.kind not in "OSU":
            raise InputError(
                f"{_where(info, spec)}: numpy dtype {array.dtype} given, expected BYTES (object, bytes or str)"
            )
        return
    expected = dtypes.from_name(spec.datatype).numpy
    if array.dtype != expected:
        raise InputError(
            f"{_where(info, spec)}: numpy dtype {array.dtype} given, expected {expected} ({spec.datatype})"
        )


def check_inputs(info: ModelInfo, inputs: Mapping[str, Any]) -> tuple[Arrays, int]:
    """The inputs as C-contiguous arrays, checked, and the batch size (1 for models without batching)."""
    specs = input_specs(info, inputs)
    arrays: Arrays = {}
    batch_sizes: dict[str, int] = {}
    for name, value in inputs.items():
        spec = specs[name]
        array = np.ascontiguousarray(value)
        _check_dtype(array, info, spec)
        check_shape(info, spec, tuple(array.shape), batch_sizes)
        arrays[name] = array
    return arrays, common_batch(info, batch_sizes)


def input_specs(info: ModelInfo, given: Mapping[str, Any]) -> dict[str, TensorInfo]:
    """The model's inputs by name, after checking that ``given`` names each of them once."""
    specs = {t.name: t for t in info.inputs}
    unknown = sorted(set(given) - set(specs))
    if unknown:
        raise InputError(f"model '{info.name}': unknown inputs {unknown}, expected {sorted(specs)}")
    missing = sorted(set(specs) - set(given))
    if missing:
        raise InputError(f"model '{info.name}': missing inputs {missing}")
    return specs


def check_shape(
    info: ModelInfo, spec: TensorInfo, shape: tuple[int, ...], batch_sizes: dict[str, int]
) -> None:
    """``shape`` against the input's dims (and the batch dimension); notes its batch size."""
    if info.max_batch_size > 0:
        if not shape or not _dims_match(shape[1:], spec.dims):
            dims = ", ".join(map(str, spec.dims))
            raise InputError(f"{_where(info, spec)}: shape {list(shape)} given, expected [batch, {dims}]")
        batch_sizes[spec.name] = shape[0]
    elif not _dims_match(shape, spec.dims):
        raise InputError(
            f"{_where(info, spec)}: shape {list(shape)} given, expected {list(spec.dims)} (model without batching)"
        )


def common_batch(info: ModelInfo, batch_sizes: dict[str, int]) -> int:
    if len(set(batch_sizes.values())) > 1:
        raise InputError(
            f"model '{info.name}': inputs have different batch sizes {batch_sizes}; all must match"
        )
    return next(iter(batch_sizes.values()), 1)


def output_shapes(info: ModelInfo, names: Sequence[str], batch: int) -> dict[str, tuple[int, ...] | None]:
    """Each output's shape when known before the call (no variable dims); None where it is not."""
    specs = {t.name: t for t in info.outputs}
    shapes: dict[str, tuple[int, ...] | None] = {}
    for name in names:
        dims = specs[name].dims
        if any(d < 0 for d in dims):
            shapes[name] = None
        else:
            shapes[name] = (batch, *dims) if info.max_batch_size > 0 else tuple(dims)
    return shapes


def split(arrays: Arrays, batch: int, max_batch_size: int) -> list[Arrays]:
    """Views of consecutive slices of at most ``max_batch_size`` along the batch dimension."""
    if max_batch_size <= 0 or batch <= max_batch_size:
        return [arrays]
    return [
        {name: array[start : start + max_batch_size] for name, array in arrays.items()}
        for start in range(0, batch, max_batch_size)
    ]


def join(parts: Sequence[Arrays]) -> Arrays:
    if len(parts) == 1:
        return parts[0]
    return {name: np.concatenate([p[name] for p in parts]) for name in parts[0]}


def empty_outputs(info: ModelInfo, names: Sequence[str]) -> Arrays:
    """Outputs of a batch of size 0: no server call; variable dims are 0."""
    specs = {t.name: t for t in info.outputs}
    result: Arrays = {}
    for name in names:
        spec = specs[name]
        shape = (0, *(max(d, 0) for d in spec.dims))
        result[name] = np.empty(shape, dtype=dtypes.from_name(spec.datatype).numpy)
    return result


def output_names(info: ModelInfo, requested: Sequence[str] | None) -> list[str]:
    known = [t.name for t in info.outputs]
    if requested is None:
        return known
    unknown = sorted(set(requested) - set(known))
    if unknown:
        raise InputError(f"model '{info.name}': unknown outputs {unknown}, expected some of {known}")
    return list(requested)


def encode(info: ModelInfo, arrays: Arrays) -> dict[str, tuple[npt.NDArray[Any], str, bytes | memoryview]]:
    """Each checked input as (array, datatype, wire bytes): the bytes view the array's memory
    except for BYTES (encoded)."""
    specs = {t.name: t for t in info.inputs}
    return {
        n: (a, specs[n].datatype, dtypes.array_to_bytes(a, dtypes.from_name(specs[n].datatype)))
        for n, a in arrays.items()
    }


def decode(data: bytes | memoryview, datatype: str, shape: tuple[int, ...], where: str) -> npt.NDArray[Any]:
    """An output array viewing ``data`` (``np.frombuffer``; BYTES elements are decoded)."""
    try:
        return dtypes.array_from_bytes(data, dtypes.from_name(datatype), shape, where)
    except Exception as exc:  # noqa: BLE001  (server errors about malformed outputs become ours)
        raise ClientError(f"{where}: cannot decode output: {exc}") from None
