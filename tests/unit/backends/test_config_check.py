"""A configuration that does not match its model fails the load, in Triton's words, never a request.

ONNX (the issue's case: a config naming an output ``prob`` the model does not have loaded, then every
request failed with HTTP 500 and onnxruntime's text) and trees here; ``.pt2``/TorchScript in
test_pytorch_backend.py, TensorFlow SavedModels in tests/integration/backends/test_tensorflow.py.
"""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest
from onnx import TensorProto, helper, save
from sklearn.tree import DecisionTreeClassifier

from sonic.models.simple import IR_VERSION, OPSET
from sonic.protocol.errors import ModelConfigError
from sonic.server.embedded import EmbeddedModels

pytestmark = pytest.mark.unit

# An MLP's head as torch exports it: input [batch, 4] FP32, outputs logits and probs [batch, 3].
GOOD = """
max_batch_size: 8
input [ { name: "x" data_type: TYPE_FP32 dims: [ 4 ] } ]
output [ { name: "logits" data_type: TYPE_FP32 dims: [ 3 ] },
         { name: "probs" data_type: TYPE_FP32 dims: [ 3 ] } ]
"""


def _onnx_model(path: Path, *, batch: str | int = "batch") -> None:
    weights = helper.make_tensor("w", TensorProto.FLOAT, [4, 3], np.ones(12, np.float32).tolist())
    graph = helper.make_graph(
        [
            helper.make_node("MatMul", ["x", "w"], ["logits"]),
            helper.make_node("Softmax", ["logits"], ["probs"]),
        ],
        "mlp",
        [helper.make_tensor_value_info("x", TensorProto.FLOAT, [batch, 4])],
        [
            helper.make_tensor_value_info("logits", TensorProto.FLOAT, [batch, 3]),
            helper.make_tensor_value_info("probs", TensorProto.FLOAT, [batch, 3]),
        ],
        initializer=[weights],
    )
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", OPSET)])
    model.ir_version = IR_VERSION
    path.parent.mkdir(parents=True)
    save(model, str(path))


async def _load(root: Path, name: str) -> None:
    models = EmbeddedModels([root])
    try:
        await models.load(name)
    finally:
        await models.close()


def _onnx_repo(root: Path, config: str, *, batch: str | int = "batch") -> Path:
    _onnx_model(root / "m" / "1" / "model.onnx", batch=batch)
    (root / "m" / "config.pbtxt").write_text('backend: "onnxruntime"\n' + config, encoding="utf-8")
    return root


async def test_matching_config_and_output_subset_load(tmp_path: Path) -> None:
    await _load(_onnx_repo(tmp_path / "a", GOOD), "m")
    # A config may name fewer outputs than the model gives (as Triton).
    await _load(
        _onnx_repo(tmp_path / "b", GOOD.replace('{ name: "logits" data_type: TYPE_FP32 dims: [ 3 ] },', "")),
        "m",
    )


