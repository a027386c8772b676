"""The model repository both servers serve in the differential tests: small Python-backend models.

Each model is a ``config.pbtxt`` and a ``model.py`` written against Triton's documented Python API, so
the same folder runs unchanged on real Triton 2.51 and on ``sonic serve``. The models echo their
inputs (outputs depend only on the request), which makes every answer comparable byte for byte.
"""

from __future__ import annotations

import textwrap
from dataclasses import dataclass
from pathlib import Path

PYTHON_MODELS = Path(__file__).parent.parent / "backends" / "python_models"

ECHO_MODEL = """
# Echoes every input INPUT_NAME as output OUT_NAME (the config pairs them), per request.
import json

import triton_python_backend_utils as pb_utils


class TritonPythonModel:
    def initialize(self, args):
        config = json.loads(args["model_config"])
        self.names = [i["name"] for i in config["input"]]

    def execute(self, requests):
        responses = []
        for request in requests:
            outputs = []
            for name in self.names:
                tensor = pb_utils.get_input_tensor_by_name(request, name)
                if tensor is not None:
                    outputs.append(pb_utils.Tensor("OUT_" + name, tensor.as_numpy()))
            responses.append(pb_utils.InferenceResponse(output_tensors=outputs))
        return responses
"""


@dataclass(frozen=True)
class TensorSpec:
    name: str
    datatype: str  # KServe v2 name (FP32, BYTES, ...)
    dims: tuple[int, ...]  # without the batch dimension
    reshape: tuple[int, ...] | None = None  # the model's own dims, where the config reshapes
    optional: bool = False
    ragged: bool = False  # allow_ragged_batch
    label_filename: str = ""  # outputs only


@dataclass(frozen=True)
class ModelSpec:
    name: str
    max_batch_size: int
    inputs: tuple[TensorSpec, ...]
    outputs: tuple[TensorSpec, ...]
    sequence: bool = False  # under the sequence batcher: needs sequence_id and flags
    dynamic_batching: bool | None = None  # None: on where max_batch_size is

    @property
    def required(self) -> tuple[TensorSpec, ...]:
        return tuple(t for t in self.inputs if not t.optional)


def _echo(name: str, max_batch_size: int, inputs: tuple[TensorSpec, ...]) -> ModelSpec:
    return ModelSpec(
        name, max_batch_size, inputs, tuple(TensorSpec("OUT_" + t.name, t.datatype, t.dims) for t in inputs)
    )


# mixed: one input per interesting datatype, variable dims, no batching.
MIXED = _echo(
    "mixed",
    0,
    (
        TensorSpec("F32", "FP32", (-1,)),
        TensorSpec("F16", "FP16", (2,)),
        TensorSpec("FLAG", "BOOL", (-1,)),
        TensorSpec("TEXT", "BYTES", (-1,)),
        TensorSpec("I64", "INT64", (2, -1)),
    ),
)
# batched: max_batch_size and the dynamic batcher.
BATCHED = _echo("batched", 4, (TensorSpec("X", "FP32", (3,)), TensorSpec("N", "INT32", (3,))))
# spare: loaded and unloaded by the model-control cases (the others stay loaded).
SPARE = _echo("spare", 0, (TensorSpec("X", "UINT8", (2,)),))
SEQUENCE = ModelSpec(
    "sequence_sum",
    0,
    (TensorSpec("INPUT", "FP32", (1,)),),
    (TensorSpec("SUM", "FP32", (1,)), TensorSpec("FLAGS", "INT32", (1,)), TensorSpec("CORR", "UINT64", (1,))),
    sequence=True,
)
# text and vector: one input each, for Triton's raw binary HTTP request (its shape comes from the
# config: a batched BYTES [1], a variable-sized dimension).
TEXT = _echo("text", 2, (TensorSpec("T", "BYTES", (1,)),))
VECTOR = _echo("vector", 0, (TensorSpec("V", "INT16", (-1,)),))
MODELS = (MIXED, BATCHED, SPARE, SEQUENCE, TEXT, VECTOR)

CONFIG_TYPES = {"BYTES": "TYPE_STRING"}


def _tensors(tensors: tuple[TensorSpec, ...]) -> str:
    rows = [
        f'{{ name: "{t.name}" data_type: {CONFIG_TYPES.get(t.datatype, "TYPE_" + t.datatype)} '
        f"dims: [ {', '.join(map(str, t.dims))} ]{_features(t)} }}"
        for t in tensors
    ]
    return ",\n  ".join(rows)


def _features(tensor: TensorSpec) -> str:
    text = ""
    if tensor.reshape is not None:
        text += f" reshape: {{ shape: [ {', '.join(map(str, tensor.reshape))} ] }}"
    if tensor.optional:
        text += " optional: true"
    if tensor.ragged:
        text += " allow_ragged_batch: true"
    if tensor.label_filename:
        text += f' label_filename: "{tensor.label_filename}"'
    return text


SEQUENCE_BATCHING = """
sequence_batching {
  # Long enough that no sequence expires between the steps of a case on a busy machine (an expiry
  # races the next step); each case ends its sequence, so none holds the one slot for long.
  max_sequence_idle_microseconds: 2000000
  direct { }
  control_input [
    { name: "START" control [ { kind: CONTROL_SEQUENCE_START int32_false_true: [ 0, 1 ] } ] },
    { name: "END" control [ { kind: CONTROL_SEQUENCE_END int32_false_true: [ 0, 1 ] } ] },
    { name: "READY" control [ { kind: CONTROL_SEQUENCE_READY int32_false_true: [ 0, 1 ] } ] },
    { name: "CORRID" control [ { kind: CONTROL_SEQUENCE_CORRID data_type: TYPE_UINT64 } ] }
  ]
}
"""


def config_text(model: ModelSpec) -> str:
    text = (
        f'name: "{model.name}"\nbackend: "python"\nmax_batch_size: {model.max_batch_size}\n'
        f"input [\n  {_tensors(model.inputs)}\n]\noutput [\n  {_tensors(model.outputs)}\n]\n"
        "instance_group [ { kind: KIND_CPU count: 1 } ]\n"
    )
    if model.sequence:
        return text + SEQUENCE_BATCHING
    dynamic = bool(model.max_batch_size) if model.dynamic_batching is None else model.dynamic_batching
    if dynamic:
        return text + "dynamic_batching { }\n"
    return text


def write_repository(root: Path, models: tuple[ModelSpec, ...] = MODELS) -> Path:
    """The models under ``root`` (version 1 of each); ``root`` is returned."""
    for model in models:
        version = root / model.name / "1"
        version.mkdir(parents=True, exist_ok=True)
        (root / model.name / "config.pbtxt").write_text(config_text(model), encoding="utf-8")
        source = (
            (PYTHON_MODELS / "sequence_sum.py").read_text(encoding="utf-8")
            if model.sequence
            else textwrap.dedent(ECHO_MODEL).lstrip()
        )
        (version / "model.py").write_text(source, encoding="utf-8")
    return root
