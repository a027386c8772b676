"""What real NVIDIA Triton 2.51 does with hostile system shared memory (docs/security.md, "Other local users").

The same cases as tests/integration/test_shm_safety.py, asked of ``tritonserver``: it does not follow a
link (``shm_open`` adds ``O_NOFOLLOW``), refuses a FIFO (its ``mmap`` fails), takes another user's object,
and dies of SIGBUS on the first request that reads a region truncated after registration, where sonic
answers INVALID_ARGUMENT and keeps serving.
"""

from __future__ import annotations

import os
import signal
import uuid
from collections.abc import Iterator
from pathlib import Path

import numpy as np
import pytest
import tritonclient.grpc as grpcclient
from tests.integration.triton_helpers import running_triton
from tritonclient.utils import InferenceServerException

from sonic.server.shm.opening import SHM_ROOT

pytestmark = [pytest.mark.integration, pytest.mark.triton]

PYTHON_MODELS = Path(__file__).parent / "python_models"
ADD_SUB_CONFIG = """name: "add_sub"
backend: "python"
input [
  { name: "INPUT0" data_type: TYPE_FP32 dims: [ 4 ] },
  { name: "INPUT1" data_type: TYPE_FP32 dims: [ 4 ] }
]
output [
  { name: "OUTPUT0" data_type: TYPE_FP32 dims: [ 4 ] },
  { name: "OUTPUT1" data_type: TYPE_FP32 dims: [ 4 ] }
]
instance_group [ { kind: KIND_CPU } ]
"""


@pytest.fixture
def names() -> Iterator[list[Path]]:
    made: list[Path] = []
    yield made
    for path in made:
        if path.is_dir() and not path.is_symlink():
            path.rmdir()
        else:
            path.unlink(missing_ok=True)


def _inputs(region: str, offset: int) -> list[grpcclient.InferInput]:
    first = grpcclient.InferInput("INPUT0", [4], "FP32")
    first.set_shared_memory(region, 16, offset=offset)
    second = grpcclient.InferInput("INPUT1", [4], "FP32")
    second.set_data_from_numpy(np.arange(4, dtype=np.float32))
    return [first, second]


def test_triton_with_hostile_shared_memory(tmp_path: Path, names: list[Path]) -> None:
    repository = tmp_path / "models"
    (repository / "add_sub" / "1").mkdir(parents=True)
    (repository / "add_sub" / "config.pbtxt").write_text(ADD_SUB_CONFIG, encoding="utf-8")
    (repository / "add_sub" / "1" / "model.py").write_bytes((PYTHON_MODELS / "add_sub.py").read_bytes())
    prefix = f"sonic_triton_shm_{uuid.uuid4().hex[:8]}"
    link, fifo, segment, hard = (
        SHM_ROOT / f"{prefix}_{kind}" for kind in ("link", "fifo", "segment", "hard")
    )
    directory = SHM_ROOT / f"{prefix}_directory"
    names.extend((link, fifo, segment, hard, directory))
    secret = tmp_path / "secret"
    secret.write_bytes(bytes(64))
    link.symlink_to(secret)
    os.mkfifo(fifo, 0o600)
    fd = os.open(segment, os.O_CREAT | os.O_EXCL | os.O_RDWR, 0o600)
    try:
        os.ftruncate(fd, 8192)
        os.link(segment, hard)
        directory.mkdir()
        with (
            running_triton([repository], ["add_sub"]) as triton,
            grpcclient.InferenceServerClient(triton.grpc_address) as client,
        ):
            with pytest.raises(InferenceServerException, match="Unable to open shared memory region") as info:
                client.register_system_shared_memory("link", f"/{link.name}", 64)
            assert info.value.status() == "StatusCode.INTERNAL"
            with pytest.raises(InferenceServerException, match="invalid args") as info:
                client.register_system_shared_memory("fifo", f"/{fifo.name}", 64)
            assert info.value.status() == "StatusCode.INVALID_ARGUMENT"
            with pytest.raises(InferenceServerException, match="Unable to open shared memory region") as info:
                client.register_system_shared_memory("directory", f"/{directory.name}", 64)
            assert info.value.status() == "StatusCode.INTERNAL"
            client.register_system_shared_memory("hard", f"/{hard.name}", 64)  # a hard link is taken
            client.unregister_system_shared_memory("hard")
            if os.geteuid() == 0:  # no owner rule: another user's object is taken
                os.fchown(fd, 4242, 4242)
            client.register_system_shared_memory("segment", f"/{segment.name}", 8192)
            np.testing.assert_array_equal(
                client.infer("add_sub", _inputs("segment", 4096)).as_numpy("OUTPUT0"), np.arange(4)
            )
            os.ftruncate(fd, 0)
            with pytest.raises(InferenceServerException) as info:
                client.infer("add_sub", _inputs("segment", 4096))
            assert info.value.status() == "StatusCode.UNAVAILABLE"
            assert triton.process.process.wait(timeout=30) == -signal.SIGBUS
    finally:
        os.close(fd)
        directory.rmdir()
