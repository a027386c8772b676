"""Triton / KServe v2 datatypes: names, config enums, numpy types and tensor byte encoding.

BYTES tensors travel as a sequence of elements, each a 4-byte little-endian length followed by the
bytes; every other type travels as the raw little-endian array. BF16 uses ``ml_dtypes.bfloat16``
(a dependency of onnx) so it keeps its 2-byte width end to end.
"""

from __future__ import annotations

import struct
from collections.abc import Callable, Iterable
from dataclasses import dataclass
from typing import Any

import ml_dtypes
import numpy as np
import numpy.typing as npt
from tritonclient.grpc import model_config_pb2

from sonic.protocol.errors import InvalidArgumentError, quote


@dataclass(frozen=True)
class Datatype:
    """One KServe v2 datatype: wire name, config enum, numpy type and typed-contents field."""

    name: str
    config_enum: int
    numpy: np.dtype[np.generic]
    contents_field: str | None  # field of InferTensorContents; None: raw bytes only


def _dt(name: str, enum_name: str, numpy_type: type | np.dtype[np.generic], field: str | None) -> Datatype:
    return Datatype(name, model_config_pb2.DataType.Value(enum_name), np.dtype(numpy_type), field)


DATATYPES: tuple[Datatype, ...] = (
    _dt("BOOL", "TYPE_BOOL", np.bool_, "bool_contents"),
    _dt("UINT8", "TYPE_UINT8", np.uint8, "uint_contents"),
    _dt("UINT16", "TYPE_UINT16", np.uint16, "uint_contents"),
    _dt("UINT32", "TYPE_UINT32", np.uint32, "uint_contents"),
    _dt("UINT64", "TYPE_UINT64", np.uint64, "uint64_contents"),
    _dt("INT8", "TYPE_INT8", np.int8, "int_contents"),
    _dt("INT16", "TYPE_INT16", np.int16, "int_contents"),
    _dt("INT32", "TYPE_INT32", np.int32, "int_contents"),
    _dt("INT64", "TYPE_INT64", np.int64, "int64_contents"),
    _dt("FP16", "TYPE_FP16", np.float16, None),
    _dt("FP32", "TYPE_FP32", np.float32, "fp32_contents"),
    _dt("FP64", "TYPE_FP64", np.float64, "fp64_contents"),
    _dt("BF16", "TYPE_BF16", np.dtype(ml_dtypes.bfloat16), None),
    _dt("BYTES", "TYPE_STRING", np.object_, "bytes_contents"),
)

BY_NAME: dict[str, Datatype] = {d.name: d for d in DATATYPES}
BY_CONFIG_ENUM: dict[int, Datatype] = {d.config_enum: d for d in DATATYPES}
BY_NUMPY: dict[np.dtype[np.generic], Datatype] = {d.numpy: d for d in DATATYPES}


def from_name(name: str) -> Datatype:
    try:
        return BY_NAME[name]
    except KeyError:
        raise InvalidArgumentError(
            f"unknown datatype '{name}', expected one of {', '.join(BY_NAME)}"
        ) from None


def from_config_enum(value: int) -> Datatype:
    try:
        return BY_CONFIG_ENUM[value]
    except KeyError:
        name = model_config_pb2.DataType.Name(value) if value in model_config_pb2.DataType.values() else value
        raise InvalidArgumentError(f"datatype {name} has no KServe v2 equivalent") from None


def from_numpy(dtype: np.dtype[np.generic]) -> Datatype:
    if dtype.kind in "SUO":
        return BY_NAME["BYTES"]
    try:
        return BY_NUMPY[dtype.newbyteorder("=") if dtype.byteorder == ">" else dtype]
    except KeyError:
        raise InvalidArgumentError(f"numpy dtype {dtype} has no KServe v2 datatype") from None


def element_count(shape: tuple[int, ...] | list[int]) -> int:
    count = 1
    for dim in shape:
        count *= dim
    return count


# --- BYTES encoding -----------------------------------------------------------------------------------

_LENGTH = struct.Struct("<I")


def element_bytes(item: object) -> bytes:
    """One BYTES element as Triton's Python backend writes it (``serialize_byte_tensor``): bytes as they
    are, anything else as ``str(item)`` in UTF-8, so the number 1 is ``b"1"``, never ``bytes(1)`` (one
    zero byte), and a float is its text, not a TypeError."""
    return item if isinstance(item, bytes) else str(item).encode("utf-8")


def serialize_bytes_tensor(array: npt.NDArray[Any]) -> bytes:
    """Length-prefixed encoding of a BYTES tensor (object, bytes or str array), in C order."""
    parts: list[bytes] = []
    for item in array.reshape(-1):
        data = element_bytes(item)
        parts.append(_LENGTH.pack(len(data)))
        parts.append(data)
    return b"".join(parts)


