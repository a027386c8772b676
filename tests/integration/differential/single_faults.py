"""Inference requests with exactly one fault each: the cases that hold sonic's words to Triton's.

Two faults in one request may be named in either order (intended row ``validation-order``), so for them
only the status is compared; a wording that only such cases reach can change unnoticed. Each fault here
is a valid request (:func:`valid_case`) bent in one way, and aims at one refusal: of the request's
model or version, of an input (name, datatype, shape, batch, data), of an output, of a parameter, of the
HTTP body's JSON (fields of the wrong type, data that does not fit the datatype, binary sizes) or of the
gRPC message (a parameter with no value, shared-memory references). Every call carries ``faults=1``.
"""

from __future__ import annotations

import dataclasses
import json
import math
from collections.abc import Callable
from typing import Any

from hypothesis import strategies as st
from tests.integration.differential.calls import Call, GrpcCall, HttpCall
from tests.integration.differential.repository import (
    BATCHED,
    MIXED,
    SPARE,
    TEXT,
    VECTOR,
    ModelSpec,
    TensorSpec,
)
from tests.integration.differential.requests import (
    DATATYPES,
    InferCase,
    ParamValue,
    TensorCase,
    infer_grpc,
    infer_http,
)
from tritonclient.grpc import service_pb2

FAULT_MODELS = (MIXED, BATCHED, SPARE, TEXT, VECTOR)
NO_TYPED = {"FP16", "BF16"}  # no typed gRPC field, and JSON refuses them on Triton (row fp16-json)


def _dims(draw: st.DrawFn, model: ModelSpec, spec: TensorSpec, batch: int) -> tuple[int, ...]:
    dims = tuple(draw(st.integers(1, 3)) if d < 0 else d for d in spec.dims)
    return (batch, *dims) if model.max_batch_size else dims


def valid_case(draw: st.DrawFn, model: ModelSpec) -> InferCase:
    """Every input raw or every input typed (typed beside raw is a fault to Triton's gRPC front end)."""
    batch = draw(st.integers(1, model.max_batch_size)) if model.max_batch_size else 0
    typed = draw(st.booleans()) and not any(spec.datatype in NO_TYPED for spec in model.inputs)
    inputs = tuple(
        TensorCase(spec.name, spec.datatype, shape, "typed" if typed else "raw", math.prod(shape))
        for spec in model.inputs
        if not spec.optional or draw(st.booleans())
        for shape in [_dims(draw, model, spec, batch)]
    )
    return InferCase(model.name, draw(st.sampled_from(["", "1"])), "", inputs, None, spec=model)


def _with_input(case: InferCase, index: int, **changes: Any) -> InferCase:
    inputs = list(case.inputs)
    inputs[index] = dataclasses.replace(inputs[index], **changes)
    return dataclasses.replace(case, inputs=tuple(inputs))


def _reshaped(tensor: TensorCase, shape: tuple[int, ...]) -> dict[str, Any]:
    count = math.prod(shape) if all(d >= 0 for d in shape) else 1
    return {"shape": shape, "count": count}


def _spec(model: ModelSpec, name: str) -> TensorSpec:
    return next(t for t in model.inputs if t.name == name)


CaseFault = Callable[[st.DrawFn, ModelSpec, InferCase], InferCase | None]


def _unknown_model(draw: st.DrawFn, model: ModelSpec, case: InferCase) -> InferCase:
    return dataclasses.replace(case, model="no_such_model")


def _unknown_version(draw: st.DrawFn, model: ModelSpec, case: InferCase) -> InferCase:
    return dataclasses.replace(case, version=draw(st.sampled_from(["2", "7"])))


def _extra_input(draw: st.DrawFn, model: ModelSpec, case: InferCase) -> InferCase:
    first = case.inputs[0]
    return dataclasses.replace(case, inputs=(*case.inputs, dataclasses.replace(first, name="BOGUS")))


def _missing_input(draw: st.DrawFn, model: ModelSpec, case: InferCase) -> InferCase | None:
    required = {t.name for t in model.required}
    droppable = [i for i, t in enumerate(case.inputs) if t.name in required]
    if not droppable:
        return None
    drop = draw(st.sampled_from(droppable))
    return dataclasses.replace(case, inputs=case.inputs[:drop] + case.inputs[drop + 1 :])


