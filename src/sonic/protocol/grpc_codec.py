"""The KServe v2 gRPC message codec: ``ModelInfer`` and ``ModelStreamInfer`` messages, both sides.

Server side, a serialized ``ModelInferRequest`` becomes an :class:`InferRequest` and an
:class:`InferResponse` becomes a serialized ``ModelInferResponse`` as pieces; client side, a
:class:`WireRequest` becomes a request head plus raw tensor fields and a response becomes a
:class:`WireResponse`. Tensor bytes skip protobuf both ways (see :mod:`sonic.protocol.wire`): they
are views of received buffers and are written next to, not into, the protobuf head.

Triton's generated messages come from ``tritonclient.grpc``; this module and its ``grpc.StatusCode``
conversion are the only places of the protocol layer that touch grpcio.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

import grpc
import numpy as np
import numpy.typing as npt
from tritonclient.grpc import service_pb2

from sonic.protocol import dtypes
from sonic.protocol.errors import GrpcCode, InvalidArgumentError, SonicError, quote
from sonic.protocol.types import (
    InferRequest,
    InferResponse,
    InputTensor,
    ParameterValue,
    ShmRef,
    WireInput,
    WireOutput,
    WireRequest,
    WireResponse,
    check_parameters,
)
from sonic.protocol.wire import (
    RAW_OUTPUT_CONTENTS_TAG,
    STREAM_INFER_RESPONSE_TAG,
    raw_contents_parts,
    raw_input_parts,
    split_raw_contents,
)

# Messages below this size are parsed by protobuf's C parser, which beats walking the fields in Python;
# above it, tensor bytes are cut out by hand so they are not copied.
SPLIT_ABOVE_BYTES = 65536
Decoded = tuple[Any, list[memoryview]]  # (ModelInferResponse without tensors, views of tensor bytes)

_STATUS_CODES = {code.value[0]: code for code in grpc.StatusCode}


def grpc_code(status: GrpcCode) -> grpc.StatusCode:
    """A status as grpcio names it."""
    return _STATUS_CODES[int(status)]


def code_of(status: grpc.StatusCode) -> GrpcCode:
    """grpcio's status as ours."""
    return GrpcCode(status.value[0])


def grpc_status(error: SonicError) -> grpc.StatusCode:
    """The status an error is sent with, as grpcio names it."""
    return grpc_code(error.code)


# --- parameters -------------------------------------------------------------------------------------------


# The fields Triton 2.51's gRPC front end takes for the parameters it reads (others are the model's).
TRITON_PARAMETER_FIELDS = {
    "sequence_id": ("int64_param", "string_param"),
    "sequence_start": ("bool_param",),
    "sequence_end": ("bool_param",),
    "priority": ("int64_param", "uint64_param"),
    "timeout": ("int64_param",),
}
CUSTOM_PARAMETER_FIELDS = ("int64_param", "bool_param", "string_param")


def _alternatives(fields: tuple[str, ...]) -> str:
    """``a``, ``a or b``, ``a, b, or c``: as Triton lists the fields it takes."""
    if len(fields) < 3:
        return " or ".join(fields)
    return ", ".join(fields[:-1]) + ", or " + fields[-1]


def parameters_from_proto(parameters: Any, where: str) -> dict[str, object]:
    """An ``InferParameter`` map as plain values, checked against Triton's request parameters."""
    values: dict[str, object] = {}
    for key, param in parameters.items():
        which = param.WhichOneof("parameter_choice")
        fields = TRITON_PARAMETER_FIELDS.get(key, CUSTOM_PARAMETER_FIELDS)
        taken = (*fields, "uint64_param") if "int64_param" in fields else fields  # ids past 2^63 too
        if which is None or (key in TRITON_PARAMETER_FIELDS and which not in taken):
            # Triton's words; a custom parameter may also be a double here (Triton has no use for it)
            raise InvalidArgumentError(
                f"{where}: invalid value type for '{key}' parameter, expected {_alternatives(fields)}."
                + ("" if which is None else f" Got {which}")
            )
        values[key] = getattr(param, which)
    check_parameters(values, where)
    return values


def set_parameters(target: Any, parameters: Mapping[str, ParameterValue]) -> None:
    """Fill an ``InferParameter`` map; the oneof field follows the Python type."""
    for key, value in parameters.items():
        param = target[key]
        if isinstance(value, bool):
            param.bool_param = value
        elif isinstance(value, int):
            if value >= 2**63:
                param.uint64_param = value
            else:
                param.int64_param = value
        elif isinstance(value, float):
            param.double_param = value
        else:
            param.string_param = value