Where = str | Callable[[], str]  # names a tensor in errors; a callable is called only for an error


def _text(where: Where) -> str:
    return where() if callable(where) else where


def _reshaped(array: npt.NDArray[Any], shape: tuple[int, ...], where: Where) -> npt.NDArray[Any]:
    """``array`` in the client's ``shape``. numpy refuses shapes whose dimensions multiply past its index
    range even when one of them is 0 (no elements): that is the client's error, not ours."""
    try:
        return array.reshape(shape)
    except ValueError as exc:
        raise InvalidArgumentError(f"{_text(where)}: shape {list(shape)} cannot be used: {exc}") from None


def deserialize_bytes_tensor(buffer: bytes | memoryview, count: int, where: Where) -> npt.NDArray[Any]:
    """Decode ``count`` length-prefixed elements; ``where`` names the tensor in errors."""
    view = memoryview(buffer)
    # Elements are collected as they are read, the array made at the end: ``count`` comes from the
    # client's shape, so an array made first could be any size; each element read takes 4 bytes at least.
    elements: list[bytes] = []
    offset = 0
    for index in range(count):
        if offset + 4 > len(view):
            raise InvalidArgumentError(
                f"{_text(where)}: malformed BYTES data: element {index} of {count} has no 4-byte length prefix "
                f"(buffer is {len(view)} bytes)"
            )
        (length,) = _LENGTH.unpack_from(view, offset)
        offset += 4
        if offset + length > len(view):
            raise InvalidArgumentError(
                f"{_text(where)}: malformed BYTES data: element {index} declares {length} bytes but only "
                f"{len(view) - offset} remain"
            )
        elements.append(bytes(view[offset : offset + length]))
        offset += length
    if offset != len(view):
        raise InvalidArgumentError(
            f"{_text(where)}: malformed BYTES data: {len(view) - offset} bytes left over after {count} elements"
        )
    items = np.empty(count, dtype=np.object_)
    items[:] = elements
    return items


def array_from_bytes(
    buffer: bytes | memoryview, datatype: Datatype, shape: tuple[int, ...], where: Where
) -> npt.NDArray[Any]:
    """View request bytes as an array without copying (BYTES elements are decoded)."""
    count = element_count(shape)
    if count < 0:
        raise InvalidArgumentError(f"{_text(where)}: shape {list(shape)} has a negative dimension")
    if datatype.name == "BYTES":
        return _reshaped(deserialize_bytes_tensor(buffer, count, where), shape, where)
    expected = count * datatype.numpy.itemsize
    if len(buffer) != expected:
        raise InvalidArgumentError(
            f"{_text(where)}: unexpected total byte size {len(buffer)} for {datatype.name} shape {list(shape)}, "
            f"expecting {expected}"
        )
    return _reshaped(np.frombuffer(buffer, dtype=datatype.numpy), shape, where)


def array_to_bytes(array: npt.NDArray[Any], datatype: Datatype) -> bytes | memoryview:
    """Bytes of an output array; a view of C-contiguous data, a copy only when it must."""
    if datatype.name == "BYTES":
        return serialize_bytes_tensor(array)
    try:  # the buffer protocol's bytes of a C-contiguous array: ~0.2 µs, a fifth of the way below
        return memoryview(array).cast("B")  # type: ignore[arg-type]
    except (TypeError, ValueError):  # not C-contiguous, a zero in its shape, or no buffer format (bfloat16)
        pass
    if not array.flags.c_contiguous:
        array = np.ascontiguousarray(array)
    # A uint8 view gives a plain byte buffer for every dtype (bool and bfloat16 included).
    return memoryview(array.reshape(-1).view(np.uint8))  # type: ignore[arg-type]


def count_mismatch(datatype: Datatype, name: str, model: str, expected: int, given: int) -> str:
    """Triton's words for typed contents (gRPC ``contents``, JSON BYTES ``data``) whose element count is
    not the shape's: a BYTES input counts strings (other words for too few than for too many), any other
    counts bytes."""
    if datatype.name == "BYTES" and given < expected:
        return (
            f"expected {expected} string elements for inference input {quote(name)} for model "
            f"{quote(model)}, got {given}"
        )
    if datatype.name == "BYTES":
        return (
            f"unexpected number of string elements {given} for inference input {quote(name)} for model "
            f"{quote(model)}, expecting {expected}"
        )
    size = datatype.numpy.itemsize
    return (
        f"input byte size mismatch for input {quote(name)} for model {quote(model)}. "
        f"Expected {expected * size}, got {given * size}"
    )


