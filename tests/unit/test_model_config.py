from __future__ import annotations

from pathlib import Path

import pytest
from tritonclient.grpc import model_config_pb2

from sonic.models.simple import identity_model
from sonic.protocol.errors import ModelConfigError
from sonic.protocol.model_config import VersionConfigError, fill_defaults, parse_config_text, validate_config
from sonic.server.backends.onnxruntime import OnnxRuntimeBackend
from sonic.server.models.repository import select_versions

pytestmark = pytest.mark.unit

GOOD = """
name: "m"
max_batch_size: 8
input [ { name: "x" data_type: TYPE_FP32 dims: [ -1, 4 ] } ]
output [ { name: "y" data_type: TYPE_INT64 dims: [ 1 ] reshape: { shape: [ ] } } ]
dynamic_batching { preferred_batch_size: [ 4, 8 ] max_queue_delay_microseconds: 100 }
"""


def test_parse_and_validate() -> None:
    config = parse_config_text(GOOD, "m/config.pbtxt")
    spec = validate_config(config)
    assert spec.max_batch_size == 8
    assert spec.inputs["x"].dims == (-1, 4)
    assert spec.inputs["x"].has_variable_dims
    assert spec.outputs["y"].model_dims == ()


def test_syntax_error_names_file_and_line() -> None:
    with pytest.raises(ModelConfigError, match=r"m/config.pbtxt:3:\d+"):
        parse_config_text('name: "m"\nmax_batch_size: 8\ninput [ { nam: "x" } ]\n', "m/config.pbtxt")


@pytest.mark.parametrize(
    ("text", "message"),
    [
        (
            'max_batch_size: 0\ninput [{name:"x" data_type: TYPE_FP32 dims:[1]}]\noutput [{name:"y" data_type: TYPE_FP32 dims:[1]}]\ndynamic_batching {}',
            "needs max_batch_size > 0",
        ),
        (
            'max_batch_size: 4\ninput [{name:"x" data_type: TYPE_FP32 dims:[1]}]\noutput [{name:"y" data_type: TYPE_FP32 dims:[1]}]\ndynamic_batching { preferred_batch_size: [8] }',
            "preferred_batch_size 8",
        ),
        (
            'input [{name:"x" dims:[1]}]\noutput [{name:"y" data_type: TYPE_FP32 dims:[1]}]',
            "must specify .data_type.",
        ),
        (
            'input [{name:"x" data_type: TYPE_FP32 dims:[0]}]\noutput [{name:"y" data_type: TYPE_FP32 dims:[1]}]',
            "dimension must be integer >= 1, or -1",
        ),
        (
            'input [{name:"x" data_type: TYPE_FP32 dims:[1]}, {name:"x" data_type: TYPE_FP32 dims:[1]}]\noutput [{name:"y" data_type: TYPE_FP32 dims:[1]}]',
            "declared twice",
        ),
    ],
    ids=["batching-without-batch", "preferred-too-big", "no-dtype", "zero-dim", "duplicate"],
)
def test_inconsistent_configs(text: str, message: str) -> None:
    with pytest.raises(ModelConfigError, match=message):
        validate_config(parse_config_text(text, "c"))


def test_reshaped_outputs_come_back_in_their_configured_dims() -> None:
    """Triton's rule: the configured dims, each -1 filled in order from where ``reshape`` has -1."""
    y = validate_config(parse_config_text(GOOD, "m/config.pbtxt")).outputs["y"]
    assert y.client_shape((3,), batched=True) == (3, 1)  # the model's [] per sample is the client's [1]
    variable = validate_config(
        parse_config_text(
            'name: "v"\noutput [ { name: "o" data_type: TYPE_FP32 dims: [ 2, -1 ] reshape: { shape: [ 1, 2, -1 ] } } ]',
            "v/config.pbtxt",
        )
    ).outputs["o"]
    assert variable.client_shape((1, 2, 5), batched=False) == (2, 5)
    plain = validate_config(parse_config_text(GOOD, "m/config.pbtxt")).inputs["x"]
    assert plain.client_shape((3, 7, 4), batched=True) == (3, 7, 4)


