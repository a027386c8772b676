"""The KServe v2 HTTP/REST frontend through the official ``tritonclient.http`` (sync and aio)."""

from __future__ import annotations

import asyncio
import json
import urllib.error
import urllib.request
from pathlib import Path
from typing import Any

import numpy as np
import numpy.typing as npt
import pytest
import tritonclient.grpc as grpcclient
import tritonclient.http as httpclient
import tritonclient.http.aio as aiohttpclient
from tritonclient.utils import InferenceServerException, triton_to_np_dtype

from sonic.launch import ServerProcess

pytestmark = pytest.mark.integration


@pytest.fixture
def client(http_server: ServerProcess) -> httpclient.InferenceServerClient:
    c = httpclient.InferenceServerClient(http_server.http_address)
    yield c
    c.close()


def _add_sub_inputs(a: npt.NDArray[Any], b: npt.NDArray[Any], *, binary: bool) -> list[httpclient.InferInput]:
    inputs = []
    for name, array in (("INPUT0", a), ("INPUT1", b)):
        tensor = httpclient.InferInput(name, list(array.shape), "INT32")
        tensor.set_data_from_numpy(array, binary_data=binary)
        inputs.append(tensor)
    return inputs


def _raw(address: str, method: str, path: str, body: bytes | None = None) -> tuple[int, Any]:
    request = urllib.request.Request(f"http://{address}{path}", data=body, method=method)
    try:
        with urllib.request.urlopen(request, timeout=10) as response:
            text = response.read()
            return response.status, json.loads(text) if text else {}
    except urllib.error.HTTPError as exc:
        return exc.code, json.loads(exc.read())


def _assert_matches_proto_json(ours: object, proto_json: object, where: str = "config") -> None:
    """Every field gRPC's proto JSON shows is in our HTTP JSON with the same value (int64 as numbers)."""
    if isinstance(proto_json, dict):
        assert isinstance(ours, dict), where
        for key, value in proto_json.items():
            assert key in ours, f"{where}.{key} missing"
            _assert_matches_proto_json(ours[key], value, f"{where}.{key}")
    elif isinstance(proto_json, list):
        assert isinstance(ours, list), where
        assert len(ours) == len(proto_json), where
        for index, (mine, theirs) in enumerate(zip(ours, proto_json, strict=True)):
            _assert_matches_proto_json(mine, theirs, f"{where}[{index}]")
    elif isinstance(proto_json, str) and isinstance(ours, int) and not isinstance(ours, bool):
        assert str(ours) == proto_json, where
    else:
        assert ours == proto_json, where


def test_health(client: httpclient.InferenceServerClient) -> None:
    assert client.is_server_live()
    assert client.is_server_ready()
    assert client.is_model_ready("add_sub")
    assert client.is_model_ready("versions", "3")
    assert not client.is_model_ready("versions", "1")  # latest 2 of 3 are loaded
    assert not client.is_model_ready("no_such_model")
    assert not client.is_model_ready("broken_model")


def test_model_not_ready_body_is_tritons(http_server: ServerProcess) -> None:
    # Found by the differential tests: Triton 2.51 answers 400 {"error": "Model version not ready"}.
    assert _raw(http_server.http_address, "GET", "/v2/models/no_such_model/ready") == (
        400,
        {"error": "Model version not ready"},
    )
    assert _raw(http_server.http_address, "GET", "/v2/models/versions/versions/1/ready")[0] == 400
    assert _raw(http_server.http_address, "GET", "/v2/models/add_sub/ready") == (200, {})


def test_metadata_matches_grpc(http_server: ServerProcess, client: httpclient.InferenceServerClient) -> None:
    g = grpcclient.InferenceServerClient(http_server.grpc_address)
    try:
        assert client.get_server_metadata() == g.get_server_metadata(as_json=True)
        for name in ("add_sub", "strings", "fixed", "versions"):
            over_grpc = g.get_model_metadata(name, as_json=True)
            for tensor in over_grpc["inputs"] + over_grpc["outputs"]:
                tensor["shape"] = [int(d) for d in tensor["shape"]]  # proto JSON writes int64 as strings
            assert client.get_model_metadata(name) == over_grpc
        config = client.get_model_config("add_sub")
        assert config == client.get_model_config("add_sub", "1")
        assert config["name"] == "add_sub"
        assert config["max_batch_size"] == 8
        assert [i["dims"] for i in config["input"]] == [[16], [16]]
        assert config["input"][0]["data_type"] == "TYPE_INT32"
        _assert_matches_proto_json(config, g.get_model_config("add_sub", as_json=True)["config"])
    finally:
        g.close()


