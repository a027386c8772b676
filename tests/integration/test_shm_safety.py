"""Shared memory that a local user cannot turn against the server, through real gRPC and HTTP requests.

Links, FIFOs, directories, hard links and other users' objects are refused at registration; an object
truncated after registration gives INVALID_ARGUMENT for inputs and outputs, and the server keeps serving.
"""

from __future__ import annotations

import os
import threading
import uuid
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import numpy as np
import pytest
import tritonclient.grpc as grpcclient
import tritonclient.http as httpclient
from tritonclient.utils import InferenceServerException

from sonic.launch import ServerProcess
from sonic.server.shm.opening import SHM_ROOT

pytestmark = pytest.mark.integration

SIZE = 1024
X = np.arange(2 * 16, dtype=np.float32).reshape(2, 16)
STATUS = {  # what each protocol's client reports for a status
    "grpc": {"invalid": "StatusCode.INVALID_ARGUMENT", "denied": "StatusCode.PERMISSION_DENIED"},
    "http": {"invalid": "400", "denied": "403"},
}


@pytest.fixture(scope="module")
def server(test_repository: Path) -> Iterator[ServerProcess]:
    with ServerProcess.start([test_repository], extra_args=["--http-port", "0"]) as process:
        yield process


@pytest.fixture(params=["grpc", "http"])
def protocol(request: pytest.FixtureRequest, server: ServerProcess) -> Iterator[tuple[str, Any]]:
    name: str = request.param
    module: Any = grpcclient if name == "grpc" else httpclient
    client = module.InferenceServerClient(server.grpc_address if name == "grpc" else server.http_address)
    try:
        yield name, client
    finally:
        client.unregister_system_shared_memory()
        client.close()


@pytest.fixture
def shm_path() -> Iterator[Callable[[], Path]]:
    """Fresh names under /dev/shm, each removed afterwards whatever the test put there."""
    made: list[Path] = []

    def fresh() -> Path:
        path = SHM_ROOT / f"sonic_safety_{uuid.uuid4().hex}"
        made.append(path)
        return path

    yield fresh
    for path in made:
        if path.is_dir() and not path.is_symlink():
            path.rmdir()
        else:
            path.unlink(missing_ok=True)


def _segment(path: Path, size: int = SIZE) -> Path:
    fd = os.open(path, os.O_CREAT | os.O_EXCL | os.O_RDWR, 0o600)
    try:
        os.ftruncate(fd, size)
    finally:
        os.close(fd)
    return path


def _refused(client: Any, key: str) -> InferenceServerException:
    with pytest.raises(InferenceServerException) as info:
        client.register_system_shared_memory("hostile", key, 64)
    return info.value


def _module(name: str) -> Any:
    return grpcclient if name == "grpc" else httpclient


def _infer_from_region(name: str, client: Any, region: str, offset: int = 0) -> Any:
    module = _module(name)
    tensor = module.InferInput("INPUT0", [2, 16], "FP32")
    tensor.set_shared_memory(region, X.nbytes, offset=offset)
    return client.infer("identity", [tensor])


def _infer_into_region(name: str, client: Any, region: str, offset: int) -> Any:
    module = _module(name)
    tensor = module.InferInput("INPUT0", [2, 16], "FP32")
    tensor.set_data_from_numpy(X)
    output = module.InferRequestedOutput("OUTPUT0")
    output.set_shared_memory(region, X.nbytes, offset=offset)
    return client.infer("identity", [tensor], outputs=[output])


def _still_serving(name: str, client: Any) -> None:
    module = _module(name)
    tensor = module.InferInput("INPUT0", [2, 16], "FP32")
    tensor.set_data_from_numpy(X)
    assert client.is_server_live()
    np.testing.assert_array_equal(client.infer("identity", [tensor]).as_numpy("OUTPUT0"), X)


