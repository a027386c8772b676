"""Protocol details and completed configs, asked of ``sonic serve`` and of real NVIDIA Triton 2.51 alike.

Each test runs against both servers (Triton: the ``tritonserver`` binary in the nvidia-pytriton wheel,
skipped where it cannot run) serving the same Python-backend model folders, and asserts what Triton
answers, so a difference shows up as a failure on the sonic side only.
"""

from __future__ import annotations

import json
import os
import queue
import tempfile
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import grpc
import numpy as np
import pytest
import tritonclient.grpc as grpcclient
import tritonclient.http as httpclient
import tritonclient.utils.shared_memory as shm
from tests.integration.triton_helpers import SERVERS, Endpoint, serving
from tritonclient.grpc import service_pb2, service_pb2_grpc
from tritonclient.utils import InferenceServerException

from sonic.launch import ServerProcess

pytestmark = [pytest.mark.integration]

PYTHON_MODELS = Path(__file__).parent / "python_models"
ADD_SUB_CONFIG = """name: "add_sub"
backend: "python"
input [
  { name: "INPUT0" data_type: TYPE_FP32 dims: [ 4 ] },
  { name: "INPUT1" data_type: TYPE_FP32 dims: [ 4 ] }
]
output [
  { name: "OUTPUT0" data_type: TYPE_FP32 dims: [ 4 ] },
  { name: "OUTPUT1" data_type: TYPE_FP32 dims: [ 4 ] }
]
instance_group [ { kind: KIND_CPU } ]
"""


@pytest.fixture(scope="module")
def repository(tmp_path_factory: pytest.TempPathFactory) -> Path:
    repo = tmp_path_factory.mktemp("parity") / "models"
    for name, config in (("add_sub", ADD_SUB_CONFIG), ("scale", 'name: "scale"\nbackend: "python"\n')):
        (repo / name / "1").mkdir(parents=True)
        (repo / name / "config.pbtxt").write_text(config, encoding="utf-8")
        (repo / name / "1" / "model.py").write_bytes((PYTHON_MODELS / f"{name}.py").read_bytes())
    return repo


@pytest.fixture(scope="module", params=SERVERS)
def server(request: pytest.FixtureRequest, repository: Path) -> Iterator[Endpoint]:
    with serving(request.param, repository, ["add_sub", "scale"]) as endpoint:
        yield endpoint


def _inputs(module: Any) -> list[Any]:
    tensors = []
    for name in ("INPUT0", "INPUT1"):
        tensor = module.InferInput(name, [4], "FP32")
        tensor.set_data_from_numpy(np.arange(4, dtype=np.float32))
        tensors.append(tensor)
    return tensors


def _raw_request(shape: int = 4) -> service_pb2.ModelInferRequest:
    request = service_pb2.ModelInferRequest(model_name="add_sub")
    for name in ("INPUT0", "INPUT1"):
        request.inputs.add(name=name, datatype="FP32", shape=[shape])
        request.raw_input_contents.append(np.ones(shape, np.float32).tobytes())
    return request


def _grpc_error(server: Endpoint, call: Any) -> grpc.RpcError:
    with grpc.insecure_channel(server.grpc) as channel:
        stub = service_pb2_grpc.GRPCInferenceServiceStub(channel)
        with pytest.raises(grpc.RpcError) as info:
            call(stub)
    return info.value


def test_server_metadata_lists_binary_tensor_data(server: Endpoint) -> None:
    with grpcclient.InferenceServerClient(server.grpc) as client:
        assert "binary_tensor_data" in client.get_server_metadata().extensions


def test_statistics_of_an_unknown_model_is_invalid_argument(server: Endpoint) -> None:
    with (
        grpcclient.InferenceServerClient(server.grpc) as client,
        pytest.raises(InferenceServerException) as info,
    ):
        client.get_inference_statistics("no_such_model")
    assert info.value.status() == "StatusCode.INVALID_ARGUMENT"
    assert "requested model 'no_such_model' is not available" in str(info.value.message())
    http = httpclient.InferenceServerClient(server.http)
    try:
        with pytest.raises(InferenceServerException) as http_info:
            http.get_inference_statistics("no_such_model")
        assert http_info.value.status() == "400"
    finally:
        http.close()


def test_load_and_unload_without_explicit_mode_are_unavailable(server: Endpoint) -> None:
    with grpcclient.InferenceServerClient(server.grpc) as client:
        for call in (client.load_model, client.unload_model):
            with pytest.raises(InferenceServerException) as info:
                call("add_sub")
            assert info.value.status() == "StatusCode.UNAVAILABLE"
        assert client.is_model_ready("add_sub")


