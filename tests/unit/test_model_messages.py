"""A model's refusals of a request in Triton 2.51's words (found by the differential tests)."""

from __future__ import annotations

from pathlib import Path

import pytest

from sonic.models.simple import IDENTITY_CONFIG, identity_model
from sonic.protocol.errors import InvalidArgumentError
from sonic.protocol.types import InferRequest, InputTensor
from sonic.server.config import ServerConfig
from sonic.server.models.manager import ModelManager

pytestmark = pytest.mark.unit


def _data(shape: tuple[int, ...]) -> InputTensor:
    return InputTensor("INPUT0", "FP32", shape, raw=b"\0" * 4 * max(0, 16 * shape[0]))


@pytest.mark.parametrize(
    ("inputs", "outputs", "message"),
    [
        ([_data((1, -1))], None, ("All input dimensions should be specified for input 'INPUT0' for model "
         "'identity', got [1,-1]")),
        ([_data((1, 16, -1))], None, ("unexpected shape for input 'INPUT0' for model 'identity'. "
         "Expected [-1,16], got [1,16,-1]")),
        ([_data((2000, 16))], None, "inference request batch-size must be <= 1024 for 'identity'"),
        ([_data((1, 16))], ["NOPE"], ("unexpected inference output 'NOPE' for model 'identity'; it has "
         "['OUTPUT0']")),
    ],
)  # fmt: skip
async def test_refusals_in_triton_words(
    tmp_path: Path, inputs: list[InputTensor], outputs: list[str] | None, message: str
) -> None:
    identity_model(tmp_path / "identity" / "1" / "model.onnx")
    (tmp_path / "identity" / "config.pbtxt").write_text(IDENTITY_CONFIG)
    manager = ModelManager(ServerConfig(model_repositories=(tmp_path,)))
    await manager.load("identity")
    try:
        with pytest.raises(InvalidArgumentError) as error:
            manager.get("identity").prepare(InferRequest("identity", "", inputs, outputs=outputs))
        assert error.value.message.endswith(message)
    finally:
        await manager.close()


OPTIONAL_CONFIG = """name: "m"
backend: "python"
input [
  { name: "A" data_type: TYPE_FP32 dims: [ 1 ] },
  { name: "B" data_type: TYPE_FP32 dims: [ 1 ] },
  { name: "C" data_type: TYPE_FP32 dims: [ 1 ] },
  { name: "D" data_type: TYPE_FP32 dims: [ 1 ] optional: true }
]
output [ { name: "OUT" data_type: TYPE_FP32 dims: [ 1 ] } ]
"""
MODEL_PY = """import triton_python_backend_utils as pb_utils


class TritonPythonModel:
    def execute(self, requests):
        return [pb_utils.InferenceResponse([]) for _ in requests]
"""


async def test_too_few_inputs_with_an_optional_one_in_triton_words(tmp_path: Path) -> None:
    """Triton counts a range when some inputs are optional: 'between 3 and 4', not 'expected 4'."""
    (tmp_path / "m" / "1").mkdir(parents=True)
    (tmp_path / "m" / "config.pbtxt").write_text(OPTIONAL_CONFIG)
    (tmp_path / "m" / "1" / "model.py").write_text(MODEL_PY)
    manager = ModelManager(ServerConfig(model_repositories=(tmp_path,)))
    await manager.load("m")
    inputs = [InputTensor(name, "FP32", (1,), raw=b"\0" * 4) for name in ("A", "B")]
    try:
        with pytest.raises(InvalidArgumentError) as error:
            manager.get("m").prepare(InferRequest("m", "", inputs))
        assert error.value.message.endswith(
            "expected number of inputs between 3 and 4 but got 2 inputs for model 'm'. Got input(s) "
            "['A','B'], but missing required input(s) ['C']. Please provide all required input(s)."
        )
    finally:
        await manager.close()
