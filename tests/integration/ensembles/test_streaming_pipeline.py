"""A streaming pipeline as ML4GW's hermes exports and drives it (DeepClean, aframe), served by ``sonic serve``.

The ensemble ``streaming`` chains a snapshotter and an online aggregator (both sequence-batched ONNX
models with implicit state) around an ONNX network (``sonic.models.streaming``). The client streams
updates over one gRPC stream to the ensemble, as hermes' ``InferenceClient`` does: tritonclient's
``async_stream_infer`` with ``request_id`` ``"<n>_<sequence>"``, ``sequence_id``, ``sequence_start`` on
the first update, ``sequence_end`` on the last and ``timeout=60``. Every answer must equal the chain
run directly with onnxruntime (:class:`~sonic.models.streaming.DirectStreaming`).

Real Triton 2.51 (the nvidia-pytriton binary, Python backend only here) serves the same ensemble with
Python steps (``python_models/stream_state.py`` keeps each sequence's state itself, since Triton's Python
backend feeds implicit state its initial value on every request; ``stream_network.py`` runs the same
ONNX file): it must answer the same, and so must sonic serving those Python steps.
"""

from __future__ import annotations

import queue
import shutil
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import numpy as np
import numpy.typing as npt
import pytest
import tritonclient.grpc as grpcclient
from tests.integration.triton_helpers import running_triton

from sonic.launch import ServerProcess
from sonic.models.streaming import (
    AGGREGATOR,
    ENSEMBLE,
    NETWORK,
    SNAPSHOTTER,
    DirectStreaming,
    StreamShape,
    ensemble_config,
    write_streaming_pipeline,
)

pytestmark = pytest.mark.integration

SHAPE = StreamShape()
Update = tuple[object, npt.NDArray[np.float32], bool, bool]  # sequence, samples, start, end