@pytest.mark.parametrize("binary", [True, False], ids=["binary", "json"])
def test_infer_add_sub(client: httpclient.InferenceServerClient, binary: bool) -> None:
    a = np.arange(48, dtype=np.int32).reshape(3, 16)
    b = np.full((3, 16), 7, dtype=np.int32)
    outputs = [
        httpclient.InferRequestedOutput("OUTPUT0", binary_data=binary),
        httpclient.InferRequestedOutput("OUTPUT1", binary_data=not binary),
    ]
    result = client.infer(
        "add_sub", _add_sub_inputs(a, b, binary=binary), outputs=outputs, request_id=f"req-{binary}"
    )
    np.testing.assert_array_equal(result.as_numpy("OUTPUT0"), a + b)
    np.testing.assert_array_equal(result.as_numpy("OUTPUT1"), a - b)
    response = result.get_response()
    assert response["id"] == f"req-{binary}"
    assert response["model_version"] == "1"
    by_name = {o["name"]: o for o in response["outputs"]}
    assert ("parameters" in by_name["OUTPUT0"]) is binary
    assert ("data" in by_name["OUTPUT1"]) is binary


def test_infer_default_outputs_and_subset(client: httpclient.InferenceServerClient) -> None:
    a = np.ones((1, 16), np.int32)
    result = client.infer("add_sub", _add_sub_inputs(a, a, binary=True))
    np.testing.assert_array_equal(result.as_numpy("OUTPUT0"), a * 2)
    np.testing.assert_array_equal(result.as_numpy("OUTPUT1"), a * 0)
    only = client.infer(
        "add_sub", _add_sub_inputs(a, a, binary=True), outputs=[httpclient.InferRequestedOutput("OUTPUT1")]
    )
    assert only.as_numpy("OUTPUT0") is None
    np.testing.assert_array_equal(only.as_numpy("OUTPUT1"), a * 0)


@pytest.mark.parametrize("binary", [True, False], ids=["binary", "json"])
def test_infer_bytes(client: httpclient.InferenceServerClient, binary: bool) -> None:
    data = np.array([["proton", "neutrino"], ["muon", "pion"]], dtype=np.object_)
    tensor = httpclient.InferInput("INPUT0", [2, 2], "BYTES")
    tensor.set_data_from_numpy(data, binary_data=binary)
    result = client.infer(
        "strings", [tensor], outputs=[httpclient.InferRequestedOutput("OUTPUT0", binary_data=binary)]
    )
    got = [[v.decode() if isinstance(v, bytes) else v for v in row] for row in result.as_numpy("OUTPUT0")]
    assert got == data.tolist()  # tritonclient gives bytes for binary outputs, str for JSON ones


def test_infer_large_binary_body(client: httpclient.InferenceServerClient) -> None:
    """2 MiB of tensor data: above aiohttp's default 1 MiB body limit, within ours."""
    x = np.random.default_rng(1).random((16, 32_768), dtype=np.float32)
    tensor = httpclient.InferInput("INPUT0", list(x.shape), "FP32")
    tensor.set_data_from_numpy(x)
    np.testing.assert_allclose(client.infer("variable_dims", [tensor]).as_numpy("OUTPUT0"), x * 2)


