"""Decoupled Python models (``model_transaction_policy { decoupled: true }``) on sonic and on real NVIDIA
Triton 2.51, the same model folders and requests: every test asserts what Triton answers.

The models are NVIDIA's ``repeat_int32`` and ``square_int32`` examples and a probe whose MODE input
picks one way of using the response sender (tests/integration/backends/python_models/). Streams are
read with the raw gRPC stub so every field of every message is compared: ids, model name and version,
``triton_final_response``, outputs, error messages.
"""

from __future__ import annotations

import json
import os
import struct
import sys
import tempfile
import urllib.error
import urllib.request
from collections.abc import Iterator, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import grpc
import numpy as np
import numpy.typing as npt
import pytest
from tritonclient.grpc import service_pb2, service_pb2_grpc

from sonic.launch import ServerProcess
from sonic.launch.process import free_port

pytestmark = [pytest.mark.integration]

PYTHON_MODELS = Path(__file__).parent / "python_models"
DECOUPLED = "model_transaction_policy { decoupled: true }"
CONFIGS = {
    "repeat_int32": f"""name: "repeat_int32"
backend: "python"
max_batch_size: 0
{DECOUPLED}
input [
  {{ name: "IN" data_type: TYPE_INT32 dims: [ -1 ] }},
  {{ name: "DELAY" data_type: TYPE_UINT32 dims: [ -1 ] }},
  {{ name: "WAIT" data_type: TYPE_UINT32 dims: [ 1 ] }}
]
output [
  {{ name: "OUT" data_type: TYPE_INT32 dims: [ 1 ] }},
  {{ name: "IDX" data_type: TYPE_UINT32 dims: [ 1 ] }}
]
""",
    "square_int32": f"""name: "square_int32"
backend: "python"
max_batch_size: 0
{DECOUPLED}
input [ {{ name: "IN" data_type: TYPE_INT32 dims: [ 1 ] }} ]
output [ {{ name: "OUT" data_type: TYPE_INT32 dims: [ 1 ] }} ]
""",
    "decoupled_probe": f"""name: "decoupled_probe"
backend: "python"
max_batch_size: 0
{DECOUPLED}
input [ {{ name: "MODE" data_type: TYPE_INT32 dims: [ 1 ] }} ]
output [
  {{ name: "OUT" data_type: TYPE_INT32 dims: [ -1 ] }},
  {{ name: "MSG" data_type: TYPE_STRING dims: [ -1 ] }}
]
""",
    "bls_decoupled": """name: "bls_decoupled"
backend: "python"
max_batch_size: 0
input [
  { name: "N" data_type: TYPE_INT32 dims: [ 1 ] },
  { name: "MODE" data_type: TYPE_INT32 dims: [ 1 ] }
]
output [
  { name: "OUT" data_type: TYPE_INT32 dims: [ -1 ] },
  { name: "COUNT" data_type: TYPE_INT32 dims: [ 2 ] },
  { name: "MSG" data_type: TYPE_STRING dims: [ 1 ] }
]
""",
}


@dataclass(frozen=True)
class Endpoint:
    kind: str  # "sonic" or "triton"
    grpc: str
    http: str


@pytest.fixture(scope="module")
def repository(tmp_path_factory: pytest.TempPathFactory) -> Path:
    repo = tmp_path_factory.mktemp("decoupled") / "models"
    for name, config in CONFIGS.items():
        (repo / name / "1").mkdir(parents=True)
        (repo / name / "config.pbtxt").write_text(config, encoding="utf-8")
        (repo / name / "1" / "model.py").write_bytes((PYTHON_MODELS / f"{name}.py").read_bytes())
    return repo


def _triton(repository: Path) -> Iterator[Endpoint]:
    triton = pytest.importorskip("sonic.launch.triton")
    try:
        workdir = Path(tempfile.mkdtemp(prefix="sonic-triton-decoupled-"))
        backends = triton.prepare_backend_directory(workdir)
    except triton.TritonStartError as exc:
        pytest.skip(str(exc))
    ports = {"grpc": free_port(), "http": free_port(), "metrics": free_port()}
    command = triton.tritonserver_command([repository], ports, backend_directory=backends)
    env = dict(os.environ)
    env["LD_LIBRARY_PATH"] = os.pathsep.join(
        p for p in (env.get("LD_LIBRARY_PATH"), str(triton.libs_path())) if p
    )
    # The stub runs the interpreter found on PATH: this one, with numpy installed.
    env["PATH"] = os.pathsep.join((str(Path(sys.executable).parent), env.get("PATH", "")))
    grpc_address = f"127.0.0.1:{ports['grpc']}"
    with triton.TritonProcess.launch(
        command, grpc_address, list(CONFIGS), 120.0, env, workdir / "triton.log"
    ):
        yield Endpoint("triton", grpc_address, f"127.0.0.1:{ports['http']}")


