"""Fuzzing model configuration: ``config.pbtxt`` text, the JSON form that arrives from the network (the
``config`` parameter of a model load), and their completion and validation.

A config from a client goes through the same steps as one from a repository: parse, Triton's defaults
(:func:`fill_defaults`), validation (:func:`validate_config`) and the version policy. Each step may
refuse it with :class:`ModelConfigError` and nothing else. Inputs are valid configs mutated in their
numbers (edge values), their tokens and their bytes, and in the JSON tree.
"""

from __future__ import annotations

import json
import re
from typing import Any

from google.protobuf import json_format
from hypothesis import given
from hypothesis import strategies as st

from sonic.protocol.errors import SonicError
from sonic.protocol.model_config import (
    DEFAULT_MAX_BATCH_SIZE,
    backend_name,
    complete_from_signature,
    fill_defaults,
    parse_config_json,
    parse_config_text,
    validate_config,
)
from sonic.server.models.repository import select_versions
from sonic.testing.fuzz import mutated, one_in, run_bounded

PEAK_BYTES = 4 << 20

CONFIGS = [
    """
name: "tagger"
backend: "onnxruntime"
max_batch_size: 8
input [ { name: "x" data_type: TYPE_FP32 dims: [ 16 ] } ]
output [ { name: "y" data_type: TYPE_FP32 dims: [ 4 ] reshape: { shape: [ 2, 2 ] } } ]
dynamic_batching {
  preferred_batch_size: [ 4, 8 ]
  max_queue_delay_microseconds: 100
  priority_levels: 2
  default_priority_level: 1
  priority_queue_policy { key: 2 value: { max_queue_size: 4 timeout_action: REJECT } }
}
instance_group [ { count: 2 kind: KIND_CPU } ]
version_policy: { specific: { versions: [ 1, 3 ] } }
parameters { key: "intra_op_thread_count" value: { string_value: "1" } }
model_repository_agents { agents [ { name: "checksum" parameters { key: "MD5:1/model.onnx" value: "ab" } } ] }
""",
    """
name: "pipeline"
platform: "ensemble"
max_batch_size: 0
input [ { name: "IN" data_type: TYPE_STRING dims: [ -1 ] optional: true } ]
output [ { name: "OUT" data_type: TYPE_INT64 dims: [ -1, 3 ] } ]
ensemble_scheduling {
  step [ { model_name: "a" model_version: -1 input_map { key: "i" value: "IN" } output_map { key: "o" value: "OUT" } } ]
}
version_policy: { latest: { num_versions: 2 } }
""",
    """
backend: "python"
max_batch_size: 4
input { name: "a" data_type: TYPE_BF16 dims: 3 }
input { name: "b" data_type: TYPE_BOOL dims: 1 }
output { name: "c" data_type: TYPE_UINT8 dims: [ 3 ] }
sequence_batching { max_sequence_idle_microseconds: 5000000 }
instance_group { kind: KIND_GPU gpus: [ 0 ] count: 1 }
optimization { input_pinned_memory { enable: false } }
""",
]
EDGE_NUMBERS = [
    "0",
    "-1",
    "-2",
    "2147483647",
    "2147483648",
    "-9223372036854775808",
    "18446744073709551615",
    "99999999999999999999999",
    "1e308",
    "nan",
    "0x10",
    "-0",
]
TOKENS = [
    "{",
    "}",
    "[",
    "]",
    ":",
    ",",
    '"',
    "input",
    "output",
    "dims",
    "TYPE_FP16",
    "KIND_MODEL",
    "#",
    "<",
    ">",
]


