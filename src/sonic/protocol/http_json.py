"""KServe v2 HTTP/REST bodies: JSON tensors and Triton's binary tensor extension.

A binary request is ``<JSON header><tensor bytes...>`` with the header length in the
``Inference-Header-Content-Length`` HTTP header; each input with ``parameters.binary_data_size``
takes its bytes from the tail in input order. Binary inputs stay views of the received body
(``np.frombuffer`` later); only JSON ``data`` goes through Python lists.
"""

from __future__ import annotations

import base64
import json
import sys
from dataclasses import dataclass
from typing import Any

import numpy as np
from google.protobuf.descriptor import FieldDescriptor
from google.protobuf.message import Message

from sonic.protocol import dtypes
from sonic.protocol.errors import InvalidArgumentError, clip, quote
from sonic.protocol.types import InferRequest, InferResponse, InputTensor, ShmRef, check_parameters

HEADER_LENGTH = "Inference-Header-Content-Length"


# --- protobuf messages as Triton's HTTP JSON ------------------------------------------------------------


# Messages whose empty maps Triton's HTTP JSON writes as {} (see message_to_json).
_EMPTY_MAPS_KEPT = frozenset({"inference.ModelConfig", "inference.ModelStatistics"})


def _scalar(field: Any, value: Any, empty_maps: bool = False) -> Any:
    if field.type == FieldDescriptor.TYPE_MESSAGE:
        return message_to_json(value, empty_maps=empty_maps)
    if field.type == FieldDescriptor.TYPE_ENUM:
        enum_value = field.enum_type.values_by_number.get(value)
        return enum_value.name if enum_value is not None else value
    if field.type == FieldDescriptor.TYPE_BYTES:
        return base64.b64encode(value).decode("ascii")
    return value


def message_to_json(message: Message, *, empty_maps: bool = False) -> dict[str, Any]:
    """A protobuf message as Triton's HTTP server writes it.

    Unlike ``json_format``, 64-bit integers stay numbers (``"dims": [16]``, counts in statistics)
    and zero-valued scalars are kept, so clients can read every statistic without defaults.
    Empty map fields are kept as ``{}`` where Triton's JSON has them: in a model config and everything
    in it (``"parameters": {}``; ``empty_maps`` passes that down), and a model's statistics'
    ``"response_stats": {}``, which Triton's hand-written statistics JSON always writes (empty for every
    backend sonic runs: Triton's Python, ONNX Runtime, PyTorch and TensorFlow backends never report
    per-response statistics); other messages leave them out.
    """
    empty_maps = empty_maps or message.DESCRIPTOR.full_name in _EMPTY_MAPS_KEPT
    out: dict[str, Any] = {}
    field: Any  # protobuf's pure-Python and upb descriptors have different stubs
    for field in message.DESCRIPTOR.fields:
        value = getattr(message, field.name)
        if field.message_type is not None and field.message_type.GetOptions().map_entry:
            value_field = field.message_type.fields_by_name["value"]
            if value or empty_maps:
                out[field.name] = {str(k): _scalar(value_field, v, empty_maps) for k, v in value.items()}
        elif field.label == FieldDescriptor.LABEL_REPEATED:
            out[field.name] = [_scalar(field, v, empty_maps) for v in value]
        elif field.containing_oneof is not None or field.type == FieldDescriptor.TYPE_MESSAGE:
            if message.HasField(field.name):
                out[field.name] = _scalar(field, value, empty_maps)
        else:
            out[field.name] = _scalar(field, value)
    return out


# --- inference requests ---------------------------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class OutputChoice:
    """How the client wants outputs back: binary by default or per output name."""

    binary_default: bool
    binary: dict[str, bool]

    def is_binary(self, name: str) -> bool:
        return self.binary.get(name, self.binary_default)


def parse_json(text: bytes | bytearray, what: str) -> Any:
    """``json.loads`` with every way a client's text can fail it as InvalidArgumentError (400)."""
    try:
        return json.loads(text)
    except (UnicodeDecodeError, json.JSONDecodeError) as exc:
        raise InvalidArgumentError(f"{what} cannot be parsed: {exc}") from None
    except RecursionError:
        # The C parser counts nesting against the interpreter's recursion limit.
        msg = (
            f"{what} is nested too deeply: more than about {sys.getrecursionlimit()} levels of arrays or "
            "objects"
        )
        raise InvalidArgumentError(msg) from None


def _parse_header(body: bytes | bytearray, header_length: int | None) -> tuple[dict[str, Any], int]:
    end = len(body) if header_length is None else header_length
    if end < 0 or end > len(body):
        raise InvalidArgumentError(
            f"{HEADER_LENGTH} is {header_length} but the request body has {len(body)} bytes"
        )
    header = parse_json(body[:end] if end != len(body) else body, "inference request JSON")
    if not isinstance(header, dict):
        msg = "inference request JSON must be an object"
        raise InvalidArgumentError(msg)
    return header, end