@pytest.mark.parametrize(
    ("call", "status", "fragment"),
    [
        (lambda c: c.get_model_metadata("no_such_model"), 404, "unknown model"),
        (lambda c: c.get_model_metadata("versions", "9"), 404, "version 9"),
        (lambda c: c.get_model_config("no_such_model"), 404, "unknown model"),
        (lambda c: c.get_model_metadata("broken_model"), 404, "no available versions"),
        (lambda c: c.load_model("no_such_model"), 404, "no model folder"),
        (lambda c: c.load_model("add_sub", config="{not json"), 400, "config"),
        (lambda c: c.get_inference_statistics("no_such_model"), 400, "is not available"),  # as Triton
    ],
    ids=["metadata", "version", "config", "unavailable", "load-missing", "load-bad-config", "stats"],
)
def test_control_errors(client: httpclient.InferenceServerClient, call, status: int, fragment: str) -> None:  # type: ignore[no-untyped-def]
    with pytest.raises(InferenceServerException) as info:
        call(client)
    assert info.value.status() == str(status)
    assert fragment in info.value.message()


def test_infer_errors(client: httpclient.InferenceServerClient) -> None:
    good = np.zeros((1, 16), np.int32)
    cases = [
        ("no_such_model", _add_sub_inputs(good, good, binary=True), "404", "unknown model"),
        ("add_sub", _add_sub_inputs(np.zeros((1, 15), np.int32), good, binary=True), "400", "unexpected shape"),
        ("add_sub", _add_sub_inputs(np.zeros((9, 16), np.int32), np.zeros((9, 16), np.int32), binary=False),
         "400", "batch-size"),
        ("add_sub", _add_sub_inputs(good, good, binary=True)[:1], "400", "missing"),
    ]  # fmt: skip
    for model, inputs, status, fragment in cases:
        with pytest.raises(InferenceServerException) as info:
            client.infer(model, inputs)
        assert info.value.status() == status, (model, fragment, info.value)
        assert fragment in info.value.message()
    wrong_type = httpclient.InferInput("INPUT0", [1, 16], "FP32")
    wrong_type.set_data_from_numpy(np.zeros((1, 16), np.float32))
    with pytest.raises(InferenceServerException, match="data-type") as info:
        client.infer("add_sub", [wrong_type, _add_sub_inputs(good, good, binary=True)[1]])
    assert info.value.status() == "400"


def test_raw_error_bodies(http_server: ServerProcess) -> None:
    address = http_server.http_address
    status, body = _raw(address, "POST", "/v2/models/add_sub/infer", b"{not json")
    assert status == 400
    assert "cannot be parsed" in str(body["error"])
    header = json.dumps(
        {
            "inputs": [
                {
                    "name": "INPUT0",
                    "shape": [1, 16],
                    "datatype": "INT32",
                    "parameters": {"binary_data_size": 64},
                }
            ]
        }
    ).encode()
    request = urllib.request.Request(
        f"http://{address}/v2/models/add_sub/infer",
        data=header + b"\0" * 10,
        method="POST",
        headers={"Inference-Header-Content-Length": str(len(header))},
    )
    with pytest.raises(urllib.error.HTTPError) as info:
        urllib.request.urlopen(request, timeout=10)
    assert info.value.code == 400
    assert "binary_data_size 64 runs past the end" in json.loads(info.value.read())["error"]
    assert _raw(address, "GET", "/v2/no/such/endpoint")[0] == 404
    assert _raw(address, "GET", "/v2/models/add_sub/infer")[0] == 405  # infer is POST only
    status, body = _raw(address, "POST", "/v2/repository/models/%2E%2E%2Fetc/load", b"{}")
    assert status == 400
    assert "invalid" in str(body["error"])


def test_repository_index_ready_only(http_server: ServerProcess) -> None:
    status, every = _raw(http_server.http_address, "POST", "/v2/repository/index", b"{}")
    assert status == 200
    status, ready = _raw(http_server.http_address, "POST", "/v2/repository/index", b'{"ready": true}')
    assert status == 200
    assert isinstance(every, list)
    assert isinstance(ready, list)
    assert ready
    assert all(row["state"] == "READY" for row in ready)
    assert len(ready) < len(every)


