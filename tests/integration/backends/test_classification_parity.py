"""Triton's classification extension, asked of ``sonic serve`` and of real NVIDIA Triton 2.51 alike.

An output requested with ``classification`` k (tritonclient's ``class_count``) comes back as a BYTES
tensor of its top k per batch row, ``"value:index[:label]"``, labels from the output's
``label_filename``. Each test runs on both servers serving the same Python model and asserts what
Triton answers (probed on Triton 2.51), so a difference fails on the sonic side only.
"""

from __future__ import annotations

import asyncio
import http.client
import json
import queue
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import grpc
import numpy as np
import numpy.typing as npt
import pytest
import tritonclient.grpc as grpcclient
import tritonclient.http as httpclient
from tests.integration.triton_helpers import SERVERS, Endpoint, serving
from tritonclient.grpc import service_pb2, service_pb2_grpc
from tritonclient.utils import InferenceServerException

from sonic.client import AsyncClient, ClientConfig, InputError, SyncClient
from sonic.client.config import TransportKind
from sonic.server.classification.order import StdSort

pytestmark = [pytest.mark.integration]

PYTHON_MODELS = Path(__file__).parent / "python_models"
OUTPUTS = """output [
  { name: "SCORES" data_type: TYPE_FP32 dims: [ -1 ] label_filename: "labels.txt" },
  { name: "COUNTS" data_type: TYPE_UINT8 dims: [ -1 ] },
  { name: "HALF" data_type: TYPE_FP16 dims: [ -1 ] },
  { name: "GRID" data_type: TYPE_FP32 dims: [ -1, 2 ] label_filename: "labels.txt" }
]"""
# One label a line; the third is empty (no label) and the fourth holds a colon. Index 4 and up: none.
LABELS = "zero\none\n\nthree:x\n"
# An ensemble output without a label file takes the labels of the step output it comes from.
ENSEMBLE = """name: "top_classes_ensemble"
platform: "ensemble"
max_batch_size: 8
input [ { name: "IN" data_type: TYPE_FP32 dims: [ -1 ] } ]
output [ { name: "BEST" data_type: TYPE_FP32 dims: [ -1 ] } ]
ensemble_scheduling { step [ {
  model_name: "top_classes" model_version: -1
  input_map { key: "IN" value: "IN" }
  output_map { key: "SCORES" value: "BEST" }
} ] }
"""
BATCH = np.array([[0.1, 0.5, 0.5, 0.2, 3.0], [1, 2, 3, 4, 5]], np.float32)


@pytest.fixture(scope="module")
def repository(tmp_path_factory: pytest.TempPathFactory) -> Path:
    repo = tmp_path_factory.mktemp("classification") / "models"
    decoupled = "model_transaction_policy { decoupled: true }\n"
    for name, max_batch_size, policy in (
        ("top_classes", 8, ""),
        ("top_classes_nb", 0, ""),
        ("top_classes_decoupled", 8, decoupled),
    ):
        folder = repo / name
        (folder / "1").mkdir(parents=True)
        (folder / "config.pbtxt").write_text(
            f'name: "{name}"\nbackend: "python"\nmax_batch_size: {max_batch_size}\n{policy}'
            'input [ { name: "IN" data_type: TYPE_FP32 dims: [ -1 ] } ]\n'
            f"{OUTPUTS}\ninstance_group [ {{ kind: KIND_CPU }} ]\n",
            encoding="utf-8",
        )
        (folder / "labels.txt").write_text(LABELS, encoding="utf-8")
        (folder / "1" / "model.py").write_bytes((PYTHON_MODELS / "top_classes.py").read_bytes())
    (repo / "top_classes_ensemble" / "1").mkdir(parents=True)
    (repo / "top_classes_ensemble" / "config.pbtxt").write_text(ENSEMBLE, encoding="utf-8")
    return repo


@pytest.fixture(scope="module", params=[*SERVERS, "sonic-grpcio"])
def server(request: pytest.FixtureRequest, repository: Path) -> Iterator[Endpoint]:
    models = ["top_classes", "top_classes_nb", "top_classes_ensemble", "top_classes_decoupled"]
    with serving(request.param, repository, models) as endpoint:
        yield endpoint


