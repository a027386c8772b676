"""Reference models built once per session, and one ``sonic serve`` serving all the ONNX ones."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest
import torch

from sonic.launch import ServerProcess
from sonic.models.build import build_model
from sonic.models.zoo import registry

ONNX_MODELS = sorted(name for name, model in registry().items() if model.is_onnx)


@pytest.fixture(scope="session")
def reference_modules() -> dict[str, torch.nn.Module]:
    """The PyTorch modules, made once: the ResNets take seconds each to set up."""
    modules = {}
    for name in ONNX_MODELS:
        make_module = registry()[name].make_module
        assert make_module is not None
        modules[name] = make_module()
    return modules


@pytest.fixture(scope="session")
def onnx_reference_repository(
    tmp_path_factory: pytest.TempPathFactory, reference_modules: dict[str, torch.nn.Module]
) -> Path:
    # Building all ONNX models takes a few seconds, so a per-session build is cheap enough.
    repository = tmp_path_factory.mktemp("reference_models")
    for name in ONNX_MODELS:
        build_model(registry()[name], repository, reference_modules[name])
    return repository


@pytest.fixture(scope="session")
def reference_server(
    onnx_reference_repository: Path, tmp_path_factory: pytest.TempPathFactory
) -> Iterator[ServerProcess]:
    log_path = tmp_path_factory.mktemp("logs") / "sonic-serve.log"
    with ServerProcess.start([onnx_reference_repository], log_path=log_path) as server:
        yield server
