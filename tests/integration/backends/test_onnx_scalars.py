"""ONNX models whose input and output are scalars (shape ``[]``), configured with dims of one element, as
Triton's ONNX Runtime backend takes them (Triton's ``L0_scalar_io``): the client sends and gets the
configured shape, the model runs on the scalar; dims with an element other than 1 fail the load, in
Triton's words."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import numpy as np
import pytest
import tritonclient.grpc as grpcclient
from onnx import TensorProto, helper

from sonic.launch import ServerProcess
from sonic.models.simple import save_graph
from sonic.protocol.errors import ModelConfigError
from sonic.server.embedded import EmbeddedModels

pytestmark = pytest.mark.integration

DIMS = {"scalar_1dim": [1], "scalar_2dim": [1, 1]}


@pytest.fixture(scope="module")
def server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[ServerProcess]:
    root: Path = tmp_path_factory.mktemp("scalars")
    for name, dims in DIMS.items():
        _scalar_model(root, name, dims)
    with ServerProcess.start([root]) as process:
        yield process


def _scalar_model(root: Path, name: str, dims: list[int]) -> None:
    """An ONNX model negating a scalar, configured with ``dims`` for its input and output."""
    graph = helper.make_graph(
        [helper.make_node("Neg", ["INPUT"], ["OUTPUT"])],
        name,
        [helper.make_tensor_value_info("INPUT", TensorProto.FLOAT, [])],
        [helper.make_tensor_value_info("OUTPUT", TensorProto.FLOAT, [])],
    )
    save_graph(graph, root / name / "1" / "model.onnx")
    (root / name / "config.pbtxt").write_text(
        f'name: "{name}"\nbackend: "onnxruntime"\nmax_batch_size: 0\n'
        f'input [ {{ name: "INPUT" data_type: TYPE_FP32 dims: {dims} }} ]\n'
        f'output [ {{ name: "OUTPUT" data_type: TYPE_FP32 dims: {dims} }} ]\n'
    )


@pytest.mark.parametrize("name", list(DIMS))
def test_a_scalar_model_answers_in_its_configured_dims(server: ServerProcess, name: str) -> None:
    value = np.full(DIMS[name], 1.5, dtype=np.float32)
    tensor = grpcclient.InferInput("INPUT", list(value.shape), "FP32")
    tensor.set_data_from_numpy(value)
    with grpcclient.InferenceServerClient(server.grpc_address) as client:
        result = client.infer(name, [tensor])
    assert result.get_output("OUTPUT").shape == DIMS[name]
    np.testing.assert_array_equal(result.as_numpy("OUTPUT"), -value)


async def test_a_scalar_configured_with_more_than_one_element_fails_the_load(tmp_path: Path) -> None:
    _scalar_model(tmp_path, "scalar_2", [2])
    models = EmbeddedModels([tmp_path])
    try:
        with pytest.raises(ModelConfigError) as caught:
            await models.load("scalar_2")
    finally:
        await models.close()
    assert (
        "unable to load model 'scalar_2', scalar tensor 'INPUT', should only provide 1 in the model "
        "configuration when the model doesn't support batching. Model configuration provided: [2]."
    ) in str(caught.value)