@pytest.fixture(
    scope="module", params=["sonic", "sonic-grpcio", pytest.param("triton", marks=pytest.mark.triton)]
)
def server(request: pytest.FixtureRequest, repository: Path) -> Iterator[Endpoint]:
    if request.param == "triton":
        yield from _triton(repository)
        return
    extra = ["--http-port", "0"] + (["--grpc-server", "grpcio"] if request.param == "sonic-grpcio" else [])
    with ServerProcess.start([repository], extra_args=extra) as process:
        yield Endpoint("sonic", process.grpc_address, process.http_address)


# --- streams, read field by field ------------------------------------------------------------------------

Message = tuple[
    str, str, str, bool | None, str, tuple[tuple[str, str, tuple[int, ...], tuple[Any, ...]], ...]
]
NUMPY = {"INT32": np.int32, "UINT32": np.uint32}


def _bytes_items(raw: bytes) -> tuple[str, ...]:
    items, offset = [], 0
    while offset < len(raw):
        (length,) = struct.unpack_from("<I", raw, offset)
        items.append(raw[offset + 4 : offset + 4 + length].decode())
        offset += 4 + length
    return tuple(items)


def _message(message: Any) -> Message:
    """(id, model name, model version, triton_final_response, error message, outputs)."""
    head = message.infer_response
    final = (
        head.parameters["triton_final_response"].bool_param
        if "triton_final_response" in head.parameters
        else None
    )
    outputs = []
    for index, tensor in enumerate(head.outputs):
        raw = head.raw_output_contents[index]
        values = (
            _bytes_items(raw)
            if tensor.datatype == "BYTES"
            else tuple(np.frombuffer(raw, NUMPY[tensor.datatype]).tolist())
        )
        outputs.append((tensor.name, tensor.datatype, tuple(tensor.shape), values))
    return head.id, head.model_name, head.model_version, final, message.error_message, tuple(outputs)


def _request(
    model: str, request_id: str, inputs: dict[str, npt.NDArray[Any]], *, empty_final: bool = False
) -> service_pb2.ModelInferRequest:
    request = service_pb2.ModelInferRequest(model_name=model, id=request_id)
    for name, array in inputs.items():
        request.inputs.add(name=name, datatype=str(array.dtype).upper(), shape=list(array.shape))
        request.raw_input_contents.append(array.tobytes())
    if empty_final:
        request.parameters["triton_enable_empty_final_response"].bool_param = True
    return request


def stream(server: Endpoint, requests: Sequence[service_pb2.ModelInferRequest]) -> list[Message]:
    with grpc.insecure_channel(server.grpc) as channel:
        stub = service_pb2_grpc.GRPCInferenceServiceStub(channel)
        return [_message(m) for m in stub.ModelStreamInfer(iter(requests), timeout=60)]


def by_id(messages: list[Message]) -> dict[str, list[Message]]:
    grouped: dict[str, list[Message]] = {}
    for message in messages:
        grouped.setdefault(message[0], []).append(message)
    return grouped


def probe(mode: int) -> dict[str, npt.NDArray[Any]]:
    return {"MODE": np.array([mode], np.int32)}


def i32(*values: int) -> tuple[str, str, tuple[int, ...], tuple[int, ...]]:
    return ("OUT", "INT32", (len(values),), values)


# --- the tests ---------------------------------------------------------------------------------------------


@pytest.mark.parametrize("empty_final", [False, True])
def test_repeat_int32_responses_interleave_and_end_as_on_triton(server: Endpoint, empty_final: bool) -> None:
    def repeat(request_id: str, values: list[int], delay_ms: int) -> service_pb2.ModelInferRequest:
        inputs = {
            "IN": np.array(values, np.int32),
            "DELAY": np.full(len(values), delay_ms, np.uint32),
            "WAIT": np.array([5], np.uint32),
        }
        return _request("repeat_int32", request_id, inputs, empty_final=empty_final)

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
        _request("square_int32", f"n{n}", {"IN": np.array([n], np.int32)}, empty_final=True) for n in (3, 0)
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
BLS_NOT_DECOUPLED = (
    "Model square_int32 - Error when running inference: Model square_int32 is using the decoupled. "
    "The current BLS request call doesn't support models using the decoupled transaction policy. "
    "Please use 'decoupled=True' argument to the 'exec' or 'async_exec' calls for decoupled models.'"
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
            server, [_request("decoupled_probe", f"m{mode}", probe(mode), empty_final=empty_final)]
        )
        expected = [(f"m{mode}", "decoupled_probe", *answer) for answer in answers[empty_final]]
        assert messages == expected, f"mode {mode}"