def _parameter_int(parameters: Any, key: str, where: str, tensor: str) -> int:
    if key not in parameters:
        return 0
    param = parameters[key]
    which = param.WhichOneof("parameter_choice")
    if which in {"int64_param", "uint64_param"}:
        return int(getattr(param, which))
    raise InvalidArgumentError(  # Triton's words, then what came
        f"{where}: invalid value type for '{key}' parameter for tensor {quote(tensor)}, expected "
        f"int64_param. Got {which}"
    )


def _shm_ref(parameters: Any, where: str, tensor: str) -> ShmRef | None:
    """The ``shared_memory_*`` parameters of an input or output, as Triton reads them."""
    if "shared_memory_region" not in parameters:
        return None
    param = parameters["shared_memory_region"]
    which = param.WhichOneof("parameter_choice")
    if which != "string_param":  # Triton's words, then what came
        raise InvalidArgumentError(
            f"{where}: invalid value type for 'shared_memory_region' parameter for tensor {quote(tensor)}, "
            f"expected string_param. Got {which}"
        )
    if "shared_memory_byte_size" not in parameters:
        raise InvalidArgumentError(  # Triton's words
            f"{where}: 'shared_memory_byte_size' must be specified along with 'shared_memory_region' "
            f"parameter for tensor {quote(tensor)}"
        )
    return ShmRef(
        param.string_param,
        _parameter_int(parameters, "shared_memory_byte_size", where, tensor),
        _parameter_int(parameters, "shared_memory_offset", where, tensor),
    )


def _set_shm(parameters: Any, ref: ShmRef) -> None:
    parameters["shared_memory_region"].string_param = ref.region
    parameters["shared_memory_byte_size"].int64_param = ref.byte_size
    if ref.offset:
        parameters["shared_memory_offset"].int64_param = ref.offset


# --- server side: requests in, responses out --------------------------------------------------------------


class _ModelName:
    """``model 'NAME'`` for error messages, quoted when formatted (most requests never format it)."""

    __slots__ = ("name",)

    def __init__(self, name: str) -> None:
        self.name = name

    def __str__(self) -> str:
        return f"model {quote(self.name)}"


def decode_infer_request(data: bytes | bytearray | memoryview) -> InferRequest:
    """A serialized ``ModelInferRequest`` as our request type, tensor bytes left in place."""
    rest, raw = split_raw_contents(data)
    head_bytes = rest if isinstance(rest, bytes) else bytes(rest)
    try:
        head = service_pb2.ModelInferRequest.FromString(head_bytes)
    except Exception as exc:  # noqa: BLE001  (protobuf's DecodeError and friends)
        raise InvalidArgumentError(f"malformed ModelInferRequest: {exc}") from None
    model = _ModelName(head.model_name)  # quoted only into an error message
    # Each walk over protobuf's repeated fields and maps costs wrappers (issue 37 item 4: decoding was
    # ~9 % of a small request's server CPU): the tensors are listed once, and parameter maps are only
    # looked into when the head holds the key's bytes at all (a map key is written as its UTF-8 bytes).
    head_inputs: list[Any] = head.inputs[:]  # a slice makes the list in C: half the time of list()
    head_outputs: list[Any] = head.outputs[:]
    any_shm = b"shared_memory_region" in head_bytes
    shm = [
        _shm_ref(t.parameters, f"{model} input '{t.name}'", t.name)
        if any_shm and "shared_memory_region" in t.parameters
        else None
        for t in head_inputs
    ]
    names = [t.name for t in head_inputs]
    # Triton's order: a repeated name (as it adds the inputs), then typed contents beside raw ones, then
    # the count of raw entries.
    if len(set(names)) != len(names):
        seen: set[str] = set()
        for name in names:
            if name in seen:
                raise InvalidArgumentError(
                    f"{model} input {quote(name)}: input {quote(name)} already exists in request"
                )
            seen.add(name)
    if raw:
        for tensor, ref in zip(head_inputs, shm, strict=True):
            if ref is None and tensor.HasField("contents"):
                raise InvalidArgumentError(
                    f"contents field must not be specified when using raw_input_contents for "
                    f"{quote(tensor.name)} for {model}"
                )
    # As in Triton, inputs in shared memory take no raw_input_contents entry.
    expected_raw = sum(ref is None for ref in shm)
    if raw and len(raw) != expected_raw:
        counts = (
            f"raw_input_contents has {len(raw)} entries for {expected_raw} inputs not in shared memory; "
            "when raw contents are used every such input must have one"
        )
        if len(raw) < expected_raw:  # Triton's words: the first input left without an entry
            unfed = [t.name for t, ref in zip(head_inputs, shm, strict=True) if ref is None][len(raw)]
            raise InvalidArgumentError(
                f"{model}: unable to find data for input tensor {quote(unfed)} for {model} in request. "
                f"({counts})"
            )
        raise InvalidArgumentError(f"{model}: {counts}")
    inputs = []
    raw_index = 0
    for tensor, ref, name in zip(head_inputs, shm, names, strict=True):
        shape = tuple(tensor.shape[:])  # protobuf's int64 values are Python ints already (sliced: faster)
        if ref is not None:
            inputs.append(InputTensor(name, tensor.datatype, shape, shm=ref))
            continue
        if raw:
            inputs.append(InputTensor(name, tensor.datatype, shape, raw=raw[raw_index]))
            raw_index += 1
            continue
        inputs.append(_typed_contents(tensor, shape, model))
    output_shm: dict[str, ShmRef] = {}
    output_classes: dict[str, int] = {}
    if head_outputs:
        output_shm = {
            o.name: ref
            for o in head_outputs
            if any_shm
            and "shared_memory_region" in o.parameters
            and (ref := _shm_ref(o.parameters, f"{model} output {quote(o.name)}", o.name)) is not None
        }
        if b"classification" in head_bytes:
            output_classes = {
                o.name: _class_count(o.parameters) for o in head_outputs if "classification" in o.parameters
            }
    return InferRequest(
        model_name=head.model_name,
        model_version=head.model_version,
        inputs=inputs,
        request_id=head.id,
        outputs=[o.name for o in head_outputs] or None,
        parameters=parameters_from_proto(head.parameters, str(model)) if head.parameters else {},
        output_shm=output_shm,
        output_classes=output_classes,
    )