@pytest.mark.parametrize(
    ("old", "new", "message"),
    [
        (
            '"probs"',
            '"prob"',
            "unexpected inference output 'prob', allowed outputs are: logits, probs",
        ),
        ('name: "x"', 'name: "input"', "unexpected inference input 'input', allowed inputs are: x"),
        (
            "dims: [ 4 ] } ]",
            'dims: [ 4 ] }, { name: "y" data_type: TYPE_FP32 dims: [ 4 ] } ]',
            "unable to load model 'm', configuration expects 2 inputs, model provides 1",
        ),
        (
            'name: "x" data_type: TYPE_FP32',
            'name: "x" data_type: TYPE_FP64',
            (
                "unable to load model 'm', configuration expects datatype TYPE_FP64 for input 'x', model provides "
                "TYPE_FP32"
            ),
        ),
        (
            '"logits" data_type: TYPE_FP32',
            '"logits" data_type: TYPE_INT64',
            (
                "unable to load model 'm', configuration expects datatype TYPE_INT64 for output 'logits', model "
                "provides TYPE_FP32"
            ),
        ),
        (
            "dims: [ 4 ]",
            "dims: [ 5 ]",
            (
                "model 'm', tensor 'x': the model expects 2 dimensions (shape [-1,4]) but the model configuration "
                "specifies 2 dimensions (an initial batch dimension because max_batch_size > 0 followed by the "
                "explicit tensor shape, making complete shape [-1,5])"
            ),
        ),
        (
            '"probs" data_type: TYPE_FP32 dims: [ 3 ]',
            '"probs" data_type: TYPE_FP32 dims: [ -1 ]',
            (
                "model 'm', tensor 'probs': the model expects 2 dimensions (shape [-1,3]) but the model "
                "configuration specifies 2 dimensions (an initial batch dimension because max_batch_size > 0 "
                "followed by the explicit tensor shape, making complete shape [-1,-1])"
            ),
        ),
        (
            "max_batch_size: 8",
            "max_batch_size: 0",
            (
                "model 'm', tensor 'x': the model expects 2 dimensions (shape [-1,4]) but the model configuration "
                "specifies 1 dimensions (shape [4])"
            ),
        ),
    ],
    ids=[
        "output-name",
        "input-name",
        "input-count",
        "input-type",
        "output-type",
        "input-dims",
        "output-dims-exact",
        "no-batching-rank",
    ],
)
async def test_onnx_mismatch_fails_the_load(tmp_path: Path, old: str, new: str, message: str) -> None:
    assert old in GOOD
    with pytest.raises(ModelConfigError) as caught:
        await _load(_onnx_repo(tmp_path, GOOD.replace(old, new)), "m")
    assert message in str(caught.value)
    assert str(caught.value).startswith(
        "load failed for model 'm': version 1 is at UNAVAILABLE state: Invalid argument: "
    )


async def test_onnx_fixed_first_dimension_cannot_batch(tmp_path: Path) -> None:
    with pytest.raises(ModelConfigError) as caught:
        await _load(_onnx_repo(tmp_path, GOOD, batch=1), "m")
    assert (
        "model 'm', tensor 'x': for the model to support batching the shape should have at least 1 dimension "
        "and the first dimension must be -1; but shape expected by the model is [1,4]"
    ) in str(caught.value)
    # Without batching, the same model loads with its full shape.
    unbatched = GOOD.replace("max_batch_size: 8", "max_batch_size: 0").replace(
        "dims: [ 4 ]", "dims: [ 1, 4 ]"
    )
    await _load(_onnx_repo(tmp_path / "b", unbatched.replace("dims: [ 3 ]", "dims: [ 1, 3 ]"), batch=1), "m")


def _trees_repo(root: Path, input_dims: str, output_dims: str) -> Path:
    x = np.random.default_rng(0).normal(size=(40, 3)).astype(np.float32)
    model = DecisionTreeClassifier(max_depth=2, random_state=0).fit(x, x[:, 0] > 0)
    (root / "t" / "1").mkdir(parents=True)
    import pickle  # noqa: PLC0415  (the trees backend's own sklearn format)

    (root / "t" / "1" / "model.pkl").write_bytes(pickle.dumps(model))
    (root / "t" / "config.pbtxt").write_text(
        'backend: "trees"\nmax_batch_size: 16\n'
        f'input [ {{ name: "input__0" data_type: TYPE_FP32 dims: [ {input_dims} ] }} ]\n'
        f'output [ {{ name: "output__0" data_type: TYPE_FP32 dims: [ {output_dims} ] }} ]\n',
        encoding="utf-8",
    )
    return root


async def test_trees_mismatch_fails_the_load(tmp_path: Path) -> None:
    await _load(_trees_repo(tmp_path / "good", "3", "1"), "t")
    with pytest.raises(ModelConfigError) as caught:
        await _load(_trees_repo(tmp_path / "features", "4", "1"), "t")
    assert "model 't', tensor 'input__0': the model expects 2 dimensions (shape [-1,3])" in str(caught.value)
    with pytest.raises(ModelConfigError) as caught:
        await _load(_trees_repo(tmp_path / "width", "3", "2"), "t")
    assert "tensor 'output__0': the model expects 2 dimensions (shape [-1,1])" in str(caught.value)
