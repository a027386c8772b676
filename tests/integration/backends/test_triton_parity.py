"""The same Python-backend model folders on real NVIDIA Triton and on sonic give the same answers.

Triton is the ``tritonserver`` binary that ships in the nvidia-pytriton wheel (a test dependency),
with its Python backend stub for this interpreter. In this environment sonic's top-level
``triton_python_backend_utils`` shadows Triton's own copy, so this also checks that Triton's stub
still works with ours (it swaps in its C++ Tensor/Request/Response classes and reads
``ModelConfig._model_config`` after ``auto_complete_config``).
"""

from __future__ import annotations

import queue
import shutil
from collections.abc import Iterator
from typing import Any

import numpy as np
import numpy.typing as npt
import pytest
import tritonclient.grpc as grpcclient
from tests.integration.triton_helpers import running_triton

from sonic.launch import ServerProcess

pytestmark = [pytest.mark.integration, pytest.mark.triton]

MODELS = ("add_sub", "scale", "sequence_sum", "state_sum", "ragged_lengths")


@pytest.fixture(scope="module")
def triton_address(built_models: Any, tmp_path_factory: pytest.TempPathFactory) -> Iterator[str]:
    repo = tmp_path_factory.mktemp("triton") / "models"
    for name in MODELS:
        shutil.copytree(built_models.repo / name, repo / name)
    # The stub runs this interpreter (first on PATH), with numpy and sonic installed.
    with running_triton([repo], MODELS) as triton:
        yield triton.grpc_address


def run(address: str, model: str, inputs: dict[str, npt.NDArray[Any]]) -> dict[str, npt.NDArray[Any]]:
    with grpcclient.InferenceServerClient(address) as client:
        tensors = []
        for name, array in inputs.items():
            tensor = grpcclient.InferInput(name, list(array.shape), "FP32")
            tensor.set_data_from_numpy(array)
            tensors.append(tensor)
        result = client.infer(model, tensors)
        names = [o["name"] for o in result.get_response(as_json=True)["outputs"]]
        return {name: result.as_numpy(name) for name in names}


def test_add_sub_same_on_triton_and_sonic(triton_address: str, backend_server: ServerProcess) -> None:
    rng = np.random.default_rng(40)
    inputs = {
        "INPUT0": rng.normal(size=4).astype(np.float32),
        "INPUT1": rng.normal(size=4).astype(np.float32),
    }
    on_triton = run(triton_address, "add_sub", inputs)
    on_sonic = run(backend_server.grpc_address, "add_sub", inputs)
    assert on_triton.keys() == on_sonic.keys() == {"OUTPUT0", "OUTPUT1"}
    for name in on_triton:
        np.testing.assert_array_equal(on_sonic[name], on_triton[name])


def test_auto_complete_same_on_triton_and_sonic(triton_address: str, backend_server: ServerProcess) -> None:
    configs = []
    for address in (triton_address, backend_server.grpc_address):
        with grpcclient.InferenceServerClient(address) as client:
            config = client.get_model_config("scale", as_json=True)["config"]
        configs.append(
            (
                config["max_batch_size"],
                [(t["name"], t["data_type"], t["dims"]) for t in config["input"]],
                [(t["name"], t["data_type"], t["dims"]) for t in config["output"]],
                "dynamic_batching" in config,
            )
        )
    assert configs[0] == configs[1]
    raw = np.random.default_rng(41).normal(size=(3, 8)).astype(np.float32)
    on_triton = run(triton_address, "scale", {"RAW": raw})
    on_sonic = run(backend_server.grpc_address, "scale", {"RAW": raw})
    np.testing.assert_array_equal(on_sonic["SCALED"], on_triton["SCALED"])


def run_sequence(address: str, corr: int, values: list[float]) -> list[tuple[float, int, int]]:
    steps = []
    with grpcclient.InferenceServerClient(address) as client:
        for index, value in enumerate(values):
            tensor = grpcclient.InferInput("INPUT", [1], "FP32")
            tensor.set_data_from_numpy(np.array([value], dtype=np.float32))
            result = client.infer(
                "sequence_sum",
                [tensor],
                sequence_id=corr,
                sequence_start=index == 0,
                sequence_end=index == len(values) - 1,
            )
            steps.append(
                (
                    float(result.as_numpy("SUM")[0]),
                    int(result.as_numpy("FLAGS")[0]),
                    int(result.as_numpy("CORR")[0]),
                )
            )
    return steps


def test_sequence_batcher_same_on_triton_and_sonic(
    triton_address: str, backend_server: ServerProcess
) -> None:
    on_triton = [run_sequence(triton_address, corr, [1.0, 2.0, 4.0]) for corr in (11, 12)]
    on_sonic = [run_sequence(backend_server.grpc_address, corr, [1.0, 2.0, 4.0]) for corr in (11, 12)]
    assert on_sonic == on_triton
    assert on_sonic[0] == [(1.0, 5, 11), (3.0, 4, 11), (7.0, 6, 11)]


def run_state_sum(address: str, corr: int, values: list[float]) -> list[float]:
    sums = []
    with grpcclient.InferenceServerClient(address) as client:
        for index, value in enumerate(values):
            tensor = grpcclient.InferInput("INPUT", [1], "FP32")
            tensor.set_data_from_numpy(np.array([value], dtype=np.float32))
            result = client.infer(
                "state_sum", [tensor], sequence_id=corr, sequence_start=index == 0, sequence_end=index == 2
            )
            assert result.as_numpy("SUM_OUT") is None  # the state output stays on the server
            sums.append(float(result.as_numpy("SUM")[0]))
    return sums


def test_implicit_state_of_a_python_model_is_kept_where_triton_drops_it(
    triton_address: str, backend_server: ServerProcess
) -> None:
    """A known, chosen difference: Triton 2.51's Python backend gets the initial state on every request
    (the backend never updates the sequence's state, and accepts the state output silently); sonic keeps
    the returned state for the sequence's next request, as the config's ``state`` section asks."""
    on_triton = [run_state_sum(triton_address, corr, [1.0, 2.0, 4.0]) for corr in (21, 22)]
    on_sonic = [run_state_sum(backend_server.grpc_address, corr, [1.0, 2.0, 4.0]) for corr in (21, 22)]
    assert on_triton == [[1.0, 2.0, 4.0], [1.0, 2.0, 4.0]]
    assert on_sonic == [[1.0, 3.0, 7.0], [1.0, 3.0, 7.0]]


def run_ragged(address: str) -> list[list[float]]:
    """Three requests of lengths 3, 4 and 5 in flight at once; what the model saw for each."""
    answers: queue.Queue[tuple[int, Any]] = queue.Queue()
    with grpcclient.InferenceServerClient(address) as client:
        for length in (3, 4, 5):
            tensor = grpcclient.InferInput("INPUT", [1, length], "FP32")
            tensor.set_data_from_numpy(np.ones((1, length), dtype=np.float32))
            client.async_infer(
                "ragged_lengths", [tensor], lambda result, error, n=length: answers.put((n, error or result))
            )
        seen = dict(answers.get(timeout=60) for _ in range(3))
    return [seen[n].as_numpy("SEEN")[0].tolist() for n in (3, 4, 5)]


def test_ragged_batch_same_on_triton_and_sonic(triton_address: str, backend_server: ServerProcess) -> None:
    on_triton = run_ragged(triton_address)
    on_sonic = run_ragged(backend_server.grpc_address)
    assert on_sonic == on_triton == [[3, 3, 3.0], [3, 4, 4.0], [3, 5, 5.0]]  # one execute, own lengths
