"""Request parameters end to end: from ``sonic.client`` (or an HTTP body) to a Python model's
``request.parameters()``, as Triton's Python backend shows them."""

from __future__ import annotations

import asyncio
import json
import urllib.error
import urllib.request
from typing import Any

import grpc
import numpy as np
import pytest
from tritonclient.grpc import service_pb2, service_pb2_grpc

from sonic.client import AsyncClient, ClientConfig, InputError
from sonic.client.config import TransportKind
from sonic.launch import ServerProcess

pytestmark = pytest.mark.integration

X = np.zeros(1, dtype=np.float32)
CUSTOM = {"detector": "hgcal", "events": 3, "debug": True, "scale": 0.5}


async def _infer(address: str, transport: TransportKind, parameters: dict[str, Any]) -> dict[str, Any]:
    config = ClientConfig(servers=(address,), transport=transport)
    async with AsyncClient("echo_parameters", config) as client:
        return await client.infer({"X": X}, parameters=parameters)


@pytest.mark.parametrize("transport", list(TransportKind))
def test_client_parameters_reach_the_python_model(
    backend_server: ServerProcess, transport: TransportKind
) -> None:
    sent = {**CUSTOM, "sequence_id": 42, "sequence_start": True, "sequence_end": True, "timeout": 5_000_000}
    outputs = asyncio.run(_infer(backend_server.grpc_address, transport, sent))
    # As in Triton: the model sees only custom parameters; the sequence ones become id and flags.
    assert json.loads(outputs["PARAMETERS"][0]) == CUSTOM
    assert json.loads(outputs["SEQUENCE"][0]) == [42, 3, 5_000_000]


@pytest.mark.parametrize("transport", list(TransportKind))
def test_string_sequence_id_and_no_parameters(
    backend_server: ServerProcess, transport: TransportKind
) -> None:
    outputs = asyncio.run(_infer(backend_server.grpc_address, transport, {"sequence_id": "run-7"}))
    assert json.loads(outputs["PARAMETERS"][0]) == {}
    assert json.loads(outputs["SEQUENCE"][0]) == ["run-7", 0, 0]
    outputs = asyncio.run(_infer(backend_server.grpc_address, transport, {}))
    assert json.loads(outputs["SEQUENCE"][0]) == [0, 0, 0]


def test_client_refuses_a_parameter_of_the_wrong_type(backend_server: ServerProcess) -> None:
    with pytest.raises(
        InputError, match=r"model 'echo_parameters': request parameter 'priority' must be an integer"
    ):
        asyncio.run(_infer(backend_server.grpc_address, TransportKind.H2, {"priority": "high"}))


def _http_infer(address: str, parameters: dict[str, Any]) -> dict[str, Any]:
    body = {
        "inputs": [{"name": "X", "datatype": "FP32", "shape": [1], "data": [0.0]}],
        "parameters": parameters,
    }
    request = urllib.request.Request(
        f"http://{address}/v2/models/echo_parameters/infer",
        data=json.dumps(body).encode(),
        headers={"Content-Type": "application/json"},
    )
    with urllib.request.urlopen(request, timeout=30) as response:
        answer: dict[str, Any] = json.loads(response.read())
    return {output["name"]: output["data"][0] for output in answer["outputs"]}


def test_http_parameters_reach_the_python_model(backend_server: ServerProcess) -> None:
    sent = {**CUSTOM, "sequence_id": 9, "sequence_end": True, "binary_data_output": False}
    outputs = _http_infer(backend_server.http_address, sent)
    assert json.loads(outputs["PARAMETERS"]) == CUSTOM
    assert json.loads(outputs["SEQUENCE"]) == [9, 2, 0]


def test_http_parameter_of_the_wrong_type_is_a_bad_request(backend_server: ServerProcess) -> None:
    with pytest.raises(urllib.error.HTTPError) as error:
        _http_infer(backend_server.http_address, {"sequence_start": "yes"})
    assert error.value.code == 400
    message = json.loads(error.value.read())["error"]
    assert (
        message == "model 'echo_parameters': request parameter 'sequence_start' must be a boolean, got 'yes'"
    )


def test_grpc_parameter_of_the_wrong_type_is_invalid_argument(backend_server: ServerProcess) -> None:
    # tritonclient refuses to send reserved parameters itself: the message is built by hand.
    request = service_pb2.ModelInferRequest(model_name="echo_parameters")
    request.inputs.add(name="X", datatype="FP32", shape=[1])
    request.raw_input_contents.append(X.tobytes())
    request.parameters["timeout"].string_param = "soon"
    with grpc.insecure_channel(backend_server.grpc_address) as channel:
        stub = service_pb2_grpc.GRPCInferenceServiceStub(channel)
        with pytest.raises(grpc.RpcError) as error:
            stub.ModelInfer(request, timeout=30)
    assert error.value.code() is grpc.StatusCode.INVALID_ARGUMENT
    assert (
        error.value.details()
        == "model 'echo_parameters': invalid value type for 'timeout' parameter, expected int64_param. Got string_param"
    )
