"""Triton's ``--grpc-header-forward-pattern`` / ``--http-header-forward-pattern`` on ``sonic serve`` and on
real NVIDIA Triton 2.51: headers whose names match reach a Python model as request parameters.

The behaviour of Triton's QA ``L0_parameters`` (headers ``my_header_*`` forwarded, the others not, the
pattern's case ignored unless it says ``(?-i)``, gRPC streams, ensembles), asserted on both servers.
"""

from __future__ import annotations

import http.client
import json
import queue
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import numpy as np
import pytest
import tritonclient.grpc as grpcclient
import tritonclient.http as httpclient
from tests.integration.triton_helpers import SERVERS, Endpoint, serving

from sonic.client import ClientConfig, SyncClient
from sonic.client.config import TransportKind

pytestmark = [pytest.mark.integration]

PYTHON_MODELS = Path(__file__).parent / "python_models"
ECHO_CONFIG = """name: "echo_parameters"
backend: "python"
input [ { name: "X" data_type: TYPE_FP32 dims: [ 1 ] } ]
output [
  { name: "PARAMETERS" data_type: TYPE_STRING dims: [ 1 ] },
  { name: "SEQUENCE" data_type: TYPE_STRING dims: [ 1 ] }
]
instance_group [ { kind: KIND_CPU } ]
"""
ENSEMBLE_CONFIG = """name: "echo_ensemble"
platform: "ensemble"
input [ { name: "X" data_type: TYPE_FP32 dims: [ 1 ] } ]
output [ { name: "PARAMETERS" data_type: TYPE_STRING dims: [ 1 ] } ]
ensemble_scheduling { step [ {
  model_name: "echo_parameters" model_version: -1
  input_map { key: "X" value: "X" }
  output_map { key: "PARAMETERS" value: "PARAMETERS" }
} ] }
"""
HEADERS = {
    "header_1": "value_1",
    "my_header_1": "my_value_1",
    "my_header_2": 'This is a "quoted" string with a backslash\\',
}
FORWARDED = {k: v for k, v in HEADERS.items() if k.startswith("my_header")}
# gRPC: case-sensitive for MY_HEADER (gRPC names are lower case: never matches) but my_other does;
# HTTP: Triton's case-insensitive default, the pattern in upper case.
FLAGS = [
    "--grpc-header-forward-pattern",
    "(?-i)MY_HEADER.*|my_other",
    "--http-header-forward-pattern",
    "MY_HEADER.*",
]


@pytest.fixture(scope="module")
def repository(tmp_path_factory: pytest.TempPathFactory) -> Path:
    repo = tmp_path_factory.mktemp("header_forward") / "models"
    (repo / "echo_parameters" / "1").mkdir(parents=True)
    (repo / "echo_parameters" / "config.pbtxt").write_text(ECHO_CONFIG, encoding="utf-8")
    (repo / "echo_parameters" / "1" / "model.py").write_bytes(
        (PYTHON_MODELS / "echo_parameters.py").read_bytes()
    )
    (repo / "echo_ensemble" / "1").mkdir(parents=True)
    (repo / "echo_ensemble" / "config.pbtxt").write_text(ENSEMBLE_CONFIG, encoding="utf-8")
    return repo


@pytest.fixture(scope="module", params=[*SERVERS, "sonic-grpcio"])
def server(request: pytest.FixtureRequest, repository: Path) -> Iterator[Endpoint]:
    models = ["echo_parameters", "echo_ensemble"]
    with serving(request.param, repository, models, sonic_args=FLAGS, triton_args=FLAGS) as endpoint:
        yield endpoint


def _input(module: Any) -> list[Any]:
    tensor = module.InferInput("X", [1], "FP32")
    tensor.set_data_from_numpy(np.zeros(1, np.float32))
    return [tensor]


def _seen(result: Any) -> dict[str, Any]:
    seen: dict[str, Any] = json.loads(result.as_numpy("PARAMETERS")[0])
    return seen


@pytest.mark.parametrize("model", ["echo_parameters", "echo_ensemble"])
def test_http_headers_matching_the_pattern_reach_the_model(server: Endpoint, model: str) -> None:
    client = httpclient.InferenceServerClient(server.http)
    try:
        # tritonclient adds its own headers to the dict it is given: a copy.
        result = client.infer(model, _input(httpclient), parameters={"key1": 1}, headers=dict(HEADERS))
    finally:
        client.close()
    assert _seen(result) == {"key1": 1, **FORWARDED}