def _object(value: object) -> object:
    """A ``parameters`` field: absent or null is no parameters; anything else is kept to be checked
    (``[]`` is not an object, however empty)."""
    return {} if value is None else value


def _int_parameter(parameters: dict[str, Any], key: str, where: str) -> int:
    value = parameters.get(key, 0)
    if isinstance(value, bool) or not isinstance(value, int):
        raise InvalidArgumentError(f"{where}: parameter '{key}' must be an integer, got {value!r}")
    return value


def _shm_ref(parameters: dict[str, Any], where: str, tensor: str) -> ShmRef | None:
    """The ``shared_memory_*`` parameters of an input or output, as Triton reads them."""
    if "shared_memory_region" not in parameters:
        return None
    region = parameters["shared_memory_region"]
    if not isinstance(region, str):
        raise InvalidArgumentError(f"{where}: parameter 'shared_memory_region' must be a string")
    if "shared_memory_byte_size" not in parameters:
        raise InvalidArgumentError(  # Triton's words
            f"{where}: 'shared_memory_byte_size' must be specified along with 'shared_memory_region' "
            f"parameter for tensor {quote(tensor)}"
        )
    return ShmRef(
        region,
        _int_parameter(parameters, "shared_memory_byte_size", where),
        _int_parameter(parameters, "shared_memory_offset", where),
    )


@dataclass(frozen=True, slots=True)
class _Where:
    """The one prefix of every error about a request: its id (when it has one) and the model, then the tensor."""

    model: str  # "[request id: ...] model 'name'"
    name: str  # the model's name as the request gives it

    @classmethod
    def of(cls, request_id: str, model_name: str) -> _Where:
        rid = f"[request id: {clip(request_id)}] " if request_id else ""
        return cls(f"{rid}model {quote(model_name)}", model_name)

    def input(self, name: str) -> str:
        return f"{self.model} input {quote(name)}"

    def output(self, name: str) -> str:
        return f"{self.model} output {quote(name)}"


def decode_infer_request(
    body: bytes | bytearray, header_length: int | None, model_name: str, model_version: str
) -> tuple[InferRequest, OutputChoice]:
    header, offset = _parse_header(body, header_length)
    request_id = str(header.get("id", ""))
    where = _Where.of(request_id, model_name)
    parameters = _object(header.get("parameters"))
    if not isinstance(parameters, dict):
        raise InvalidArgumentError(f"{where.model}: 'parameters' must be an object")
    check_parameters(parameters, where.model)
    raw_inputs = header.get("inputs")
    if not isinstance(raw_inputs, list):
        raise InvalidArgumentError(f"{where.model}: the request has no 'inputs' list")
    view = memoryview(body)
    inputs: list[InputTensor] = []
    for item in raw_inputs:
        tensor, offset = _decode_input(item, view, offset, where)
        inputs.append(tensor)
    if offset != len(body):
        raise InvalidArgumentError(  # Triton's words, then the count
            f"{where.model}: unexpected additional input data for model {quote(where.name)}; "
            f"{len(body) - offset} bytes of binary data left over after the inputs"
        )
    request = InferRequest(
        model_name=model_name,
        model_version=model_version,
        inputs=inputs,
        request_id=request_id,
        parameters=parameters,
    )
    binary = _decode_outputs(header.get("outputs"), where, request)
    return request, OutputChoice(parameters.get("binary_data_output", False), binary)


