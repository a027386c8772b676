"""The server's shared-memory checks: what registration opens, and access to objects that shrink."""

from __future__ import annotations

import os
import socket
import uuid
from collections.abc import Callable, Iterator
from pathlib import Path

import numpy as np
import numpy.typing as npt
import pytest

from sonic.cli import serve
from sonic.cli.main import build_parser
from sonic.protocol import dtypes
from sonic.protocol.errors import (
    InvalidArgumentError,
    NotFoundError,
    PermissionDeniedError,
    ResourceExhaustedError,
)
from sonic.protocol.shm_names import MAX_PID, pid_namespace
from sonic.server.shm.opening import SHM_ROOT, open_object, shm_path
from sonic.server.shm.regions import OFF_LOOP_BYTES, Region, SharedMemoryRegistry, write_output

pytestmark = pytest.mark.unit


@pytest.fixture
def fresh() -> Iterator[Callable[[], Path]]:
    made: list[Path] = []

    def name() -> Path:
        path = SHM_ROOT / f"sonic_unit_{uuid.uuid4().hex}"
        made.append(path)
        return path

    yield name
    for path in made:
        if path.is_dir() and not path.is_symlink():
            path.rmdir()
        else:
            path.unlink(missing_ok=True)


@pytest.fixture
def registry() -> Iterator[SharedMemoryRegistry]:
    registry = SharedMemoryRegistry()
    yield registry
    registry.close()


def _segment(path: Path, size: int) -> Path:
    fd = os.open(path, os.O_CREAT | os.O_EXCL | os.O_RDWR, 0o600)
    try:
        os.ftruncate(fd, size)
    finally:
        os.close(fd)
    return path


@pytest.mark.parametrize("key", ["", "/", "/a/b", "/..", "/."])
def test_key_names(key: str) -> None:
    with pytest.raises(InvalidArgumentError, match="not a valid POSIX shared memory name"):
        shm_path(key)


def test_open_checks(fresh: Callable[[], Path], tmp_path: Path) -> None:
    plain = _segment(fresh(), 4096)
    opened = open_object("r", f"/{plain.name}", allow_other_users=False)
    try:
        assert opened.size_bytes == 4096
        assert opened.identity == (plain.stat().st_dev, plain.stat().st_ino)
        assert os.get_inheritable(opened.fd) is False  # O_CLOEXEC: not leaked to model subprocesses
    finally:
        os.close(opened.fd)
    with pytest.raises(NotFoundError, match="no shared memory object with key"):
        open_object("r", f"/{fresh().name}", allow_other_users=False)
    link = fresh()
    link.symlink_to(tmp_path)
    with pytest.raises(InvalidArgumentError, match="symbolic link"):
        open_object("r", f"/{link.name}", allow_other_users=False)
    with socket.socket(socket.AF_UNIX) as sock:
        unix = fresh()
        sock.bind(str(unix))
        with pytest.raises(
            InvalidArgumentError, match="it is a socket or a device, not a shared memory object"
        ):
            open_object("r", f"/{unix.name}", allow_other_users=False)


@pytest.mark.skipif(os.geteuid() != 0, reason="giving a file to another user needs root")
def test_owner_rule(fresh: Callable[[], Path]) -> None:
    path = _segment(fresh(), 64)
    os.chown(path, 4242, 4242)
    with pytest.raises(PermissionDeniedError, match="belongs to user 4242, not to the server's user 0"):
        open_object("r", f"/{path.name}", allow_other_users=False)
    opened = open_object("r", f"/{path.name}", allow_other_users=True)
    os.close(opened.fd)


def test_only_objects_nobody_else_can_write_are_mapped(fresh: Callable[[], Path]) -> None:
    """A mapped object shrunk under a read kills the process (SIGBUS): only the server's user may do that."""
    path = _segment(fresh(), 64)
    for mode, copy_always, mapped in (
        (0o600, False, True),
        (0o620, False, False),
        (0o606, False, False),
        (0o600, True, False),
    ):
        path.chmod(mode)
        registry = SharedMemoryRegistry(copy_always=copy_always)
        try:
            registry.register("r", f"/{path.name}", 0, 64)
            assert (registry.get("r", "test").mapping is not None) == mapped, (oct(mode), copy_always)
        finally:
            registry.close()


@pytest.mark.parametrize("size", [256, OFF_LOOP_BYTES + 4096], ids=["on-loop", "off-loop"])
@pytest.mark.parametrize("copy_always", [False, True], ids=["mapped", "copied"])
async def test_reads_and_writes_of_a_shrunk_object(
    fresh: Callable[[], Path], size: int, copy_always: bool
) -> None:
    path = _segment(fresh(), 2 * size + 64)
    data = np.random.default_rng(0).integers(0, 255, size, dtype=np.uint8)
    registry = SharedMemoryRegistry(copy_always=copy_always)
    registry.register("r", f"/{path.name}", 64, 2 * size)
    region = registry.get("r", "test")
    try:
        await _shrink_under(region, path, data, size)
    finally:
        registry.close()


async def _shrink_under(region: Region, path: Path, data: npt.NDArray[np.uint8], size: int) -> None:
    await write_output(region, size, size, data, dtypes.from_name("UINT8"), "test")
    assert bytes(await region.read(size, size, "test")) == data.tobytes()
    os.truncate(path, size)
    with pytest.raises(InvalidArgumentError, match=rf"it holds {size} now \(truncated"):
        await region.read(size, size, "test")
    with pytest.raises(InvalidArgumentError, match=rf"{size} bytes at offset {size} need"):
        await write_output(region, size, size, data, dtypes.from_name("UINT8"), "test")
    assert os.fstat(region.fd).st_size == size
    with pytest.raises(InvalidArgumentError, match="run past the end"):
        await region.read(size, size + 1, "test")