def test_a_link_is_not_followed(
    protocol: tuple[str, Any], shm_path: Callable[[], Path], tmp_path: Path
) -> None:
    name, client = protocol
    secret = tmp_path / "secret"
    secret.write_bytes(b"not for clients" * 100)
    for target in (secret, _segment(shm_path())):  # any file, and even a real segment
        link = shm_path()
        link.symlink_to(target)
        error = _refused(client, f"/{link.name}")
        assert error.status() == STATUS[name]["invalid"]
        assert "symbolic link" in str(error)
    assert secret.read_bytes() == b"not for clients" * 100


def test_special_files_and_hard_links_are_refused(
    protocol: tuple[str, Any], shm_path: Callable[[], Path]
) -> None:
    name, client = protocol
    fifo = shm_path()
    os.mkfifo(fifo, 0o600)
    directory = shm_path()
    directory.mkdir()
    linked = shm_path()
    os.link(_segment(shm_path()), linked)
    for path, why in ((fifo, "it is a FIFO"), (directory, "it is a directory"), (linked, "has 2 links")):
        error = _refused(client, f"/{path.name}")
        assert error.status() == STATUS[name]["invalid"]
        assert why in str(error)
    _still_serving(name, client)


@pytest.mark.skipif(os.geteuid() != 0, reason="giving a file to another user needs root")
def test_other_users_objects_are_refused(protocol: tuple[str, Any], shm_path: Callable[[], Path]) -> None:
    name, client = protocol
    path = _segment(shm_path())
    os.chown(path, 4242, 4242)
    error = _refused(client, f"/{path.name}")
    assert error.status() == STATUS[name]["denied"]
    assert "belongs to user 4242" in str(error)
    assert "--allow-shm-from-other-users" in str(error)


@pytest.mark.skipif(os.geteuid() != 0, reason="giving a file to another user needs root")
def test_other_users_objects_when_allowed(test_repository: Path, shm_path: Callable[[], Path]) -> None:
    path = _segment(shm_path())
    path.write_bytes(X.tobytes())
    os.chown(path, 4242, 4242)
    args = ["--allow-shm-from-other-users"]
    with ServerProcess.start([test_repository], extra_args=args) as process:
        client = grpcclient.InferenceServerClient(process.grpc_address)
        try:
            client.register_system_shared_memory("theirs", f"/{path.name}", X.nbytes)
            result = _infer_from_region("grpc", client, "theirs")
            np.testing.assert_array_equal(result.as_numpy("OUTPUT0"), X)
        finally:
            client.close()


# 0600: only the server's user can shrink it, so the server maps it (and checks its size before each
# access); 0666: anyone could, so the server copies through its descriptor.
MODES = pytest.mark.parametrize("mode", [0o600, 0o666], ids=["mapped", "copied"])


@MODES
def test_truncated_input_region(protocol: tuple[str, Any], shm_path: Callable[[], Path], mode: int) -> None:
    name, client = protocol
    path = _segment(shm_path())
    path.chmod(mode)
    with path.open("r+b") as handle:
        handle.write(X.tobytes())
    client.register_system_shared_memory("shrunk", f"/{path.name}", SIZE)
    np.testing.assert_array_equal(_infer_from_region(name, client, "shrunk").as_numpy("OUTPUT0"), X)
    os.truncate(path, 0)  # as a hostile client would: mapped access would now be a SIGBUS
    with pytest.raises(InferenceServerException) as info:
        _infer_from_region(name, client, "shrunk", offset=256)
    assert info.value.status() == STATUS[name]["invalid"]
    message = str(info.value)
    assert "shared memory region 'shrunk'" in message
    assert f"{X.nbytes} bytes at offset 256" in message
    assert "it holds 0 now" in message
    _still_serving(name, client)