def _decode_input(item: object, body: memoryview, offset: int, where: _Where) -> tuple[InputTensor, int]:
    """One entry of ``inputs``, and the offset of the next binary tensor in ``body``."""
    if not isinstance(item, dict) or not isinstance(item.get("name"), str):
        raise InvalidArgumentError(f"{where.model}: every input needs a 'name'")
    name = item["name"]
    at = where.input(name)
    shape_list = item.get("shape")
    if not isinstance(shape_list, list) or not all(
        isinstance(d, int) and not isinstance(d, bool) for d in shape_list
    ):
        raise InvalidArgumentError(f"{at}: 'shape' must be a list of integers, got {shape_list!r}")
    shape = tuple(shape_list)
    datatype_name = item.get("datatype")
    if not isinstance(datatype_name, str):
        raise InvalidArgumentError(f"{at}: 'datatype' is missing")
    parameters = _object(item.get("parameters"))
    if not isinstance(parameters, dict):
        raise InvalidArgumentError(f"{at}: 'parameters' must be an object")
    given = [
        field
        for field, present in (
            ("data", "data" in item),
            ("binary_data_size", "binary_data_size" in parameters),
            ("shared_memory_region", "shared_memory_region" in parameters),
        )
        if present
    ]
    if len(given) != 1:  # Triton's words, checked where Triton checks it: before the data is read
        raise InvalidArgumentError(
            f"{at}: Input must set only one of the following fields: 'data', 'binary_data_size' in "
            "'parameters', 'shared_memory_region' in 'parameters'. But "
            + ("set " + " ".join(quote(field) for field in given) if given else "no field is set")
        )
    shm = _shm_ref(parameters, at, name)
    if shm is not None:
        return InputTensor(name, datatype_name, shape, shm=shm), offset
    if "binary_data_size" in parameters:
        size = _int_parameter(parameters, "binary_data_size", at)
        if size < 0 or offset + size > len(body):
            raise InvalidArgumentError(  # Triton's words, then the sizes
                f"{at}: unexpected size for input {quote(name)}, expecting {offset + size - len(body)} "
                f"additional bytes for model {quote(where.name)}; binary_data_size {size} runs past the end "
                f"of the request body ({len(body) - offset} bytes of binary data left)"
            )
        return InputTensor(name, datatype_name, shape, raw=body[offset : offset + size]), offset + size
    try:
        datatype = dtypes.from_name(datatype_name)
    except InvalidArgumentError as exc:  # Triton's words, then which
        raise InvalidArgumentError(f"{at}: invalid datatype for input {name}: {exc}") from None
    contents = _json_contents(item["data"], datatype, at)
    if datatype.name == "BYTES" and isinstance(contents, np.ndarray) and min(shape, default=0) >= 0:
        expected = dtypes.element_count(shape)
        if contents.size != expected:  # Triton's words (numbers: its 500 "Unable to parse", ours below)
            mismatch = dtypes.count_mismatch(datatype, name, where.name, expected, contents.size)
            raise InvalidArgumentError(f"{at}: {mismatch}")
    array = dtypes.array_from_contents(contents, datatype, shape, at)
    return InputTensor(name, datatype_name, shape, array=array), offset


def _json_contents(data: Any, datatype: dtypes.Datatype, at: str) -> Any:
    """An input's JSON ``data``, nested lists flattened by numpy (typed and checked later); each element
    must be of the JSON type the datatype takes."""
    if not isinstance(data, list):  # Triton's words: a number or a string is no array of them
        raise InvalidArgumentError(
            f"{at}: Unable to parse 'data': attempt to access JSON non-array as array (the {datatype.name} "
            f"input's 'data' is {clip(json.dumps(data))})"
        )
    try:
        if datatype.name == "BYTES":
            return np.asarray(data, dtype=np.object_).reshape(-1)
        if data and isinstance(data[0], list):
            array = np.asarray(data)  # refuses ragged lists
            # The elements as objects too: numpy made null NaN, and true 1 beside numbers.
            _check_json_elements(np.asarray(data, dtype=np.object_).reshape(-1).tolist(), datatype, at)
            return array
    except (ValueError, TypeError, OverflowError) as exc:
        raise InvalidArgumentError(f"{at}: 'data' is not a regular nested list: {exc}") from None
    _check_json_elements(data, datatype, at)
    return data


# The JSON values each kind of datatype takes, and Triton's words (its JSON parser's) for any other: a
# number for floats, true or false for BOOL, an integer (not 1.0, not true) for the integer types.
_JSON_ELEMENTS = {
    "float": (frozenset({int, float}), "non-number as double"),
    "bool": (frozenset({bool}), "non-boolean as boolean"),
    "signed": (frozenset({int}), "non-signed-integer as signed-integer"),
    "unsigned": (frozenset({int}), "non-unsigned-integer as unsigned-integer"),
}


def _json_kind(datatype: dtypes.Datatype) -> str:
    if datatype.name == "BOOL":
        return "bool"
    if datatype.name.startswith("UINT"):
        return "unsigned"
    return "signed" if datatype.name.startswith("INT") else "float"


def _check_json_elements(flat: list[Any], datatype: dtypes.Datatype, at: str) -> None:
    """Refuse a null, a string or a value of the wrong JSON type (Triton does, with a 500; numpy would
    make null NaN and true 1.0), in Triton's words, naming the first such element."""
    kind = _json_kind(datatype)
    allowed, words = _JSON_ELEMENTS[kind]
    if set(map(type, flat)) <= allowed and not (kind == "unsigned" and flat and min(flat) < 0):
        return
    index, value = next(
        (i, v) for i, v in enumerate(flat) if type(v) not in allowed or (kind == "unsigned" and v < 0)
    )
    raise InvalidArgumentError(
        f"{at}: Unable to parse 'data': attempt to access JSON {words} (element {index} of the "
        f"{datatype.name} input is {clip(json.dumps(value))})"
    )