def test_repository_index_load_unload(client: httpclient.InferenceServerClient) -> None:
    index = client.get_model_repository_index()
    rows = {(row["name"], row.get("version", "")): row for row in index}
    assert rows[("add_sub", "1")]["state"] == "READY"
    assert rows[("versions", "3")]["state"] == "READY"
    assert any(row["name"] == "broken_model" and row.get("state") == "UNAVAILABLE" for row in index)
    client.unload_model("autocomplete")
    assert not client.is_model_ready("autocomplete")
    client.load_model("autocomplete")
    assert client.is_model_ready("autocomplete")
    config = json.dumps({"max_batch_size": 2, "backend": "onnxruntime"})
    client.load_model("autocomplete", config=config)
    assert client.get_model_config("autocomplete")["max_batch_size"] == 2
    # As Triton 2.51: a load without an override keeps the one serving while the model's files are
    # unchanged (tests/integration/test_triton_load_parity.py checks it on both servers).
    client.load_model("autocomplete")
    assert client.get_model_config("autocomplete")["max_batch_size"] == 2


def test_statistics_count_requests(client: httpclient.InferenceServerClient) -> None:
    before = client.get_inference_statistics("fixed")["model_stats"][0]
    metadata = client.get_model_metadata("fixed")
    inputs = []
    for spec in metadata["inputs"]:
        tensor = httpclient.InferInput(spec["name"], spec["shape"], spec["datatype"])
        tensor.set_data_from_numpy(np.zeros(spec["shape"], dtype=triton_to_np_dtype(spec["datatype"])))
        inputs.append(tensor)
    for _ in range(3):
        client.infer("fixed", inputs)
    after = client.get_inference_statistics("fixed", "1")["model_stats"][0]
    assert after["inference_stats"]["success"]["count"] == before["inference_stats"]["success"]["count"] + 3
    assert after["execution_count"] == before["execution_count"] + 3
    assert after["inference_stats"]["fail"]["count"] == before["inference_stats"]["fail"]["count"]
    every = client.get_inference_statistics()["model_stats"]
    assert {"add_sub", "fixed", "strings"} <= {s["name"] for s in every}


def test_aio_client(http_server: ServerProcess) -> None:
    async def main() -> None:
        async with aiohttpclient.InferenceServerClient(http_server.http_address) as c:
            assert await c.is_server_ready()
            assert (await c.get_model_metadata("add_sub"))["name"] == "add_sub"
            a = np.arange(16, dtype=np.int32).reshape(1, 16)
            inputs = []
            for name in ("INPUT0", "INPUT1"):
                tensor = aiohttpclient.InferInput(name, [1, 16], "INT32")
                tensor.set_data_from_numpy(a)
                inputs.append(tensor)
            results = await asyncio.gather(*(c.infer("add_sub", inputs) for _ in range(8)))
            for result in results:
                np.testing.assert_array_equal(result.as_numpy("OUTPUT0"), a * 2)
            with pytest.raises(InferenceServerException) as info:
                await c.infer("no_such_model", inputs)
            assert info.value.status() == "404"

    asyncio.run(main())


@pytest.mark.parametrize("algorithm", ["gzip", "deflate"])
def test_compressed_requests(client: httpclient.InferenceServerClient, algorithm: str) -> None:
    a = np.arange(32, dtype=np.int32).reshape(2, 16)
    result = client.infer(
        "add_sub",
        _add_sub_inputs(a, a, binary=True),
        request_compression_algorithm=algorithm,
        response_compression_algorithm=algorithm,
    )
    np.testing.assert_array_equal(result.as_numpy("OUTPUT0"), a * 2)


def test_message_size_limit(test_repository: Path) -> None:
    args = ["--http-port", "0", "--max-message-bytes", "4096"]
    with ServerProcess.start([test_repository], extra_args=args) as process:
        http = httpclient.InferenceServerClient(process.http_address)
        grpc = grpcclient.InferenceServerClient(process.grpc_address)
        try:
            small = np.ones((2, 16), np.float32)
            big = np.ones((128, 16), np.float32)  # 8 KiB of tensor data
            for module, c in ((httpclient, http), (grpcclient, grpc)):
                tensor = module.InferInput("INPUT0", [2, 16], "FP32")
                tensor.set_data_from_numpy(small)
                c.infer("identity", [tensor])
                tensor = module.InferInput("INPUT0", [128, 16], "FP32")
                tensor.set_data_from_numpy(big)
                with pytest.raises(InferenceServerException) as info:
                    c.infer("identity", [tensor])
                assert info.value.status() in {"413", "StatusCode.RESOURCE_EXHAUSTED"}, info.value
        finally:
            http.close()
            grpc.close()
