"""Model folders sonic refuses in words of its own: configurations Triton 2.51 has no refusal for (or words
the suite cannot hold sonic's to), each broken in one way, loaded by ``test_reach_sonic.py``.

Each :class:`~tests.integration.differential.faulty_models.Faulty` here is a one-input Python echo model
with one fault: a configuration section sonic does not implement, a priority level out of range, an
implicit state whose initial file is missing, of the wrong size or whose dims are variable, a config
that is not UTF-8, a version folder without ``model.py``, a config that names no backend beside no known
model file, an ``auto_complete_config`` that returns something else or an invalid configuration. Two
ONNX models (Triton here has only the Python backend): one configured decoupled, one whose output loses
the batch dimension (a sum over every axis).
"""

from __future__ import annotations

from pathlib import Path

from onnx import TensorProto, helper, save
from tests.integration.differential.faulty_models import ECHO, IO, Faulty

from sonic.models.simple import IR_VERSION, OPSET

STATE = 'state [ { input_name: "S_IN" output_name: "S_OUT" data_type: TYPE_INT32 dims: [ %s ]%s } ]\n'
INITIAL = ' initial_state [ { name: "init" data_type: TYPE_INT32 dims: [ 2 ] data_file: "init.bin" } ]'


def _state(dims: str, initial: str) -> str:
    return f"max_batch_size: 0\n{IO}sequence_batching {{ {STATE % (dims, initial)} }}\n"


def _priority(policy: str) -> str:
    return f"max_batch_size: 4\n{IO}dynamic_batching {{ priority_levels: 2 {policy} }}\n"


COMPLETION_RETURNS_NONE = (
    ECHO
    + """
    @staticmethod
    def auto_complete_config(config):
        return None
"""
)
COMPLETION_INVALID = (
    ECHO
    + """
    @staticmethod
    def auto_complete_config(config):
        config.set_dynamic_batching()
        config._model_config["max_batch_size"] = "many"
        return config
"""
)

SONIC_ONLY = (
    Faulty(
        "secondary_devices",
        f"max_batch_size: 0\n{IO}instance_group [ {{ kind: KIND_CPU secondary_devices [ "
        "{ kind: KIND_NVDLA device_id: 0 } ] } ]\n",
    ),
    Faulty("default_priority", _priority("default_priority_level: 3")),
    Faulty(
        "priority_policy", _priority("default_priority_level: 1 priority_queue_policy { key: 3 value { } }")
    ),
    Faulty("state_file_missing", _state("2", INITIAL)),
    Faulty("state_file_size", _state("2", INITIAL)),  # its init.bin holds 3 bytes
    Faulty("state_variable_dims", _state("-1", "")),
    Faulty("config_not_utf8", ""),  # its config.pbtxt is rewritten with a byte that is no UTF-8
    Faulty("no_model_file", ""),  # version 1 holds no model.py
    Faulty("no_backend", ""),  # no backend or platform; version 1 holds model.bin
    Faulty("completion_returns_none", "", source=COMPLETION_RETURNS_NONE),
    Faulty("completion_invalid", "", source=COMPLETION_INVALID),
)


def write_sonic_only(root: Path) -> None:
    """Each model's folder under ``root``, with the file changes the comments above name."""
    for model in SONIC_ONLY:
        version = root / model.name / "1"
        version.mkdir(parents=True)
        text = model.config_text()
        if model.name == "no_backend":
            text = text.replace('backend: "python"\n', "")
        (root / model.name / "config.pbtxt").write_text(text, encoding="utf-8")
        if model.name == "no_backend":
            (version / "model.bin").write_bytes(b"\0")
        elif model.name != "no_model_file":
            (version / "model.py").write_text(model.source, encoding="utf-8")
    (root / "state_file_size" / "initial_state").mkdir()
    (root / "state_file_size" / "initial_state" / "init.bin").write_bytes(b"\1\2\3")
    not_utf8 = root / "config_not_utf8" / "config.pbtxt"
    not_utf8.write_bytes(not_utf8.read_bytes() + b"# \xff\n")


ONNX_DECOUPLED = "onnx_decoupled"
ONNX_SCALAR = "onnx_scalar"  # loaded at the start of test_reach_sonic's ``own``


def _onnx(root: Path, name: str, node: str, config: str) -> None:
    """An ONNX model ``name``: X (FP32) through ``node`` to OUT_X (its shape left to the runtime)."""
    made = helper.make_node(node, ["X"], ["OUT_X"])
    if node == "ReduceSum":  # every axis, none kept: a scalar
        made.attribute.append(helper.make_attribute("keepdims", 0))
    graph = helper.make_graph(
        [made],
        name,
        [helper.make_tensor_value_info("X", TensorProto.FLOAT, None)],
        [helper.make_tensor_value_info("OUT_X", TensorProto.FLOAT, None)],
    )
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", OPSET)], ir_version=IR_VERSION)
    (root / name / "1").mkdir(parents=True)
    save(model, root / name / "1" / "model.onnx")
    text = f'name: "{name}"\nbackend: "onnxruntime"\n{config}'
    (root / name / "config.pbtxt").write_text(text, encoding="utf-8")


def write_onnx(root: Path) -> None:
    """The two ONNX models under ``root``."""
    _onnx(
        root,
        ONNX_DECOUPLED,
        "Identity",
        f"max_batch_size: 0\n{IO}model_transaction_policy {{ decoupled: true }}\n",
    )
    _onnx(root, ONNX_SCALAR, "ReduceSum", f"max_batch_size: 2\n{IO}")
