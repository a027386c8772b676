"""Real servers for client integration tests: ``sonic serve`` and NVIDIA ``tritonserver`` with the same
models (identity models in ONNX; Triton runs them through onnxruntime in its Python backend)."""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import pytest

from sonic.launch import ServerProcess
from sonic.launch.triton import TritonProcess
from sonic.testing.repository import MODELS, write_test_repository


@dataclass(frozen=True)
class RunningServer:
    kind: str  # "sonic" or "triton"
    address: str
    pid: int


@pytest.fixture(scope="session")
def sonic_repository(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return write_test_repository(tmp_path_factory.mktemp("sonic-repo"), "sonic")


@pytest.fixture(scope="session")
def triton_repository(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return write_test_repository(tmp_path_factory.mktemp("triton-repo"), "triton")


@pytest.fixture(scope="session")
def sonic_server(sonic_repository: Path) -> Iterator[RunningServer]:
    with ServerProcess.start([sonic_repository]) as process:
        yield RunningServer("sonic", process.grpc_address, process.pid)


@pytest.fixture(scope="session")
def triton_server(
    triton_repository: Path, tmp_path_factory: pytest.TempPathFactory
) -> Iterator[RunningServer]:
    workdir = tmp_path_factory.mktemp("triton")
    with TritonProcess.start(
        [triton_repository], models=[m.name for m in MODELS], workdir=workdir
    ) as process:
        yield RunningServer("triton", process.grpc_address, process.pid)


@pytest.fixture(params=["sonic", pytest.param("triton", marks=pytest.mark.triton)])
def server(request: pytest.FixtureRequest) -> RunningServer:
    """The same test against our server and against real Triton."""
    return request.getfixturevalue(f"{request.param}_server")  # type: ignore[no-any-return]
