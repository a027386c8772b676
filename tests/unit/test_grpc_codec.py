"""The gRPC codec: what a client encodes, the server decodes the same, parameters included."""

from __future__ import annotations

import numpy as np
import pytest
from tritonclient.grpc import service_pb2

from sonic.protocol.errors import InvalidArgumentError
from sonic.protocol.grpc_codec import decode_infer_request, encode_request
from sonic.protocol.types import ShmRef, WireInput, WireOutputRequest, WireRequest

pytestmark = pytest.mark.unit


def _round_trip(request: WireRequest):  # type: ignore[no-untyped-def]
    head, tail = encode_request(request)
    return decode_infer_request(b"".join([head.SerializeToString(), *tail]))


def test_request_round_trip_with_parameters() -> None:
    data = np.arange(6, dtype=np.float32).tobytes()
    parameters = {
        "sequence_id": 2**63 + 5,
        "sequence_start": True,
        "priority": 2,
        "timeout": 100,
        "ratio": 0.25,
    }
    request = WireRequest(
        "m",
        "3",
        (WireInput("A", "FP32", (2, 3), data), WireInput("B", "FP32", (2, 3), None, ShmRef("r", 24, 8))),
        (WireOutputRequest("OUT"),),
        request_id="id-1",
        parameters={**parameters, "note": "text"},
    )
    decoded = _round_trip(request)
    assert (decoded.model_name, decoded.model_version, decoded.request_id) == ("m", "3", "id-1")
    assert decoded.parameters == {**parameters, "note": "text"}
    assert (decoded.priority, decoded.timeout_us) == (2, 100)
    assert decoded.outputs == ["OUT"]
    assert bytes(decoded.inputs[0].raw or b"") == data
    assert decoded.inputs[1].shm == ShmRef("r", 24, 8)


def test_no_parameters_decode_as_empty() -> None:
    decoded = _round_trip(WireRequest("m", "", (WireInput("A", "FP32", (1,), b"\0\0\0\0"),)))
    assert decoded.parameters == {}
    assert (decoded.priority, decoded.timeout_us) == (0, 0)


@pytest.mark.parametrize(
    ("parameters", "message"),
    [
        # Triton's words, then the field that was set
        (
            {"priority": "high"},
            "invalid value type for 'priority' parameter, expected int64_param or uint64_param. Got string_param",
        ),
        (
            {"sequence_end": 1},
            "invalid value type for 'sequence_end' parameter, expected bool_param. Got int64_param",
        ),
        (
            {"sequence_id": 1.5},
            "invalid value type for 'sequence_id' parameter, expected int64_param or string_param. Got double_param",
        ),
        (
            {"timeout": True},
            "invalid value type for 'timeout' parameter, expected int64_param. Got bool_param",
        ),
    ],
)
def test_parameters_of_the_wrong_type_are_refused(parameters: dict[str, object], message: str) -> None:
    request = WireRequest("m", "", (WireInput("A", "FP32", (1,), b"\0\0\0\0"),), parameters=parameters)  # type: ignore[arg-type]
    with pytest.raises(InvalidArgumentError) as error:
        _round_trip(request)
    assert error.value.message == f"model 'm': {message}"


def test_typed_contents_with_a_negative_dimension_are_left_to_the_model() -> None:
    # Found by the differential tests: a BYTES input shaped [-1] reached numpy (an internal error). Its
    # data is not read: the model refuses the shape in Triton's words for its dims.
    request = service_pb2.ModelInferRequest(model_name="m")
    tensor = request.inputs.add(name="TEXT", datatype="BYTES", shape=[-1])
    tensor.contents.bytes_contents.append(b"a")
    decoded = decode_infer_request(request.SerializeToString()).inputs[0]
    assert (decoded.shape, decoded.array, decoded.raw) == ((-1,), None, None)


def test_typed_bytes_contents_decode() -> None:
    # upb's repeated fields have no __iter__ attribute; they were refused as "not a list of strings".
    request = service_pb2.ModelInferRequest(model_name="m")
    tensor = request.inputs.add(name="TEXT", datatype="BYTES", shape=[2])
    tensor.contents.bytes_contents.extend([b"a", b"bc"])
    array = decode_infer_request(request.SerializeToString()).inputs[0].array
    assert array is not None
    assert array.tolist() == [b"a", b"bc"]