def test_reclaim_unlinks_only_the_object_of_an_exited_client(
    registry: SharedMemoryRegistry, fresh: Callable[[], Path]
) -> None:
    """A region named as an exited sonic client's must not get any other object unlinked."""
    victim = _segment(fresh(), 64)
    dead = f"sonic_{MAX_PID}_n{pid_namespace()}_dead_1"  # pid_max is at most MAX_PID: never running
    registry.register(dead, f"/{victim.name}", 0, 64)
    assert registry.reclaim() == [dead]
    assert victim.exists()


def test_mapped_regions_get_their_memory_first(
    registry: SharedMemoryRegistry, fresh: Callable[[], Path]
) -> None:
    """Writing a hole of a mapping when /dev/shm is full is a SIGBUS: the region's pages are allocated at once."""
    path = _segment(fresh(), 1 << 20)
    assert path.stat().st_blocks == 0  # ftruncate makes a sparse object
    registry.register("r", f"/{path.name}", 4096, 8192)
    assert registry.get("r", "test").mapping is not None
    assert path.stat().st_blocks * 512 == 8192


def test_serve_options(tmp_path: Path) -> None:
    def config(*extra: str) -> tuple[bool, bool]:
        args = build_parser().parse_args(
            ["serve", "--model-repository", str(tmp_path), "--gpus", "0", *extra]
        )
        made = serve.config_from_args(args)
        return made.security.allow_shm_from_other_users, made.security.shm_copy_always

    assert config() == (False, False)
    assert config("--allow-shm-from-other-users", "--shm-copy-always") == (True, True)


def test_regions_are_bounded(fresh: Callable[[], Path]) -> None:
    path = _segment(fresh(), 64)
    registry = SharedMemoryRegistry(max_regions=1)
    try:
        registry.register("first", f"/{path.name}", 0, 64)
        with pytest.raises(ResourceExhaustedError, match="holds 1 regions, its most"):
            registry.register("second", f"/{path.name}", 0, 64)
        registry.unregister("first")
        registry.register("second", f"/{path.name}", 0, 64)
    finally:
        registry.close()


@pytest.mark.parametrize(
    ("offset", "byte_size", "refused"),
    [
        (0, 65, "invalid args"),
        (2**40, 0, "invalid args"),
        (8, 2**40, "invalid args"),
        (0, 0, "unable to process address spaceInvalid argument"),
        (64, 0, "unable to process address spaceInvalid argument"),
    ],
)
def test_bounds_are_refused_in_triton_words(
    fresh: Callable[[], Path], offset: int, byte_size: int, refused: str
) -> None:
    """Found by the differential tests: Triton's messages for a region out of its object's bounds or empty."""
    path = _segment(fresh(), 64)
    registry = SharedMemoryRegistry()
    try:
        with pytest.raises(InvalidArgumentError) as error:
            registry.register("r", f"/{path.name}", offset, byte_size)
        # Triton's words first, then what was given (sonic's addition).
        assert error.value.message.startswith(f"failed to register shared memory region 'r': {refused}")
        bounds = f"offset {offset} + byte size {byte_size} exceeds the 64 bytes"
        given = bounds if refused == "invalid args" else "a region of 0 bytes"
        assert given in error.value.message
        assert registry.status("") == []
    finally:
        registry.close()


def test_a_key_with_a_nul_byte_is_refused_by_name() -> None:
    """Found by fuzzing: os.open raised ValueError (an INTERNAL answer) for a key with NUL in it."""
    with pytest.raises(InvalidArgumentError, match="is not a valid POSIX shared memory name"):
        shm_path("/a\x00b")


@pytest.mark.parametrize(
    ("offset", "byte_size", "words"),
    [
        (100, 16, "Invalid offset for shared memory region: 'r' (offset 100; the region has 64 bytes)"),
        (64, 0, "Invalid offset for shared memory region: 'r' (offset 64; the region has 64 bytes)"),
        (-1, 4, "Invalid offset for shared memory region: 'r'"),
        (60, 16, "Invalid offset + byte size for shared memory region: 'r' (16 bytes at offset 60 run past"),
        (48, 32, "Invalid offset + byte size for shared memory region: 'r'"),
    ],
)
async def test_offsets_past_a_region_in_tritons_words(
    registry: SharedMemoryRegistry, fresh: Callable[[], Path], offset: int, byte_size: int, words: str
) -> None:
    """Triton 2.51 (probed): an offset not inside the region, even for no bytes, is 'Invalid offset';
    bytes past its end 'Invalid offset + byte size'; the same for inputs and outputs."""
    path = _segment(fresh(), 64)
    registry.register("r", f"/{path.name}", 0, 64)
    region = registry.get("r", "test")
    with pytest.raises(InvalidArgumentError) as read:
        await region.read(offset, byte_size, "model 'm' input 'X'")
    with pytest.raises(InvalidArgumentError) as place:
        region.output_view(offset, byte_size, "model 'm' output 'Y'")
    assert read.value.message.startswith(f"model 'm' input 'X': {words}")
    assert place.value.message.startswith(f"model 'm' output 'Y': {words}")
    assert bytes(await region.read(60, 4, "test")) == b"\0" * 4  # the last bytes are inside
