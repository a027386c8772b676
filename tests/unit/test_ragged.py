"""Ragged batching's merge and split as pure functions, against the values Triton documents."""

from __future__ import annotations

import numpy as np
import pytest

from sonic.protocol.errors import InternalError, ModelConfigError
from sonic.protocol.model_config import parse_config_text
from sonic.server.runtime.ragged import (
    BatchInputSpec,
    Kind,
    RaggedPlan,
    ScatterSpec,
    batch_input_tensor,
    merge_inputs,
    scatter_output,
)

SHAPES = [(1, 3), (1, 4), (1, 5)]  # the example of Triton's ragged_batching.md


def spec(kind: int, dtype: type = np.float32) -> BatchInputSpec:
    return BatchInputSpec(kind, "T", np.dtype(dtype), "INPUT")


@pytest.mark.parametrize(
    ("kind", "expected"),
    [
        (Kind.BATCH_ELEMENT_COUNT, [3, 4, 5]),
        (Kind.BATCH_ACCUMULATED_ELEMENT_COUNT, [3, 7, 12]),
        (Kind.BATCH_ACCUMULATED_ELEMENT_COUNT_WITH_ZERO, [0, 3, 7, 12]),
    ],
)
def test_element_counts(kind: int, expected: list[int]) -> None:
    tensor = batch_input_tensor(spec(kind, np.int32), SHAPES)
    assert tensor.dtype == np.int32
    np.testing.assert_array_equal(tensor, expected)


def test_max_element_count_is_a_shape() -> None:
    tensor = batch_input_tensor(spec(Kind.BATCH_MAX_ELEMENT_COUNT_AS_SHAPE), SHAPES)
    assert tensor.shape == (5,)


def test_item_shape_example_of_the_model_config_proto() -> None:
    # "one batch-2 input with shape [3, 1] and batch-1 input with shape [2, 2]": [[3, 1], [3, 1], [2, 2]].
    shapes = [(2, 3, 1), (1, 2, 2)]
    item = batch_input_tensor(spec(Kind.BATCH_ITEM_SHAPE), shapes)
    np.testing.assert_array_equal(item, [[3, 1], [3, 1], [2, 2]])
    flat = batch_input_tensor(spec(Kind.BATCH_ITEM_SHAPE_FLATTEN), shapes)
    np.testing.assert_array_equal(flat, [3, 1, 3, 1, 2, 2])


def test_merge_flattens_ragged_inputs_and_stacks_the_others() -> None:
    plan = RaggedPlan(frozenset({"INPUT"}), (spec(Kind.BATCH_ACCUMULATED_ELEMENT_COUNT),), {})
    requests = [
        {"INPUT": np.full(shape, i, dtype=np.float32), "FIXED": np.full((1, 2), i)}
        for i, shape in enumerate(SHAPES)
    ]
    merged = merge_inputs(plan, requests)
    np.testing.assert_array_equal(merged["INPUT"], [0] * 3 + [1] * 4 + [2] * 5)
    assert merged["FIXED"].shape == (3, 2)
    np.testing.assert_array_equal(merged["T"], [3, 7, 12])


def test_merge_of_one_request_still_flattens() -> None:
    plan = RaggedPlan(frozenset({"INPUT"}), (), {})
    merged = merge_inputs(plan, [{"INPUT": np.zeros((1, 4), dtype=np.float32)}])
    assert merged["INPUT"].shape == (4,)


def test_scatter_gives_each_request_its_input_shape() -> None:
    scatter = ScatterSpec("INPUT", (-1, -1))
    parts = scatter_output("m", "OUT", scatter, np.arange(12), SHAPES)
    assert [p.shape for p in parts] == SHAPES
    np.testing.assert_array_equal(parts[2], [[7, 8, 9, 10, 11]])


def test_scatter_with_a_fixed_dimension() -> None:
    # Output dims [-1, 2]: the -1 comes from the input's second dimension, 2 stays.
    parts = scatter_output("m", "OUT", ScatterSpec("INPUT", (-1, -1, 2)), np.arange(14), [(1, 3), (1, 4)])
    assert [p.shape for p in parts] == [(1, 3, 2), (1, 4, 2)]


def test_scatter_of_the_wrong_size_fails_the_batch() -> None:
    with pytest.raises(InternalError, match=r"output 'OUT' has 11 elements, expected 12"):
        scatter_output("m", "OUT", ScatterSpec("INPUT", (-1, -1)), np.arange(11), SHAPES)


CONFIG = """
name: "r"
max_batch_size: 8
input [ { name: "INPUT" data_type: TYPE_FP32 dims: [ -1 ] allow_ragged_batch: true } ]
batch_input [ { kind: BATCH_ITEM_SHAPE target_name: "SHAPES" data_type: TYPE_INT32 source_input: "INPUT" } ]
output [ { name: "OUT" data_type: TYPE_FP32 dims: [ -1 ] } ]
batch_output [ { target_name: "OUT" kind: BATCH_SCATTER_WITH_INPUT_SHAPE source_input: "INPUT" } ]
"""


def test_plan_from_config() -> None:
    plan = RaggedPlan.from_config(parse_config_text(CONFIG, "test"))
    assert plan is not None
    assert plan.ragged_inputs == {"INPUT"}
    assert plan.batch_inputs == (
        BatchInputSpec(Kind.BATCH_ITEM_SHAPE, "SHAPES", np.dtype(np.int32), "INPUT"),
    )
    assert plan.scatter_outputs == {"OUT": ScatterSpec("INPUT", (-1, -1))}


def test_no_plan_without_ragged_sections() -> None:
    config = parse_config_text('name: "p" max_batch_size: 8', "test")
    assert RaggedPlan.from_config(config) is None


@pytest.mark.parametrize(
    ("old", "new", "message"),
    [
        ("max_batch_size: 8", "max_batch_size: 0", "need max_batch_size > 0"),
        ('source_input: "INPUT" } ]\noutput', 'source_input: "X" } ]\noutput', "reads unknown input 'X'"),
        ("TYPE_INT32", "TYPE_INT64", "TYPE_INT32 or TYPE_FP32"),
        ('target_name: "OUT" kind', 'target_name: "NOPE" kind', "unknown output 'NOPE'"),
    ],
)
def test_bad_configs_are_refused(old: str, new: str, message: str) -> None:
    assert old in CONFIG
    config = parse_config_text(CONFIG.replace(old, new), "test")
    with pytest.raises(ModelConfigError, match=message):
        RaggedPlan.from_config(config)
