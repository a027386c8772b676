"""Decoupled Python models (``model_transaction_policy { decoupled: true }``) on sonic and on real NVIDIA
Triton 2.51, the same model folders and requests: every test asserts what Triton answers.

The models are NVIDIA's ``repeat_int32`` and ``square_int32`` examples and a probe whose MODE input
picks one way of using the response sender (tests/integration/backends/python_models/). Streams are
read with the raw gRPC stub so every field of every message is compared: ids, model name and version,
``triton_final_response``, outputs, error messages.
"""

from __future__ import annotations

import json
import queue
import signal
import urllib.error
import urllib.request
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import grpc
import numpy as np
import pytest
import tritonclient.grpc as grpcclient
from tests.integration.backends.decoupled_servers import (
    SERVERS,
    by_id,
    endpoints,
    i32,
    infer_request,
    probe,
    stream,
    write_repository,
)
from tests.integration.triton_helpers import Endpoint
from tritonclient.grpc import service_pb2, service_pb2_grpc
from tritonclient.utils import InferenceServerException

from sonic.launch import ServerProcess

pytestmark = [pytest.mark.integration]


@pytest.fixture(scope="module")
def repository(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return write_repository(tmp_path_factory.mktemp("decoupled"))


@pytest.fixture(scope="module", params=SERVERS)
def server(request: pytest.FixtureRequest, repository: Path) -> Iterator[Endpoint]:
    yield from endpoints(request.param, repository)


# --- the tests ---------------------------------------------------------------------------------------------


@pytest.mark.parametrize("empty_final", [False, True])
def test_repeat_int32_responses_interleave_and_end_as_on_triton(server: Endpoint, empty_final: bool) -> None:
    def repeat(request_id: str, values: list[int], delay_ms: int) -> service_pb2.ModelInferRequest:
        inputs = {
            "IN": np.array(values, np.int32),
            "DELAY": np.full(len(values), delay_ms, np.uint32),
            "WAIT": np.array([5], np.uint32),
        }
        return infer_request("repeat_int32", request_id, inputs, empty_final=empty_final)

    messages = stream(server, [repeat("a", [4, 5, 6], 30), repeat("b", [7, 8], 20), repeat("c", [], 0)])
    end = [("", "repeat_int32", "", True, "", ())] if empty_final else []
    grouped = by_id(messages)
    for request_id, values in (("a", [4, 5, 6]), ("b", [7, 8])):
        assert grouped.pop(request_id) == [
            (
                request_id,
                "repeat_int32",
                "1",
                False,
                "",
                (("OUT", "INT32", (1,), (value,)), ("IDX", "UINT32", (1,), (index,))),
            )
            for index, value in enumerate(values)
        ] + [(request_id, *e[1:]) for e in end]
    assert grouped.pop("c", []) == [("c", *e[1:]) for e in end]
    assert grouped == {}


def test_square_int32_gives_n_responses(server: Endpoint) -> None:
    requests = [
        infer_request("square_int32", f"n{n}", {"IN": np.array([n], np.int32)}, empty_final=True)
        for n in (3, 0)
    ]
    grouped = by_id(stream(server, requests))
    assert grouped["n3"] == [("n3", "square_int32", "1", False, "", (i32(3),))] * 3 + [
        ("n3", "square_int32", "", True, "", ())
    ]
    assert grouped["n0"] == [("n0", "square_int32", "", True, "", ())]


CLOSED = "TritonModelException: Unable to send response. Response sender has been closed."
NO_RESPONSE = (
    "TritonModelException: Inference Response object must be provided when the response flags is set to zero."
)
BAD_FLAG = "TritonModelException: Unable to send response. Unsupported flag provided."
NOT_NONE = (
    "Failed to process the request(s) for model 'decoupled_probe_0', message: Python model "
    "'decoupled_probe_0' is using the decoupled mode and the execute function must return None."
)
# mode -> (messages without, with triton_enable_empty_final_response): (version, final, error, outputs)
PROBE_ANSWERS: dict[int, tuple[list[tuple[str, bool, str, tuple[Any, ...]]], ...]] = {
    0: ([("1", True, "", (i32(0),))],) * 2,
    1: ([("1", False, "", (i32(1),))], [("1", False, "", (i32(1),)), ("", True, "", ())]),
    2: ([], [("", True, "", ())]),
    3: (
        [
            (
                "1",
                True,
                "",
                (
                    i32(3),
                    (
                        "MSG",
                        "BYTES",
                        (2,),
                        (NO_RESPONSE, BAD_FLAG),
                    ),
                ),
            )
        ],
    )
    * 2,
    4: ([("1", True, "", (("MSG", "BYTES", (2,), (CLOSED, CLOSED)),))],) * 2,
    5: (
        [
            (
                "",
                True,
                NOT_NONE,
                (),
            )
        ],
    )
    * 2,
    7: (
        [("", False, "probe error response", ())],
        [("", False, "probe error response", ()), ("", True, "", ())],
    ),
    10: ([("1", True, "", (("MSG", "BYTES", (2,), ("False", "False")),))],) * 2,
    11: (
        [("1", False, "", (i32(i),)) for i in range(20)],
        [("1", False, "", (i32(i),)) for i in range(20)] + [("", True, "", ())],
    ),
}


@pytest.mark.parametrize("empty_final", [False, True])
def test_response_sender_uses_and_misuses_answer_as_on_triton(server: Endpoint, empty_final: bool) -> None:
    # One stream per mode: mode 4 reports what mode 3 met after its final flag, so 3 runs first.
    for mode, answers in PROBE_ANSWERS.items():
        messages = stream(
            server, [infer_request("decoupled_probe", f"m{mode}", probe(mode), empty_final=empty_final)]
        )
        expected = [(f"m{mode}", "decoupled_probe", *answer) for answer in answers[empty_final]]
        assert messages == expected, f"mode {mode}"


def test_a_failing_execute_ends_the_request_with_its_error(server: Endpoint) -> None:
    (message,) = stream(server, [infer_request("decoupled_probe", "m6", probe(6))])
    request_id, model, version, final, error, outputs = message
    assert (request_id, model, version, final, outputs) == ("m6", "decoupled_probe", "", True, ())
    # Triton adds the Python traceback ("\n\nAt:\n  .../model.py(62): execute\n"); sonic does not.
    assert error.startswith(
        "Failed to process the request(s) for model 'decoupled_probe_0', message: "
        "TritonModelException: probe failure in execute"
    )


def test_unary_calls_to_a_decoupled_model_are_refused_as_on_triton(server: Endpoint) -> None:
    request = infer_request("square_int32", "u", {"IN": np.array([3], np.int32)})
    with grpc.insecure_channel(server.grpc) as channel, pytest.raises(grpc.RpcError) as info:
        service_pb2_grpc.GRPCInferenceServiceStub(channel).ModelInfer(request)
    assert info.value.code() == grpc.StatusCode.UNIMPLEMENTED
    assert info.value.details() == "ModelInfer RPC doesn't support models with decoupled transaction policy"
    body = json.dumps({"inputs": [{"name": "IN", "datatype": "INT32", "shape": [1], "data": [3]}]}).encode()
    http = urllib.request.Request(
        f"http://{server.http}/v2/models/square_int32/infer", body, {"Content-Type": "application/json"}
    )
    with pytest.raises(urllib.error.HTTPError) as http_info:
        urllib.request.urlopen(http, timeout=60)
    assert http_info.value.code == 501
    assert json.loads(http_info.value.read()) == {
        "error": "HTTP end point doesn't support models with decoupled transaction policy"
    }


def test_config_shows_the_transaction_policy(server: Endpoint) -> None:
    with grpc.insecure_channel(server.grpc) as channel:
        stub = service_pb2_grpc.GRPCInferenceServiceStub(channel)
        config = stub.ModelConfig(service_pb2.ModelConfigRequest(name="square_int32")).config
    assert config.model_transaction_policy.decoupled is True
    with urllib.request.urlopen(f"http://{server.http}/v2/models/square_int32/config", timeout=60) as answer:
        assert json.loads(answer.read())["model_transaction_policy"] == {"decoupled": True}


def test_response_statistics_stay_empty_as_on_triton(server: Endpoint) -> None:
    # Triton's L0_response_statistics: per-response statistics (``response_stats``, keyed by the response's
    # index) are reported only by backends that call TRITONBACKEND_ModelInstanceReportResponseStatistics,
    # which Triton 2.51's Python backend never does: after N responses, an empty final response, an error
    # response, a non-decoupled model's answer and a BLS call, Triton's map is empty over both protocols,
    # and its HTTP JSON still writes the key.
    stream(server, [infer_request("square_int32", "n", {"IN": np.array([3], np.int32)})])
    stream(server, [infer_request("decoupled_probe", f"p{mode}", probe(mode)) for mode in (1, 2, 7)])
    client = grpcclient.InferenceServerClient(server.grpc)
    for mode in (4, 0):  # this model answering itself, then calling square_int32 by BLS
        inputs = [grpcclient.InferInput("N", [1], "INT32"), grpcclient.InferInput("MODE", [1], "INT32")]
        inputs[0].set_data_from_numpy(np.array([2], np.int32))
        inputs[1].set_data_from_numpy(np.array([mode], np.int32))
        assert client.infer("bls_decoupled", inputs).as_numpy("OUT") is not None
    for model in ("square_int32", "decoupled_probe", "bls_decoupled"):
        grpc_stats = client.get_inference_statistics(model, as_json=False).model_stats
        assert grpc_stats[0].inference_stats.success.count > 0
        assert len(grpc_stats[0].response_stats) == 0
        with urllib.request.urlopen(f"http://{server.http}/v2/models/{model}/stats", timeout=60) as answer:
            http_stats = json.load(answer)["model_stats"]
        assert http_stats[0]["inference_stats"]["success"]["count"] > 0
        assert http_stats[0]["response_stats"] == {}
    client.close()


def test_tritonclient_streams_nvidias_repeat_example(server: Endpoint) -> None:
    """What NVIDIA's repeat_client.py does: tritonclient's stream, the empty final response asked for."""
    results: queue.Queue[tuple[Any, Any]] = queue.Queue()
    inputs = []
    for name, array in (
        ("IN", np.array([4, 5, 6], np.int32)),
        ("DELAY", np.array([5, 5, 5], np.uint32)),
        ("WAIT", np.array([1], np.uint32)),
    ):
        tensor = grpcclient.InferInput(name, list(array.shape), str(array.dtype).upper())
        tensor.set_data_from_numpy(array)
        inputs.append(tensor)
    received: list[tuple[int, int, bool]] = []
    with grpcclient.InferenceServerClient(server.grpc) as client:
        client.start_stream(callback=lambda result, error: results.put((result, error)))
        client.async_stream_infer("repeat_int32", inputs, request_id="r", enable_empty_final_response=True)
        while not received or not received[-1][2]:
            result, error = results.get(timeout=60)
            assert error is None
            final = result.get_response().parameters["triton_final_response"].bool_param
            out, idx = result.as_numpy("OUT"), result.as_numpy("IDX")
            received.append((-1 if out is None else int(out[0]), -1 if idx is None else int(idx[0]), final))
        client.stop_stream()
    assert received == [(4, 0, False), (5, 1, False), (6, 2, False), (-1, -1, True)]


def test_an_invalid_request_to_a_decoupled_model_is_answered_in_the_stream(server: Endpoint) -> None:
    wrong = infer_request("square_int32", "bad", {"IN": np.array([1, 2], np.int32)})
    (message,) = stream(server, [wrong])
    request_id, model, version, final, error, outputs = message
    assert (request_id, model, version, final, outputs) == ("bad", "", "", None, ())
    assert "unexpected shape for input 'IN' for model 'square_int32'" in error


def test_sigterm_lets_a_stream_in_flight_finish_then_exits(tmp_path: Path) -> None:
    """A decoupled request still sending when the server is told to stop (Triton's L0_grpc_state_cleanup,
    shutdown with a decoupled stream open): sonic drains it (every response and the final flag reach the
    client) and then exits 0. sonic only: this is its drain on SIGTERM."""
    repository = write_repository(tmp_path)
    answers: queue.Queue[Any] = queue.Queue()
    with ServerProcess.start([repository]) as server:
        client = grpcclient.InferenceServerClient(server.grpc_address)
        try:
            client.start_stream(callback=lambda result, error: answers.put(error or result))
            inputs = {
                "IN": np.arange(5, dtype=np.int32),
                "DELAY": np.full(5, 200, dtype=np.uint32),
                "WAIT": np.array([0], dtype=np.uint32),
            }
            tensors = []
            for name, array in inputs.items():
                tensor = grpcclient.InferInput(name, list(array.shape), "INT32" if name == "IN" else "UINT32")
                tensor.set_data_from_numpy(array)
                tensors.append(tensor)
            client.async_stream_infer("repeat_int32", tensors, enable_empty_final_response=True)
            first = answers.get(timeout=60)  # the request is running: its first response came
            server.process.send_signal(signal.SIGTERM)
            rest = [answers.get(timeout=60) for _ in range(5)]
            client.stop_stream()
        finally:
            client.close()
        assert server.process.wait(timeout=60) == 0
    responses = [first, *rest]
    assert not [r for r in responses if isinstance(r, InferenceServerException)]
    assert [int(r.as_numpy("OUT")[0]) for r in responses[:5]] == [0, 1, 2, 3, 4]
    assert responses[5].get_response().parameters["triton_final_response"].bool_param
