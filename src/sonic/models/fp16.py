"""An ONNX model's FP16 conversion with the same interface: FP32 in and out, FP16 inside.

What a site does to halve a model's memory and use a GPU's half-precision units: weights and
activations in FP16, a ``Cast`` after each FP32 graph input and before each FP32 graph output, so the
config (and the clients) stay as they were. ``sonic validate`` measures what the conversion changed
(docs/perf.md). Handled: FP32 initializers, ``Constant`` nodes and ``Cast`` targets; every
intermediate type is left to onnxruntime's inference.
"""

from __future__ import annotations

from pathlib import Path

import numpy as np
import onnx
from onnx import TensorProto, helper, numpy_helper


def _half(tensor: TensorProto) -> TensorProto:
    if tensor.data_type != TensorProto.FLOAT:
        return tensor
    return numpy_helper.from_array(numpy_helper.to_array(tensor).astype(np.float16), tensor.name)


def convert_to_fp16(model: onnx.ModelProto) -> onnx.ModelProto:
    """A copy of ``model`` computing in FP16, its FP32 inputs and outputs kept FP32 at the boundary."""
    converted = onnx.ModelProto()
    converted.CopyFrom(model)
    graph = converted.graph
    for index, initializer in enumerate(graph.initializer):
        graph.initializer[index].CopyFrom(_half(initializer))
    for node in graph.node:
        for attribute in node.attribute:
            if node.op_type == "Constant" and attribute.type == onnx.AttributeProto.TENSOR:
                attribute.t.CopyFrom(_half(attribute.t))
            if node.op_type == "Cast" and attribute.name == "to" and attribute.i == TensorProto.FLOAT:
                attribute.i = TensorProto.FLOAT16
    casts_in, casts_out = [], []
    for value in graph.input:
        if value.type.tensor_type.elem_type == TensorProto.FLOAT:
            half = f"{value.name}__fp16"
            for node in graph.node:
                node.input[:] = [half if name == value.name else name for name in node.input]
            casts_in.append(helper.make_node("Cast", [value.name], [half], to=TensorProto.FLOAT16))
    for value in graph.output:
        if value.type.tensor_type.elem_type == TensorProto.FLOAT:
            half = f"{value.name}__fp16"
            for node in graph.node:
                node.output[:] = [half if name == value.name else name for name in node.output]
                node.input[:] = [half if name == value.name else name for name in node.input]
            casts_out.append(helper.make_node("Cast", [half], [value.name], to=TensorProto.FLOAT))
    nodes = [*casts_in, *graph.node, *casts_out]
    del graph.node[:]
    graph.node.extend(nodes)
    del graph.value_info[:]  # FP32 intermediate types no longer hold; onnxruntime infers them
    onnx.checker.check_model(converted)
    return converted


def convert_file(source: Path, target: Path) -> Path:
    """Convert the model at ``source`` and save it at ``target``."""
    target.parent.mkdir(parents=True, exist_ok=True)
    onnx.save(convert_to_fp16(onnx.load(str(source))), str(target))
    return target