def test_a_failing_execute_ends_the_request_with_its_error(server: Endpoint) -> None:
    (message,) = stream(server, [_request("decoupled_probe", "m6", probe(6))])
    request_id, model, version, final, error, outputs = message
    assert (request_id, model, version, final, outputs) == ("m6", "decoupled_probe", "", True, ())
    # Triton adds the Python traceback ("\n\nAt:\n  .../model.py(62): execute\n"); sonic does not.
    assert error.startswith(
        "Failed to process the request(s) for model 'decoupled_probe_0', message: "
        "TritonModelException: probe failure in execute"
    )


def test_cancelling_the_stream_is_seen_by_the_model(server: Endpoint) -> None:
    with grpc.insecure_channel(server.grpc) as channel:
        stub = service_pb2_grpc.GRPCInferenceServiceStub(channel)
        call = stub.ModelStreamInfer(iter([_request("decoupled_probe", "m8", probe(8))]), timeout=60)
        received = []
        for message in call:
            received.append(_message(message))
            if len(received) == 3:
                call.cancel()
                break
    assert [m[5] for m in received] == [(i32(0),), (i32(1),), (i32(2),)]
    # Mode 9 answers once the model's thread noticed (on its next send) and noted it.
    ((*_, outputs),) = stream(server, [_request("decoupled_probe", "m9", probe(9))])
    notes = outputs[0][3]
    assert notes == ("cancelled=True request.is_cancelled=True final: no error",)


def test_unary_calls_to_a_decoupled_model_are_refused_as_on_triton(server: Endpoint) -> None:
    request = _request("square_int32", "u", {"IN": np.array([3], np.int32)})
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


@pytest.mark.parametrize("mode", [0, 1])
def test_bls_iterates_over_a_decoupled_models_responses(server: Endpoint, mode: int) -> None:
    """exec(decoupled=True) (mode 0) and async_exec(decoupled=True) (mode 1): the final flag sent alone
    comes as a last, empty response."""
    for n, values in ((3, (3, 3, 3)), (0, ())):
        inputs = {"N": np.array([n], np.int32), "MODE": np.array([mode], np.int32)}
        ((*_, outputs),) = stream(server, [_request("bls_decoupled", "b", inputs)])
        assert outputs == (
            ("OUT", "INT32", (len(values),), values),
            ("COUNT", "INT32", (2,), (n + 1, 1)),
            ("MSG", "BYTES", (1,), ("",)),
        )


def test_bls_without_decoupled_true_gets_tritons_error(server: Endpoint) -> None:
    inputs = {"N": np.array([3], np.int32), "MODE": np.array([2], np.int32)}
    ((*_, outputs),) = stream(server, [_request("bls_decoupled", "b", inputs)])
    assert outputs[2] == (
        "MSG",
        "BYTES",
        (1,),
        (BLS_NOT_DECOUPLED,),
    )


def test_a_model_sending_to_a_client_that_does_not_read_is_held_back(server: Endpoint) -> None:
    """sonic's bound (docs/backends.md): the model's sender waits once 64 responses are unread and the
    front end has 4 MiB (native) or 64 responses (grpcio) queued for the client. Triton queues all.

    The model floods 2,000 responses of 64 KiB (128 MiB). grpcio's client grows its HTTP/2 window to
    64 MiB and buffers what arrives without being read; past about 32 MiB it resets the stream itself
    (PROTOCOL_ERROR, grpcio 1.85), which the model sees as a cancellation. Either way the model never
    gets to send everything, as it would into an unbounded queue."""
    if server.kind == "triton":
        pytest.skip("Triton 2.51 queues every response a decoupled model sends: no bound to check")
    with grpc.insecure_channel(server.grpc) as channel:
        stub = service_pb2_grpc.GRPCInferenceServiceStub(channel)
        call = stub.ModelStreamInfer(iter([_request("decoupled_probe", "m12", probe(12))]), timeout=60)
        first = next(call)  # the flood runs; this client reads no more
        assert _message(first)[5][0][2] == (16384,)
        ((*_, outputs),) = stream(server, [_request("decoupled_probe", "m13", probe(13))])
        call.cancel()
    _, sent = outputs[0][3]
    assert 64 <= int(sent) < 1000
