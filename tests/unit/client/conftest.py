"""In-memory servers for client unit tests: numpy functions behind MemoryTransport."""

from __future__ import annotations

from typing import Any

import numpy.typing as npt
import pytest

from sonic.client.transport.base import ModelInfo, TensorInfo
from sonic.client.transport.memory import MemoryModel, MemoryServer, MemoryTransport


def _double(arrays: dict[str, npt.NDArray[Any]]) -> dict[str, npt.NDArray[Any]]:
    x = arrays["INPUT0"]
    return {"OUTPUT0": x * 2, "OUTPUT1": x + 1}


def _identity(arrays: dict[str, npt.NDArray[Any]]) -> dict[str, npt.NDArray[Any]]:
    return {"OUTPUT0": arrays["INPUT0"].copy()}


def _identity_model(name: str, datatype: str, dims: tuple[int, ...], max_batch_size: int) -> MemoryModel:
    info = ModelInfo(
        name,
        ("1",),
        (TensorInfo("INPUT0", datatype, dims),),
        (TensorInfo("OUTPUT0", datatype, dims),),
        max_batch_size,
    )
    return MemoryModel(info, _identity)


def make_models() -> dict[str, MemoryModel]:
    double = ModelInfo(
        "double",
        ("1",),
        (TensorInfo("INPUT0", "FP32", (4,)),),
        (TensorInfo("OUTPUT0", "FP32", (4,)), TensorInfo("OUTPUT1", "FP32", (4,))),
        8,
    )
    models = {"double": MemoryModel(double, _double)}
    for datatype in ("FP16", "BF16", "BOOL", "BYTES", "INT64"):
        name = f"id_{datatype.lower()}"
        models[name] = _identity_model(name, datatype, (-1,), 16)
    models["nobatch"] = _identity_model("nobatch", "FP32", (2, 3), 0)
    return models


@pytest.fixture
def servers() -> list[MemoryServer]:
    return [MemoryServer(f"memory-{i}:1", make_models()) for i in range(2)]


@pytest.fixture
def transports(servers: list[MemoryServer]) -> list[MemoryTransport]:
    return [MemoryTransport(s) for s in servers]
