"""The sequence batcher end to end, driven by tritonclient's sequence API over gRPC, streaming and HTTP."""

from __future__ import annotations

import queue
import threading
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import numpy as np
import pytest
import tritonclient.grpc as grpcclient
import tritonclient.http as httpclient
from tritonclient.utils import InferenceServerException

from sonic.launch import ServerProcess
from sonic.models.sequence import write_accumulator

pytestmark = pytest.mark.integration

OLDEST = "oldest { max_candidate_sequences: 8 }"
PYTHON_MODELS = Path(__file__).parents[1] / "backends" / "python_models"
STATE_SHOWN = """
name: "state_shown"
backend: "python"
max_batch_size: 0
input [ { name: "INPUT" data_type: TYPE_FP32 dims: [ 1 ] } ]
output [
  { name: "OUTPUT" data_type: TYPE_FP32 dims: [ 1 ] },
  { name: "STATE_OUT" data_type: TYPE_FP32 dims: [ 1 ] }
]
sequence_batching {
  state [ { input_name: "STATE_IN" output_name: "STATE_OUT" data_type: TYPE_FP32 dims: [ 1 ]
            initial_state: { data_type: TYPE_FP32 dims: [ 1 ] zero_data: true name: "zero" } } ]
}
"""


@pytest.fixture(scope="module")
def server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[ServerProcess]:
    root: Path = tmp_path_factory.mktemp("sequences")
    write_accumulator(root, "acc_direct")
    write_accumulator(root, "acc_oldest", OLDEST)
    write_accumulator(root, "acc_string", string_ids=True)
    (root / "state_shown" / "1").mkdir(parents=True)
    (root / "state_shown" / "1" / "model.py").write_bytes((PYTHON_MODELS / "state_shown.py").read_bytes())
    (root / "state_shown" / "config.pbtxt").write_text(STATE_SHOWN)
    with ServerProcess.start([root], extra_args=["--http-port", "0"]) as process:
        yield process


def _input(module: Any, value: float) -> list[Any]:
    tensor = module.InferInput("INPUT", [1, 1], "FP32")
    tensor.set_data_from_numpy(np.array([[value]], dtype=np.float32))
    return [tensor]


def _step(result: Any) -> tuple[float, int, int]:
    return (
        float(result.as_numpy("OUTPUT")[0, 0]),
        int(result.as_numpy("CORR")[0, 0]),
        int(result.as_numpy("FLAGS")[0, 0]),
    )


def _run_sequence(client: Any, module: Any, model: str, corr: int | str, values: list[float]) -> list[Any]:
    steps = []
    for index, value in enumerate(values):
        result = client.infer(
            model,
            _input(module, value),
            sequence_id=corr,
            sequence_start=index == 0,
            sequence_end=index == len(values) - 1,
        )
        steps.append(_step(result))
    return steps


@pytest.mark.parametrize("model", ["acc_direct", "acc_oldest"])
def test_interleaved_sequences_keep_their_own_state(server: ServerProcess, model: str) -> None:
    with grpcclient.InferenceServerClient(server.grpc_address) as client:
        first = client.infer(model, _input(grpcclient, 1), sequence_id=1001, sequence_start=True)
        second = client.infer(model, _input(grpcclient, 10), sequence_id=1002, sequence_start=True)
        middle = client.infer(model, _input(grpcclient, 2), sequence_id=1001)
        last = client.infer(model, _input(grpcclient, 20), sequence_id=1002, sequence_end=True)
        end = client.infer(model, _input(grpcclient, 3), sequence_id=1001, sequence_end=True)
    # FLAGS: START 1 + END 2 + READY 4; CORR: the correlation id the model saw.
    assert [_step(r) for r in (first, second, middle, last, end)] == [
        (1.0, 1001, 5),
        (10.0, 1002, 5),
        (3.0, 1001, 4),
        (30.0, 1002, 6),
        (6.0, 1001, 6),
    ]


