"""Outputs run straight into a buffer the server then writes to shared memory: onnxruntime's bound outputs."""

from __future__ import annotations

import os
import uuid
from collections.abc import Iterator
from pathlib import Path

import numpy as np
import pytest

from sonic.protocol import dtypes
from sonic.protocol.model_config import ModelSpec, fill_defaults, parse_config_text, validate_config
from sonic.server.backends.base import InstanceContext
from sonic.server.backends.onnxruntime import OnnxRuntimeBackend
from sonic.server.shm.opening import SHM_ROOT
from sonic.server.shm.regions import SharedMemoryRegistry, output_buffer, write_output
from sonic.testing.repository import MODELS, write_test_repository

pytestmark = pytest.mark.unit


def _load(root: Path, name: str) -> tuple[OnnxRuntimeBackend, ModelSpec]:
    text = (root / name / "config.pbtxt").read_text(encoding="utf-8")
    config = parse_config_text(text, name)
    fill_defaults(config, default_filename="model.onnx", gpu_count=0)
    spec = validate_config(config)
    path = root / name / "1" / "model.onnx"
    context = InstanceContext(config, spec, 1, path.parent, path, f"{name}_0", "cpu", 0)
    return OnnxRuntimeBackend(context), spec


@pytest.fixture
def tmp_shm() -> Iterator[Path]:
    path = SHM_ROOT / f"sonic_test_into_{uuid.uuid4().hex}"
    with path.open("xb") as handle:
        handle.truncate(4096)
    try:
        yield path
    finally:
        path.unlink(missing_ok=True)


@pytest.fixture(scope="module")
def repository(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return write_test_repository(tmp_path_factory.mktemp("repo"), "sonic", MODELS)


@pytest.mark.parametrize("copy_always", [False, True], ids=["mapped", "copied"])
async def test_outputs_are_written_into_the_given_buffers(
    repository: Path, tmp_shm: Path, copy_always: bool
) -> None:
    backend, spec = _load(repository, "identity")
    x = np.arange(3 * 16, dtype=np.float32).reshape(3, 16)
    registry = SharedMemoryRegistry(copy_always=copy_always)
    try:
        registry.register("r", f"/{tmp_shm.name}", 0, 4096)
        region = registry.get("r", "where")
        view = region.output_view(64, 4096 - 64, "where")
        assert (view is None) == copy_always  # mapped: the backend runs straight into the region
        buffer = output_buffer(spec, 3, "OUTPUT0", 4096 - 64, view)
        assert buffer is not None
        assert buffer.shape == (3, 16)
        assert buffer.dtype == np.float32
        outputs = backend.execute_into({"INPUT0": x}, ["OUTPUT0"], {"OUTPUT0": buffer})
        assert outputs["OUTPUT0"] is buffer
        # Then written into the region (a copy skipped when mapped); the byte count is reported.
        size = await write_output(region, 64, 4096 - 64, buffer, dtypes.from_name("FP32"), "where")
        del view, buffer, outputs
    finally:
        registry.close()
    assert size == x.nbytes
    fd = os.open(tmp_shm, os.O_RDONLY)
    try:
        written = np.frombuffer(os.pread(fd, x.nbytes, 64), np.float32).reshape(3, 16)
    finally:
        os.close(fd)
    np.testing.assert_array_equal(written, x)


def test_unsuitable_buffers_fall_back_to_a_plain_run(repository: Path) -> None:
    backend, _ = _load(repository, "identity")
    x = np.ones((3, 16), np.float32)
    wrong = np.zeros((2, 16), np.float32)  # shaped for another batch: onnxruntime refuses the binding
    outputs = backend.execute_into({"INPUT0": x}, ["OUTPUT0"], {"OUTPUT0": wrong})
    assert outputs["OUTPUT0"] is not wrong
    np.testing.assert_array_equal(outputs["OUTPUT0"], x)
    # The output placed over the input: the model must not write into what it still reads.
    shared = np.arange(3 * 16, dtype=np.float32).reshape(3, 16)
    outputs = backend.execute_into({"INPUT0": shared}, ["OUTPUT0"], {"OUTPUT0": shared})
    assert outputs["OUTPUT0"] is not shared
    np.testing.assert_array_equal(outputs["OUTPUT0"], np.arange(3 * 16, dtype=np.float32).reshape(3, 16))
    # Outputs without a buffer: a plain run for all of them.
    assert backend.execute_into({"INPUT0": x}, ["OUTPUT0"], {})["OUTPUT0"].shape == (3, 16)


def test_output_buffer_only_when_the_size_is_known(repository: Path) -> None:
    view = memoryview(bytearray(4096))
    _, variable = _load(repository, "identity_fp16")  # dims [-1]
    assert output_buffer(variable, 2, "OUTPUT0", 4096, view) is None
    _, fixed = _load(repository, "identity")
    assert output_buffer(fixed, 64, "OUTPUT0", 100, view[:100]) is None  # too small: reported after running
    assert output_buffer(fixed, 2, "NOPE", 4096, None) is None
    _, nobatch = _load(repository, "nobatch")
    for given in (view, None):  # a view of a mapped region, or a buffer of the server
        buffer = output_buffer(nobatch, 0, "OUTPUT0", 4096, given)
        assert buffer is not None
        assert buffer.shape == (2, 3)
