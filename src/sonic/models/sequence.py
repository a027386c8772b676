"""A stateful model for the sequence batcher: a running sum per sequence, in implicit state.

``accumulator``: each request sends ``INPUT`` FP32 ``[1, 1]``; the model adds it to its sequence's
state (``STATE_IN``, zero at START) and answers ``OUTPUT`` (the running sum, also kept as
``STATE_OUT``), ``CORR`` (the CORRID control it saw) and ``FLAGS`` (START + 2 END + 4 READY).
Built with ``onnx.helper``; used by tests and benchmarks.
"""

from __future__ import annotations

from pathlib import Path

import numpy as np
from onnx import TensorProto, helper, numpy_helper

from sonic.models.simple import save_graph


def accumulator_config(name: str, strategy: str = "direct { }", corrid_type: str = "TYPE_INT64") -> str:
    """The config of :func:`accumulator_model` with a sequence ``strategy`` section."""
    return f"""
name: "{name}"
backend: "onnxruntime"
max_batch_size: 4
input [ {{ name: "INPUT" data_type: TYPE_FP32 dims: [ 1 ] }} ]
output [
  {{ name: "OUTPUT" data_type: TYPE_FP32 dims: [ 1 ] }},
  {{ name: "CORR" data_type: {corrid_type.replace("TYPE_STRING", "TYPE_INT64")} dims: [ 1 ] }},
  {{ name: "FLAGS" data_type: TYPE_INT32 dims: [ 1 ] }}
]
sequence_batching {{
  max_sequence_idle_microseconds: 5000000
  {strategy}
  control_input [
    {{ name: "START" control [ {{ kind: CONTROL_SEQUENCE_START int32_false_true: [ 0, 1 ] }} ] }},
    {{ name: "END" control [ {{ kind: CONTROL_SEQUENCE_END int32_false_true: [ 0, 1 ] }} ] }},
    {{ name: "READY" control [ {{ kind: CONTROL_SEQUENCE_READY int32_false_true: [ 0, 1 ] }} ] }},
    {{ name: "CORRID" control [ {{ kind: CONTROL_SEQUENCE_CORRID data_type: {corrid_type} }} ] }}
  ]
  state [ {{ input_name: "STATE_IN" output_name: "STATE_OUT" data_type: TYPE_FP32 dims: [ 1 ] }} ]
}}
"""


def accumulator_model(path: Path, *, string_ids: bool = False) -> None:
    """``OUTPUT = STATE_IN + INPUT``; with ``string_ids`` the CORRID input is BYTES and ``CORR`` is 0."""
    batch: list[int | str] = ["batch", 1]
    constants = [
        numpy_helper.from_array(np.array(2, dtype=np.int32), "two"),
        numpy_helper.from_array(np.array(4, dtype=np.int32), "four"),
    ]
    nodes = [
        helper.make_node("Add", ["STATE_IN", "INPUT"], ["OUTPUT"]),
        helper.make_node("Identity", ["OUTPUT"], ["STATE_OUT"]),
        helper.make_node("Mul", ["END", "two"], ["end2"]),
        helper.make_node("Mul", ["READY", "four"], ["ready4"]),
        helper.make_node("Add", ["START", "end2"], ["start_end"]),
        helper.make_node("Add", ["start_end", "ready4"], ["FLAGS"]),
    ]
    if string_ids:
        constants.append(numpy_helper.from_array(np.zeros((1, 1), dtype=np.int64), "zero"))
        nodes.append(helper.make_node("Shape", ["CORRID"], ["corr_shape"]))
        nodes.append(helper.make_node("Expand", ["zero", "corr_shape"], ["CORR"]))
    else:
        nodes.append(helper.make_node("Identity", ["CORRID"], ["CORR"]))
    corr_type = TensorProto.STRING if string_ids else TensorProto.INT64
    graph = helper.make_graph(
        nodes,
        "accumulator",
        [
            helper.make_tensor_value_info("INPUT", TensorProto.FLOAT, batch),
            helper.make_tensor_value_info("STATE_IN", TensorProto.FLOAT, batch),
            helper.make_tensor_value_info("START", TensorProto.INT32, batch),
            helper.make_tensor_value_info("END", TensorProto.INT32, batch),
            helper.make_tensor_value_info("READY", TensorProto.INT32, batch),
            helper.make_tensor_value_info("CORRID", corr_type, batch),
        ],
        [
            helper.make_tensor_value_info("OUTPUT", TensorProto.FLOAT, batch),
            helper.make_tensor_value_info("STATE_OUT", TensorProto.FLOAT, batch),
            helper.make_tensor_value_info("CORR", TensorProto.INT64, batch),
            helper.make_tensor_value_info("FLAGS", TensorProto.INT32, batch),
        ],
        initializer=constants,
    )
    save_graph(graph, path)


def write_accumulator(
    root: Path, name: str, strategy: str = "direct { }", *, string_ids: bool = False
) -> Path:
    """The model folder ``root/name`` (version 1)."""
    accumulator_model(root / name / "1" / "model.onnx", string_ids=string_ids)
    corrid = "TYPE_STRING" if string_ids else "TYPE_INT64"
    (root / name / "config.pbtxt").write_text(accumulator_config(name, strategy, corrid))
    return root / name
