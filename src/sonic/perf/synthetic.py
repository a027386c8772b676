"""A model whose cost is a constant per execution, whatever the batch: larger batches always win.

``INPUT0`` FP32 [batch, 16] -> ``OUTPUT0`` = INPUT0 + c, where c comes from ``depth`` products of
a ``width`` x ``width`` matrix seeded from the sum of the input. The chain depends on the input,
so onnxruntime cannot fold it into a constant, and its size does not depend on the batch. It is
the known answer ``sonic analyze`` must find (dynamic batching with the largest batch), and a
server workload with a known per-execution time for the load generator and the simulation.
"""

from __future__ import annotations

from pathlib import Path

import numpy as np
from onnx import TensorProto, helper, numpy_helper

from sonic.models.simple import save_graph

FIXED_COST_CONFIG = """
name: "fixed_cost"
backend: "onnxruntime"
max_batch_size: 64
input [ { name: "INPUT0" data_type: TYPE_FP32 dims: [ 16 ] } ]
output [ { name: "OUTPUT0" data_type: TYPE_FP32 dims: [ 16 ] } ]
# One instance: one execution at a time is the known cost model (onnxruntime CPU groups default to two).
instance_group [ { count: 1 kind: KIND_CPU } ]
"""


def fixed_cost_model(path: Path, *, width: int = 256, depth: int = 12) -> None:
    rng = np.random.default_rng(11)
    weight = (rng.standard_normal((width, width)) / np.sqrt(width)).astype(np.float32)
    initializers = [numpy_helper.from_array(weight, "w")]
    nodes = [
        helper.make_node("ReduceSum", ["INPUT0"], ["total"], keepdims=0),
        helper.make_node("Mul", ["w", "total"], ["x0"]),
    ]
    for layer in range(depth):
        nodes.append(helper.make_node("MatMul", [f"x{layer}", "w"], [f"m{layer}"]))
        nodes.append(helper.make_node("Tanh", [f"m{layer}"], [f"x{layer + 1}"]))
    nodes.append(helper.make_node("ReduceMean", [f"x{depth}"], ["c"], keepdims=0))
    nodes.append(helper.make_node("Add", ["INPUT0", "c"], ["OUTPUT0"]))
    shape: list[int | str] = ["batch", 16]
    graph = helper.make_graph(
        nodes,
        "fixed_cost",
        [helper.make_tensor_value_info("INPUT0", TensorProto.FLOAT, shape)],
        [helper.make_tensor_value_info("OUTPUT0", TensorProto.FLOAT, shape)],
        initializer=initializers,
    )
    save_graph(graph, path)


def write_fixed_cost_repository(root: Path, *, config: str = FIXED_COST_CONFIG, depth: int = 12) -> Path:
    """``root/fixed_cost`` with version 1 and ``config``; returns ``root``."""
    model_dir = root / "fixed_cost"
    fixed_cost_model(model_dir / "1" / "model.onnx", depth=depth)
    (model_dir / "config.pbtxt").write_text(config.lstrip(), encoding="utf-8")
    return root
