"""Every bad request gets Triton's status code and a message naming model, input, expected and given."""

from __future__ import annotations

import concurrent.futures
from typing import Any

import grpc
import numpy as np
import numpy.typing as npt
import pytest
import tritonclient.grpc as grpcclient
from tritonclient.grpc import service_pb2, service_pb2_grpc
from tritonclient.utils import InferenceServerException

from sonic.launch import ServerProcess

pytestmark = pytest.mark.integration


@pytest.fixture
def client(server: ServerProcess):  # type: ignore[no-untyped-def]
    with grpcclient.InferenceServerClient(server.grpc_address) as c:
        yield c


def _input(name: str, array: npt.NDArray[Any], datatype: str) -> grpcclient.InferInput:
    tensor = grpcclient.InferInput(name, list(array.shape), datatype)
    tensor.set_data_from_numpy(array)
    return tensor


def _error(call) -> InferenceServerException:  # type: ignore[no-untyped-def]
    with pytest.raises(InferenceServerException) as info:
        call()
    return info.value


ONES = np.ones((1, 16), dtype=np.int32)


def test_unknown_model_and_version(client: grpcclient.InferenceServerClient) -> None:
    error = _error(lambda: client.infer("nope", [_input("INPUT0", ONES, "INT32")]))
    assert error.status() == "StatusCode.NOT_FOUND"
    assert "'nope'" in error.message()
    error = _error(
        lambda: client.infer(
            "versions", [_input("INPUT0", ONES.astype(np.float32), "FP32")], model_version="9"
        )
    )
    assert error.status() == "StatusCode.NOT_FOUND"
    assert "version 9" in error.message()
    assert _error(lambda: client.get_model_metadata("nope")).status() == "StatusCode.NOT_FOUND"
    assert _error(lambda: client.get_model_config("nope")).status() == "StatusCode.NOT_FOUND"


@pytest.mark.parametrize(
    ("inputs", "expected"),
    [
        ([("INPUT0", ONES, "INT32")], "expected 2 inputs but got 1"),
        (
            [("INPUT0", ONES, "INT32"), ("INPUT1", ONES, "INT32"), ("EXTRA", ONES, "INT32")],
            "unexpected inference input 'EXTRA'",
        ),
        (
            [("INPUT0", ONES.astype(np.float32), "FP32"), ("INPUT1", ONES, "INT32")],
            "data-type is 'FP32', but model 'add_sub' expects 'INT32'",
        ),
        (
            [
                ("INPUT0", np.ones((1, 15), np.int32), "INT32"),
                ("INPUT1", np.ones((1, 15), np.int32), "INT32"),
            ],
            "Expected [-1,16], got [1,15]",
        ),
        (
            [
                ("INPUT0", np.ones((9, 16), np.int32), "INT32"),
                ("INPUT1", np.ones((9, 16), np.int32), "INT32"),
            ],
            "inference request batch-size must be <= 8 for 'add_sub'",
        ),
        (
            [("INPUT0", np.ones((2, 16), np.int32), "INT32"), ("INPUT1", ONES, "INT32")],
            "input 'INPUT1' batch size does not match other inputs for 'add_sub'",
        ),
        (
            [("INPUT0", np.ones(16, np.int32), "INT32"), ("INPUT1", np.ones(16, np.int32), "INT32")],
            "Expected [-1,16], got [16]",
        ),
    ],
    ids=["missing", "unexpected", "dtype", "shape", "batch-too-big", "batch-mismatch", "no-batch-dim"],
)
def test_invalid_inputs(client: grpcclient.InferenceServerClient, inputs, expected: str) -> None:  # type: ignore[no-untyped-def]
    error = _error(lambda: client.infer("add_sub", [_input(n, a, d) for n, a, d in inputs]))
    assert error.status() == "StatusCode.INVALID_ARGUMENT"
    assert expected in error.message()
    assert "add_sub" in error.message()


def _raw_request(server: ServerProcess, request: service_pb2.ModelInferRequest) -> grpc.RpcError:
    with grpc.insecure_channel(server.grpc_address) as channel:
        stub = service_pb2_grpc.GRPCInferenceServiceStub(channel)
        with pytest.raises(grpc.RpcError) as info:
            stub.ModelInfer(request)
    return info.value


