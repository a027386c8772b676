"""One request's shared memory (``server/shm/request.py``): resolved beside the request, never into it."""

from __future__ import annotations

import asyncio
import dataclasses
import os
import uuid
from collections.abc import Iterator
from pathlib import Path

import numpy as np
import pytest
from tests.unit.backends.test_decoupled_python import DECOUPLED_CONFIG, DECOUPLED_MODEL

from sonic.models.simple import IDENTITY_CONFIG, identity_model
from sonic.protocol.errors import InternalError, InvalidArgumentError, NotFoundError
from sonic.protocol.model_config import parse_config_text, validate_config
from sonic.protocol.types import InferRequest, InputTensor, ShmRef
from sonic.server.config import ServerConfig
from sonic.server.dataplane import Arrival, DataPlane
from sonic.server.frontends.grpc_methods import infer_decoupled
from sonic.server.models.manager import ModelManager
from sonic.server.shm.opening import SHM_ROOT
from sonic.server.shm.regions import SharedMemoryRegistry
from sonic.server.shm.request import names_shared_memory, resolve

pytestmark = pytest.mark.unit

WIRE_FIELDS = {
    "model_name",
    "model_version",
    "inputs",
    "request_id",
    "outputs",
    "parameters",
    "output_shm",
    "output_classes",
}
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


IN_USE = "Cannot unregister shared memory region 'region', it is currently in use."
NOT_ALL = "Failed to unregister the following system shared memory regions: region ,"


def _in_and_out(output_region: str = "region") -> InferRequest:
    return InferRequest(
        "identity",
        "",
        [InputTensor("INPUT0", "FP32", (1, 16), shm=ShmRef("region", SIZE, 0))],
        output_shm={"OUTPUT0": ShmRef(output_region, SIZE, SIZE)},
    )


async def test_a_region_in_use_is_not_unregistered_until_released(segment: Path) -> None:
    """As Triton 2.51: unregistering a region a request in flight holds is INTERNAL, in its words, and
    the region stays; unregistering every region forgets the others and names the ones it kept."""
    spec = validate_config(parse_config_text(IDENTITY_CONFIG, "identity"))
    registry = SharedMemoryRegistry()
    try:
        registry.register("region", f"/{segment.name}", 0, 2 * SIZE)
        registry.register("spare", f"/{segment.name}", 0, SIZE)
        memory = await resolve(registry, _in_and_out(), spec, cached=False)
        assert memory is not None
        assert registry.get("region", "test").users == 2  # its input and its output
        with pytest.raises(InternalError) as one:
            registry.unregister("region")
        assert one.value.message.startswith(IN_USE)
        with pytest.raises(InternalError) as every:
            registry.unregister("")
        assert every.value.message.startswith(NOT_ALL)
        assert [region.name for region in registry.status("")] == ["region"]
        memory.release()
        memory.release()  # a second release does nothing
        assert registry.get("region", "test").users == 0
        registry.unregister("region")
        assert registry.status("") == []
    finally:
        registry.close()


async def test_a_refused_resolve_holds_nothing(segment: Path) -> None:
    """The input's region was held before the output's region was found missing: it is let go."""
    spec = validate_config(parse_config_text(IDENTITY_CONFIG, "identity"))
    registry = SharedMemoryRegistry()
    try:
        registry.register("region", f"/{segment.name}", 0, 2 * SIZE)
        with pytest.raises(NotFoundError, match="Unable to find shared memory region: 'nope'"):
            await resolve(registry, _in_and_out("nope"), spec, cached=False)
        assert registry.get("region", "test").users == 0
        registry.unregister("region")
    finally:
        registry.close()


async def test_the_data_plane_releases_a_region_on_every_path(repository: Path, segment: Path) -> None:
    """Answered, refused after the model ran (an output region too small), cancelled: released each time."""
    config = ServerConfig(model_repositories=(repository,))
    manager = ModelManager(config)
    await manager.load("identity")
    plane = DataPlane(config, manager)
    plane.accepting = True
    try:
        plane.system_shared_memory_register("region", f"/{segment.name}", 0, 2 * SIZE)
        region = plane.shared_memory.get("region", "test")
        await plane.infer(_in_and_out(), Arrival(0))
        assert region.users == 0
        small = dataclasses.replace(_in_and_out(), output_shm={"OUTPUT0": ShmRef("region", SIZE - 4, SIZE)})
        with pytest.raises(InvalidArgumentError, match="should be at least 64 bytes"):
            await plane.infer(small, Arrival(0))
        assert region.users == 0
        task = asyncio.create_task(plane.infer(_in_and_out(), Arrival(0)))
        # The task runs up to its first wait, the model's run: nothing before it waits (the region is
        # mapped, its bytes are read in place).
        await asyncio.wait({task}, timeout=0)
        assert region.users == 2
        task.cancel()
        with pytest.raises(asyncio.CancelledError):
            await task
        assert region.users == 0
        plane.system_shared_memory_unregister("region")
    finally:
        plane.shared_memory.close()
        await manager.close()


