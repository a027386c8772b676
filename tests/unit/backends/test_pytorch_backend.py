"""The PyTorch backend in-process: signature auto-complete, name mapping rules, clear errors."""

from __future__ import annotations

import re
from pathlib import Path
from typing import Any

import numpy as np
import pytest
import torch
from tritonclient.grpc import model_config_pb2

from sonic.protocol.errors import ModelConfigError
from sonic.protocol.model_config import fill_defaults, parse_config_text, validate_config
from sonic.server.backends.base import InstanceContext
from sonic.server.backends.pytorch import PyTorchBackend

pytestmark = pytest.mark.unit


class TwoArgs(torch.nn.Module):
    def forward(self, a: torch.Tensor, b: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        return a - b, (a * b).double()


@pytest.fixture(scope="module")
def exported(tmp_path_factory: pytest.TempPathFactory) -> Path:
    batch = torch.export.Dim("batch", min=1, max=64)
    program = torch.export.export(
        TwoArgs(), (torch.ones(2, 3), torch.ones(2, 3)), dynamic_shapes={"a": {0: batch}, "b": {0: batch}}
    )
    path = tmp_path_factory.mktemp("exported") / "1" / "model.pt2"
    path.parent.mkdir()
    torch.export.save(program, str(path))
    return path


def backend(config: model_config_pb2.ModelConfig, path: Path) -> PyTorchBackend:
    fill_defaults(config, default_filename="model.pt", gpu_count=0)
    context = InstanceContext(config, validate_config(config), 1, path.parent, path, "m_0", "cpu", 0)
    return PyTorchBackend(context)


def test_exported_signature_and_dtype_check(exported: Path) -> None:
    config = model_config_pb2.ModelConfig(name="m")
    PyTorchBackend.complete_config(config, exported, {})
    assert config.max_batch_size == 4
    assert [(t.name, list(t.dims)) for t in config.input] == [("a", [3]), ("b", [3])]
    assert [(t.name, t.data_type) for t in config.output] == [
        ("OUTPUT__0", model_config_pb2.TYPE_FP32),
        ("OUTPUT__1", model_config_pb2.TYPE_FP64),
    ]
    config.default_model_filename = "model.pt2"
    model = backend(config, exported)
    a = np.full((2, 3), 5.0, np.float32)
    b = np.ones((2, 3), np.float32)
    out = model.execute({"b": b, "a": a}, ["OUTPUT__0", "OUTPUT__1"])
    np.testing.assert_array_equal(out["OUTPUT__0"], a - b)  # inputs by forward argument name
    assert out["OUTPUT__1"].dtype == np.float64
    # A config that declares the wrong output type fails the load, in Triton's words, naming both types.
    config.output[1].data_type = model_config_pb2.TYPE_FP32
    expected = (
        "unable to load model 'm', configuration expects datatype TYPE_FP32 for output 'OUTPUT__1', "
        "model provides TYPE_FP64"
    )
    with pytest.raises(ModelConfigError, match=re.escape(expected)):
        backend(config, exported)


@pytest.mark.parametrize(
    ("change", "message"),
    [
        (
            lambda c: c.input[0].dims.__setitem__(0, 4),
            (
                "model 'm', tensor 'a': the model expects 2 dimensions (shape [-1,3]) but the model configuration "
                "specifies 2 dimensions (an initial batch dimension because max_batch_size > 0 followed by the "
                "explicit tensor shape, making complete shape [-1,4])"
            ),
        ),
        (
            lambda c: c.input.add(name="c", data_type=model_config_pb2.TYPE_FP32, dims=[3]),
            "unable to load model 'm', configuration expects 3 inputs, model provides 2",
        ),
        (
            lambda c: c.output.add(name="OUTPUT__2", data_type=model_config_pb2.TYPE_FP32, dims=[3]),
            "unexpected inference output 'OUTPUT__2', allowed outputs are: OUTPUT__0, OUTPUT__1",
        ),
    ],
)
def test_exported_program_checked_at_load(exported: Path, change: Any, message: str) -> None:
    config = model_config_pb2.ModelConfig(name="m", default_model_filename="model.pt2")
    PyTorchBackend.complete_config(config, exported, {})
    change(config)
    with pytest.raises(ModelConfigError, match=re.escape(message)):
        backend(config, exported)


@pytest.mark.filterwarnings("ignore:`torch.jit:DeprecationWarning")  # deprecated, still what users have
def test_torchscript_input_count_checked_at_load(tmp_path: Path) -> None:
    path = tmp_path / "1" / "model.pt"
    path.parent.mkdir()
    traced = torch.jit.trace(TwoArgs(), (torch.ones(2, 3), torch.ones(2, 3)))  # type: ignore[no-untyped-call]
    traced.save(str(path))
    config = parse_config_text(
        """
        name: "m"
        backend: "pytorch"
        max_batch_size: 8
        input [ { name: "a" data_type: TYPE_FP32 dims: [ 3 ] } ]
        output [ { name: "OUTPUT__0" data_type: TYPE_FP32 dims: [ 3 ] } ]
        """,
        "test",
    )
    with pytest.raises(ModelConfigError, match="configuration expects 1 inputs, model provides 2"):
        backend(config, path)


def test_config_order_when_names_say_nothing(exported: Path) -> None:
    config = parse_config_text(
        """
        name: "m"
        backend: "pytorch"
        default_model_filename: "model.pt2"
        max_batch_size: 8
        input [ { name: "first" data_type: TYPE_FP32 dims: [ 3 ] },
                { name: "second" data_type: TYPE_FP32 dims: [ 3 ] } ]
        output [ { name: "diff" data_type: TYPE_FP32 dims: [ 3 ] } ]
        """,
        "test",
    )
    model = backend(config, exported)
    out = model.execute(
        {"second": np.ones((1, 3), np.float32), "first": np.zeros((1, 3), np.float32)}, ["diff"]
    )
    np.testing.assert_array_equal(out["diff"], -np.ones((1, 3), np.float32))


def test_torchscript_needs_declared_io(tmp_path: Path) -> None:
    config = model_config_pb2.ModelConfig(name="m")
    with pytest.raises(ModelConfigError, match="TorchScript files carry no tensor signature"):
        PyTorchBackend.complete_config(config, tmp_path / "model.pt", {})


def test_bad_parameter_and_gpu_without_cuda(exported: Path) -> None:
    config = model_config_pb2.ModelConfig(name="m", default_model_filename="model.pt2")
    PyTorchBackend.complete_config(config, exported, {})
    config.parameters["INFERENCE_MODE"].string_value = "maybe"
    with pytest.raises(ModelConfigError, match="INFERENCE_MODE is 'maybe', expected true or false"):
        backend(config, exported)
    if not torch.cuda.is_available():
        del config.parameters["INFERENCE_MODE"]
        fill_defaults(config, default_filename="model.pt", gpu_count=0)
        context = InstanceContext(
            config, validate_config(config), 1, exported.parent, exported, "g", "gpu", 0
        )
        with pytest.raises(ModelConfigError, match="asks for a GPU instance, but this PyTorch has no CUDA"):
            PyTorchBackend(context)