def _class_count(parameters: Any) -> int:
    """An output's ``classification`` parameter, in Triton's words (its ``ParseClassificationParams``)."""
    param = parameters["classification"]
    if param.WhichOneof("parameter_choice") != "int64_param":
        msg = "invalid value type for 'classification' parameter, expected int64_param"
        raise InvalidArgumentError(msg)
    if param.int64_param <= 0:
        msg = "invalid value for 'classification' parameter, expected >= 0"
        raise InvalidArgumentError(msg)
    if "shared_memory_region" in parameters:
        msg = "output can't set both 'shared_memory_region' and 'classification'"
        raise InvalidArgumentError(msg)
    return int(param.int64_param)


def _typed_contents(tensor: Any, shape: tuple[int, ...], model: _ModelName) -> InputTensor:
    """An input sent in ``contents`` (typed protobuf lists) rather than raw bytes."""
    where = f"{model} input {quote(tensor.name)}"
    datatype = dtypes.from_name(tensor.datatype)
    if not tensor.HasField("contents"):
        raise InvalidArgumentError(
            f"{where}: unable to find data for input tensor {quote(tensor.name)} for {model} in request."
        )
    if any(dim < 0 for dim in shape):
        # Refused by the model's shape check, in Triton's words for the model's dims (no data is read).
        return InputTensor(tensor.name, tensor.datatype, shape)
    if datatype.contents_field is None:
        raise InvalidArgumentError(
            f"{where}: {datatype.name} data can only be sent as raw_input_contents, not typed contents"
        )
    values = getattr(tensor.contents, datatype.contents_field)
    expected = dtypes.element_count(shape)
    if len(values) != expected:  # Triton's words (it counts what the contents would fill)
        mismatch = dtypes.count_mismatch(datatype, tensor.name, model.name, expected, len(values))
        raise InvalidArgumentError(f"{where}: {mismatch}")
    array = dtypes.array_from_contents(values, datatype, shape, where)
    return InputTensor(tensor.name, tensor.datatype, shape, array=array)


def encode_infer_response(response: InferResponse, *, final: bool | None = None) -> list[bytes | memoryview]:
    """A serialized ``ModelInferResponse`` as pieces: tensors stay views of the output arrays.

    ``final``: its ``triton_final_response`` parameter (every streamed response has one, as in Triton's
    stream: true but for a decoupled model's responses before its last); None: no such parameter.
    """
    head = service_pb2.ModelInferResponse(
        model_name=response.model_name, model_version=response.model_version, id=response.request_id
    )
    if final is not None:
        head.parameters["triton_final_response"].bool_param = final
    contents: list[bytes | memoryview] = []
    for output in response.outputs:
        head.outputs.add(name=output.name, datatype=output.datatype, shape=output.shape)
        if output.shm is not None:
            # As Triton: no parameters on it (the client placed it), and one empty raw_output_contents
            # entry so the indices of the other outputs line up.
            contents.append(b"")
            continue
        contents.append(dtypes.array_to_bytes(output.array, dtypes.from_name(output.datatype)))
    return raw_contents_parts(head.SerializeToString(), contents)


