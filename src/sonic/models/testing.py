"""ONNX models that exercise the protocol corners: variable dims, BYTES, no batching, slow execution.

Built with ``onnx.helper`` in milliseconds; used by tests and benchmarks.
"""

from __future__ import annotations

from pathlib import Path

import numpy as np
from onnx import TensorProto, helper, numpy_helper

from sonic.models.simple import save_graph


def variable_dims_model(path: Path) -> None:
    """``INPUT0`` FP32 [batch, -1] -> ``OUTPUT0`` = 2 * INPUT0."""
    shape: list[int | str] = ["batch", "n"]
    two = numpy_helper.from_array(np.array(2.0, dtype=np.float32), "two")
    graph = helper.make_graph(
        [helper.make_node("Mul", ["INPUT0", "two"], ["OUTPUT0"])],
        "variable_dims",
        [helper.make_tensor_value_info("INPUT0", TensorProto.FLOAT, shape)],
        [helper.make_tensor_value_info("OUTPUT0", TensorProto.FLOAT, shape)],
        initializer=[two],
    )
    save_graph(graph, path)


def string_identity_model(path: Path) -> None:
    """``INPUT0`` BYTES [batch, 2] -> ``OUTPUT0`` (same strings)."""
    shape: list[int | str] = ["batch", 2]
    graph = helper.make_graph(
        [helper.make_node("Identity", ["INPUT0"], ["OUTPUT0"])],
        "string_identity",
        [helper.make_tensor_value_info("INPUT0", TensorProto.STRING, shape)],
        [helper.make_tensor_value_info("OUTPUT0", TensorProto.STRING, shape)],
    )
    save_graph(graph, path)


def fixed_shape_model(path: Path) -> None:
    """No batch dimension: ``INPUT0`` FP64 [3, 4] -> ``OUTPUT0`` = sum over axis 1, [3]."""
    graph = helper.make_graph(
        [helper.make_node("ReduceSum", ["INPUT0", "axes"], ["OUTPUT0"], keepdims=0)],
        "fixed_shape",
        [helper.make_tensor_value_info("INPUT0", TensorProto.DOUBLE, [3, 4])],
        [helper.make_tensor_value_info("OUTPUT0", TensorProto.DOUBLE, [3])],
        initializer=[numpy_helper.from_array(np.array([1], dtype=np.int64), "axes")],
    )
    save_graph(graph, path)


def slow_model(path: Path, *, width: int = 512, depth: int = 40) -> None:
    """``INPUT0`` FP32 [batch, width] through ``depth`` tanh(x @ W) layers: tens of ms per batch of 64."""
    rng = np.random.default_rng(7)
    weight = numpy_helper.from_array(
        (rng.standard_normal((width, width)) / np.sqrt(width)).astype(np.float32), "w"
    )
    nodes = []
    current = "INPUT0"
    for layer in range(depth):
        product, activated = f"mm{layer}", ("OUTPUT0" if layer == depth - 1 else f"act{layer}")
        nodes.append(helper.make_node("MatMul", [current, "w"], [product]))
        nodes.append(helper.make_node("Tanh", [product], [activated]))
        current = activated
    shape: list[int | str] = ["batch", width]
    graph = helper.make_graph(
        nodes,
        "slow",
        [helper.make_tensor_value_info("INPUT0", TensorProto.FLOAT, shape)],
        [helper.make_tensor_value_info("OUTPUT0", TensorProto.FLOAT, shape)],
        initializer=[weight],
    )
    save_graph(graph, path)


CLASSIFIER_CONFIG = """backend: "onnxruntime"
max_batch_size: 64
input [ {{ name: "INPUT0" data_type: TYPE_FP32 dims: [ {features} ] }} ]
output [
  {{ name: "PROBABILITIES" data_type: TYPE_FP32 dims: [ {classes} ] }},
  {{ name: "LABEL" data_type: TYPE_INT64 dims: [ 1 ] }}
]
"""


def classifier_model(
    path: Path, *, features: int = 32, hidden: int = 64, classes: int = 5, perturbation: float = 0.0
) -> None:
    """A small classifier: ``INPUT0`` FP32 [batch, features] through tanh(x @ W1) @ W2 to ``PROBABILITIES``
    (softmax, [batch, classes]) and ``LABEL`` (arg-max, INT64 [batch, 1]). Seeded weights; ``perturbation``
    is added to one weight of the last layer: the same model with a deliberate defect (``sonic validate``'s
    tests and docs/perf.md catch it)."""
    rng = np.random.default_rng(11)
    first = (rng.standard_normal((features, hidden)) / np.sqrt(features)).astype(np.float32)
    second = (3 * rng.standard_normal((hidden, classes)) / np.sqrt(hidden)).astype(np.float32)
    second[0, 0] += perturbation
    nodes = [
        helper.make_node("MatMul", ["INPUT0", "w1"], ["h"]),
        helper.make_node("Tanh", ["h"], ["a"]),
        helper.make_node("MatMul", ["a", "w2"], ["logits"]),
        helper.make_node("Softmax", ["logits"], ["PROBABILITIES"], axis=-1),
        helper.make_node("ArgMax", ["logits"], ["LABEL"], axis=-1, keepdims=1),
    ]
    graph = helper.make_graph(
        nodes,
        "classifier",
        [helper.make_tensor_value_info("INPUT0", TensorProto.FLOAT, ["batch", features])],
        [
            helper.make_tensor_value_info("PROBABILITIES", TensorProto.FLOAT, ["batch", classes]),
            helper.make_tensor_value_info("LABEL", TensorProto.INT64, ["batch", 1]),
        ],
        initializer=[numpy_helper.from_array(first, "w1"), numpy_helper.from_array(second, "w2")],
    )
    save_graph(graph, path)