def test_errors_of_inputs_in_triton_words_and_order() -> None:
    request = service_pb2.ModelInferRequest(model_name="m")
    request.inputs.add(name="A", datatype="INT32", shape=[1])
    with pytest.raises(InvalidArgumentError) as error:
        decode_infer_request(request.SerializeToString())
    assert error.value.message == (
        "model 'm' input 'A': unable to find data for input tensor 'A' for model 'm' in request."
    )
    # A repeated input is named before typed contents beside raw ones, input by input as Triton adds them.
    request.inputs.add(name="A", datatype="INT32", shape=[1]).contents.int_contents.append(1)
    request.raw_input_contents.append(b"\0" * 4)
    with pytest.raises(InvalidArgumentError) as error:
        decode_infer_request(request.SerializeToString())
    assert error.value.message == "model 'm' input 'A': input 'A' already exists in request"

    # Found by the differential tests: every input's name before any contents, as Triton 2.51 (a typed
    # input beside raw ones, repeated later, is named as repeated).
    request = service_pb2.ModelInferRequest(model_name="m")
    request.inputs.add(name="F", datatype="FP32", shape=[1]).contents.fp32_contents.append(1.0)
    request.inputs.add(name="R", datatype="FP32", shape=[1])
    request.inputs.add(name="F", datatype="FP32", shape=[1]).contents.fp32_contents.append(1.0)
    request.raw_input_contents.append(b"\0" * 4)
    with pytest.raises(InvalidArgumentError) as error:
        decode_infer_request(request.SerializeToString())
    assert error.value.message == "model 'm' input 'F': input 'F' already exists in request"


@pytest.mark.parametrize(
    ("datatype", "field", "values", "message"),
    [
        ("UINT8", "uint_contents", [1, 2, 3], "input byte size mismatch for input 'X' for model 'm'. Expected 2, got 3"),
        ("FP32", "fp32_contents", [1.0], "input byte size mismatch for input 'X' for model 'm'. Expected 8, got 4"),
        ("BYTES", "bytes_contents", [b"a", b"b", b"c"],
         "unexpected number of string elements 3 for inference input 'X' for model 'm', expecting 2"),
    ],
)  # fmt: skip
def test_typed_contents_that_do_not_fill_the_shape_in_triton_words(
    datatype: str, field: str, values: list[object], message: str
) -> None:
    """Checked against Triton 2.51: it counts the bytes (strings for BYTES) the contents would fill."""
    request = service_pb2.ModelInferRequest(model_name="m")
    tensor = request.inputs.add(name="X", datatype=datatype, shape=[2])
    getattr(tensor.contents, field).extend(values)
    with pytest.raises(InvalidArgumentError) as error:
        decode_infer_request(request.SerializeToString())
    assert error.value.message == f"model 'm' input 'X': {message}"


def test_shared_memory_and_classification_are_found_beside_plain_tensors() -> None:
    """Parameter maps are looked into only when the head holds the key's bytes: a request mixing inputs and
    outputs in shared memory, classified and plain ones decodes every one of them."""
    data = np.arange(4, dtype=np.float32).tobytes()
    request = WireRequest(
        "m",
        "",
        (
            WireInput("PLAIN", "FP32", (1, 4), data),
            WireInput("IN_SHM", "FP32", (1, 4), None, ShmRef("in", 16, 32)),
            WireInput("PLAIN2", "FP32", (1, 4), data),
        ),
        (
            WireOutputRequest("OUT"),
            WireOutputRequest("OUT_SHM", shm=ShmRef("out", 16, 8)),
            WireOutputRequest("TOP", class_count=2),
        ),
    )
    decoded = _round_trip(request)
    assert [(t.name, t.shm) for t in decoded.inputs] == [
        ("PLAIN", None),
        ("IN_SHM", ShmRef("in", 16, 32)),
        ("PLAIN2", None),
    ]
    assert [bytes(t.raw) for t in decoded.inputs if t.raw is not None] == [data, data]
    assert decoded.outputs == ["OUT", "OUT_SHM", "TOP"]
    assert decoded.output_shm == {"OUT_SHM": ShmRef("out", 16, 8)}
    assert decoded.output_classes == {"TOP": 2}
    plain = _round_trip(WireRequest("m", "", (WireInput("A", "FP32", (1, 4), data),), ()))
    assert (plain.outputs, plain.output_shm, plain.output_classes) == (None, {}, {})


def test_a_repeated_input_name_is_refused_first() -> None:
    data = np.zeros(1, np.float32).tobytes()
    inputs = (
        WireInput("A", "FP32", (1,), data),
        WireInput("B", "FP32", (1,), data),
        WireInput("A", "FP32", (1,), data),
    )
    with pytest.raises(
        InvalidArgumentError, match=r"^model 'm' input 'A': input 'A' already exists in request$"
    ):
        _round_trip(WireRequest("m", "", inputs, ()))