def _duplicate_input(draw: st.DrawFn, model: ModelSpec, case: InferCase) -> InferCase:
    return dataclasses.replace(case, inputs=(*case.inputs, case.inputs[-1]))


def _datatype(draw: st.DrawFn, model: ModelSpec, case: InferCase) -> InferCase:
    index = draw(st.integers(0, len(case.inputs) - 1))
    tensor = case.inputs[index]
    datatype = draw(st.sampled_from([d for d in DATATYPES if d != tensor.datatype]))
    return _with_input(case, index, datatype=datatype, mode="raw")


def _shape(draw: st.DrawFn, model: ModelSpec, case: InferCase) -> InferCase | None:
    index = draw(st.integers(0, len(case.inputs) - 1))
    shape = list(case.inputs[index].shape)
    how = draw(st.sampled_from(["more", "less", "wrong"]))
    if how == "more":
        shape.append(draw(st.integers(1, 2)))
    elif how == "less" and len(shape) > (1 if model.max_batch_size else 0):
        shape.pop()
    elif how == "wrong" and shape and _spec(model, case.inputs[index].name).dims[-1:] != (-1,):
        shape[-1] += 1
    else:
        return None
    return _with_input(case, index, **_reshaped(case.inputs[index], tuple(shape)))


def _negative_dim(draw: st.DrawFn, model: ModelSpec, case: InferCase) -> InferCase | None:
    index = draw(st.integers(0, len(case.inputs) - 1))
    shape = list(case.inputs[index].shape)
    # Not the batch dimension where other inputs have one: they would differ in batch size too.
    first = 1 if model.max_batch_size and len(case.inputs) > 1 else 0
    if len(shape) <= first:
        return None
    shape[draw(st.integers(first, len(shape) - 1))] = draw(st.sampled_from([-1, -2]))
    return _with_input(case, index, **_reshaped(case.inputs[index], tuple(shape)))


def _batch(draw: st.DrawFn, model: ModelSpec, case: InferCase) -> InferCase | None:
    if not model.max_batch_size:
        return None
    batch = draw(st.sampled_from([model.max_batch_size + 1, model.max_batch_size + 3, 0]))
    for index, tensor in enumerate(case.inputs):
        case = _with_input(case, index, **_reshaped(tensor, (batch, *tensor.shape[1:])))
    return case


def _batch_mismatch(draw: st.DrawFn, model: ModelSpec, case: InferCase) -> InferCase | None:
    if not model.max_batch_size or len(case.inputs) < 2:
        return None
    tensor = case.inputs[-1]
    batch = 1 if tensor.shape[0] > 1 else 2
    return _with_input(case, len(case.inputs) - 1, **_reshaped(tensor, (batch, *tensor.shape[1:])))


def _count(draw: st.DrawFn, model: ModelSpec, case: InferCase) -> InferCase:
    index = draw(st.integers(0, len(case.inputs) - 1))
    tensor = case.inputs[index]
    return _with_input(case, index, count=max(0, tensor.count + draw(st.sampled_from([1, -1]))))


def _data_mode(draw: st.DrawFn, model: ModelSpec, case: InferCase) -> InferCase:
    index = draw(st.integers(0, len(case.inputs) - 1))
    mode = draw(st.sampled_from(["none", "both"]))
    if case.inputs[index].datatype in NO_TYPED:
        mode = "none"
    return _with_input(case, index, mode=mode)


def _malformed_bytes(draw: st.DrawFn, model: ModelSpec, case: InferCase) -> InferCase | None:
    index = next((i for i, t in enumerate(case.inputs) if t.datatype == "BYTES"), None)
    if index is None or case.inputs[index].count == 0:
        return None
    good = b"".join(
        len(f"s{i}").to_bytes(4, "little") + f"s{i}".encode() for i in range(case.inputs[index].count)
    )
    how = draw(st.sampled_from(["short prefix", "long length", "left over"]))
    raw = {"short prefix": good[:-1][:2], "long length": b"\xff\0\0\0ab" + good[6:], "left over": good + b"x"}
    return _with_input(case, index, mode="raw", raw=raw[how])


def _unknown_output(draw: st.DrawFn, model: ModelSpec, case: InferCase) -> InferCase:
    return dataclasses.replace(case, outputs=(model.outputs[0].name, "NOT_AN_OUTPUT"))