@MODES
def test_truncated_output_region(protocol: tuple[str, Any], shm_path: Callable[[], Path], mode: int) -> None:
    name, client = protocol
    path = _segment(shm_path())
    path.chmod(mode)
    client.register_system_shared_memory("shrunk", f"/{path.name}", SIZE)
    os.truncate(path, 300)
    with pytest.raises(InferenceServerException) as info:
        _infer_into_region(name, client, "shrunk", offset=512)
    assert info.value.status() == STATUS[name]["invalid"]
    assert f"{X.nbytes} bytes at offset 512 need the object to hold 640 bytes, it holds 300" in str(
        info.value
    )
    assert path.stat().st_size == 300  # not grown back by the refused write
    _still_serving(name, client)


@MODES
def test_a_key_replaced_after_registration_changes_nothing(
    protocol: tuple[str, Any], shm_path: Callable[[], Path], tmp_path: Path, mode: int
) -> None:
    """The server reads and writes the object it checked, whatever the name points at later."""
    name, client = protocol
    path = _segment(shm_path())
    path.chmod(mode)
    with path.open("r+b") as handle:
        handle.write(X.tobytes())
    client.register_system_shared_memory("swapped", f"/{path.name}", SIZE)
    kept = os.open(path, os.O_RDONLY)  # the original object lives on after its name goes
    try:
        path.unlink()
        secret = tmp_path / "secret"
        secret.write_bytes(bytes(SIZE))
        path.symlink_to(secret)
        np.testing.assert_array_equal(_infer_from_region(name, client, "swapped").as_numpy("OUTPUT0"), X)
        _infer_into_region(name, client, "swapped", offset=512)
        assert secret.read_bytes() == bytes(SIZE)
        assert os.pread(kept, X.nbytes, 512) == X.tobytes()
    finally:
        os.close(kept)


def test_copy_always(test_repository: Path, shm_path: Callable[[], Path]) -> None:
    """--shm-copy-always: even the server's own user's objects are copied, and shrinking one is an error."""
    path = _segment(shm_path())
    path.write_bytes(X.tobytes() + bytes(SIZE - X.nbytes))
    with ServerProcess.start([test_repository], extra_args=["--shm-copy-always"]) as process:
        client = grpcclient.InferenceServerClient(process.grpc_address)
        try:
            client.register_system_shared_memory("mine", f"/{path.name}", SIZE)
            np.testing.assert_array_equal(_infer_from_region("grpc", client, "mine").as_numpy("OUTPUT0"), X)
            _infer_into_region("grpc", client, "mine", offset=512)
            assert path.read_bytes()[512 : 512 + X.nbytes] == X.tobytes()
            os.truncate(path, 100)
            with pytest.raises(InferenceServerException, match="it holds 100 now"):
                _infer_from_region("grpc", client, "mine")
            _still_serving("grpc", client)
        finally:
            client.close()


def _hammer(path: Path, stop: threading.Event) -> None:
    """A hostile client: shrinks and restores its object as fast as it can, until told to stop."""
    fd = os.open(path, os.O_RDWR)
    try:
        while not stop.is_set():
            os.ftruncate(fd, 0)
            os.ftruncate(fd, SIZE)
    finally:
        os.close(fd)


def test_copied_regions_survive_shrinking_during_requests(
    protocol: tuple[str, Any], shm_path: Callable[[], Path]
) -> None:
    """Truncations racing the accesses themselves: every answer is a result or INVALID_ARGUMENT."""
    name, client = protocol
    path = _segment(shm_path())
    path.chmod(0o666)  # writable by others: copied, never mapped
    client.register_system_shared_memory("racing", f"/{path.name}", SIZE)
    stop = threading.Event()
    hammer = threading.Thread(target=_hammer, args=(path, stop))
    hammer.start()
    answers: list[str] = []
    try:
        for _ in range(200):
            try:
                _infer_from_region(name, client, "racing", offset=256)
                _infer_into_region(name, client, "racing", offset=512)
                answers.append("ok")
            except InferenceServerException as exc:
                answers.append(str(exc.status()) if exc.status() == STATUS[name]["invalid"] else str(exc))
    finally:
        stop.set()
        hammer.join()
    assert set(answers) <= {"ok", STATUS[name]["invalid"]}, set(answers)
    _still_serving(name, client)
