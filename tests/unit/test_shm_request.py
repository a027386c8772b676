"""One request's shared memory (``server/shm_request.py``): resolved beside the request, never into it."""

from __future__ import annotations

import asyncio
import dataclasses
import os
import uuid
from collections.abc import Iterator
from pathlib import Path

import numpy as np
import pytest

from sonic.models.simple import IDENTITY_CONFIG, identity_model
from sonic.protocol.model_config import parse_config_text, validate_config
from sonic.protocol.types import InferRequest, InputTensor, ShmRef
from sonic.server.config import ServerConfig
from sonic.server.dataplane import Arrival, DataPlane
from sonic.server.manager import ModelManager
from sonic.server.shm import SharedMemoryRegistry
from sonic.server.shm_open import SHM_ROOT
from sonic.server.shm_request import resolve

pytestmark = pytest.mark.unit

WIRE_FIELDS = {"model_name", "model_version", "inputs", "request_id", "outputs", "parameters", "output_shm"}
SIZE = 4 * 16  # one FP32 [1, 16] tensor
VALUES = np.arange(16, dtype=np.float32).reshape(1, 16)


@pytest.fixture
def segment() -> Iterator[Path]:
    path = SHM_ROOT / f"sonic_unit_{uuid.uuid4().hex}"
    fd = os.open(path, os.O_CREAT | os.O_EXCL | os.O_RDWR, 0o600)
    try:
        os.write(fd, VALUES.tobytes() + bytes(SIZE))  # the input, then room for the output
    finally:
        os.close(fd)
    yield path
    path.unlink(missing_ok=True)


@pytest.fixture
def repository(tmp_path: Path) -> Path:
    identity_model(tmp_path / "identity" / "1" / "model.onnx")
    (tmp_path / "identity" / "config.pbtxt").write_text(IDENTITY_CONFIG)
    return tmp_path


def test_the_request_type_carries_only_the_wire() -> None:
    assert {f.name for f in dataclasses.fields(InferRequest)} == WIRE_FIELDS


async def test_a_request_without_shared_memory_resolves_to_nothing() -> None:
    spec = validate_config(parse_config_text(IDENTITY_CONFIG, "identity"))
    request = InferRequest("identity", "", [InputTensor("INPUT0", "FP32", (1, 16), raw=bytes(SIZE))])
    assert await resolve(SharedMemoryRegistry(), request, spec, cached=False) is None


async def test_shared_memory_in_and_out_leaves_the_request_as_received(
    repository: Path, segment: Path
) -> None:
    config = ServerConfig(model_repositories=(repository,))
    manager = ModelManager(config)
    await manager.load("identity")
    plane = DataPlane(config, manager)
    plane.accepting = True
    try:
        plane.system_shared_memory_register("region", f"/{segment.name}", 0, 2 * SIZE)
        request = InferRequest(
            "identity",
            "",
            [InputTensor("INPUT0", "FP32", (1, 16), shm=ShmRef("region", SIZE, 0))],
            output_shm={"OUTPUT0": ShmRef("region", SIZE, SIZE)},
        )
        before = dataclasses.replace(request, inputs=[dataclasses.replace(t) for t in request.inputs])
        response = await plane.infer(request, Arrival(0))
        assert response.outputs[0].shm == ShmRef("region", SIZE, SIZE)
        contents = await asyncio.to_thread(segment.read_bytes)
        np.testing.assert_array_equal(np.frombuffer(contents[SIZE:], dtype=np.float32).reshape(1, 16), VALUES)
        assert request == before  # nothing was read or placed into the wire type
        assert request.inputs[0].raw is None
    finally:
        plane.shared_memory.close()
        await manager.close()
