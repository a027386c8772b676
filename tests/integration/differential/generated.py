"""Model repositories generated from a seed: configuration features, and a model that returns what it is told.

A few repositories per session (one per seed of :data:`SEEDS`, both servers started once on each), many
requests each. :func:`generated_models` draws echo models with the configuration features Triton's
clients meet: optional inputs, ``reshape`` (fixed dims, and ``[ ]`` for a ``[1]`` of a batched model),
``-1`` dims, ``label_filename``, ``allow_ragged_batch``, the dynamic batcher on or off, ``max_batch_size``
0 or more. Every repository also holds :data:`RETURNS`, a Python model whose ``execute()`` returns what
the request's ``returns`` parameter asks for (JSON): outputs as numpy arrays of any dtype and byte order,
object arrays of ints, floats, str or bytes, Python lists, wrong shapes and wrong types; the error Triton
gives for what its Python backend cannot send is compared with sonic's.
"""

from __future__ import annotations

import json
import os
import random
import textwrap
from dataclasses import replace
from pathlib import Path

from hypothesis import strategies as st
from tests.integration.differential.repository import ModelSpec, TensorSpec, config_text, write_repository
from tests.integration.differential.requests import InferCase, ParamValue, TensorCase

SEEDS_ENV = "SONIC_DIFFERENTIAL_REPOSITORIES"
CI_SEEDS = (108,)  # its three models have every feature above (and BYTES inputs)
LABELS = "labels.txt"
DATATYPES = ("FP32", "INT32", "INT64", "UINT8", "BOOL", "BYTES", "FP64", "INT8")


def seeds() -> tuple[int, ...]:
    """CI: a fixed seed; ``SONIC_DIFFERENTIAL_REPOSITORIES=N``: N fresh ones."""
    count = int(os.environ.get(SEEDS_ENV, "0"))
    if not count:
        return CI_SEEDS
    return tuple(random.randrange(1 << 30) for _ in range(count))


def _tensor(rng: random.Random, name: str, batched: bool, dynamic: bool) -> TensorSpec:
    datatype = rng.choice(DATATYPES)
    shape = rng.choice(
        ["fixed", "variable", "two", "reshape", "scalar"]
        if batched
        else ["fixed", "variable", "two", "reshape"]
    )
    if shape == "fixed":
        spec = TensorSpec(name, datatype, (rng.randint(1, 3),))
    elif shape == "variable":
        spec = TensorSpec(name, datatype, (-1,))
    elif shape == "two":
        spec = TensorSpec(name, datatype, (rng.randint(1, 2), -1))
    elif shape == "reshape":
        rows, cols = rng.randint(1, 2), rng.randint(2, 3)
        spec = rng.choice(
            [
                TensorSpec(name, datatype, (rows * cols,), reshape=(rows, cols)),
                TensorSpec(name, datatype, (rows, cols), reshape=(rows * cols,)),
            ]
        )
    else:  # a [1] the model sees without the dimension
        spec = TensorSpec(name, datatype, (1,), reshape=())
    return replace(
        spec,
        optional=rng.random() < 0.3,
        ragged=dynamic and spec.dims == (-1,) and rng.random() < 0.8,
    )


def generated_model(rng: random.Random, name: str) -> ModelSpec:
    batch = rng.choice([0, 0, 2, 4])
    dynamic = bool(batch) and rng.random() < 0.6
    inputs = tuple(_tensor(rng, f"I{i}", bool(batch), dynamic) for i in range(rng.randint(1, 3)))
    if all(t.optional for t in inputs):
        inputs = (replace(inputs[0], optional=False), *inputs[1:])
    outputs = tuple(
        TensorSpec(
            "OUT_" + t.name,
            t.datatype,
            t.dims,
            reshape=t.reshape,
            label_filename=LABELS if index == 0 and rng.random() < 0.5 else "",
        )
        for index, t in enumerate(inputs)
    )
    return ModelSpec(name, batch, inputs, outputs, dynamic_batching=dynamic)


def generated_models(seed: int) -> tuple[ModelSpec, ...]:
    rng = random.Random(seed)
    return tuple(generated_model(rng, f"gen{seed}_{index}") for index in range(3))


# --- the model that returns what it is told ---------------------------------------------------------------

RETURNS_SOURCE = """
# Returns what the request's "returns" parameter (JSON) asks for: a list of outputs, each
# {"name", "kind": numpy dtype string, "object" or "list", "values": [...], "shape": [...]}; a value
# {"bytes": "<hex>"} is bytes.
import json

import numpy as np
import triton_python_backend_utils as pb_utils


def _value(value):
    return bytes.fromhex(value["bytes"]) if isinstance(value, dict) else value


def _data(item):
    values = [_value(v) for v in item["values"]]
    if item["kind"] == "list":
        return values
    if item["kind"] == "object":
        data = np.empty(len(values), dtype=np.object_)
        data[:] = values
    else:
        data = np.array(values, dtype=np.dtype(item["kind"]))
    return data.reshape(item["shape"]) if "shape" in item else data


class TritonPythonModel:
    def execute(self, requests):
        responses = []
        for request in requests:
            spec = json.loads(json.loads(request.parameters() or "{}").get("returns", "[]"))
            tensors = [pb_utils.Tensor(item["name"], _data(item)) for item in spec]
            responses.append(pb_utils.InferenceResponse(output_tensors=tensors))
        return responses
"""

