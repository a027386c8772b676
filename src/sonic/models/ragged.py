"""A ragged-batching model as Triton's docs describe one: variable-length requests, no padding.

``ragged_sum``: each request sends ``INPUT`` FP32 ``[1, n]`` with its own ``n``. The model sees the
batch's elements concatenated (``INPUT`` ``[sum n]``) and ``OFFSETS`` (the
``BATCH_ACCUMULATED_ELEMENT_COUNT_WITH_ZERO`` batch input, ``[requests + 1]``), and answers per
request ``SUM`` (its elements' sum, ``[1, 1]``), ``COUNT`` (its ``n`` from ``BATCH_ELEMENT_COUNT``)
and ``DOUBLED`` (its elements times two, scattered back with ``BATCH_SCATTER_WITH_INPUT_SHAPE``).
Built with ``onnx.helper``; used by tests and benchmarks.
"""

from __future__ import annotations

from pathlib import Path

import numpy as np
from onnx import TensorProto, helper, numpy_helper

from sonic.models.simple import save_graph

RAGGED_SUM_CONFIG = """
backend: "onnxruntime"
max_batch_size: 64
input [ { name: "INPUT" data_type: TYPE_FP32 dims: [ -1 ] allow_ragged_batch: true } ]
batch_input [
  { kind: BATCH_ACCUMULATED_ELEMENT_COUNT_WITH_ZERO target_name: "OFFSETS" data_type: TYPE_INT32
    source_input: "INPUT" },
  { kind: BATCH_ELEMENT_COUNT target_name: "COUNTS" data_type: TYPE_FP32 source_input: "INPUT" }
]
output [
  { name: "SUM" data_type: TYPE_FP32 dims: [ 1 ] },
  { name: "COUNT" data_type: TYPE_FP32 dims: [ 1 ] },
  { name: "DOUBLED" data_type: TYPE_FP32 dims: [ -1 ] }
]
batch_output [ { target_name: "DOUBLED" kind: BATCH_SCATTER_WITH_INPUT_SHAPE source_input: "INPUT" } ]
"""


def ragged_sum_model(path: Path) -> None:
    """Per-request sums of the concatenated ``INPUT`` by ``OFFSETS`` (cumulative sum, gather, difference)."""
    constants = [
        numpy_helper.from_array(np.array([0.0], dtype=np.float32), "zero"),
        numpy_helper.from_array(np.array(0, dtype=np.int64), "axis0"),
        numpy_helper.from_array(np.array([1], dtype=np.int64), "one"),
        numpy_helper.from_array(np.array([0], dtype=np.int64), "start"),
        numpy_helper.from_array(np.array([-1], dtype=np.int64), "minus_one"),
        numpy_helper.from_array(np.array([np.iinfo(np.int64).max], dtype=np.int64), "end"),
        numpy_helper.from_array(np.array(2.0, dtype=np.float32), "two"),
    ]
    nodes = [
        helper.make_node("CumSum", ["INPUT", "axis0"], ["running"]),
        helper.make_node("Concat", ["zero", "running"], ["running0"], axis=0),
        helper.make_node("Slice", ["OFFSETS", "one", "end"], ["ends"]),
        helper.make_node("Slice", ["OFFSETS", "start", "minus_one"], ["starts"]),
        helper.make_node("Gather", ["running0", "ends"], ["at_end"]),
        helper.make_node("Gather", ["running0", "starts"], ["at_start"]),
        helper.make_node("Sub", ["at_end", "at_start"], ["sums"]),
        helper.make_node("Unsqueeze", ["sums", "one"], ["SUM"]),
        helper.make_node("Unsqueeze", ["COUNTS", "one"], ["COUNT"]),
        helper.make_node("Mul", ["INPUT", "two"], ["DOUBLED"]),
    ]
    graph = helper.make_graph(
        nodes,
        "ragged_sum",
        [
            helper.make_tensor_value_info("INPUT", TensorProto.FLOAT, ["elements"]),
            helper.make_tensor_value_info("OFFSETS", TensorProto.INT32, ["offsets"]),
            helper.make_tensor_value_info("COUNTS", TensorProto.FLOAT, ["requests"]),
        ],
        [
            helper.make_tensor_value_info("SUM", TensorProto.FLOAT, ["requests", 1]),
            helper.make_tensor_value_info("COUNT", TensorProto.FLOAT, ["requests", 1]),
            helper.make_tensor_value_info("DOUBLED", TensorProto.FLOAT, ["elements"]),
        ],
        initializer=constants,
    )
    save_graph(graph, path)


def write_ragged_sum(root: Path, name: str = "ragged_sum", extra_config: str = "") -> Path:
    """The model folder ``root/name`` (version 1) with :data:`RAGGED_SUM_CONFIG` plus ``extra_config``."""
    ragged_sum_model(root / name / "1" / "model.onnx")
    (root / name / "config.pbtxt").write_text(f'name: "{name}"\n{RAGGED_SUM_CONFIG}{extra_config}')
    return root / name