def array_from_contents(
    values: object, datatype: Datatype, shape: tuple[int, ...], where: str
) -> npt.NDArray[Any]:
    """Array from typed contents (gRPC ``InferTensorContents``, HTTP JSON ``data``).

    Values come from the client: BYTES elements must be strings or bytes (``bytes(n)`` of a number would
    allocate n bytes), and integers must fit the datatype (numpy would wrap them, or overflow).
    """
    if any(dim < 0 for dim in shape):  # a negative count would reach numpy (an internal error)
        raise InvalidArgumentError(f"{where}: shape {list(shape)} has a negative dimension")
    count = element_count(shape)
    if datatype.name == "BYTES":
        return _bytes_from_contents(values, shape, count, where)
    try:
        array = np.asarray(values).reshape(-1)  # first as they are, so their range can be checked
        if datatype.numpy.kind in "iu" and array.size:
            _check_integers(array, datatype, where)
        if datatype.name == "BOOL" and array.size and array.dtype.kind != "b":
            # JSON 300 or "text" for a BOOL input: Triton refuses it (numpy would make it true)
            odd = next((v for v in array.tolist() if not isinstance(v, bool)), array.reshape(-1)[0].item())
            raise InvalidArgumentError(f"{where}: contents are not BOOL values: {odd!r} is not a boolean")
        # Floats past the type's range become infinities, as in Triton (a C++ cast), without numpy's warning.
        with np.errstate(over="ignore"):
            array = array.astype(datatype.numpy, copy=False)
    except (TypeError, ValueError, OverflowError) as exc:
        raise InvalidArgumentError(f"{where}: contents are not {datatype.name} values: {exc}") from None
    if array.size != count:
        raise InvalidArgumentError(
            f"{where}: expected {count} {datatype.name} elements for shape {list(shape)}, got {array.size}"
        )
    return _reshaped(array, shape, where)


def _check_integers(array: npt.NDArray[Any], datatype: Datatype, where: str) -> None:
    """JSON 1.5 or true for an integer input is refused, as Triton refuses it (numpy would truncate it)."""
    _check_integer_range(array, datatype, where)
    if array.dtype.kind in "fb":
        flat = array.reshape(-1).tolist()
        odd = next((v for v in flat if isinstance(v, bool) or not float(v).is_integer()), flat[0])
        raise InvalidArgumentError(
            f"{where}: contents are not {datatype.name} values: {odd!r} is not an integer"
        )
    _check_integer_range(array, datatype, where)


def _check_integer_range(array: npt.NDArray[Any], datatype: Datatype, where: str) -> None:
    info = np.iinfo(datatype.numpy.name)
    if array.dtype.kind == "O":  # mixed values (numbers with null, numbers past int64): each int checked
        for value in array:
            if isinstance(value, int) and not info.min <= value <= info.max:
                raise InvalidArgumentError(
                    f"{where}: value {value} is out of range for {datatype.name} ({info.min}..{info.max})"
                )
        return  # anything else is converted (or refused) by astype
    if array.dtype.kind not in "iuf":
        return  # strings: converted (or refused) by astype
    low, high = array.min(), array.max()
    if array.dtype.kind == "f":
        if not (np.isfinite(low) and np.isfinite(high)):
            raise InvalidArgumentError(f"{where}: {datatype.name} contents must be finite numbers")
        # As floats the largest int64/uint64 round up to 2**63/2**64, which no longer fit: compare past it.
        too_high = high >= float(info.max) + 1
    else:
        too_high = high > info.max
    if low < info.min or too_high:
        value = low if low < info.min else high
        raise InvalidArgumentError(
            f"{where}: value {value} is out of range for {datatype.name} ({info.min}..{info.max})"
        )


def _bytes_from_contents(values: object, shape: tuple[int, ...], count: int, where: str) -> npt.NDArray[Any]:
    if isinstance(values, np.ndarray):
        flat: list[object] = values.reshape(-1).tolist()
    elif isinstance(values, (str, bytes, bytearray, dict)) or not isinstance(values, Iterable):
        raise InvalidArgumentError(
            f"{where}: BYTES contents must be a list of strings, got {type(values).__name__}"
        )
    else:
        flat = list(values)
    if len(flat) != count:
        raise InvalidArgumentError(
            f"{where}: expected {count} BYTES elements for shape {list(shape)}, got {len(flat)}"
        )
    items = np.empty(count, dtype=np.object_)
    for index, item in enumerate(flat):
        if isinstance(item, str):
            items[index] = item.encode("utf-8", errors="surrogatepass")
        elif isinstance(item, bytes):
            items[index] = item
        else:
            raise InvalidArgumentError(  # Triton's words (JSON is where anything but bytes comes from)
                f"{where}: Unable to parse JSON bytes array: attempt to access JSON non-string as string "
                f"(BYTES element {index} is {type(item).__name__}, not a string)"
            )
    return _reshaped(items, shape, where)