@pytest.mark.parametrize(
    ("dims", "shape", "words"),
    [
        ("-1", "2, -1", "has different size for dims and reshape"),
        ("4", "3", "has different size for dims and reshape"),
        ("-1, -1", "-1", "has different number of variable-size dimensions for dims and reshape"),
        ("1", "0", "reshape dimensions must be integer >= 1, or -1 to indicate a variable-size dimension"),
    ],
)
def test_a_reshape_triton_refuses(dims: str, shape: str, words: str) -> None:
    """Triton's ValidateIOShape: as many elements, and as many between each variable dim."""
    text = f'name: "r"\ninput [ {{ name: "x" data_type: TYPE_FP32 dims: [ {dims} ] reshape: {{ shape: [ {shape} ] }} }} ]'
    with pytest.raises(VersionConfigError) as info:
        validate_config(parse_config_text(text, "r/config.pbtxt"))
    assert str(info.value) == f"model input 'x' {words} for r"


@pytest.mark.parametrize(("dims", "shape"), [("1", ""), ("2, 4, -1, 6", "8, -1, 1, 6"), ("-1", "-1, 1")])
def test_a_reshape_triton_takes(dims: str, shape: str) -> None:
    text = f'name: "r"\ninput [ {{ name: "x" data_type: TYPE_FP32 dims: [ {dims} ] reshape: {{ shape: [ {shape} ] }} }} ]'
    assert validate_config(parse_config_text(text, "r/config.pbtxt")).inputs["x"].dims


def test_no_input_or_output_is_a_valid_model() -> None:
    # As Triton 2.51: the override {"max_batch_size": 16} of a Python model without auto-completion loads.
    spec = validate_config(parse_config_text("max_batch_size: 16", "c"))
    assert (spec.inputs, spec.outputs, spec.max_batch_size) == ({}, {}, 16)


def test_auto_complete_from_onnx_signature(tmp_path: Path) -> None:
    identity_model(tmp_path / "model.onnx", dims=(3, 5))
    config = model_config_pb2.ModelConfig(name="auto")
    OnnxRuntimeBackend.complete_config(config, tmp_path / "model.onnx", {})
    fill_defaults(config, default_filename="model.onnx", gpu_count=0)
    assert config.max_batch_size == 4
    assert [list(i.dims) for i in config.input] == [[3, 5]]
    assert config.input[0].data_type == model_config_pb2.TYPE_FP32
    assert config.instance_group[0].kind == model_config_pb2.ModelInstanceGroup.KIND_CPU
    assert config.instance_group[0].name == "auto"  # as Triton names the group it adds
    assert config.version_policy.latest.num_versions == 1


@pytest.mark.parametrize(("default", "max_batch_size", "dims"), [("4", 4, [16]), ("0", 0, [-1, 16])])
def test_auto_complete_of_a_config_with_inputs_only_sets_max_batch_size_as_triton(
    tmp_path: Path, default: str, max_batch_size: int, dims: list[int]
) -> None:
    # Triton's onnxruntime backend completes max_batch_size unless inputs AND outputs are declared.
    identity_model(tmp_path / "model.onnx")
    config = parse_config_text('name: "m"\ninput [{name:"INPUT0" data_type: TYPE_FP32 dims:[-1, 16]}]', "c")
    OnnxRuntimeBackend.complete_config(config, tmp_path / "model.onnx", {"default-max-batch-size": default})
    assert config.max_batch_size == max_batch_size
    assert [list(o.dims) for o in config.output] == [dims]


@pytest.mark.parametrize(
    ("policy", "expected"),
    [
        ("", [5]),
        ("latest { num_versions: 2 }", [3, 5]),
        ("all { }", [1, 3, 5]),
        ("specific { versions: [1, 3] }", [1, 3]),
    ],
)
def test_version_policy(policy: str, expected: list[int]) -> None:
    config = parse_config_text(f"version_policy {{ {policy} }}" if policy else "", "c")
    assert select_versions("m", config.version_policy, [1, 3, 5]) == expected


def test_specific_version_missing() -> None:
    config = parse_config_text("version_policy { specific { versions: [2] } }", "c")
    with pytest.raises(ModelConfigError, match=r"version\(s\) \[2\]"):
        select_versions("m", config.version_policy, [1, 3])
