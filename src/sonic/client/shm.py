"""Client side of Triton's system shared memory: regions in /dev/shm, registered with one server.

Each request in flight to a local server borrows one region from that server's pool, writes its inputs
into it (the one copy of each tensor) and, when every requested output has a known size, has the
server write the outputs there too. Regions are reused, grown when a request needs more, and
unregistered and unlinked on close or after an error that may have left the server's view stale.
"""

from __future__ import annotations

import logging
import mmap
import os
import uuid
from pathlib import Path
from typing import Any

import numpy as np
import numpy.typing as npt

from sonic.client.errors import ClientError
from sonic.client.transport.base import Transport

log = logging.getLogger(__name__)

SHM_ROOT = Path("/dev/shm")  # noqa: S108  (the POSIX shared-memory namespace, not a temp dir)
ALIGN_BYTES = 64  # tensors start on cache-line boundaries


def align(size: int) -> int:
    return (size + ALIGN_BYTES - 1) // ALIGN_BYTES * ALIGN_BYTES


class Region:
    """One POSIX shared-memory object, mapped into this process."""

    def __init__(self, name: str, size: int) -> None:
        self.name = name  # also the key: '/<name>' for shm_open
        self.key = f"/{name}"
        self.path = SHM_ROOT / name
        self.size = 0
        fd = os.open(self.path, os.O_CREAT | os.O_EXCL | os.O_RDWR, 0o600)
        try:
            os.ftruncate(fd, size)
            self.mapping = mmap.mmap(fd, size)
        except BaseException:
            os.close(fd)
            self.path.unlink(missing_ok=True)
            raise
        self._fd = fd
        self.size = size

    def grow(self, size: int) -> None:
        self.mapping.close()
        os.ftruncate(self._fd, size)
        self.mapping = mmap.mmap(self._fd, size)
        self.size = size

    def write(self, offset: int, data: bytes | memoryview) -> None:
        size = data.nbytes if isinstance(data, memoryview) else len(data)
        self.mapping[offset : offset + size] = data

    def read(self, offset: int, dtype: np.dtype[Any], shape: tuple[int, ...]) -> npt.NDArray[Any]:
        """A copy: the region is reused by the next request as soon as this one returns."""
        count = 1
        for dim in shape:
            count *= dim
        view = np.frombuffer(self.mapping, dtype=dtype, count=count, offset=offset)
        result = view.reshape(shape).copy()
        del view  # release the buffer export so the mapping can be closed or grown
        return result

    def read_bytes(self, offset: int, size: int) -> bytes:
        return self.mapping[offset : offset + size]

    def close(self) -> None:
        self.mapping.close()
        os.close(self._fd)
        self.path.unlink(missing_ok=True)


class RegionPool:
    """Regions registered with one server; at most one request uses a region at a time."""

    def __init__(self, transport: Transport) -> None:
        self._transport = transport
        self._free: list[Region] = []
        self._all: set[Region] = set()
        self._prefix = f"sonic_{os.getpid()}_{uuid.uuid4().hex[:8]}"
        self._count = 0

    async def acquire(self, size: int) -> Region:
        size = max(align(size), 4096)
        if self._free:
            region = max(self._free, key=lambda r: r.size)
            self._free.remove(region)
            if region.size < size:
                # Growing changes the mapping: the server must map it again.
                await self._transport.shm_unregister(region.name)
                region.grow(size)
                await self._register(region)
            return region
        self._count += 1
        region = Region(f"{self._prefix}_{self._count}", size)
        self._all.add(region)
        try:
            await self._register(region)
        except BaseException:
            self._all.discard(region)
            region.close()
            raise
        return region

    async def _register(self, region: Region) -> None:
        await self._transport.shm_register(region.name, region.key, 0, region.size)

    def release(self, region: Region) -> None:
        self._free.append(region)

    async def discard(self, region: Region) -> None:
        """Forget a region after an error; the server may be gone, so failures are only logged."""
        self._all.discard(region)
        try:
            await self._transport.shm_unregister(region.name)
        except ClientError as exc:
            log.debug("unregistering %s from %s failed: %s", region.name, self._transport.address, exc)
        region.close()

    async def close(self) -> None:
        for region in list(self._all):
            await self.discard(region)
        self._free.clear()