@st.composite
def config_texts(draw: st.DrawFn) -> str:
    """A valid config, its numbers swapped for edge values now and then, tokens and bytes mutated."""
    text = draw(st.sampled_from(CONFIGS))
    text = re.sub(
        r"-?\d+",
        lambda m: draw(st.sampled_from([m.group(), *EDGE_NUMBERS])) if draw(one_in(3)) else m.group(),
        text,
    )
    for _ in range(draw(st.integers(0, 2))):
        pos = draw(st.integers(0, len(text)))
        text = text[:pos] + draw(st.sampled_from(TOKENS)) + text[pos:]
    if draw(one_in(3)):
        text = draw(mutated(text.encode())).decode("utf-8", errors="replace")
    return text


def _complete(config: Any, gpu_count: int) -> None:
    """The steps a loaded config goes through after parsing (repository.py and manager.py order)."""
    backend_name(config)
    select_versions("m", config.version_policy, [1, 2, 3])
    if not config.input and not config.output:
        complete_from_signature(config, [("x", 11, [-1, 4])], [("y", 11, [-1, 2])], DEFAULT_MAX_BATCH_SIZE)
    fill_defaults(config, default_filename="model.onnx", gpu_count=gpu_count)
    spec = validate_config(config)
    for tensor in (*spec.inputs.values(), *spec.outputs.values()):
        assert all(d == -1 or d > 0 for d in tensor.dims)


@given(config_texts(), st.integers(0, 2))
def test_config_pbtxt_parse_and_complete(text: str, gpu_count: int) -> None:
    run_bounded(
        lambda: _complete(parse_config_text(text, "config.pbtxt"), gpu_count),
        allowed=(SonicError,),
        max_peak_bytes=PEAK_BYTES,
    )


json_values = st.recursive(
    st.none() | st.booleans() | st.integers(-(2**65), 2**65) | st.floats() | st.text(max_size=6),
    lambda inner: st.lists(inner, max_size=3) | st.dictionaries(st.text(max_size=6), inner, max_size=3),
    max_leaves=6,
)


def _mutate_tree(draw: st.DrawFn, node: Any) -> Any:
    if draw(one_in(25)):
        return draw(json_values)
    if isinstance(node, dict):
        return {key: _mutate_tree(draw, value) for key, value in node.items()}
    if isinstance(node, list):
        return [_mutate_tree(draw, value) for value in node]
    return node


@st.composite
def config_jsons(draw: st.DrawFn) -> str:
    """The JSON form of a valid config (as clients send it in a load), its tree and bytes mutated."""
    config = parse_config_text(draw(st.sampled_from(CONFIGS)), "base")
    tree = _mutate_tree(draw, json_format.MessageToDict(config))
    text = json.dumps(tree)
    if draw(one_in(4)):
        text = draw(mutated(text.encode())).decode("utf-8", errors="replace")
    return text


@given(config_jsons(), st.integers(0, 2))
def test_config_json_parse_and_complete(text: str, gpu_count: int) -> None:
    """RepositoryModelLoad's ``config`` parameter, from any client allowed to load models."""
    run_bounded(
        lambda: _complete(parse_config_json(text, "load parameter 'config'"), gpu_count),
        allowed=(SonicError,),
        max_peak_bytes=PEAK_BYTES,
    )


@given(
    st.integers(1, 100_000).map(lambda depth: "[" * depth + "]" * depth)
    | st.integers(1, 100_000).map(lambda depth: '{"a":' * depth + "1" + "}" * depth)
    | st.integers(1, 100_000).map(lambda depth: '{"parameters": ' * depth + "{}" + "}" * depth)
)
def test_config_json_nesting(text: str) -> None:
    """Nesting is the client's to choose: JSON's parser recurses, so too deep must be an error, not a crash."""
    run_bounded(lambda: parse_config_json(text, "config"), allowed=(SonicError,), max_peak_bytes=64 << 20)


@given(st.integers(1, 3000).map(lambda depth: "optimization {" * depth))
def test_config_text_nesting(text: str) -> None:
    run_bounded(lambda: parse_config_text(text, "config"), allowed=(SonicError,), max_peak_bytes=PEAK_BYTES)