@pytest.mark.parametrize("model", ["acc_direct", "acc_oldest"])
def test_concurrent_sequences_batch_together_and_stay_apart(server: ServerProcess, model: str) -> None:
    """Ten sequences at once: more than the direct batcher's eight slots (batches of 4 on two instances), so
    two wait in its backlog; or on the oldest-first batcher. Each keeps its implicit state: every one sees
    only its own running sum and id."""
    answers: queue.Queue[tuple[int, list[Any]]] = queue.Queue()

    def sequence(corr: int) -> None:
        with grpcclient.InferenceServerClient(server.grpc_address) as client:
            answers.put((corr, _run_sequence(client, grpcclient, model, corr, [corr] * 6)))

    threads = [threading.Thread(target=sequence, args=(corr,)) for corr in range(1, 11)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    results = dict(answers.get_nowait() for _ in threads)
    for corr, steps in results.items():
        assert [s[0] for s in steps] == [corr * n for n in range(1, 7)]
        assert {s[1] for s in steps} == {corr}


def test_string_ids_over_http(server: ServerProcess) -> None:
    with httpclient.InferenceServerClient(server.http_address) as client:
        steps = _run_sequence(client, httpclient, "acc_string", "run-7", [1, 2, 4])
    assert steps == [(1.0, 0, 5), (3.0, 0, 4), (7.0, 0, 6)]


def test_streaming_sequence(server: ServerProcess) -> None:
    answers: queue.Queue[Any] = queue.Queue()
    with grpcclient.InferenceServerClient(server.grpc_address) as client:
        client.start_stream(callback=lambda result, error: answers.put(error or result))
        for index, value in enumerate((5.0, 6.0, 7.0)):
            client.async_stream_infer(
                "acc_oldest",
                _input(grpcclient, value),
                sequence_id=77,
                sequence_start=index == 0,
                sequence_end=index == 2,
            )
        results = [answers.get(timeout=60) for _ in range(3)]
        client.stop_stream()
    assert [_step(r) for r in results] == [(5.0, 77, 5), (11.0, 77, 4), (18.0, 77, 6)]


@pytest.mark.parametrize(
    ("parameters", "message"),
    [
        ({}, "must specify a non-zero or non-empty correlation ID"),
        ({"sequence_id": 9}, "must specify the START flag on the first request of the sequence"),
    ],
)
def test_requests_outside_a_sequence_are_refused(
    server: ServerProcess, parameters: dict[str, Any], message: str
) -> None:
    with (
        grpcclient.InferenceServerClient(server.grpc_address) as client,
        pytest.raises(InferenceServerException, match=message) as caught,
    ):
        client.infer("acc_direct", _input(grpcclient, 1), **parameters)
    assert caught.value.status() == "StatusCode.INVALID_ARGUMENT"


def test_a_sequence_ends_at_end(server: ServerProcess) -> None:
    with grpcclient.InferenceServerClient(server.grpc_address) as client:
        _run_sequence(client, grpcclient, "acc_direct", 31, [1, 1])
        with pytest.raises(InferenceServerException, match="START flag"):
            client.infer("acc_direct", _input(grpcclient, 1), sequence_id=31)


def _state_step(client: Any, model: str, value: float, **sequence: Any) -> Any:
    tensor = grpcclient.InferInput("INPUT", [1], "FP32")
    tensor.set_data_from_numpy(np.array([value], dtype=np.float32))
    outputs = [grpcclient.InferRequestedOutput(name) for name in sequence.pop("outputs", ["OUTPUT"])]
    return client.infer(model, [tensor], outputs=outputs, sequence_id=61, **sequence)


def test_a_state_output_listed_among_the_outputs_can_be_asked_for(server: ServerProcess) -> None:
    """Triton's L0_implicit_state ``test_request_output``: the state output is an output like any other when
    the configuration lists it, and the sequence's state still follows it."""
    with grpcclient.InferenceServerClient(server.grpc_address) as client:
        first = _state_step(client, "state_shown", 1.0, sequence_start=True, outputs=["OUTPUT", "STATE_OUT"])
        second = _state_step(client, "state_shown", 2.0, sequence_end=True, outputs=["STATE_OUT"])
    assert (float(first.as_numpy("OUTPUT")[0]), float(first.as_numpy("STATE_OUT")[0])) == (1.0, 1.0)
    assert float(second.as_numpy("STATE_OUT")[0]) == 3.0
    assert second.as_numpy("OUTPUT") is None