@pytest.fixture(scope="module")
def repo(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return write_streaming_pipeline(tmp_path_factory.mktemp("streaming"), SHAPE)


@pytest.fixture(scope="module")
def server(repo: Path) -> Iterator[ServerProcess]:
    with ServerProcess.start([repo]) as process:
        yield process


def updates(rng: np.random.Generator, count: int) -> list[npt.NDArray[np.float32]]:
    shape = (1, SHAPE.channels, SHAPE.update_samples)
    return [rng.normal(size=shape).astype(np.float32) for _ in range(count)]


def stream(
    address: str, plan: list[Update], timeout_us: int | None = 60
) -> dict[str, npt.NDArray[np.float32]]:
    """Send ``plan`` over one stream, hermes' way (``timeout_us``: the request parameter ``timeout``, 60
    as hermes sends it); the answers by request id."""
    answers: queue.Queue[Any] = queue.Queue()
    with grpcclient.InferenceServerClient(address) as client:
        client.start_stream(callback=lambda result, error: answers.put(error or result))
        for index, (sequence, samples, start, end) in enumerate(plan):
            tensor = grpcclient.InferInput("snapshot_update", list(samples.shape), "FP32")
            tensor.set_data_from_numpy(samples)
            client.async_stream_infer(
                ENSEMBLE,
                model_version="1",
                inputs=[tensor],
                request_id=f"{index}_{sequence}",
                sequence_id=sequence,  # int or str: tritonclient sends either
                sequence_start=start,
                sequence_end=end,
                timeout=timeout_us,
            )
        results = [answers.get(timeout=60) for _ in plan]
        client.stop_stream()
    found = {}
    for result in results:
        if isinstance(result, Exception):
            raise result
        found[result.get_response().id] = result.as_numpy("output_stream")
    return found


def expected(repo: Path, plan: list[Update]) -> dict[str, npt.NDArray[np.float32]]:
    direct = DirectStreaming(repo, SHAPE)
    answers = {}
    for index, (sequence, samples, start, _) in enumerate(plan):
        if start:
            direct.start(sequence)
        answers[f"{index}_{sequence}"] = direct.update(sequence, samples)
    return answers


def check(served: dict[str, npt.NDArray[np.float32]], wanted: dict[str, npt.NDArray[np.float32]]) -> None:
    assert sorted(served) == sorted(wanted)
    for request_id, value in wanted.items():
        np.testing.assert_allclose(served[request_id], value, rtol=1e-5, atol=1e-6, err_msg=request_id)


def test_one_stream_equals_the_chain_run_directly(server: ServerProcess, repo: Path) -> None:
    samples = updates(np.random.default_rng(1), 12)
    plan: list[Update] = [(1001, x, i == 0, i == len(samples) - 1) for i, x in enumerate(samples)]
    wanted = expected(repo, plan)
    check(stream(server.grpc_address, plan), wanted)
    # The aggregator's state did its work: once warm, the answers are averages of several windows.
    assert len({float(v[0, 0]) for v in wanted.values()}) > 6


def test_interleaved_sequences_on_one_stream_keep_separate_states(server: ServerProcess, repo: Path) -> None:
    rng = np.random.default_rng(2)
    first, second = updates(rng, 8), updates(rng, 8)
    plan: list[Update] = []
    for i in range(8):
        plan.append((2001, first[i], i == 0, i == 7))
        plan.append((2002, second[i], i == 0, i == 7))
    check(stream(server.grpc_address, plan), expected(repo, plan))


def test_reused_id_after_end_starts_from_the_initial_state(server: ServerProcess, repo: Path) -> None:
    rng = np.random.default_rng(3)
    before, after = updates(rng, 5), updates(rng, 5)
    plan: list[Update] = [(3001, x, i == 0, i == 4) for i, x in enumerate(before)]
    plan += [(3001, x, i == 0, i == 4) for i, x in enumerate(after)]
    served = stream(server.grpc_address, plan)
    check(served, expected(repo, plan))
    # The second sequence answers as a fresh one would: nothing of the first one's states is left.
    fresh: list[Update] = [(9, x, i == 0, i == 4) for i, x in enumerate(after)]
    for i, value in enumerate(expected(repo, fresh).values()):
        np.testing.assert_allclose(served[f"{i + 5}_3001"], value, rtol=1e-5, atol=1e-6)


def test_string_sequence_ids(server: ServerProcess, repo: Path) -> None:
    rng = np.random.default_rng(4)
    first, second = updates(rng, 6), updates(rng, 6)
    plan: list[Update] = []
    for i in range(6):
        plan.append(("H1-run", first[i], i == 0, i == 5))
        plan.append(("L1-run", second[i], i == 0, i == 5))
    check(stream(server.grpc_address, plan), expected(repo, plan))


def test_update_without_start_is_refused_with_tritons_words(server: ServerProcess) -> None:
    samples = updates(np.random.default_rng(5), 1)[0]
    with pytest.raises(Exception, match=r"must specify the START flag on the first request of the sequence"):
        stream(server.grpc_address, [(4001, samples, False, False)])


# --- the same ensemble with Python steps, on real Triton 2.51 and on sonic ---

PYTHON_MODELS = Path(__file__).parent.parent / "backends" / "python_models"


def _python_step(role: str, inputs: str, outputs: str, sequence: bool) -> str:
    parameters = {
        "role": role,
        "window_samples": SHAPE.window_samples,
        "update_samples": SHAPE.update_samples,
    }
    entries = ", ".join(f'{{ key: "{k}" value: {{ string_value: "{v}" }} }}' for k, v in parameters.items())
    batcher = "sequence_batching { max_sequence_idle_microseconds: 10000000 direct { } }" if sequence else ""
    return f"""
name: "{role}"
backend: "python"
max_batch_size: 0
input [ {inputs} ]
output [ {outputs} ]
{batcher}
parameters [ {entries} ]
instance_group [ {{ count: 1 kind: KIND_CPU }} ]
"""


@pytest.fixture(scope="module")
def python_repo(repo: Path, tmp_path_factory: pytest.TempPathFactory) -> Path:
    root = tmp_path_factory.mktemp("streaming_python") / "models"
    c, u, s = SHAPE.channels, SHAPE.update_samples, SHAPE.window_samples

    def tensor(name: str, dims: list[int]) -> str:
        return f'{{ name: "{name}" data_type: TYPE_FP32 dims: {dims} }}'

    configs = {
        SNAPSHOTTER: _python_step(
            SNAPSHOTTER,
            tensor("snapshot_update", [1, c, u]),
            tensor("network.witness_snapshot", [1, c, s]),
            True,
        ),
        NETWORK: _python_step(NETWORK, tensor("witness", [1, c, s]), tensor("prediction", [1, s]), False),
        AGGREGATOR: _python_step(AGGREGATOR, tensor("update", [1, s]), tensor("output_stream", [1, u]), True),
    }
    for name, config in configs.items():
        (root / name / "1").mkdir(parents=True)
        (root / name / "config.pbtxt").write_text(config)
        source = "stream_network.py" if name == NETWORK else "stream_state.py"
        shutil.copy(PYTHON_MODELS / source, root / name / "1" / "model.py")
    shutil.copy(repo / NETWORK / "1" / "model.onnx", root / NETWORK / "1" / "model.onnx")
    (root / ENSEMBLE / "1").mkdir(parents=True)
    (root / ENSEMBLE / "config.pbtxt").write_text(ensemble_config(SHAPE))
    return root


def _triton(python_repo: Path) -> Iterator[str]:
    # The stub runs this interpreter (first on PATH), with numpy and onnxruntime installed.
    with running_triton([python_repo], [ENSEMBLE]) as triton:
        yield triton.grpc_address


@pytest.fixture(scope="module", params=["sonic", pytest.param("triton", marks=pytest.mark.triton)])
def python_server(request: pytest.FixtureRequest, python_repo: Path) -> Iterator[str]:
    if request.param == "triton":
        yield from _triton(python_repo)
        return
    with ServerProcess.start([python_repo]) as process:
        yield process.grpc_address


def test_python_steps_answer_the_same_on_triton_and_sonic(python_server: str, repo: Path) -> None:
    rng = np.random.default_rng(6)
    first, second = updates(rng, 6), updates(rng, 6)
    plan: list[Update] = []
    for i in range(6):
        plan.append((5001, first[i], i == 0, i == 5))
        plan.append(("V1-run", second[i], i == 0, i == 5))
    plan += [(5001, x, i == 0, i == 2) for i, x in enumerate(updates(rng, 3))]  # the id again, from zero
    # No request timeout here: Triton's sequence batcher rejects a request that waited longer than it
    # ("timeout of the corresponding sequence has been expired"), and hermes' 60 us is shorter than
    # a Python step takes; sonic's sequence batcher does not apply request timeouts.
    check(stream(python_server, plan, timeout_us=None), expected(repo, plan))
