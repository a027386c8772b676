"""Client side of Triton's system shared memory: regions in /dev/shm, registered with one server.

Each request in flight to a local server borrows one region from that server's pool, writes its inputs
into it (the one copy of each tensor) and, when every requested output has a known size, has the
server write the outputs there too. Regions are reused, grown when a request needs more, and
unregistered and unlinked on close or after an error that may have left the server's view stale,
and unlinked at interpreter exit (or on SIGTERM/SIGINT when allowed) if the client was never closed
(:mod:`sonic.client.cleanup`). Region names say which process made them
(:mod:`sonic.protocol.shm_names`), so a server reclaims those of a client that was killed.
Zero-copy callers (:mod:`sonic.client.zerocopy`) hold numpy views of a region: a mapping with views
left is never unmapped under them (it goes with the last view), only unlinked and unregistered.
"""

from __future__ import annotations

import contextlib
import logging
import mmap
import os
import secrets
from collections.abc import Mapping
from pathlib import Path
from typing import Any

import numpy as np
import numpy.typing as npt

from sonic.client.cleanup import exit_cleanup
from sonic.client.errors import ClientError
from sonic.client.transport.base import Transport
from sonic.protocol.shm_names import region_prefix
from sonic.protocol.types import ShmRef

log = logging.getLogger(__name__)

SHM_ROOT = Path("/dev/shm")  # noqa: S108  (the POSIX shared-memory namespace, not a temp dir)
ALIGN_BYTES = 64  # tensors start on cache-line boundaries


def align(size: int) -> int:
    return (size + ALIGN_BYTES - 1) // ALIGN_BYTES * ALIGN_BYTES


def layout(region: str, sizes: Mapping[str, int], start: int = 0) -> tuple[dict[str, ShmRef], int]:
    """Consecutive aligned placements for tensors of ``sizes`` bytes from ``start``; and where they end."""
    placements: dict[str, ShmRef] = {}
    offset = start
    for name, size in sizes.items():
        placements[name] = ShmRef(region, size, offset)
        offset += align(size)
    return placements, offset


class Region:
    """One POSIX shared-memory object, mapped into this process."""

    def __init__(self, name: str, size: int) -> None:
        self.name = name  # also the key: '/<name>' for shm_open
        self.key = f"/{name}"
        self.path = SHM_ROOT / name
        self.size = 0
        # O_EXCL: a name another local user planted first (a file, or a link to one) is refused, never
        # opened (O_EXCL does not follow a link; O_NOFOLLOW says so twice). 0600: only this user reads
        # it, as the server's owner check expects.
        fd = os.open(self.path, os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW | os.O_CLOEXEC | os.O_RDWR, 0o600)
        exit_cleanup().add(self.path)
        try:
            os.ftruncate(fd, size)
            self.mapping = mmap.mmap(fd, size)
        except BaseException:
            os.close(fd)
            self.path.unlink(missing_ok=True)
            exit_cleanup().discard(self.path)
            raise
        self._fd = fd
        self.size = size

    def grow(self, size: int) -> None:
        self._unmap()
        os.ftruncate(self._fd, size)
        self.mapping = mmap.mmap(self._fd, size)
        self.size = size

    def write(self, offset: int, data: bytes | memoryview) -> None:
        size = data.nbytes if isinstance(data, memoryview) else len(data)
        self.mapping[offset : offset + size] = data

    def array(
        self, offset: int, dtype: np.dtype[Any], shape: tuple[int, ...], *, writable: bool
    ) -> npt.NDArray[Any]:
        """A numpy view of the region: it keeps the mapping alive, not the data (the region is reused)."""
        count = 1
        for dim in shape:
            count *= dim
        view = np.frombuffer(self.mapping, dtype=dtype, count=count, offset=offset).reshape(shape)
        view.flags.writeable = writable
        return view

    def read(self, offset: int, dtype: np.dtype[Any], shape: tuple[int, ...]) -> npt.NDArray[Any]:
        """A copy: the region is reused by the next request as soon as this one returns."""
        return self.array(offset, dtype, shape, writable=False).copy()

    def read_bytes(self, offset: int, size: int) -> bytes:
        return self.mapping[offset : offset + size]

    def _unmap(self) -> None:
        # With zero-copy views still held the mapping stays until the last of them goes: a view
        # released too late then reads stale data, never unmapped memory.
        with contextlib.suppress(BufferError):
            self.mapping.close()

    def close(self) -> None:
        self._unmap()
        os.close(self._fd)
        self.path.unlink(missing_ok=True)
        exit_cleanup().discard(self.path)


class RegionPool:
    """Regions registered with one server; at most one request uses a region at a time."""

    def __init__(self, transport: Transport) -> None:
        self._transport = transport
        self._free: list[Region] = []
        self._all: set[Region] = set()
        self._prefix = region_prefix()
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
        # A random part per region: another local user who saw this pool's names cannot plant the next
        # one first (O_EXCL would refuse it, failing the request).
        region = Region(f"{self._prefix}_{self._count}_{secrets.token_hex(4)}", size)
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
        if region in self._all:  # not when the pool was closed (or the region dropped) meanwhile
            self._free.append(region)

    async def discard(self, region: Region) -> None:
        """Forget a region after an error; the server may be gone, so failures are only logged."""
        if region not in self._all:  # already dropped, or the pool was closed
            return
        self._all.discard(region)
        try:
            await self._transport.shm_unregister(region.name)
        except ClientError as exc:
            log.debug("unregistering %s from %s failed: %s", region.name, self._transport.address, exc)
        finally:
            region.close()  # unlinked even when cancelled or the server is gone

    async def close(self) -> None:
        try:
            for region in list(self._all):
                await self.discard(region)
        finally:
            for region in list(self._all):  # left over only if cancelled midway: unlink them all
                self._all.discard(region)
                region.close()
            self._free.clear()