def test_byte_size_not_matching_shape(server: ServerProcess) -> None:
    request = service_pb2.ModelInferRequest(model_name="identity")
    request.inputs.add(name="INPUT0", datatype="FP32", shape=[1, 16])
    request.raw_input_contents.append(b"\x00" * 60)
    error = _raw_request(server, request)
    assert error.code() == grpc.StatusCode.INVALID_ARGUMENT
    assert "input byte size mismatch for input 'INPUT0' for model 'identity'. Expected 64, got 60" in str(
        error.details()
    )
    assert "input 'INPUT0'" in str(error.details())


def test_malformed_bytes_tensor(server: ServerProcess) -> None:
    request = service_pb2.ModelInferRequest(model_name="strings")
    request.inputs.add(name="INPUT0", datatype="BYTES", shape=[1, 2])
    request.raw_input_contents.append(b"\x05\x00\x00\x00abc")  # declares 5 bytes, carries 3
    error = _raw_request(server, request)
    assert error.code() == grpc.StatusCode.INVALID_ARGUMENT
    assert "malformed BYTES" in str(error.details())


def test_raw_contents_count_mismatch(server: ServerProcess) -> None:
    request = service_pb2.ModelInferRequest(model_name="add_sub")
    request.inputs.add(name="INPUT0", datatype="INT32", shape=[1, 16])
    request.inputs.add(name="INPUT1", datatype="INT32", shape=[1, 16])
    request.raw_input_contents.append(ONES.tobytes())
    error = _raw_request(server, request)
    assert error.code() == grpc.StatusCode.INVALID_ARGUMENT
    assert "raw_input_contents has 1 entries for 2 inputs" in str(error.details())


def test_unknown_output(client: grpcclient.InferenceServerClient) -> None:
    error = _error(
        lambda: client.infer(
            "add_sub",
            [_input("INPUT0", ONES, "INT32"), _input("INPUT1", ONES, "INT32")],
            outputs=[grpcclient.InferRequestedOutput("OUTPUT9")],
        )
    )
    assert error.status() == "StatusCode.INVALID_ARGUMENT"
    assert "unexpected inference output 'OUTPUT9'" in error.message()


def test_unavailable_model_reports_reason(client: grpcclient.InferenceServerClient) -> None:
    error = _error(lambda: client.infer("broken_model", [_input("INPUT0", ONES.astype(np.float32), "FP32")]))
    assert error.status() == "StatusCode.NOT_FOUND"  # as Triton: "... has no available versions"
    assert "has no available versions" in error.message()
    assert "onnxruntime cannot load" in error.message()


def test_load_refused_outside_explicit_mode(client: grpcclient.InferenceServerClient) -> None:
    error = _error(lambda: client.load_model("identity"))
    assert error.status() == "StatusCode.UNAVAILABLE"  # as Triton 2.51
    assert "--model-control-mode explicit" in error.message()


def test_bad_requests_do_not_disturb_good_ones(client: grpcclient.InferenceServerClient) -> None:
    """Interleave bad and good requests on one batched model: every good one is answered correctly."""

    def good_call(index: int) -> npt.NDArray[Any]:
        data = np.full((2, 16), index, dtype=np.float32)
        answer: npt.NDArray[Any] = client.infer("identity", [_input("INPUT0", data, "FP32")]).as_numpy(
            "OUTPUT0"
        )
        return answer

    def bad_call(index: int) -> str:
        data = np.full((2, 15), index, dtype=np.float32)
        try:
            client.infer("identity", [_input("INPUT0", data, "FP32")])
        except InferenceServerException as exc:
            return str(exc.status())
        return "no error"

    with concurrent.futures.ThreadPoolExecutor(8) as pool:
        good_futures = [pool.submit(good_call, i) for i in range(40)]
        bad_futures = [pool.submit(bad_call, i) for i in range(40)]
        good = [f.result() for f in good_futures]
        errors = [f.result() for f in bad_futures]
    for index, value in enumerate(good):
        np.testing.assert_array_equal(value, np.full((2, 16), index, dtype=np.float32))
    assert set(errors) == {"StatusCode.INVALID_ARGUMENT"}
