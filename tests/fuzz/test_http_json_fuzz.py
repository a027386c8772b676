"""Fuzzing the HTTP/REST inference codec: the KServe v2 JSON body, Triton's binary tensor extension and
``Inference-Header-Content-Length`` (0: Triton's raw binary request, shapes deduced from any config).

Requests are built valid (JSON ``data`` nested or flat, binary inputs with their sizes, shared-memory
and request parameters, outputs), then mutated twice over: in the JSON tree (a value swapped for any
other JSON value, so types and ranges are wrong in places a decoder reads) and in the bytes.
"""

from __future__ import annotations

import json
from typing import Any

import numpy as np
from hypothesis import given
from hypothesis import strategies as st

from sonic.protocol import dtypes
from sonic.protocol.errors import SonicError
from sonic.protocol.http_json import decode_infer_request, parse_json
from sonic.protocol.http_raw import decode_raw_request
from sonic.protocol.model_config import ModelSpec, TensorSpec
from sonic.testing.fuzz import mutated, one_in, run_bounded

MAX_BODY_BYTES = 4096
PEAK_BYTES = 64 * MAX_BODY_BYTES + (256 << 10)

json_scalars = st.one_of(
    st.none(),
    st.booleans(),
    st.integers(-(2**70), 2**70),
    st.floats(allow_nan=False, allow_infinity=False),
    st.text(max_size=8),
)
# Values at and past the edges of the datatypes' ranges, and of the other types JSON has.
EDGE_VALUES = st.sampled_from([2**31, 2**64, -1, 256, 1e300, 2**1000, -(2**63) - 1, 0.5, "1", None, True])
json_values = st.recursive(
    json_scalars,
    lambda inner: st.lists(inner, max_size=3) | st.dictionaries(st.text(max_size=6), inner, max_size=3),
    max_leaves=8,
)
names = st.text(max_size=8)
parameter_keys = st.sampled_from(
    [
        "binary_data_size",
        "binary_data",
        "binary_data_output",
        "shared_memory_region",
        "shared_memory_byte_size",
        "shared_memory_offset",
        "classification",
        "priority",
        "timeout",
        "sequence_id",
        "custom",
    ]
)


def _values(draw: st.DrawFn, datatype: dtypes.Datatype, count: int) -> list[Any]:
    """``count`` values of the datatype; one time in three any JSON scalars (out of range, wrong type)."""
    if draw(one_in(3)):
        return draw(st.lists(EDGE_VALUES | json_scalars, min_size=count, max_size=count))
    if datatype.name == "BYTES":
        return draw(st.lists(st.text(max_size=6), min_size=count, max_size=count))
    if datatype.name == "BOOL":
        return draw(st.lists(st.booleans(), min_size=count, max_size=count))
    if datatype.numpy.kind == "f":
        return draw(st.lists(st.floats(-1e6, 1e6), min_size=count, max_size=count))
    info = np.iinfo(datatype.numpy.name)
    return draw(st.lists(st.integers(int(info.min), int(info.max)), min_size=count, max_size=count))


@st.composite
def infer_bodies(draw: st.DrawFn) -> tuple[bytes, int | None]:
    """A valid request body (JSON and binary tail) and its header length, before any mutation."""
    inputs = []
    tail = b""
    for _ in range(draw(st.integers(0, 3))):
        datatype = dtypes.BY_NAME[draw(st.sampled_from(list(dtypes.BY_NAME)))]
        shape = draw(st.lists(st.integers(0, 3), max_size=3))
        count = dtypes.element_count(shape)
        item: dict[str, Any] = {"name": draw(names), "datatype": datatype.name, "shape": shape}
        how = draw(st.sampled_from(["flat", "nested", "binary", "shm"]))
        if how == "binary" or datatype.name in {"FP16", "BF16"}:
            size = count * (datatype.numpy.itemsize if datatype.name != "BYTES" else 6)
            data = draw(st.binary(min_size=size, max_size=size))
            item["parameters"] = {"binary_data_size": len(data)}
            tail += data
        elif how == "shm":
            item["parameters"] = {
                "shared_memory_region": draw(names),
                "shared_memory_byte_size": draw(st.integers(-1, 2**64)),
            }
        else:
            values = _values(draw, datatype, count)
            if how == "nested" and shape and count:
                values = np.array(values, dtype=object).reshape(shape).tolist()
            item["data"] = values
        inputs.append(item)
    body: dict[str, Any] = {"inputs": inputs}
    if draw(st.booleans()):
        body["id"] = draw(names)
    if draw(st.booleans()):
        body["parameters"] = draw(st.dictionaries(parameter_keys, json_scalars, max_size=3))
    if draw(st.booleans()):
        body["outputs"] = [
            {
                "name": draw(names),
                "parameters": draw(st.dictionaries(parameter_keys, json_scalars, max_size=2)),
            }
            for _ in range(draw(st.integers(0, 2)))
        ]
    head = json.dumps(_mutate_tree(draw, body)).encode()
    return head + tail, (len(head) if tail or draw(st.booleans()) else None)