def _grpc_infer(
    server: Endpoint, model: str, scores: npt.NDArray[Any], output: str, count: int
) -> npt.NDArray[Any]:
    with grpcclient.InferenceServerClient(server.grpc) as client:
        tensor = grpcclient.InferInput("IN", list(scores.shape), "FP32")
        tensor.set_data_from_numpy(scores)
        requested = [grpcclient.InferRequestedOutput(output, class_count=count)]
        result = client.infer(model, [tensor], outputs=requested)
        assert result.get_response().outputs[0].datatype == "BYTES"
        answer: npt.NDArray[Any] = result.as_numpy(output)
        return answer


def _texts(array: npt.NDArray[Any]) -> list[Any]:
    texts: list[Any] = np.vectorize(lambda b: b.decode() if isinstance(b, bytes) else b, otypes=[object])(
        array
    ).tolist()
    return texts


def test_server_metadata_lists_classification(server: Endpoint) -> None:
    with grpcclient.InferenceServerClient(server.grpc) as client:
        assert "classification" in client.get_server_metadata().extensions
    http = httpclient.InferenceServerClient(server.http)
    try:
        assert "classification" in http.get_server_metadata()["extensions"]
    finally:
        http.close()


def test_top_k_per_batch_row_with_labels(server: Endpoint) -> None:
    answer = _grpc_infer(server, "top_classes", BATCH, "SCORES", 3)
    assert answer.shape == (2, 3)
    assert _texts(answer) == [
        ["3.000000:4", "0.500000:1:one", "0.500000:2"],
        ["5.000000:4", "4.000000:3:three:x", "3.000000:2"],
    ]


def test_an_ensemble_output_takes_its_step_outputs_labels(server: Endpoint) -> None:
    answer = _grpc_infer(server, "top_classes_ensemble", BATCH, "BEST", 2)
    assert _texts(answer) == [["3.000000:4", "0.500000:1:one"], ["5.000000:4", "4.000000:3:three:x"]]


def test_more_classes_asked_than_there_are_gives_them_all(server: Endpoint) -> None:
    answer = _grpc_infer(server, "top_classes", BATCH[:1], "SCORES", 10)
    assert _texts(answer) == [
        ["3.000000:4", "0.500000:1:one", "0.500000:2", "0.200000:3:three:x", "0.100000:0:zero"]
    ]


def test_integers_print_as_integers_and_rows_flatten(server: Endpoint) -> None:
    assert _texts(_grpc_infer(server, "top_classes", BATCH * 10 - 5, "COUNTS", 2)) == [
        ["253:3", "252:0"],  # -2 and -4 as uint8
        ["45:4", "35:3"],
    ]
    # A [4, 2] row is flattened: index 7 is the last element.
    assert _texts(_grpc_infer(server, "top_classes", BATCH[1:, :4], "GRID", 3)) == [
        ["8.000000:7", "6.000000:5", "4.000000:3:three:x"]
    ]


def test_a_model_that_does_not_batch_answers_one_row(server: Endpoint) -> None:
    answer = _grpc_infer(server, "top_classes_nb", np.array([0.3, 0.9, 0.1], np.float32), "SCORES", 2)
    assert _texts(answer) == ["0.900000:1:one", "0.300000:0:zero"]


def test_equal_scores_keep_index_order_in_a_short_row(server: Endpoint) -> None:
    scores = np.array([[1.0, 0.0, 1.0, 1.0, 0.0, 1.0]], np.float32)
    assert _texts(_grpc_infer(server, "top_classes", scores, "SCORES", 6)) == [
        ["1.000000:0:zero", "1.000000:2", "1.000000:3:three:x", "1.000000:5", "0.000000:1:one", "0.000000:4"]
    ]


