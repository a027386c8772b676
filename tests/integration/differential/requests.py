"""Inference requests as data, and their encodings: a gRPC ``ModelInferRequest`` and an HTTP/REST body.

One :class:`InferCase` is encoded for both protocols, so one generated case exercises the same
validation through both front ends of both servers.
"""

from __future__ import annotations

import json
import math
from dataclasses import dataclass, field
from typing import Any
from urllib.parse import quote

import numpy as np
from tests.integration.differential.calls import GrpcCall, HttpCall
from tests.integration.differential.repository import MODELS, ModelSpec, TensorSpec
from tritonclient.grpc import service_pb2

ParamValue = bool | int | float | str

NUMPY = {
    "BOOL": np.bool_, "UINT8": np.uint8, "UINT16": np.uint16, "UINT32": np.uint32, "UINT64": np.uint64,
    "INT8": np.int8, "INT16": np.int16, "INT32": np.int32, "INT64": np.int64,
    "FP16": np.float16, "FP32": np.float32, "FP64": np.float64,
}  # fmt: skip
CONTENTS_FIELD = {
    "BOOL": "bool_contents", "INT8": "int_contents", "INT16": "int_contents", "INT32": "int_contents",
    "INT64": "int64_contents", "UINT8": "uint_contents", "UINT16": "uint_contents",
    "UINT32": "uint_contents", "UINT64": "uint64_contents", "FP32": "fp32_contents",
    "FP64": "fp64_contents", "BYTES": "bytes_contents",
}  # fmt: skip
DATATYPES = (*NUMPY, "BYTES", "BF16")


@dataclass(frozen=True)
class TensorCase:
    name: str
    datatype: str
    shape: tuple[int, ...]
    mode: str  # "raw", "typed", "both" (raw and typed) or "none" (no data)
    count: int  # elements of data sent (may differ from the shape's)
    raw: bytes | None = None  # the raw data sent instead of that of ``count`` elements (malformed BYTES)


@dataclass(frozen=True)
class InferCase:
    model: str
    version: str
    request_id: str
    inputs: tuple[TensorCase, ...]
    outputs: tuple[str, ...] | None  # None: no output list (all outputs)
    parameters: tuple[tuple[str, ParamValue], ...] = ()
    extra_raw: int = 0  # raw_input_contents entries beyond the inputs' (gRPC only)
    # The model the case is meant for, where it is not one of repository.MODELS (a generated one).
    spec: ModelSpec | None = field(default=None, repr=False, compare=False)


def values(datatype: str, count: int) -> list[Any]:
    """``count`` elements of ``datatype`` as Python values (deterministic, small, exact in every type)."""
    if datatype == "BYTES":
        return [f"s{i}" for i in range(count)]
    if datatype == "BOOL":
        return [bool(i % 2) for i in range(count)]
    if datatype in {"FP16", "FP32", "FP64", "BF16"}:
        return [i * 0.5 for i in range(count)]
    return [i % 100 for i in range(count)]


def raw_bytes(datatype: str, count: int) -> bytes:
    """The raw (little-endian, BYTES length-prefixed) encoding of :func:`values`."""
    if datatype == "BYTES":
        return b"".join(len(s).to_bytes(4, "little") + s.encode() for s in values(datatype, count))
    if datatype == "BF16":  # the top half of the FP32 pattern
        as_fp32 = np.asarray(values(datatype, count), np.float32).view(np.uint32)
        return (as_fp32 >> 16).astype("<u2").tobytes()
    return np.asarray(values(datatype, count), NUMPY[datatype]).tobytes()


def tensor_bytes(tensor: TensorCase) -> bytes:
    return raw_bytes(tensor.datatype, tensor.count) if tensor.raw is None else tensor.raw


def infer_grpc(case: InferCase) -> GrpcCall:
    request = service_pb2.ModelInferRequest(
        model_name=case.model, model_version=case.version, id=case.request_id
    )
    for key, value in case.parameters:
        _set(request.parameters[key], value)
    raw = []
    for tensor in case.inputs:
        message = request.inputs.add(name=tensor.name, datatype=tensor.datatype, shape=tensor.shape)
        if tensor.mode in {"raw", "both"}:
            raw.append(tensor_bytes(tensor))
        if tensor.mode in {"typed", "both"}:
            field = CONTENTS_FIELD.get(tensor.datatype)
            if field is None:  # FP16/BF16 have no typed field: send it in the nearest one, Triton refuses it
                field = "fp32_contents"
            items = values(tensor.datatype, tensor.count)
            if tensor.datatype == "BYTES":
                items = [s.encode() for s in items]
            getattr(message.contents, field).extend(items)
    raw += [b"\0\0\0\0"] * case.extra_raw
    request.raw_input_contents.extend(raw)
    for name in case.outputs or ():
        request.outputs.add(name=name)
    return GrpcCall(
        "ModelInfer", request.SerializeToString(deterministic=True), what=repr(case), faults=faults(case)
    )