def test_grpc_pattern_that_turns_case_back_on(server: Endpoint) -> None:
    with grpcclient.InferenceServerClient(server.grpc) as client:
        headers = {**HEADERS, "my_other": "other"}
        result = client.infer(
            "echo_parameters", _input(grpcclient), parameters={"key1": "v"}, headers=headers
        )
    # MY_HEADER.* (case kept) matches no gRPC name, all lower case; my_other matches.
    assert _seen(result) == {"key1": "v", "my_other": "other"}


def test_grpc_stream_forwards_the_headers_that_opened_it(server: Endpoint) -> None:
    results: queue.Queue[Any] = queue.Queue()  # the client's stream thread puts, the test takes
    with grpcclient.InferenceServerClient(server.grpc) as client:
        client.start_stream(
            callback=lambda result, error: results.put(error or result), headers={"my_other": "s"}
        )
        for key in ("a", "b"):
            client.async_stream_infer("echo_parameters", _input(grpcclient), parameters={"key": key})
            assert _seen(results.get(timeout=60)) == {"key": key, "my_other": "s"}
        client.stop_stream()


def test_a_header_named_as_a_parameter_replaces_it(server: Endpoint) -> None:
    # Triton adds a second parameter of that name; the model's json.loads keeps the last, the header's.
    with grpcclient.InferenceServerClient(server.grpc) as client:
        result = client.infer(
            "echo_parameters", _input(grpcclient), parameters={"my_other": 5}, headers={"my_other": "hdr"}
        )
    assert _seen(result) == {"my_other": "hdr"}
    body = json.dumps(
        {
            "inputs": [{"name": "X", "datatype": "FP32", "shape": [1], "data": [0]}],
            "parameters": {"My_Header": 5},
        }
    )
    connection = http.client.HTTPConnection(server.http, timeout=30)
    try:
        connection.request("POST", "/v2/models/echo_parameters/infer", body, {"My_Header": "hdr"})
        answer = json.loads(connection.getresponse().read())
    finally:
        connection.close()
    assert json.loads(answer["outputs"][0]["data"][0]) == {"My_Header": "hdr"}


def test_http_names_keep_the_clients_spelling(server: Endpoint) -> None:
    body = json.dumps({"inputs": [{"name": "X", "datatype": "FP32", "shape": [1], "data": [0]}]})
    connection = http.client.HTTPConnection(server.http, timeout=30)
    try:
        connection.request(
            "POST", "/v2/models/echo_parameters/infer", body, {"My_Header_Up": "A", "Other": "B"}
        )
        answer = json.loads(connection.getresponse().read())
    finally:
        connection.close()
    assert json.loads(answer["outputs"][0]["data"][0]) == {"My_Header_Up": "A"}


def test_http_value_with_trailing_space(server: Endpoint) -> None:
    client = httpclient.InferenceServerClient(server.http)
    try:
        result = client.infer("echo_parameters", _input(httpclient), headers={"my_header": "value "})
    finally:
        client.close()
    # Triton's HTTP parser keeps the trailing space; aiohttp's drops it as HTTP's optional whitespace
    # (RFC 9110 5.5; docs/triton-differences.md, header-forward-reserved).
    assert _seen(result) == {"my_header": "value " if server.kind == "triton" else "value"}


@pytest.mark.parametrize("kind", [*SERVERS, "sonic-grpcio"])
def test_a_pattern_for_every_name_forwards_what_grpc_shows(repository: Path, kind: str) -> None:
    flags = ["--grpc-header-forward-pattern", ".*"]
    with (
        serving(kind, repository, ["echo_parameters"], sonic_args=flags, triton_args=flags) as endpoint,
        grpcclient.InferenceServerClient(endpoint.grpc) as client,
    ):
        result = client.infer(
            "echo_parameters", _input(grpcclient), headers={"my-key": "v"}, client_timeout=60
        )
        native = _sonic_client_parameters(endpoint.grpc)
    seen = _seen(result)
    # gRPC's own headers (content-type, te, grpc-*, pseudo-headers) stay out; user-agent is shown.
    assert sorted(seen) == ["my-key", "user-agent"]
    assert seen["my-key"] == "v"
    assert seen["user-agent"].startswith("grpc-python/")
    # sonic.client's own transport sends no header beyond gRPC's and its user-agent.
    assert native == {"user-agent": "sonic-client", "run": "2026A"}


def _sonic_client_parameters(address: str) -> dict[str, Any]:
    config = ClientConfig(servers=(address,), transport=TransportKind.H2)
    with SyncClient("echo_parameters", config) as client:
        outputs = client.infer({"X": np.zeros(1, np.float32)}, parameters={"run": "2026A"})
    seen: dict[str, Any] = json.loads(outputs["PARAMETERS"][0])
    return seen
