"""The gRPC frontend driven by the official tritonclient: metadata, config, repository, inference."""

from __future__ import annotations

import asyncio
import hashlib
import queue
from pathlib import Path
from typing import Any

import grpc
import numpy as np
import numpy.typing as npt
import onnxruntime as ort
import pytest
import tritonclient.grpc as grpcclient
import tritonclient.grpc.aio as aioclient
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


def _direct(model_path: Path, feeds: dict[str, npt.NDArray[Any]]) -> list[npt.NDArray[Any]]:
    session = ort.InferenceSession(str(model_path), providers=["CPUExecutionProvider"])
    return list(session.run(None, feeds))


def test_health_and_server_metadata(client: grpcclient.InferenceServerClient) -> None:
    assert client.is_server_live()
    assert client.is_server_ready()
    metadata = client.get_server_metadata()
    assert metadata.name == "triton"  # Triton's --id default
    assert "model_repository" in metadata.extensions
    assert "statistics" in metadata.extensions


def test_model_metadata_and_config(client: grpcclient.InferenceServerClient) -> None:
    assert client.is_model_ready("add_sub")
    metadata = client.get_model_metadata("add_sub")
    assert [(t.name, t.datatype, list(t.shape)) for t in metadata.inputs] == [
        ("INPUT0", "INT32", [-1, 16]),
        ("INPUT1", "INT32", [-1, 16]),
    ]
    assert metadata.platform == "onnxruntime_onnx"
    config = client.get_model_config("add_sub").config
    assert config.max_batch_size == 8
    assert config.instance_group[0].count == 2  # Triton's default for an onnxruntime CPU group
    assert config.default_model_filename == "model.onnx"


def test_config_keeps_checksum_agents(
    client: grpcclient.InferenceServerClient, test_repository: Path
) -> None:
    """SonicTriton compares these checksums with its local copy, so they must come back unchanged (the
    server verified them at load: the model is ready)."""
    agents = client.get_model_config("checksum").config.model_repository_agents.agents
    assert agents[0].name == "checksum"
    md5 = hashlib.md5((test_repository / "checksum" / "1" / "model.onnx").read_bytes(), usedforsecurity=False)
    assert dict(agents[0].parameters) == {"MD5:1/model.onnx": md5.hexdigest()}
    assert client.is_model_ready("checksum")


def test_config_auto_completed_from_onnx(client: grpcclient.InferenceServerClient) -> None:
    config = client.get_model_config("autocomplete").config
    assert config.max_batch_size == 4  # Triton's default-max-batch-size for a dynamic first dimension
    assert config.HasField("dynamic_batching")
    assert [(t.name, list(t.dims)) for t in config.input] == [("INPUT0", [16])]
    assert [(t.name, list(t.dims)) for t in config.output] == [("OUTPUT0", [16])]


def test_repository_index_lists_failures_with_reasons(client: grpcclient.InferenceServerClient) -> None:
    index = {(m.name, m.version): m for m in client.get_model_repository_index().models}
    assert index[("add_sub", "1")].state == "READY"
    assert index[("versions", "2")].state == "READY"
    assert index[("versions", "3")].state == "READY"
    assert ("versions", "1") not in index
    broken = next(m for m in index.values() if m.name == "broken_config")
    assert broken.state == "UNAVAILABLE"
    assert "config.pbtxt:3" in broken.reason  # file and line of the syntax error
    model = next(m for m in index.values() if m.name == "broken_model")
    assert model.state == "UNAVAILABLE"
    assert "onnxruntime cannot load" in model.reason
    ready = {m.name for m in client.get_model_repository_index().models if m.state == "READY"}
    assert "broken_model" not in ready


def test_add_sub_equals_direct_onnxruntime(
    client: grpcclient.InferenceServerClient, test_repository: Path
) -> None:
    rng = np.random.default_rng(1)
    a = rng.integers(-1000, 1000, (5, 16), dtype=np.int32)
    b = rng.integers(-1000, 1000, (5, 16), dtype=np.int32)
    result = client.infer("add_sub", [_input("INPUT0", a, "INT32"), _input("INPUT1", b, "INT32")])
    expected = _direct(test_repository / "add_sub" / "1" / "model.onnx", {"INPUT0": a, "INPUT1": b})
    np.testing.assert_array_equal(result.as_numpy("OUTPUT0"), expected[0])
    np.testing.assert_array_equal(result.as_numpy("OUTPUT1"), expected[1])
    raw = result.get_response()
    assert [o.name for o in raw.outputs] == ["OUTPUT0", "OUTPUT1"]
    assert [len(c) for c in raw.raw_output_contents] == [5 * 16 * 4, 5 * 16 * 4]


def test_output_subset_is_honoured(client: grpcclient.InferenceServerClient) -> None:
    a = np.ones((1, 16), dtype=np.int32)
    result = client.infer(
        "add_sub",
        [_input("INPUT0", a, "INT32"), _input("INPUT1", a, "INT32")],
        outputs=[grpcclient.InferRequestedOutput("OUTPUT1")],
    )
    raw = result.get_response()
    assert [o.name for o in raw.outputs] == ["OUTPUT1"]
    assert len(raw.raw_output_contents) == 1
    np.testing.assert_array_equal(result.as_numpy("OUTPUT1"), np.zeros((1, 16), dtype=np.int32))