BAD_PARAMETERS: tuple[tuple[str, ParamValue], ...] = (
    ("priority", "high"),
    ("priority", 1.5),
    ("timeout", "soon"),
    ("timeout", True),
    ("binary_data_output", 3),
    ("sequence_id", 1.5),
    ("sequence_start", 1),
)


def _parameter(draw: st.DrawFn, model: ModelSpec, case: InferCase) -> InferCase:
    return dataclasses.replace(case, parameters=(draw(st.sampled_from(BAD_PARAMETERS)),))


CASE_FAULTS: dict[str, CaseFault] = {
    "unknown model": _unknown_model,
    "unknown version": _unknown_version,
    "unexpected input": _extra_input,
    "missing input": _missing_input,
    "repeated input": _duplicate_input,
    "datatype": _datatype,
    "shape": _shape,
    "negative dimension": _negative_dim,
    "batch size": _batch,
    "batch sizes differ": _batch_mismatch,
    "element count": _count,
    "no data or two kinds": _data_mode,
    "malformed BYTES": _malformed_bytes,
    "unknown output": _unknown_output,
    "parameter type": _parameter,
}


# --- faults of the HTTP body's JSON (the binary part, if any, kept) ----------------------------------------

JsonFault = Callable[[st.DrawFn, dict[str, Any]], bool]  # changes the header in place; False: not here


def _first_typed(header: dict[str, Any]) -> dict[str, Any] | None:
    return next((i for i in header["inputs"] if "data" in i), None)


def _shape_type(draw: st.DrawFn, header: dict[str, Any]) -> bool:
    header["inputs"][0]["shape"] = draw(st.sampled_from([["a"], 3, [1.5], None]))
    return True


def _no_datatype(draw: st.DrawFn, header: dict[str, Any]) -> bool:
    del header["inputs"][0]["datatype"]
    return True


def _no_name(draw: st.DrawFn, header: dict[str, Any]) -> bool:
    del header["inputs"][0]["name"]
    return True


def _parameters_type(draw: st.DrawFn, header: dict[str, Any]) -> bool:
    # Not the request's own when they ask for binary outputs (FP16 outputs as JSON: a second fault).
    target = (
        header["inputs"][0]
        if "parameters" in header
        else draw(st.sampled_from([header, header["inputs"][0]]))
    )
    target["parameters"] = draw(st.sampled_from([[], "x", 3]))
    return True


def _outputs_type(draw: st.DrawFn, header: dict[str, Any]) -> bool:
    header["outputs"] = draw(st.sampled_from([{}, "OUT", [{}], [{"name": 3}]]))
    return True


def _data_value(draw: st.DrawFn, header: dict[str, Any]) -> bool:
    entry = _first_typed(header)
    if entry is None or not entry["data"]:
        return False
    value = draw(
        st.sampled_from(["text", None, [1, [2]], {"a": 1}, 300, -1, 1.5, 2**70, True])
        if entry["datatype"] != "BYTES"
        else st.sampled_from([3, None, True, [["a"], "b"]])
    )
    flat = entry["data"]
    while isinstance(flat[0], list):
        flat = flat[0]
    flat[0] = value
    return True


def _classification(draw: st.DrawFn, header: dict[str, Any]) -> bool:
    header["outputs"] = [{"name": "OUT_" + header["inputs"][0]["name"], "parameters": {"classification": 2}}]
    return True


def _shm_input(draw: st.DrawFn, header: dict[str, Any]) -> bool:
    entry = _first_typed(header)
    if entry is None:
        return False
    del entry["data"]
    # With its byte size: Triton's HTTP front end looks the region up first, a second fault without it.
    parameters = {
        "shared_memory_region": draw(st.sampled_from(["no_region", 3])),
        "shared_memory_byte_size": 8,
    }
    entry["parameters"] = parameters
    return True


JSON_FAULTS: dict[str, JsonFault] = {
    "JSON shape type": _shape_type,
    "JSON no datatype": _no_datatype,
    "JSON no name": _no_name,
    "JSON parameters type": _parameters_type,
    "JSON outputs type": _outputs_type,
    "JSON data value": _data_value,
    "JSON classification": _classification,
    "JSON shared memory": _shm_input,
}
BODY_FAULTS = ("binary size past the end", "binary bytes left over", "not an object", "no inputs")


