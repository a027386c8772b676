"""System shared-memory regions registered by clients (Triton's ``system_shared_memory`` extension).

A client creates a POSIX shared-memory object (``shm_open(key)``; on Linux a file under /dev/shm),
registers ``(name, key, offset, byte_size)`` with the server, and then names the region in requests
instead of sending tensor bytes. Inputs are read as views of the mapping (no copy); outputs are
written into it and left out of the response body.

Regions nobody will unregister are reclaimed (:meth:`SharedMemoryRegistry.reclaim`, run before each
register and status call): those whose shared-memory object is gone, and those of a ``sonic.client``
whose process has exited, as its region names say (:mod:`sonic.protocol.shm_names`). The dead client's
object is unlinked too (a SIGKILL gave it no chance to).
"""

from __future__ import annotations

import contextlib
import logging
import mmap
import os
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np
import numpy.typing as npt

from sonic.protocol import dtypes
from sonic.protocol.errors import AlreadyExistsError, InvalidArgumentError, NotFoundError
from sonic.protocol.model_config import ModelSpec
from sonic.protocol.shm_names import owner_exited, pid_namespace

log = logging.getLogger(__name__)

# glibc's shm_open(key) opens /dev/shm/<key without its leading slash>.
SHM_ROOT = Path("/dev/shm")  # noqa: S108  (the POSIX shared-memory namespace, not a temp dir)


@dataclass(eq=False)
class Region:
    name: str
    key: str
    offset: int
    byte_size: int
    mapping: mmap.mmap

    def view(self, offset: int, byte_size: int, where: str) -> memoryview:
        """``byte_size`` bytes at ``offset`` inside the region, checked against its bounds."""
        if offset < 0 or byte_size < 0:
            raise InvalidArgumentError(
                f"{where}: shared memory offset {offset} and byte size {byte_size} must not be negative"
            )
        if offset + byte_size > self.byte_size:
            raise InvalidArgumentError(
                f"{where}: {byte_size} bytes at offset {offset} run past the end of shared memory region "
                f"'{self.name}' ({self.byte_size} bytes)"
            )
        start = self.offset + offset
        return memoryview(self.mapping)[start : start + byte_size]

    def close(self) -> None:
        # A request may still hold a view; the mapping then goes away with the last view.
        with contextlib.suppress(BufferError):
            self.mapping.close()


def _shm_path(key: str) -> Path:
    name = key.removeprefix("/")
    if not name or "/" in name:
        raise InvalidArgumentError(f"shared memory key '{key}' is not a valid POSIX shared memory name")
    return SHM_ROOT / name


class SharedMemoryRegistry:
    """Regions by name. Every method is called on the event loop thread."""

    def __init__(self) -> None:
        self._regions: dict[str, Region] = {}
        self._namespace = pid_namespace()

    def reclaim(self) -> list[str]:
        """Forget regions whose object is gone or whose client exited (unlinking the latter's object);
        returns their names. A stat per region: cheap next to the call it precedes."""
        reclaimed = []
        for region in list(self._regions.values()):
            path = SHM_ROOT / region.key.removeprefix("/")
            exited = owner_exited(region.name, self._namespace)
            if exited or not path.exists():
                self._regions.pop(region.name).close()
                if exited:
                    path.unlink(missing_ok=True)
                reclaimed.append(region.name)
        if reclaimed:
            log.warning(
                "reclaimed %d shared memory region(s) whose client exited or whose object is gone: %s",
                len(reclaimed),
                ", ".join(reclaimed),
            )
        return reclaimed

    def register(self, name: str, key: str, offset: int, byte_size: int) -> None:
        self.reclaim()
        if not name:
            msg = "shared memory region name must not be empty"
            raise InvalidArgumentError(msg)
        if name in self._regions:
            raise AlreadyExistsError(f"shared memory region '{name}' already in manager")
        if offset < 0 or byte_size <= 0:
            raise InvalidArgumentError(
                f"shared memory region '{name}': offset {offset} must be >= 0 and byte size {byte_size} > 0"
            )
        path = _shm_path(key)
        try:
            fd = os.open(path, os.O_RDWR)
        except FileNotFoundError:
            raise NotFoundError(
                f"unable to open shared memory region '{name}': no shared memory object with key '{key}'"
            ) from None
        except OSError as exc:
            raise InvalidArgumentError(
                f"unable to open shared memory region '{name}' ({key}): {exc}"
            ) from None
        try:
            size = os.fstat(fd).st_size
            if offset + byte_size > size:
                raise InvalidArgumentError(
                    f"shared memory region '{name}': offset {offset} + byte size {byte_size} exceeds the "
                    f"{size} bytes of shared memory object '{key}'"
                )
            mapping = mmap.mmap(fd, offset + byte_size)
        finally:
            os.close(fd)
        self._regions[name] = Region(name, key, offset, byte_size, mapping)

    def unregister(self, name: str) -> None:
        """Forget one region, or every region when ``name`` is empty (unknown names are not an error)."""
        names = [name] if name else list(self._regions)
        for each in names:
            region = self._regions.pop(each, None)
            if region is not None:
                region.close()

    def status(self, name: str) -> list[Region]:
        self.reclaim()
        if not name:
            return list(self._regions.values())
        region = self._regions.get(name)
        if region is None:
            raise NotFoundError(f"Unable to find system shared memory region: '{name}'")
        return [region]

    def get(self, name: str, where: str) -> Region:
        region = self._regions.get(name)
        if region is None:
            raise NotFoundError(f"{where}: unable to find system shared memory region: '{name}'")
        return region

    def close(self) -> None:
        self.unregister("")


def output_buffer(spec: ModelSpec, batch: int, name: str, view: memoryview) -> npt.NDArray[Any] | None:
    """``view`` as the array output ``name`` will be, when its shape is known before running; else None."""
    out = spec.outputs.get(name)
    if (
        out is None
        or out.datatype.name == "BYTES"
        or out.model_dims != out.dims
        or min(out.dims, default=0) < 0
    ):
        return None
    shape = (batch, *out.dims) if spec.batched else out.dims
    count = dtypes.element_count(shape)
    if count * out.datatype.numpy.itemsize > len(view):
        return None  # too small: reported after running, as for every other backend
    return np.frombuffer(view, dtype=out.datatype.numpy, count=count).reshape(shape)


def write_output(view: memoryview, array: npt.NDArray[Any], datatype: dtypes.Datatype, where: str) -> int:
    """Copy an output into a region view (unless the backend wrote it there); returns the bytes written."""
    data = dtypes.array_to_bytes(array, datatype)
    size = data.nbytes if isinstance(data, memoryview) else len(data)
    if size > len(view):
        raise InvalidArgumentError(
            f"{where}: shared memory size specified with the request for output ({len(view)} bytes) "
            f"should be at least {size} bytes to hold the results"
        )
    target = np.frombuffer(view, dtype=np.uint8, count=size)
    source = np.frombuffer(data, dtype=np.uint8)
    if source.ctypes.data != target.ctypes.data:
        target[:] = source
    return size