def test_equal_scores_in_a_long_row_in_the_order_of_tritons_std_sort(server: Endpoint) -> None:
    scores = np.ones((1, 26), np.float32)
    scores[0, 20] = 2.0
    order = [20, 13, 25, 24, 23, 22, 21, 19, 18, 17, 16, 15, 14, 0, 12, 11, 10, 9, 8, 7, 6, 5, 4, 3, 2, 1]
    answer = _texts(_grpc_infer(server, "top_classes", scores, "SCORES", 26))[0]
    assert [int(text.split(":")[1]) for text in answer] == order
    # Integers with many ties across a longer row: introsort's partitions, then the final insertion sort.
    counts = np.tile(np.array([3, 1, 3, 2, 0, 2], np.float32), 9)
    expected = StdSort(counts.astype(np.uint8).tolist()).indices()[:30]
    answer = _texts(_grpc_infer(server, "top_classes", counts[np.newaxis], "COUNTS", 30))[0]
    assert [int(text.split(":")[1]) for text in answer] == expected


def test_http_json_and_binary_outputs(server: Endpoint) -> None:
    http = httpclient.InferenceServerClient(server.http)
    try:
        tensor = httpclient.InferInput("IN", list(BATCH.shape), "FP32")
        tensor.set_data_from_numpy(BATCH)
        for binary in (True, False):
            requested = [httpclient.InferRequestedOutput("SCORES", binary_data=binary, class_count=2)]
            result = http.infer("top_classes", [tensor], outputs=requested)
            entry = result.get_response()["outputs"][0]
            assert (entry["datatype"], entry["shape"]) == ("BYTES", [2, 2])
            assert _texts(result.as_numpy("SCORES")) == [
                ["3.000000:4", "0.500000:1:one"],
                ["5.000000:4", "4.000000:3:three:x"],
            ]
    finally:
        http.close()


def _http_post(server: Endpoint, parameters: dict[str, Any], output: str = "SCORES") -> tuple[int, Any]:
    body = {
        "inputs": [{"name": "IN", "datatype": "FP32", "shape": [1, 3], "data": [0.25, 0.75, 0.5]}],
        "outputs": [{"name": output, "parameters": parameters}],
    }
    connection = http.client.HTTPConnection(server.http, timeout=30)
    try:
        connection.request("POST", "/v2/models/top_classes/infer", json.dumps(body))
        response = connection.getresponse()
        return response.status, json.loads(response.read())
    finally:
        connection.close()


def test_http_classification_zero_is_the_tensor_itself(server: Endpoint) -> None:
    status, answer = _http_post(server, {"classification": 0})
    assert status == 200
    assert answer["outputs"][0]["datatype"] == "FP32"
    assert answer["outputs"][0]["data"] == [0.25, 0.75, 0.5]


@pytest.mark.parametrize("count", [-1, "2", 2.0, True, None])
def test_http_classification_that_is_not_an_unsigned_integer_is_refused(server: Endpoint, count: Any) -> None:
    status, answer = _http_post(server, {"classification": count})
    # Triton answers 500 for this client fault, sonic 400 (docs/triton-differences.md).
    assert status == (500 if server.kind == "triton" else 400)
    assert answer["error"].startswith(
        "Unable to set 'classification': attempt to access JSON non-unsigned-integer as unsigned-integer"
    )


def test_http_classification_with_shared_memory_is_refused(server: Endpoint) -> None:
    status, answer = _http_post(
        server, {"classification": 1, "shared_memory_region": "r", "shared_memory_byte_size": 4}
    )
    assert (status, answer["error"]) == (
        400,
        "Output can't set both 'shared_memory_region' and 'classification'",
    )


def test_unsupported_datatype_is_refused_in_tritons_words(server: Endpoint) -> None:
    words = "class result not available for output due to unsupported type 'FP16'"
    with pytest.raises(InferenceServerException) as info:
        _grpc_infer(server, "top_classes", BATCH, "HALF", 2)
    assert info.value.status() == "StatusCode.INVALID_ARGUMENT"
    assert words in str(info.value.message())
    status, answer = _http_post(server, {"classification": 2}, "HALF")
    assert (status, answer["error"]) == (400, words)