def test_requests_refused_by_validation_are_not_counted(server: Endpoint) -> None:
    with grpcclient.InferenceServerClient(server.grpc) as client:
        before = client.get_inference_statistics("add_sub").model_stats[0].inference_stats
        wrong_shape = _raw_request(shape=5)
        assert (
            _grpc_error(server, lambda stub: stub.ModelInfer(wrong_shape)).code()
            == grpc.StatusCode.INVALID_ARGUMENT
        )
        client.infer("add_sub", _inputs(grpcclient))
        after = client.get_inference_statistics("add_sub").model_stats[0].inference_stats
    assert after.fail.count == before.fail.count
    assert after.success.count == before.success.count + 1


def test_outputs_come_back_in_config_order(server: Endpoint) -> None:
    request = _raw_request()
    request.outputs.add(name="OUTPUT1")
    request.outputs.add(name="OUTPUT0")
    with grpc.insecure_channel(server.grpc) as channel:
        response = service_pb2_grpc.GRPCInferenceServiceStub(channel).ModelInfer(request)
    assert [o.name for o in response.outputs] == ["OUTPUT0", "OUTPUT1"]


def test_stream_responses_carry_triton_final_response(server: Endpoint) -> None:
    results: queue.Queue[tuple[Any, Any]] = queue.Queue()
    with grpcclient.InferenceServerClient(server.grpc) as client:
        client.start_stream(callback=lambda result, error: results.put((result, error)))
        client.async_stream_infer("add_sub", _inputs(grpcclient))
        result, error = results.get(timeout=60)
        client.stop_stream()
    assert error is None
    assert result.get_response().parameters["triton_final_response"].bool_param is True


def test_stream_error_responses_echo_only_the_request_id(server: Endpoint) -> None:
    bad = _raw_request(shape=5)
    bad.id = "bad-1"
    unknown = service_pb2.ModelInferRequest(model_name="no_such_model", id="unknown-1")
    with grpc.insecure_channel(server.grpc) as channel:
        stub = service_pb2_grpc.GRPCInferenceServiceStub(channel)
        responses = list(stub.ModelStreamInfer(iter([bad, unknown])))
    assert [r.infer_response for r in responses] == [
        service_pb2.ModelInferResponse(id="bad-1"),
        service_pb2.ModelInferResponse(id="unknown-1"),
    ]
    assert "unexpected shape for input" in responses[0].error_message
    assert responses[1].error_message == "Request for unknown model: 'no_such_model' is not found"


def test_grpc_outputs_in_shared_memory_carry_no_parameters(server: Endpoint) -> None:
    key = f"/sonic_parity_grpc_{server.kind}_{os.getpid()}"
    handle = shm.create_shared_memory_region("parity_grpc_out", key, 64)
    try:
        with grpcclient.InferenceServerClient(server.grpc) as client:
            client.register_system_shared_memory("parity_grpc_out", key, 64)
            in_region = grpcclient.InferRequestedOutput("OUTPUT0")
            in_region.set_shared_memory("parity_grpc_out", 16)
            outputs = [in_region, grpcclient.InferRequestedOutput("OUTPUT1")]
            response = client.infer("add_sub", _inputs(grpcclient), outputs=outputs).get_response()
            client.unregister_system_shared_memory("parity_grpc_out")
        assert [(o.name, dict(o.parameters)) for o in response.outputs] == [("OUTPUT0", {}), ("OUTPUT1", {})]
        assert [len(raw) for raw in response.raw_output_contents] == [0, 16]
        np.testing.assert_array_equal(shm.get_contents_as_numpy(handle, np.float32, [4]), np.arange(4) * 2)
    finally:
        shm.destroy_shared_memory_region(handle)


def test_typed_and_raw_contents_together_are_refused(server: Endpoint) -> None:
    request = _raw_request()
    request.inputs[0].contents.fp32_contents.extend([1.0, 2.0, 3.0, 4.0])
    error = _grpc_error(server, lambda stub: stub.ModelInfer(request))
    assert error.code() == grpc.StatusCode.INVALID_ARGUMENT
    assert "contents field must not be specified when using raw_input_contents for 'INPUT0'" in str(
        error.details()
    )