def _decode_outputs(raw_outputs: object, where: _Where, request: InferRequest) -> dict[str, bool]:
    """``outputs``: the names asked for (None: every output), their shared memory and classification (into
    ``request``); returns their binary choice."""
    binary: dict[str, bool] = {}
    if raw_outputs is None:
        return binary
    if not isinstance(raw_outputs, list):
        raise InvalidArgumentError(f"{where.model}: 'outputs' must be a list")
    outputs: list[str] = []
    for item in raw_outputs:
        if not isinstance(item, dict) or not isinstance(item.get("name"), str):
            raise InvalidArgumentError(f"{where.model}: every requested output needs a 'name'")
        name = item["name"]
        outputs.append(name)
        parameters = _object(item.get("parameters"))
        if not isinstance(parameters, dict):
            raise InvalidArgumentError(f"{where.output(name)}: 'parameters' must be an object")
        if "classification" in parameters:
            count = _class_count(parameters, where.output(name))
            if count:  # as Triton: 0 asks for the tensor itself
                request.output_classes[name] = count
        ref = _shm_ref(parameters, where.output(name), name)
        if ref is not None:
            request.output_shm[name] = ref
        if "binary_data" in parameters:
            binary[name] = bool(parameters["binary_data"])
    request.outputs = outputs
    return binary


def _class_count(parameters: dict[str, Any], where: str) -> int:
    """An output's ``classification``: an unsigned integer (Triton's ``CheckClassificationOutput``)."""
    if "shared_memory_region" in parameters:
        msg = "Output can't set both 'shared_memory_region' and 'classification'"
        raise InvalidArgumentError(msg)
    count = parameters["classification"]
    if isinstance(count, bool) or not isinstance(count, int) or count < 0:
        # Triton's words (its status is 500: docs/triton-differences.md, client-fault-not-internal).
        raise InvalidArgumentError(
            "Unable to set 'classification': attempt to access JSON non-unsigned-integer as unsigned-integer "
            f"({where}: got {count!r})"
        )
    return count


# --- inference responses --------------------------------------------------------------------------------


def _json_data(array: np.ndarray[Any, Any], datatype: str, where: str) -> list[Any]:
    if datatype == "BYTES":
        try:
            return [
                item.decode("utf-8") if isinstance(item, bytes) else str(item) for item in array.reshape(-1)
            ]
        except UnicodeDecodeError:
            raise InvalidArgumentError(
                f"{where}: BYTES output is not UTF-8 text; request it with binary_data: true"
            ) from None
    if datatype == "BF16":
        return array.reshape(-1).astype(np.float32).tolist()  # type: ignore[no-any-return]
    return array.reshape(-1).tolist()  # type: ignore[no-any-return]


def encode_infer_response(response: InferResponse, choice: OutputChoice) -> tuple[bytes, int | None]:
    """The response body, and the JSON header length when binary output bytes follow it."""
    parts, json_length = encode_infer_response_parts(response, choice)
    if len(parts) == 1 and isinstance(parts[0], bytes):
        return parts[0], json_length
    return b"".join(parts), json_length


def encode_infer_response_parts(
    response: InferResponse, choice: OutputChoice
) -> tuple[list[bytes | memoryview], int | None]:
    """:func:`encode_infer_response` as pieces: the JSON header (the whole body when no binary output
    follows: header length None), then each binary output's bytes, a view of its array where it can be."""
    outputs: list[dict[str, Any]] = []
    tails: list[bytes | memoryview] = []
    tail_bytes = 0
    for output in response.outputs:
        entry: dict[str, Any] = {
            "name": output.name,
            "datatype": output.datatype,
            "shape": list(output.shape),
        }
        if output.shm is not None:
            # Written into the client's region: the entry carries neither data nor parameters, as
            # Triton's (perf_analyzer's C++ client reads any output ``parameters`` as binary data).
            pass
        elif choice.is_binary(output.name):
            data = dtypes.array_to_bytes(output.array, dtypes.from_name(output.datatype))
            size = data.nbytes if isinstance(data, memoryview) else len(data)
            entry["parameters"] = {"binary_data_size": size}
            tails.append(data)
            tail_bytes += size
        else:
            entry["data"] = _json_data(
                output.array, output.datatype, f"model '{response.model_name}' output '{output.name}'"
            )
        outputs.append(entry)
    body: dict[str, Any] = {"model_name": response.model_name, "model_version": response.model_version}
    if response.request_id:
        body["id"] = response.request_id
    body["outputs"] = outputs
    head = json.dumps(body, separators=(",", ":")).encode()
    if not tail_bytes:  # as Triton: binary outputs of 0 bytes only are a plain JSON answer (no header)
        return [head], None
    return [head, *tails], len(head)