def _raw_grpc_error(server: Endpoint, set_parameter: Any) -> grpc.RpcError:
    request = service_pb2.ModelInferRequest(model_name="top_classes")
    request.inputs.add(name="IN", datatype="FP32", shape=[1, 2])
    request.raw_input_contents.append(np.ones(2, np.float32).tobytes())
    set_parameter(request.outputs.add(name="SCORES").parameters["classification"])
    with grpc.insecure_channel(server.grpc) as channel, pytest.raises(grpc.RpcError) as info:
        service_pb2_grpc.GRPCInferenceServiceStub(channel).ModelInfer(request, timeout=30)
    return info.value


def test_grpc_classification_must_be_a_positive_int64(server: Endpoint) -> None:
    def zero(parameter: Any) -> None:
        parameter.int64_param = 0

    def text(parameter: Any) -> None:
        parameter.string_param = "2"

    error = _raw_grpc_error(server, zero)
    assert error.code() == grpc.StatusCode.INVALID_ARGUMENT
    assert error.details() == "invalid value for 'classification' parameter, expected >= 0"
    error = _raw_grpc_error(server, text)
    assert error.code() == grpc.StatusCode.INVALID_ARGUMENT
    assert error.details() == "invalid value type for 'classification' parameter, expected int64_param"


@pytest.mark.parametrize(
    ("model", "expected"),
    [
        ("top_classes", [[["0.300000:1:one", "0.200000:2"]]]),
        (
            "top_classes_decoupled",
            [[["0.300000:1:one", "0.200000:2"]], [["0.300000:1:one", "0.200000:0:zero"]]],
        ),
    ],
)
def test_grpc_stream_answers_classes(server: Endpoint, model: str, expected: list[Any]) -> None:
    results: queue.Queue[Any] = queue.Queue()  # the client's stream thread puts, the test takes
    with grpcclient.InferenceServerClient(server.grpc) as client:
        client.start_stream(callback=lambda result, error: results.put(error or result))
        tensor = grpcclient.InferInput("IN", [1, 3], "FP32")
        tensor.set_data_from_numpy(np.array([[0.1, 0.3, 0.2]], np.float32))
        client.async_stream_infer(
            model, [tensor], outputs=[grpcclient.InferRequestedOutput("SCORES", class_count=2)]
        )
        answers = [results.get(timeout=60) for _ in expected]
        client.stop_stream()
    assert [_texts(answer.as_numpy("SCORES")) for answer in answers] == expected


@pytest.mark.parametrize("transport", list(TransportKind))
def test_sonic_client_class_counts(server: Endpoint, transport: TransportKind) -> None:
    async def run() -> dict[str, npt.NDArray[Any]]:
        async with AsyncClient(
            "top_classes", ClientConfig(servers=(server.grpc,), transport=transport)
        ) as client:
            with pytest.raises(InputError, match="class count must be a positive integer, got 0"):
                await client.infer({"IN": BATCH}, ["SCORES"], class_counts={"SCORES": 0})
            return await client.infer({"IN": BATCH}, ["SCORES", "COUNTS"], class_counts={"SCORES": 1})

    outputs = asyncio.run(run())
    assert _texts(outputs["SCORES"]) == [["3.000000:4"], ["5.000000:4"]]
    assert outputs["COUNTS"].tolist() == [[0, 0, 0, 0, 3], [1, 2, 3, 4, 5]]


def test_sync_client_class_counts(server: Endpoint) -> None:
    with SyncClient("top_classes", ClientConfig(servers=(server.grpc,))) as client:
        first = client.infer({"IN": BATCH}, ["SCORES"])  # the blocking fast path, raw scores
        classes = client.infer({"IN": BATCH}, ["SCORES"], class_counts={"SCORES": 2})
        detailed = client.infer_detailed({"IN": BATCH}, ["SCORES"], class_counts={"SCORES": 1})
    assert first["SCORES"].dtype == np.float32
    assert _texts(classes["SCORES"]) == [
        ["3.000000:4", "0.500000:1:one"],
        ["5.000000:4", "4.000000:3:three:x"],
    ]
    assert _texts(detailed.outputs["SCORES"]) == [["3.000000:4"], ["5.000000:4"]]