def _mutate_tree(draw: st.DrawFn, node: Any, depth: int = 0) -> Any:
    """The JSON tree with, now and then, a node replaced by any JSON value."""
    if draw(one_in(50)):
        return draw(json_values)
    if isinstance(node, dict):
        return {key: _mutate_tree(draw, value, depth + 1) for key, value in node.items()}
    if isinstance(node, list) and depth < 6:
        return [_mutate_tree(draw, value, depth + 1) for value in node]
    return node


@st.composite
def mutated_bodies(draw: st.DrawFn) -> tuple[bytes, int | None]:
    body, header_length = draw(infer_bodies())
    if draw(one_in(5)):  # bytes: most such bodies stop at the JSON parser
        body = draw(mutated(body))
    if draw(one_in(8)):
        header_length = draw(st.integers(-(2**33), 2**33) | st.integers(-2, len(body) + 2))
    return body[:MAX_BODY_BYTES], header_length


@given(mutated_bodies())
def test_infer_request_decode(case: tuple[bytes, int | None]) -> None:
    """Any body and header length: a request whose binary inputs are in bounds, or a 400-class error."""
    body, header_length = case

    def decode() -> None:
        request, _ = decode_infer_request(body, header_length, "model", "")
        for tensor in request.inputs:
            if tensor.raw is not None:
                assert len(tensor.raw) <= len(body)

    run_bounded(decode, allowed=(SonicError,), max_peak_bytes=PEAK_BYTES)


@given(st.binary(max_size=512), st.none() | st.integers(-4, 600))
def test_infer_request_decode_of_random_bytes(body: bytes, header_length: int | None) -> None:
    run_bounded(
        lambda: decode_infer_request(body, header_length, "model", "1"),
        allowed=(SonicError,),
        max_peak_bytes=PEAK_BYTES,
    )


@given(st.integers(1, 100_000).map(lambda depth: b"[" * depth + b"]" * depth) | st.binary(max_size=64))
def test_deeply_nested_json_is_a_400(text: bytes) -> None:
    """The JSON parser's recursion is the attacker's to choose: too deep is InvalidArgumentError."""
    run_bounded(lambda: parse_json(text, "request JSON"), allowed=(SonicError,), max_peak_bytes=8 << 20)


dims_lists = st.lists(st.sampled_from([-1, 0, 1, 2, 3, 2**20]), min_size=0, max_size=3).map(tuple)
raw_specs = st.builds(
    lambda batch, inputs: ModelSpec(
        "model",
        batch,
        {f"I{i}": TensorSpec(f"I{i}", datatype, dims, dims) for i, (datatype, dims) in enumerate(inputs)},
        {},
    ),
    st.sampled_from([0, 0, 4]),
    st.lists(st.tuples(st.sampled_from(dtypes.DATATYPES), dims_lists), min_size=0, max_size=2),
)


@given(raw_specs, st.binary(max_size=512))
def test_raw_request_decode(spec: ModelSpec, body: bytes) -> None:
    """Triton's raw binary request (no JSON): any config and body, a request that fits the body or a 400."""

    def decode() -> None:
        request, _ = decode_raw_request(body, spec, "model", "", "model 'model'")
        (tensor,) = request.inputs
        if tensor.raw is not None:
            itemsize = dtypes.from_name(tensor.datatype).numpy.itemsize
            assert dtypes.element_count(tensor.shape) * itemsize == len(tensor.raw) == len(body)

    run_bounded(decode, allowed=(SonicError,), max_peak_bytes=PEAK_BYTES)
