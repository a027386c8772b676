"""``triton_python_backend_utils`` as Triton Python models use it, and the config JSON they get."""

from __future__ import annotations

import contextvars
import json
from collections.abc import Iterator
from typing import Any

import ml_dtypes
import numpy as np
import pytest
from tritonclient.grpc import model_config_pb2

import triton_python_backend_utils as pb_utils
from sonic.protocol.model_config import parse_config_text
from sonic.server.backends import pb_utils as bls
from sonic.server.backends.base import ModelCall
from sonic.server.backends.python import config_to_dict
from sonic.server.responses import Streamed

pytestmark = pytest.mark.unit

CONFIG = """
name: "m"
backend: "python"
max_batch_size: 8
input [ { name: "IN" data_type: TYPE_FP32 dims: [ 4, -1 ] } ]
output [ { name: "OUT" data_type: TYPE_INT64 dims: [ 2 ] } ]
dynamic_batching { max_queue_delay_microseconds: 100 }
parameters { key: "k" value: { string_value: "v" } }
"""


def test_config_json_as_triton_gives_it() -> None:
    as_dict = config_to_dict(parse_config_text(CONFIG, "test"))
    # Triton's JSON has numbers for 64-bit fields and every field, defaults included.
    assert as_dict["input"][0]["dims"] == [4, -1]
    assert as_dict["dynamic_batching"]["max_queue_delay_microseconds"] == 100
    assert as_dict["max_batch_size"] == 8
    assert as_dict["output"][0]["data_type"] == "TYPE_INT64"
    assert as_dict["parameters"]["k"]["string_value"] == "v"
    json.dumps(as_dict)  # must be plain JSON
    output_config = pb_utils.get_output_config_by_name(as_dict, "OUT")
    assert output_config is not None
    assert output_config["dims"] == [2]
    assert pb_utils.get_input_config_by_name(as_dict, "nope") is None


def test_model_config_auto_complete_rules() -> None:
    config = pb_utils.ModelConfig(json.dumps({"name": "m", "max_batch_size": 0, "input": [], "output": []}))
    config.set_max_batch_size(16)
    config.add_input({"name": "IN", "data_type": "TYPE_FP32", "dims": [4]})
    config.add_input({"name": "IN", "data_type": "TYPE_FP32", "dims": [4], "optional": True})
    config.add_output({"name": "OUT", "data_type": "TYPE_FP32", "dims": [1]})
    config.set_dynamic_batching()
    assert config.as_dict()["input"] == [
        {"name": "IN", "data_type": "TYPE_FP32", "dims": [4], "optional": True}
    ]
    assert config.as_dict()["dynamic_batching"] == {}
    with pytest.raises(ValueError, match="configuration expects datatype TYPE_FP32"):
        config.add_input({"name": "IN", "data_type": "TYPE_INT32", "dims": [4]})
    with pytest.raises(ValueError, match="the model expects dims"):
        config.add_output({"name": "OUT", "data_type": "TYPE_FP32", "dims": [2]})
    with pytest.raises(ValueError, match="contains property other than"):
        config.add_output({"name": "X", "data_type": "TYPE_FP32", "dims": [2], "optional": True})
    with pytest.raises(ValueError, match="specified max_batch_size 16"):
        config.set_max_batch_size(4)


def test_tensor_types_and_errors() -> None:
    assert pb_utils.Tensor("a", np.zeros(2, np.float32)).triton_dtype() == model_config_pb2.TYPE_FP32
    assert (
        pb_utils.Tensor("b", np.array([b"x"], dtype=np.object_)).triton_dtype()
        == model_config_pb2.TYPE_STRING
    )
    bf16 = pb_utils.Tensor("c", np.zeros(2, ml_dtypes.bfloat16))
    assert bf16.triton_dtype() == model_config_pb2.TYPE_BF16
    assert pb_utils.triton_string_to_numpy("TYPE_INT16") is np.int16
    assert pb_utils.triton_to_numpy_type(model_config_pb2.TYPE_UINT8) is np.uint8
    with pytest.raises(
        pb_utils.TritonModelException, match=r"^NumPy dtype is not supported: .* use np\.object_"
    ):
        pb_utils.Tensor("d", np.array(["text"]))
    encoded = pb_utils.serialize_byte_tensor(np.array([b"ab", b""], dtype=np.object_))
    assert encoded is not None
    assert pb_utils.deserialize_bytes_tensor(encoded.tobytes()).tolist() == [b"ab", b""]


