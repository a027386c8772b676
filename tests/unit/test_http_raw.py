"""The raw binary HTTP request's shape deduction (``sonic.protocol.http_raw``), as Triton 2.51 does it."""

from __future__ import annotations

import numpy as np
import pytest

from sonic.protocol import dtypes
from sonic.protocol.errors import InvalidArgumentError
from sonic.protocol.http_json import OutputChoice, encode_infer_response
from sonic.protocol.http_raw import decode_raw_request, raw_shape
from sonic.protocol.model_config import ModelSpec, TensorSpec
from sonic.protocol.types import InferResponse, OutputTensor


def _spec(max_batch_size: int, *inputs: tuple[str, str, tuple[int, ...]]) -> ModelSpec:
    tensors = {
        name: TensorSpec(name, dtypes.from_name(datatype), dims, dims) for name, datatype, dims in inputs
    }
    return ModelSpec("m", max_batch_size, tensors, {})


@pytest.mark.parametrize(
    ("spec", "size", "shape"),
    [
        (_spec(0, ("X", "UINT8", (2,))), 2, (2,)),
        (_spec(4, ("X", "FP32", (3,))), 12, (1, 3)),  # the batch dimension is 1
        (_spec(4, ("X", "FP32", (3,))), 24, (1, 3)),  # not deduced from the size: a mismatch later
        (_spec(0, ("X", "FP32", (-1,))), 12, (3,)),
        (_spec(0, ("X", "FP32", (-1,))), 5, (1,)),  # whole elements, rounded down
        (_spec(0, ("X", "FP32", (-1,))), 0, (0,)),
        (_spec(4, ("X", "INT32", (2, -1))), 24, (1, 2, 3)),
        (_spec(0, ("X", "BYTES", (1,))), 7, (1,)),
        (_spec(2, ("X", "BYTES", (1,))), 0, (1, 1)),
    ],
)
def test_shape_from_the_config(spec: ModelSpec, size: int, shape: tuple[int, ...]) -> None:
    assert raw_shape(spec, size, "m") == shape


@pytest.mark.parametrize(
    ("spec", "message"),
    [
        (
            _spec(0, ("A", "FP32", (1,)), ("B", "FP32", (1,))),
            (
                "m: Raw request must only have 1 input (found 1) to be deduced but got 2 inputs in 'm' model "
                "configuration"
            ),
        ),
        (
            _spec(0, ("X", "INT16", (-1, -1))),
            (
                "m: The shape of the raw input 'X' can not be deduced because there are more than one "
                "variable-sized dimension"
            ),
        ),
        (
            _spec(0, ("X", "BYTES", (-1,))),
            "m: For BYTE datatype raw input 'X', the model must have input shape [1]",
        ),
        (
            _spec(0, ("X", "BYTES", (2,))),
            "m: For BYTE datatype raw input 'X', the model must have input shape [1]",
        ),
    ],
)
def test_shape_cannot_be_deduced(spec: ModelSpec, message: str) -> None:
    with pytest.raises(InvalidArgumentError) as caught:
        raw_shape(spec, 8, "m")
    assert caught.value.message == message


def test_numeric_body_is_a_view_of_the_right_size() -> None:
    body = np.arange(3, dtype=np.float32).tobytes()
    request, choice = decode_raw_request(body, _spec(4, ("X", "FP32", (3,))), "m", "1", "model 'm'")
    (tensor,) = request.inputs
    assert (request.model_name, request.model_version, request.request_id) == ("m", "1", "")
    assert (tensor.name, tensor.datatype, tensor.shape, bytes(tensor.raw or b"")) == (
        "X",
        "FP32",
        (1, 3),
        body,
    )
    assert request.outputs is None
    assert choice.is_binary("ANY")


def test_numeric_body_of_the_wrong_size_names_raw_input() -> None:
    with pytest.raises(InvalidArgumentError) as caught:
        decode_raw_request(bytes(5), _spec(0, ("X", "UINT8", (2,))), "m", "", "model 'm' version 1")
    assert caught.value.message == (
        "model 'm' version 1 input 'raw_input': input byte size mismatch for input 'raw_input' for model 'm'. "
        "Expected 2, got 5"
    )


def test_bytes_body_is_the_one_element() -> None:
    request, _ = decode_raw_request(bytearray(b"\xff\x00text"), _spec(2, ("T", "BYTES", (1,))), "m", "", "m")
    (tensor,) = request.inputs
    assert tensor.shape == (1, 1)
    assert tensor.array is not None
    assert tensor.array.tolist() == [[b"\xff\x00text"]]


def test_binary_outputs_of_no_bytes_answer_plain_json() -> None:
    output = OutputTensor("Y", "FP32", (0,), np.zeros(0, np.float32))
    response = InferResponse("m", "1", "", [output])
    body, length = encode_infer_response(response, OutputChoice(True, {}))
    assert length is None
    assert b'"binary_data_size":0' in body