RETURNS = ModelSpec(
    "returns",
    0,
    (TensorSpec("X", "FP32", (-1,)),),
    (
        TensorSpec("F32", "FP32", (-1,)),
        TensorSpec("F16", "FP16", (-1,)),
        TensorSpec("F64", "FP64", (-1,)),
        TensorSpec("I32", "INT32", (-1,)),
        TensorSpec("I64", "INT64", (-1,)),
        TensorSpec("U16", "UINT16", (-1,)),
        TensorSpec("B", "BOOL", (-1,)),
        TensorSpec("S", "BYTES", (-1,)),
        TensorSpec("M", "FP32", (2, -1)),
    ),
)


def write_generated(root: Path, models: tuple[ModelSpec, ...]) -> Path:
    """``models`` (echo models) and :data:`RETURNS` under ``root``, with the labels file where one is named."""
    write_repository(root, models)
    for model in models:
        if any(t.label_filename for t in model.outputs):
            labels = "\n".join(f"label{i}" for i in range(8)) + "\n"
            (root / model.name / LABELS).write_text(labels, encoding="utf-8")
    (root / RETURNS.name / "1").mkdir(parents=True, exist_ok=True)
    (root / RETURNS.name / "config.pbtxt").write_text(config_text(RETURNS), encoding="utf-8")
    (root / RETURNS.name / "1" / "model.py").write_text(
        textwrap.dedent(RETURNS_SOURCE).lstrip(), encoding="utf-8"
    )
    return root


# What the model is told to return: for each declared output mostly its own dtype (either byte order),
# else an object array (of ints, floats, str or bytes), a Python list, another dtype or a wrong shape.
OWN_KINDS = {
    "F32": ("<f4", ">f4"),
    "F16": ("<f2", ">f2"),
    "F64": ("<f8", ">f8"),
    "I32": ("<i4", ">i4"),
    "I64": ("<i8", ">i8"),
    "U16": ("<u2", ">u2"),
    "B": ("?",),
    "S": ("object",),
    "M": ("<f4",),
}
OTHER_KINDS = ("<f4", "<i8", "<u1", "?", "<f8", ">i2", "<U2", "|S2")
ELEMENTS = ("int", "float", "str", "bytes")


def _element(kind: str, element: str, index: int) -> object:
    if kind == "?":
        return index % 2 == 0
    if kind in {"<U2", "|S2"} or element == "str":
        return f"v{index}"
    if element == "bytes":
        return {"bytes": bytes([index, 0xFF]).hex()}
    if element == "float" or kind[1:2] == "f":
        return index + 0.5
    return index * 3 - 1 if kind[1:2] == "i" else index * 3


@st.composite
def returns_items(draw: st.DrawFn) -> dict[str, object]:
    name = draw(st.sampled_from([t.name for t in RETURNS.outputs] * 6 + ["NOPE"]))
    how = draw(st.sampled_from(["own"] * 5 + ["object", "list", "other", "shape"]))
    kind = draw(st.sampled_from(OWN_KINDS.get(name, ("<f4",))))
    if how == "object" or how == "list":
        kind = how
    elif how == "other":
        kind = draw(st.sampled_from(OTHER_KINDS))
    element = draw(st.sampled_from(ELEMENTS))
    count = draw(st.integers(0, 3))
    rows = 2 if name == "M" else 1
    values = [_element(kind, element, i) for i in range(count * rows)]
    item: dict[str, object] = {"name": name, "kind": kind, "values": values}
    if kind != "list":
        item["shape"] = [rows, count] if name == "M" else [count]
        if how == "shape":
            item["shape"] = draw(st.sampled_from([[count * rows, 1], [1, count * rows], [count * rows]]))
    return item


@st.composite
def returns_cases(draw: st.DrawFn) -> InferCase:
    """A request to :data:`RETURNS` whose ``returns`` parameter asks for one or two outputs."""
    items = draw(st.lists(returns_items(), min_size=1, max_size=2, unique_by=lambda i: i["name"]))
    # Mostly the outputs it returns by name: asked for all, a model that returns fewer is refused by
    # sonic (row missing-outputs), whatever else is in the answer.
    outputs = draw(st.sampled_from([None, *[tuple(str(i["name"]) for i in items)] * 4]))
    tensor = TensorCase("X", "FP32", (1,), "raw", 1)
    parameters: tuple[tuple[str, ParamValue], ...] = (("returns", json.dumps(items)),)
    return InferCase(RETURNS.name, "", "", (tensor,), outputs, parameters, spec=RETURNS)