async def test_a_decoupled_request_holds_its_input_region_until_its_stream_ends(
    tmp_path: Path, segment: Path
) -> None:
    """Read to the final response, or left after the first: the region is held meanwhile, then let go."""
    (tmp_path / "m" / "1").mkdir(parents=True)
    (tmp_path / "m" / "config.pbtxt").write_text(DECOUPLED_CONFIG)
    (tmp_path / "m" / "1" / "model.py").write_text(DECOUPLED_MODEL)
    config = ServerConfig(model_repositories=(tmp_path,))
    manager = ModelManager(config)
    await manager.load("m")
    plane = DataPlane(config, manager)
    plane.accepting = True
    ones = np.ones((1, 2), dtype=np.float32)  # X == 1: two responses, then the final flag alone
    try:
        await asyncio.to_thread(segment.write_bytes, ones.tobytes())
        plane.system_shared_memory_register("region", f"/{segment.name}", 0, ones.nbytes)
        region = plane.shared_memory.get("region", "test")
        request = InferRequest(
            "m", "", [InputTensor("X", "FP32", (1, 2), shm=ShmRef("region", ones.nbytes, 0))]
        )
        answers = 0
        async for _ in infer_decoupled(plane, request, Arrival(0)):
            answers += 1
            assert region.users == 1
            with pytest.raises(InternalError, match="it is currently in use"):
                plane.system_shared_memory_unregister("region")
        assert answers == 3
        assert region.users == 0
        stream = infer_decoupled(plane, request, Arrival(0))
        await anext(stream)
        assert region.users == 1
        await stream.aclose()  # the reader left
        assert region.users == 0
        plane.system_shared_memory_unregister("region")
    finally:
        plane.shared_memory.close()
        await manager.close()


@pytest.mark.parametrize("copy_always", [False, True])
async def test_a_mapped_input_is_read_in_place_and_a_copied_one_is_not(
    segment: Path, copy_always: bool
) -> None:
    """Issue 37 item 2: an input in a mapped region reaches the model as a view of the mapping (what the
    client writes there after the request resolved shows through it: no copy); under --shm-copy-always
    (docs/security.md) it is a copy, which the client's later writes do not reach."""
    spec = validate_config(parse_config_text(IDENTITY_CONFIG, "identity"))
    registry = SharedMemoryRegistry(copy_always=copy_always)
    try:
        registry.register("region", f"/{segment.name}", 0, 2 * SIZE)
        memory = await resolve(registry, _in_and_out(), spec, cached=False)
        assert memory is not None
        view = np.frombuffer(memory.inputs[0], np.float32)
        np.testing.assert_array_equal(view, VALUES.reshape(-1))
        changed = VALUES + 100
        fd = os.open(segment, os.O_RDWR)
        try:
            os.pwrite(fd, changed.tobytes(), 0)
        finally:
            os.close(fd)
        seen = VALUES if copy_always else changed
        np.testing.assert_array_equal(view, seen.reshape(-1))
        del view
        memory.release()
    finally:
        registry.close()


def test_a_request_names_shared_memory_by_an_input_or_an_output() -> None:
    """The data plane skips resolve() for requests that name none (most): an input or an output in
    shared memory, alone or beside plain tensors, must be seen."""
    plain = InputTensor("INPUT0", "FP32", (1, 16), raw=bytes(SIZE))
    placed = InputTensor("INPUT1", "FP32", (1, 16), shm=ShmRef("r", SIZE))
    assert not names_shared_memory(InferRequest("identity", "", [plain]))
    assert names_shared_memory(InferRequest("identity", "", [plain, placed]))
    assert names_shared_memory(
        InferRequest("identity", "", [plain], output_shm={"OUTPUT0": ShmRef("r", SIZE)})
    )
