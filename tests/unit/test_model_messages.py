"""A model's refusals of a request in Triton 2.51's words (found by the differential tests)."""

from __future__ import annotations

from pathlib import Path

import pytest

from sonic.models.simple import IDENTITY_CONFIG, identity_model
from sonic.protocol.errors import InvalidArgumentError
from sonic.protocol.types import InferRequest, InputTensor
from sonic.server.config import ServerConfig
from sonic.server.manager import ModelManager

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