def test_http_outputs_in_shared_memory_carry_no_parameters(server: Endpoint) -> None:
    key = f"/sonic_parity_{server.kind}_{os.getpid()}"
    handle = shm.create_shared_memory_region("parity_out", key, 64)
    http = httpclient.InferenceServerClient(server.http)
    try:
        http.register_system_shared_memory("parity_out", key, 64)
        in_region = httpclient.InferRequestedOutput("OUTPUT0")
        in_region.set_shared_memory("parity_out", 16)
        in_body = httpclient.InferRequestedOutput("OUTPUT1", binary_data=True)
        result = http.infer("add_sub", _inputs(httpclient), outputs=[in_region, in_body])
        described = result.get_output("OUTPUT0")
        assert "parameters" not in described
        assert "data" not in described
        assert result.get_output("OUTPUT1")["parameters"] == {"binary_data_size": 16}
        np.testing.assert_array_equal(shm.get_contents_as_numpy(handle, np.float32, [4]), np.arange(4) * 2)
    finally:
        http.unregister_system_shared_memory("parity_out")
        http.close()
        shm.destroy_shared_memory_region(handle)


@pytest.mark.parametrize("model", ["add_sub", "scale"])
def test_completed_configs_are_tritons(server: Endpoint, model: str) -> None:
    with grpcclient.InferenceServerClient(server.grpc) as client:
        config = client.get_model_config(model, as_json=True)["config"]
    expected: dict[str, Any] = {
        "add_sub": {
            "name": "add_sub",
            "max_batch_size": 0,
            "instance_group": [{"name": "add_sub_0", "count": 1, "kind": "KIND_CPU"}],
        },
        "scale": {
            "name": "scale",
            "max_batch_size": 32,
            "instance_group": [{"name": "scale", "count": 1, "kind": "KIND_CPU"}],
            "dynamic_batching": {"preferred_batch_size": [32]},
        },
    }[model]
    for key, value in expected.items():
        assert config.get(key, 0) == value, (key, json.dumps(config))
    assert config["backend"] == "python"
    assert config["default_model_filename"] == "model.py"
    assert config["version_policy"] == {"latest": {"num_versions": 1}}
    assert config["optimization"]["input_pinned_memory"] == {"enable": True}


def test_a_huge_model_name_gets_not_found_with_the_name_cut() -> None:
    """sonic only: Triton echoes the whole name and its answer is lost to the client's 16 KiB limit."""
    name = "m" * 20_000
    with (
        ServerProcess.start([Path(tempfile.mkdtemp(prefix="sonic-empty-"))]) as process,
        grpc.insecure_channel(process.grpc_address) as channel,
    ):
        stub = service_pb2_grpc.GRPCInferenceServiceStub(channel)
        requests: list[tuple[Any, Any]] = [
            (stub.ModelMetadata, service_pb2.ModelMetadataRequest(name=name)),
            (stub.ModelInfer, service_pb2.ModelInferRequest(model_name=name)),
        ]
        for method, message in requests:
            with pytest.raises(grpc.RpcError) as info:
                method(message)
            assert info.value.code() == grpc.StatusCode.NOT_FOUND
            assert "(20000 characters)" in str(info.value.details())
            assert len(str(info.value.details())) < 1000


def test_cuda_shared_memory_status_and_unregister_answer_without_a_gpu(server: Endpoint) -> None:
    with grpcclient.InferenceServerClient(server.grpc) as client:
        client.unregister_cuda_shared_memory()  # perf_analyzer does this when it finishes
        assert list(client.get_cuda_shared_memory_status().regions) == []


def test_typed_contents_beside_raw_is_refused_per_input_before_the_raw_count(server: Endpoint) -> None:
    # INPUT0 raw, INPUT1 typed: one raw entry for two inputs, and typed contents beside raw ones.
    request = service_pb2.ModelInferRequest(model_name="add_sub")
    request.inputs.add(name="INPUT0", datatype="FP32", shape=[4])
    typed = request.inputs.add(name="INPUT1", datatype="FP32", shape=[4])
    typed.contents.fp32_contents.extend([1.0] * 4)
    request.raw_input_contents.append(np.ones(4, np.float32).tobytes())
    error = _grpc_error(server, lambda stub: stub.ModelInfer(request))
    assert error.code() == grpc.StatusCode.INVALID_ARGUMENT
    assert error.details() == (
        "contents field must not be specified when using raw_input_contents for 'INPUT1' for model 'add_sub'"
    )


def test_server_metadata_name_is_triton_by_default(server: Endpoint) -> None:
    with grpcclient.InferenceServerClient(server.grpc) as client:
        assert client.get_server_metadata().name == "triton"
    http = httpclient.InferenceServerClient(server.http)
    try:
        assert http.get_server_metadata()["name"] == "triton"
    finally:
        http.close()