def _set(param: Any, value: ParamValue) -> None:
    if isinstance(value, bool):
        param.bool_param = value
    elif isinstance(value, int):
        param.int64_param = value
    elif isinstance(value, float):
        param.double_param = value
    else:
        param.string_param = value


def _nested(items: list[Any], shape: tuple[int, ...]) -> list[Any]:
    """``items`` as a nested list of ``shape`` when the counts agree, else flat (both are valid JSON data)."""
    if not shape or math.prod(shape) != len(items) or len(shape) == 1:
        return items
    step = math.prod(shape[1:])
    return [_nested(items[i * step : (i + 1) * step], shape[1:]) for i in range(shape[0])]


def infer_http(case: InferCase, *, binary_output: bool) -> HttpCall:
    """The KServe v2 JSON body, with the binary tensor extension for "raw" inputs."""
    body: dict[str, Any] = {}
    if case.request_id:
        body["id"] = case.request_id
    if case.parameters:
        body["parameters"] = dict(case.parameters)
    inputs = []
    binary = []
    for tensor in case.inputs:
        entry: dict[str, Any] = {
            "name": tensor.name,
            "datatype": tensor.datatype,
            "shape": list(tensor.shape),
        }
        if tensor.mode in {"typed", "both"}:
            entry["data"] = _nested(values(tensor.datatype, tensor.count), tensor.shape)
        if tensor.mode in {"raw", "both"}:
            data = tensor_bytes(tensor)
            entry["parameters"] = {"binary_data_size": len(data)}
            binary.append(data)
        inputs.append(entry)
    body["inputs"] = inputs
    if case.outputs is not None:
        body["outputs"] = [{"name": n, "parameters": {"binary_data": binary_output}} for n in case.outputs]
    elif binary_output:
        body.setdefault("parameters", {})["binary_data_output"] = True
    head = json.dumps(body).encode()
    headers = {"Content-Type": "application/json"}
    if binary:
        headers = {
            "Inference-Header-Content-Length": str(len(head)),
            "Content-Type": "application/octet-stream",
        }
    path = (
        f"/v2/models/{quote(case.model)}"
        + (f"/versions/{quote(case.version)}" if case.version else "")
        + "/infer"
    )
    return HttpCall("POST", path, head + b"".join(binary), headers, what=repr(case), faults=faults(case))


def _shape_ok(model: ModelSpec, spec: TensorSpec, shape: tuple[int, ...]) -> bool:
    dims = shape
    if model.max_batch_size:
        if not shape or not 1 <= shape[0] <= model.max_batch_size:
            return False
        dims = shape[1:]
    return len(dims) == len(spec.dims) and all(
        e in (-1, g) and g >= 0 for g, e in zip(dims, spec.dims, strict=True)
    )


def faults(case: InferCase) -> int:
    """How many things are wrong in ``case`` (a lower bound): with two or more, servers may name either."""
    model = case.spec if case.spec is not None and case.spec.name == case.model else None
    model = model or next((m for m in MODELS if m.name == case.model), None)
    if model is None:
        return 1 + (case.version not in {"", "1"})
    count = (case.version not in {"", "1"}) + (case.extra_raw > 0)
    specs = {t.name: t for t in model.inputs}
    names = [t.name for t in case.inputs]
    required = {t.name for t in model.required}
    count += len(names) != len(set(names)) or not required <= set(names)
    count += any(n not in {t.name for t in model.outputs} for n in case.outputs or ())
    batches = set()
    for tensor in case.inputs:
        spec = specs.get(tensor.name)
        if spec is None:
            count += 1
            continue
        count += tensor.datatype != spec.datatype
        count += not _shape_ok(model, spec, tensor.shape)
        count += all(d >= 0 for d in tensor.shape) and tensor.count != math.prod(tensor.shape)
        count += tensor.mode in {"none", "both"}
        count += tensor.mode != "raw" and tensor.datatype in {"FP16", "BF16"}
        if tensor.shape:
            batches.add(tensor.shape[0])
    count += bool(model.max_batch_size) and len(batches) > 1
    return count


def raw_http(model: str, version: str, body: bytes, header: str = "0", what: str = "") -> HttpCall:
    """Triton's raw binary request: ``Inference-Header-Content-Length`` 0 and the body one input's data."""
    path = f"/v2/models/{quote(model)}" + (f"/versions/{quote(version)}" if version else "") + "/infer"
    headers = {"Inference-Header-Content-Length": header, "Content-Type": "application/octet-stream"}
    return HttpCall("POST", path, body, headers, what=what or f"raw binary request {path} body {body!r}")