def test_bls_outside_a_model_thread_is_a_clear_error() -> None:
    request = pb_utils.InferenceRequest(model_name="x", inputs=[], requested_output_names=[])
    with pytest.raises(pb_utils.TritonModelException, match="no server to call"):
        request.exec()


class _BlockingRecorder:
    """The server's caller as a BLS request sees it: records what a call carried."""

    def __init__(self) -> None:
        self.parameters: dict[str, object] | None = None

    async def infer(self, call: ModelCall) -> dict[str, np.ndarray]:  # type: ignore[type-arg]
        raise AssertionError("BLS calls from a model thread block")

    def infer_blocking(self, call: ModelCall) -> dict[str, np.ndarray]:  # type: ignore[type-arg]
        self.parameters = dict(call.parameters or {})
        return {"Y": np.zeros(1, np.float32)}

    def infer_stream_blocking(self, call: ModelCall) -> Iterator[Streamed]:
        self.parameters = dict(call.parameters or {})
        yield Streamed({"Y": np.zeros(1, np.float32)}, final=True)


def _bls(**options: Any) -> tuple[pb_utils.InferenceResponse, _BlockingRecorder]:
    recorder = _BlockingRecorder()

    def call() -> pb_utils.InferenceResponse:
        bls.current_caller.set(recorder)
        request = pb_utils.InferenceRequest(
            model_name="m", inputs=[], requested_output_names=["Y"], **options
        )
        response: pb_utils.InferenceResponse = request.exec()
        return response

    return contextvars.copy_context().run(call), recorder


def test_bls_request_carries_sequence_flags_timeout_and_parameters() -> None:
    flags = (
        pb_utils.TRITONSERVER_REQUEST_FLAG_SEQUENCE_START | pb_utils.TRITONSERVER_REQUEST_FLAG_SEQUENCE_END
    )
    response, recorder = _bls(correlation_id="run-7", flags=flags, timeout=10, parameters={"a": 1})
    assert not response.has_error()
    assert recorder.parameters == {
        "a": 1,
        "sequence_id": "run-7",
        "sequence_start": True,
        "sequence_end": True,
        "timeout": 10,
    }
    _, recorder = _bls(correlation_id=5, parameters='{"b": true}')
    assert recorder.parameters == {"b": True, "sequence_id": 5}
    _, recorder = _bls()
    assert recorder.parameters == {}


def test_bls_parameters_that_are_no_json_object_fail_the_call() -> None:
    response, recorder = _bls(parameters="not json")
    assert response.has_error()
    assert "parameters 'not json' are not JSON" in str(response.error())
    response, _ = _bls(parameters="[1, 2]")
    assert "must be a JSON object" in str(response.error())
    assert recorder.parameters is None


def test_decoupled_bls_call_carries_the_correlation_id_and_parameters() -> None:
    recorder = _BlockingRecorder()

    def call() -> list[pb_utils.InferenceResponse]:
        bls.current_caller.set(recorder)
        request = pb_utils.InferenceRequest(
            model_name="m", inputs=[], requested_output_names=["Y"], correlation_id=5, parameters={"k": "v"}
        )
        return list(request.exec(decoupled=True))

    responses = contextvars.copy_context().run(call)
    assert len(responses) == 1
    assert recorder.parameters is not None
    assert recorder.parameters["sequence_id"] == 5
    assert recorder.parameters["k"] == "v"