def test_strings_round_trip(client: grpcclient.InferenceServerClient) -> None:
    data = np.array([[b"muon", b""], ["électron".encode(), b"tau\x00"]], dtype=np.object_)
    result = client.infer("strings", [_input("INPUT0", data, "BYTES")])
    np.testing.assert_array_equal(result.as_numpy("OUTPUT0"), data)


def test_model_without_batching(client: grpcclient.InferenceServerClient) -> None:
    data = np.arange(12, dtype=np.float64).reshape(3, 4)
    result = client.infer("fixed", [_input("INPUT0", data, "FP64")])
    np.testing.assert_array_equal(result.as_numpy("OUTPUT0"), data.sum(axis=1))
    assert client.get_model_metadata("fixed").inputs[0].shape == [3, 4]


def test_variable_dims(client: grpcclient.InferenceServerClient) -> None:
    for width in (1, 7, 33):
        data = np.random.default_rng(width).random((2, width), dtype=np.float32)
        result = client.infer("variable_dims", [_input("INPUT0", data, "FP32")])
        np.testing.assert_array_equal(result.as_numpy("OUTPUT0"), data * 2)


def test_specific_version_and_latest(client: grpcclient.InferenceServerClient) -> None:
    data = np.ones((1, 16), dtype=np.float32)
    assert client.infer("versions", [_input("INPUT0", data, "FP32")]).get_response().model_version == "3"
    assert (
        client.infer("versions", [_input("INPUT0", data, "FP32")], model_version="2")
        .get_response()
        .model_version
        == "2"
    )
    assert not client.is_model_ready("versions", "1")


def test_typed_contents_and_compression(server: ServerProcess) -> None:
    """Inputs as typed `contents` (not raw bytes), and a gzip-compressed request."""
    with grpc.insecure_channel(server.grpc_address) as channel:
        stub = service_pb2_grpc.GRPCInferenceServiceStub(channel)
        request = service_pb2.ModelInferRequest(model_name="add_sub", id="typed-1")
        for name, values in (("INPUT0", list(range(16))), ("INPUT1", [1] * 16)):
            tensor = request.inputs.add(name=name, datatype="INT32", shape=[1, 16])
            tensor.contents.int_contents.extend(values)
        response = stub.ModelInfer(request, compression=grpc.Compression.Gzip)
    assert response.id == "typed-1"
    total = np.frombuffer(response.raw_output_contents[0], dtype=np.int32)
    np.testing.assert_array_equal(total, np.arange(16) + 1)


def test_stream_infer(server: ServerProcess) -> None:
    results: queue.Queue[Any] = queue.Queue()
    with grpcclient.InferenceServerClient(server.grpc_address) as c:
        c.start_stream(callback=lambda result, error: results.put(error or result))
        for index in range(5):
            data = np.full((1, 16), index, dtype=np.float32)
            c.async_stream_infer("identity", [_input("INPUT0", data, "FP32")], request_id=str(index))
        c.async_stream_infer(
            "identity", [_input("INPUT0", np.ones((1, 3), dtype=np.float32), "FP32")], request_id="bad"
        )
        got = [results.get(timeout=30) for _ in range(6)]
        c.stop_stream()
    errors = [g for g in got if isinstance(g, InferenceServerException)]
    answers = {
        g.get_response().id: g.as_numpy("OUTPUT0") for g in got if not isinstance(g, InferenceServerException)
    }
    assert len(errors) == 1
    assert "unexpected shape" in str(errors[0])
    assert sorted(answers) == ["0", "1", "2", "3", "4"]
    for key, value in answers.items():
        np.testing.assert_array_equal(value, np.full((1, 16), int(key), dtype=np.float32))


async def test_aio_client_concurrent_requests(server: ServerProcess) -> None:
    async with aioclient.InferenceServerClient(server.grpc_address) as c:

        async def one(index: int) -> None:
            data = np.full((index % 4 + 1, 16), index, dtype=np.float32)
            tensor = aioclient.InferInput("INPUT0", list(data.shape), "FP32")
            tensor.set_data_from_numpy(data)
            result = await c.infer("identity", [tensor])
            np.testing.assert_array_equal(result.as_numpy("OUTPUT0"), data)

        await asyncio.gather(*(one(i) for i in range(64)))
        assert await c.is_model_ready("identity")


def test_large_batches_run_in_slices_with_identical_results(client: grpcclient.InferenceServerClient) -> None:
    data = np.random.default_rng(3).random((10, 5), dtype=np.float32)  # slices of 3: 3+3+3+1
    result = client.infer("chunked", [_input("INPUT0", data, "FP32")])
    np.testing.assert_array_equal(result.as_numpy("OUTPUT0"), data * 2)


def test_standard_grpc_health_check(server: ServerProcess) -> None:
    """grpc.health.v1.Health/Check, as grpc-health-probe and Kubernetes gRPC probes call it."""
    with grpc.insecure_channel(server.grpc_address) as channel:
        check = channel.unary_unary(
            "/grpc.health.v1.Health/Check", request_serializer=None, response_deserializer=None
        )
        assert check(b"") == b"\x08\x01"  # HealthCheckResponse{status: SERVING}
        assert check(b"\x0a\x05model") == b"\x08\x01"  # any service name
        with pytest.raises(grpc.RpcError) as caught:
            check(b"\x10\x01")  # a field HealthCheckRequest does not have
    assert caught.value.code() is grpc.StatusCode.INVALID_ARGUMENT
