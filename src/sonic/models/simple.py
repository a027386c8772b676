"""Small ONNX models built directly with ``onnx.helper`` (no PyTorch needed): protocol and overhead tests.

- ``identity``: ``INPUT0`` FP32 [-1, 16] -> ``OUTPUT0`` (same values): the overhead workload.
- ``add_sub``: ``INPUT0``, ``INPUT1`` INT32 [-1, 16] -> ``OUTPUT0`` = sum, ``OUTPUT1`` = difference
  (the shape of Triton's ``simple`` example model).
"""

from __future__ import annotations

from pathlib import Path

import onnx
from onnx import TensorProto, helper

# ORT of the oldest supported release reads this opset and IR version.
OPSET = 17
IR_VERSION = 8


def save_graph(graph: onnx.GraphProto, path: Path) -> None:
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", OPSET)])
    model.ir_version = IR_VERSION
    onnx.checker.check_model(model)
    path.parent.mkdir(parents=True, exist_ok=True)
    onnx.save(model, str(path))


def identity_model(path: Path, *, dims: tuple[int, ...] = (16,), elem_type: int = TensorProto.FLOAT) -> None:
    shape: list[int | str] = ["batch", *dims]
    graph = helper.make_graph(
        [helper.make_node("Identity", ["INPUT0"], ["OUTPUT0"])],
        "identity",
        [helper.make_tensor_value_info("INPUT0", elem_type, shape)],
        [helper.make_tensor_value_info("OUTPUT0", elem_type, shape)],
    )
    save_graph(graph, path)


def add_sub_model(path: Path, *, elem_type: int = TensorProto.INT32) -> None:
    shape: list[int | str] = ["batch", 16]
    graph = helper.make_graph(
        [
            helper.make_node("Add", ["INPUT0", "INPUT1"], ["OUTPUT0"]),
            helper.make_node("Sub", ["INPUT0", "INPUT1"], ["OUTPUT1"]),
        ],
        "add_sub",
        [helper.make_tensor_value_info(n, elem_type, shape) for n in ("INPUT0", "INPUT1")],
        [helper.make_tensor_value_info(n, elem_type, shape) for n in ("OUTPUT0", "OUTPUT1")],
    )
    save_graph(graph, path)


IDENTITY_CONFIG = """
name: "identity"
backend: "onnxruntime"
max_batch_size: 1024
input [ { name: "INPUT0" data_type: TYPE_FP32 dims: [ 16 ] } ]
output [ { name: "OUTPUT0" data_type: TYPE_FP32 dims: [ 16 ] } ]
dynamic_batching { }
"""

ADD_SUB_CONFIG = """
name: "add_sub"
platform: "onnxruntime_onnx"
max_batch_size: 8
input [
  { name: "INPUT0" data_type: TYPE_INT32 dims: [ 16 ] },
  { name: "INPUT1" data_type: TYPE_INT32 dims: [ 16 ] }
]
output [
  { name: "OUTPUT0" data_type: TYPE_INT32 dims: [ 16 ] },
  { name: "OUTPUT1" data_type: TYPE_INT32 dims: [ 16 ] }
]
"""


def write_sample_repository(root: Path) -> Path:
    """A repository with ``identity`` and ``add_sub``, ready for ``sonic serve``."""
    for name, config, build in (
        ("identity", IDENTITY_CONFIG, identity_model),
        ("add_sub", ADD_SUB_CONFIG, add_sub_model),
    ):
        model_dir = root / name
        build(model_dir / "1" / "model.onnx")
        (model_dir / "config.pbtxt").write_text(config.lstrip(), encoding="utf-8")
    return root