def encode_stream_error(data: bytes | bytearray | memoryview, message: str) -> bytes:
    """A ``ModelStreamInferResponse`` reporting a failed request, echoing its id as Triton does (only the id:
    no model name, no ``triton_final_response``)."""
    response = service_pb2.ModelStreamInferResponse(error_message=message)
    try:
        head, _ = split_raw_contents(data)
        response.infer_response.id = service_pb2.ModelInferRequest.FromString(head).id
    except Exception:  # noqa: BLE001, S110  (a malformed request has no id to echo)
        pass
    encoded: bytes = response.SerializeToString()
    return encoded


def encode_decoupled_error(model_name: str, request_id: str, message: str, *, final: bool) -> bytes:
    """A ``ModelStreamInferResponse`` for an error response of a decoupled model, or its failed execution:
    as Triton sends them, with the request id, the model name (no version) and ``triton_final_response``."""
    response = service_pb2.ModelStreamInferResponse(error_message=message)
    response.infer_response.model_name = model_name
    response.infer_response.id = request_id
    response.infer_response.parameters["triton_final_response"].bool_param = final
    encoded: bytes = response.SerializeToString()
    return encoded


# --- client side: requests out, responses in --------------------------------------------------------------


def encode_request(request: WireRequest) -> tuple[Any, list[bytes | memoryview]]:
    """The request head (a ModelInferRequest without tensor bytes) and its raw_input_contents fields."""
    head = service_pb2.ModelInferRequest(model_name=request.model, model_version=request.version)
    if request.request_id:
        head.id = request.request_id
    if request.parameters:
        set_parameters(head.parameters, request.parameters)
    contents: list[bytes | memoryview] = []
    for tensor in request.inputs:
        message = head.inputs.add(name=tensor.name, datatype=tensor.datatype, shape=tensor.shape)
        if tensor.shm is not None:
            _set_shm(message.parameters, tensor.shm)
            continue
        assert tensor.data is not None
        contents.append(tensor.data)
    for output in request.outputs:
        message = head.outputs.add(name=output.name)
        if output.shm is not None:
            _set_shm(message.parameters, output.shm)
        if output.class_count:
            message.parameters["classification"].int64_param = output.class_count
    return head, raw_input_parts(contents)


def encode_infer_request(
    model: str,
    version: str,
    arrays: Mapping[str, npt.NDArray[Any]],
    datatypes: Mapping[str, str],
    parameters: Mapping[str, ParameterValue] | None = None,
) -> bytes:
    """A whole serialized ``ModelInferRequest`` carrying every tensor in ``raw_input_contents``."""
    inputs = []
    for name, array in arrays.items():
        datatype = dtypes.from_name(datatypes[name])
        data = dtypes.array_to_bytes(np.ascontiguousarray(array), datatype)
        inputs.append(WireInput(name, datatype.name, tuple(array.shape), data))
    head, tail = encode_request(WireRequest(model, version, tuple(inputs), parameters=parameters or {}))
    return b"".join([head.SerializeToString(), *tail])


def decode_response(
    head: Any, raw: Sequence[memoryview], *, serialize_ns: int = 0, wait_ns: int = 0
) -> WireResponse:
    """A ModelInferResponse head and its tensor bytes as our response type."""
    outputs = []
    for index, tensor in enumerate(head.outputs):
        payload: bytes | memoryview = raw[index] if index < len(raw) else b""
        outputs.append(WireOutput(tensor.name, tensor.datatype, tuple(tensor.shape), payload))  # ints already
    return WireResponse(head.model_name, head.model_version, tuple(outputs), serialize_ns, wait_ns)


def split_response(data: bytes | bytearray | memoryview) -> Decoded:
    """A serialized ModelInferResponse as its head and views of its tensor bytes."""
    if len(data) < SPLIT_ABOVE_BYTES:
        head = service_pb2.ModelInferResponse.FromString(data)
        return head, [memoryview(r) for r in head.raw_output_contents]
    rest, raw = split_raw_contents(data, RAW_OUTPUT_CONTENTS_TAG)
    return service_pb2.ModelInferResponse.FromString(rest), raw


def split_stream_response(data: bytes) -> tuple[Any, list[memoryview], str]:
    """A serialized ModelStreamInferResponse: its infer_response head, tensor views and error message."""
    if len(data) < SPLIT_ABOVE_BYTES:
        message = service_pb2.ModelStreamInferResponse.FromString(data)
        head = message.infer_response
        return head, [memoryview(r) for r in head.raw_output_contents], message.error_message
    # Large: cut the infer_response out as a view and its tensors out of that, without copies.
    rest, inner = split_raw_contents(data, STREAM_INFER_RESPONSE_TAG)
    if inner:
        head, raw = split_response(inner[0])
    else:
        head, raw = service_pb2.ModelInferResponse(), []
    return head, raw, service_pb2.ModelStreamInferResponse.FromString(rest).error_message
