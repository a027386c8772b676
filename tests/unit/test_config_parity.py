"""Triton's config semantics: unimplemented sections refused, KIND_GPU without GPUs, onnxruntime
optimisation numbers, Triton's completed fields, and a failed reload that leaves the model serving."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import onnxruntime as ort
import pytest

from sonic.models.simple import IDENTITY_CONFIG, identity_model
from sonic.protocol.errors import ModelConfigError
from sonic.protocol.model_config import (
    UNIMPLEMENTED_SECTIONS,
    fill_defaults,
    parse_config_text,
    validate_config,
)
from sonic.protocol.types import InferRequest, InputTensor
from sonic.protocol.wire import ModelState
from sonic.server.backends.base import InstanceContext
from sonic.server.backends.onnxruntime import OnnxRuntimeBackend
from sonic.server.config import ServerConfig
from sonic.server.models.manager import ModelManager

pytestmark = pytest.mark.unit

# One config per unimplemented section, each setting only that section.
SECTION_SNIPPETS = {
    "instance_group.secondary_devices": (
        "instance_group [ { kind: KIND_CPU secondary_devices [ { kind: KIND_NVDLA device_id: 0 } ] } ]"
    ),
    "sequence_batching.iterative_sequence": "sequence_batching { iterative_sequence: true }",
}


@pytest.mark.parametrize("section", sorted(UNIMPLEMENTED_SECTIONS))
def test_each_unimplemented_section_is_refused_by_name(section: str) -> None:
    text = IDENTITY_CONFIG.replace("dynamic_batching { }", "") + SECTION_SNIPPETS[section]
    config = parse_config_text(text, "test")
    with pytest.raises(ModelConfigError, match=f"sets '{section}', which sonic does not implement"):
        validate_config(config)


def test_plain_config_passes_the_section_check() -> None:
    validate_config(parse_config_text(IDENTITY_CONFIG, "test"))


def test_kind_gpu_without_gpus_is_refused_as_triton_does() -> None:
    config = parse_config_text(IDENTITY_CONFIG + 'instance_group [ { name: "g" kind: KIND_GPU } ]', "test")
    with pytest.raises(
        ModelConfigError,
        match="instance group g of model identity has kind KIND_GPU but no GPUs are available",
    ):
        fill_defaults(config, default_filename="model.onnx", gpu_count=0)
    config = parse_config_text(IDENTITY_CONFIG + "instance_group [ { kind: KIND_GPU gpus: [ 3 ] } ]", "test")
    with pytest.raises(ModelConfigError, match="invalid or unsupported gpu id 3"):
        fill_defaults(config, default_filename="model.onnx", gpu_count=2)


def test_completed_fields_match_triton() -> None:
    config = parse_config_text(IDENTITY_CONFIG, "test")
    fill_defaults(config, default_filename="model.onnx", gpu_count=0)
    assert config.platform == "onnxruntime_onnx"
    assert list(config.dynamic_batching.preferred_batch_size) == [1024]
    # Triton's SetDefaultInstanceCount: two for onnxruntime and TensorFlow CPU groups, one otherwise.
    assert [(g.name, g.count) for g in config.instance_group] == [("identity", 2)]
    assert config.optimization.input_pinned_memory.enable
    assert config.optimization.output_pinned_memory.enable
    grouped = parse_config_text(
        IDENTITY_CONFIG.replace("onnxruntime", "python") + "instance_group [ { kind: KIND_CPU } ]", "test"
    )
    fill_defaults(grouped, default_filename="model.py", gpu_count=0)
    assert [(g.name, g.count) for g in grouped.instance_group] == [("identity_0", 1)]
    assert grouped.platform == ""
    for backend, kind, count in [
        ("tensorflow", "KIND_CPU", 2),
        ("pytorch", "KIND_CPU", 1),
        ("onnxruntime", "KIND_GPU", 1),
    ]:
        other = parse_config_text(
            IDENTITY_CONFIG.replace("onnxruntime", backend) + f"instance_group [ {{ kind: {kind} }} ]", "test"
        )
        fill_defaults(other, default_filename="model", gpu_count=1)
        assert [g.count for g in other.instance_group] == [count], backend
    ensemble = parse_config_text('name: "e" platform: "ensemble"', "test")
    fill_defaults(ensemble, default_filename="", gpu_count=0)
    assert ensemble.backend == ""


def _session_options(tmp_path: Path, extra: str) -> ort.SessionOptions:
    identity_model(tmp_path / "model.onnx")
    config = parse_config_text(IDENTITY_CONFIG + extra, "test")
    context = InstanceContext(
        config=config,
        spec=validate_config(config),
        version=1,
        version_dir=tmp_path,
        model_path=tmp_path / "model.onnx",
        instance_name="identity_0",
        device_kind="cpu",
        device_id=0,
        options={},
        models=None,
    )
    backend = OnnxRuntimeBackend(context)
    options: ort.SessionOptions = backend._session.get_session_options()
    backend.close()
    return options


@pytest.mark.parametrize(
    ("extra", "level", "mode"),
    [
        ("", ort.GraphOptimizationLevel.ORT_ENABLE_ALL, ort.ExecutionMode.ORT_SEQUENTIAL),
        ("optimization { graph { level: -1 } }", ort.GraphOptimizationLevel.ORT_ENABLE_BASIC, None),
        ("optimization { graph { level: 1 } }", ort.GraphOptimizationLevel.ORT_ENABLE_EXTENDED, None),
        ("optimization { graph { level: 2 } }", ort.GraphOptimizationLevel.ORT_DISABLE_ALL, None),
        (
            'parameters { key: "execution_mode" value { string_value: "1" } }',
            None,
            ort.ExecutionMode.ORT_PARALLEL,
        ),
        (
            'parameters { key: "execution_mode" value { string_value: "parallel" } }',
            None,
            ort.ExecutionMode.ORT_PARALLEL,
        ),
    ],
)
def test_onnxruntime_levels_and_modes_use_tritons_numbers(
    tmp_path: Path, extra: str, level: object, mode: object
) -> None:
    options = _session_options(tmp_path, extra)
    if level is not None:
        assert options.graph_optimization_level == level
    if mode is not None:
        assert options.execution_mode == mode


def test_bad_execution_mode_is_refused(tmp_path: Path) -> None:
    with pytest.raises(ModelConfigError, match="execution_mode '2', expected 0"):
        _session_options(tmp_path, 'parameters { key: "execution_mode" value { string_value: "2" } }')


@pytest.mark.parametrize(("given", "expected"), [("", "1"), ("0", "0"), ("1", "1")])
def test_onnxruntime_spinning_is_onnxruntimes_default_unless_turned_off(
    tmp_path: Path, given: str, expected: str
) -> None:
    extra = f'parameters {{ key: "intra_op_spinning" value {{ string_value: "{given}" }} }}' if given else ""
    options = _session_options(tmp_path, extra)
    assert options.get_session_config_entry("session.intra_op.allow_spinning") == expected


def test_bad_spinning_is_refused(tmp_path: Path) -> None:
    with pytest.raises(ModelConfigError, match="intra_op_spinning 'no', expected 0"):
        _session_options(tmp_path, 'parameters { key: "intra_op_spinning" value { string_value: "no" } }')


def _request(value: float) -> InferRequest:
    data = np.full((1, 16), value, dtype=np.float32)
    return InferRequest("m", "", [InputTensor("INPUT0", "FP32", (1, 16), raw=data.tobytes())])


async def test_failed_reload_leaves_the_serving_version_serving(tmp_path: Path) -> None:
    identity_model(tmp_path / "m" / "1" / "model.onnx")
    (tmp_path / "m" / "config.pbtxt").write_text(IDENTITY_CONFIG.replace('"identity"', '"m"'))
    manager = ModelManager(ServerConfig(model_repositories=(tmp_path,)))
    await manager.load("m")
    serving = manager.get("m")
    (tmp_path / "m" / "1" / "model.onnx").write_bytes(b"garbage written over the model")
    with pytest.raises(
        ModelConfigError, match="load failed for model 'm': version 1 is at UNAVAILABLE state"
    ):
        await manager.load("m")
    assert manager.get("m") is serving
    response = await serving.infer(_request(2.0))
    np.testing.assert_array_equal(response.outputs[0].array, np.full((1, 16), 2.0, dtype=np.float32))
    (tmp_path / "m" / "config.pbtxt").write_text("max_batch_size: oops")
    with pytest.raises(ModelConfigError, match=r"config\.pbtxt:1"):
        await manager.load("m")
    assert manager.get("m") is serving
    assert [r.state for r in manager.index(ready_only=False) if r.name == "m"] == [ModelState.READY]
    await manager.close()