def _split(call: HttpCall) -> tuple[dict[str, Any], bytes]:
    length = call.headers.get("Inference-Header-Content-Length")
    end = int(length) if length is not None else len(call.body)
    header: dict[str, Any] = json.loads(call.body[:end])
    return header, call.body[end:]


def _joined(call: HttpCall, header: Any, binary: bytes, what: str) -> HttpCall:
    head = json.dumps(header).encode()
    headers = dict(call.headers)
    if "Inference-Header-Content-Length" in headers:
        headers["Inference-Header-Content-Length"] = str(len(head))
    return dataclasses.replace(call, body=head + binary, headers=headers, what=what, faults=1)


def _body_fault(draw: st.DrawFn, call: HttpCall, fault: str) -> HttpCall | None:
    header, binary = _split(call)
    what = f"single fault {fault}: {call.what}"
    if fault in JSON_FAULTS:
        return _joined(call, header, binary, what) if JSON_FAULTS[fault](draw, header) else None
    if fault == "not an object":
        return _joined(call, draw(st.sampled_from([[], "x", 3, None])), binary, what)
    if fault == "no inputs":
        header.pop("inputs")
        return _joined(call, header, b"", what) if not binary else None
    sized = [i for i in header["inputs"] if "binary_data_size" in i.get("parameters", {})]
    if not sized:
        return None
    if fault == "binary size past the end":
        sized[-1]["parameters"]["binary_data_size"] += draw(st.integers(1, 9))
        return _joined(call, header, binary, what)
    return _joined(call, header, binary + b"\0" * draw(st.integers(1, 5)), what)


# --- faults of the gRPC message --------------------------------------------------------------------------

GRPC_FAULTS = ("parameter without value", "input parameter without value", "shared memory reference")


def _grpc_fault(draw: st.DrawFn, call: GrpcCall, fault: str) -> GrpcCall:
    request = service_pb2.ModelInferRequest.FromString(call.payload)
    if fault == "parameter without value":
        request.parameters["custom"].SetInParent()
    elif fault == "input parameter without value":
        request.inputs[0].parameters["custom"].SetInParent()
    else:
        parameters = request.inputs[0].parameters
        parameters["shared_memory_region"].string_param = draw(st.sampled_from(["no_region", ""]))
        if draw(st.booleans()):
            parameters["shared_memory_byte_size"].int64_param = 8
        if request.raw_input_contents:
            del request.raw_input_contents[0]
        request.inputs[0].ClearField("contents")
    payload = request.SerializeToString(deterministic=True)
    return GrpcCall("ModelInfer", payload, what=f"single fault {fault}: {call.what}", faults=1)


FAULTS = (*CASE_FAULTS, *GRPC_FAULTS, *JSON_FAULTS, *BODY_FAULTS)


@st.composite
def single_fault_calls(
    draw: st.DrawFn, models: tuple[ModelSpec, ...] = FAULT_MODELS, fault: str | None = None
) -> Call:
    """A valid inference request to one of ``models`` with exactly one fault (``fault``, or any), over
    gRPC or HTTP (the one protocol a fault of the gRPC message or of the JSON body has)."""
    model = draw(st.sampled_from(models))
    case = valid_case(draw, model)
    if fault is None:
        fault = draw(st.sampled_from(FAULTS))
    grpc = fault in GRPC_FAULTS or (fault in CASE_FAULTS and draw(st.booleans()))
    if fault in CASE_FAULTS:
        bent = CASE_FAULTS[fault](draw, model, case)
        if bent is None:
            bent = _unknown_output(draw, model, case)
            fault = "unknown output"
        call: Call = infer_grpc(bent) if grpc else infer_http(bent, binary_output=True)
        return dataclasses.replace(call, what=f"single fault {fault}: {call.what}", faults=1)
    if grpc:
        return _grpc_fault(draw, infer_grpc(case), fault)
    http = infer_http(case, binary_output=True)
    bent_call = _body_fault(draw, http, fault)
    if bent_call is None:  # the fault has nothing to bend here (no typed input, no binary part)
        bent_call = _body_fault(draw, http, "JSON no datatype")
    assert bent_call is not None
    return bent_call
