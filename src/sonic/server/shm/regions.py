"""System shared-memory regions registered by clients (Triton's ``system_shared_memory`` extension).

A client creates a POSIX shared-memory object (``shm_open(key)``; on Linux a file under /dev/shm),
registers ``(name, key, offset, byte_size)`` with the server, and then names the region in requests
instead of sending tensor bytes. The object is opened once, at registration, and checked
(:mod:`sonic.server.shm.opening`: no links, a regular file of the server's user); the server then reads
and writes it only through that descriptor, or a mapping of it.

A client can truncate its object at any time, and touching a mapped page past the new end kills the
process (SIGBUS), which no check made before the access rules out (the truncation may come between the
check and the copy, or while a backend reads or writes a view on its instance thread). So an object is
mapped (zero copy; its size checked with ``fstat`` before each access, its pages allocated at
registration) only when nobody but the server's own user can write it, who could stop the server by
other means too. Any other object, and every object under ``--shm-copy-always``, is copied with
``preadv``/``pwritev`` (off the event loop from 256 KiB): a system call on a shrunk object reads short,
which is a clear INVALID_ARGUMENT, and the server keeps serving. Costs: benchmarks/shm_access.py;
the whole argument and what remains: docs/security.md, "Other local users: shared memory".

Regions nobody will unregister are reclaimed (:meth:`SharedMemoryRegistry.reclaim`, run before each
register and status call): those whose shared-memory object is gone, and those of a ``sonic.client``
whose process has exited, as its region names say (:mod:`sonic.protocol.shm_names`). The dead client's
object is unlinked too (a SIGKILL gave it no chance to).
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import mmap
import os
import resource
from dataclasses import dataclass
from typing import Any

import numpy as np
import numpy.typing as npt

from sonic.protocol import dtypes
from sonic.protocol.errors import (
    AlreadyExistsError,
    InternalError,
    InvalidArgumentError,
    NotFoundError,
    ResourceExhaustedError,
    quote,
)
from sonic.protocol.model_config import ModelSpec
from sonic.protocol.shm_names import owner_exited, pid_namespace
from sonic.server.shm.opening import open_object, shm_path

log = logging.getLogger(__name__)

# Copies at least this large run on a worker thread: about 20 us of memcpy, past which the event loop
# would be held longer than a thread hop costs.
OFF_LOOP_BYTES = 1 << 18


def _pread(fd: int, buffer: memoryview, position: int) -> int | None:
    """Fill ``buffer`` from ``position``; None when done, else the object's size (it ends too early)."""
    done = 0
    while done < len(buffer):
        count = os.preadv(fd, [buffer[done:]], position + done)
        if count == 0:
            # Measured here, on this descriptor: the region's own may be closed by now (unregistered).
            return os.fstat(fd).st_size
        done += count
    return None


def _pwrite(fd: int, data: memoryview, position: int) -> None:
    done = 0
    while done < len(data):
        done += os.pwritev(fd, [data[done:]], position + done)


def _closing(fd: int, function: Any, *args: Any) -> Any:
    try:
        return function(fd, *args)
    finally:
        os.close(fd)


async def _off_loop(fd: int, function: Any, *args: Any) -> Any:
    # A duplicate, closed by the thread itself: unregistering the region (or cancelling the request)
    # meanwhile closes the region's own descriptor, whose number could then name another file.
    return await asyncio.to_thread(_closing, os.dup(fd), function, *args)


@dataclass(eq=False)
class Region:
    """One registered region. ``mapping`` is None for a shared object (copied through ``fd``)."""

    name: str
    key: str
    offset: int
    byte_size: int
    fd: int
    identity: tuple[int, int]  # (st_dev, st_ino) of the object, as opened
    mapping: mmap.mmap | None
    # Requests in flight that read or write the region (:class:`~sonic.server.shm.request.RequestMemory`
    # holds and releases them): while any does, unregistering it is refused, as Triton 2.51 does.
    users: int = 0

    def check(self, offset: int, byte_size: int, where: str) -> None:
        """``byte_size`` bytes at ``offset`` must lie inside the region as registered. Triton's words: the
        offset must be inside the region (even for no bytes), then the bytes must end inside it."""
        if byte_size < 0:  # Triton's words (its offset + byte size check), then which was negative
            raise InvalidArgumentError(
                f"{where}: Invalid offset + byte size for shared memory region: '{self.name}' (byte size "
                f"{byte_size} at offset {offset} is negative)"
            )
        if not 0 <= offset < self.byte_size:
            raise InvalidArgumentError(
                f"{where}: Invalid offset for shared memory region: '{self.name}' (offset {offset}; the "
                f"region has {self.byte_size} bytes)"
            )
        if offset + byte_size > self.byte_size:
            raise InvalidArgumentError(
                f"{where}: Invalid offset + byte size for shared memory region: '{self.name}' ({byte_size} "
                f"bytes at offset {offset} run past the end of its {self.byte_size} bytes)"
            )

    def _check_object(self, offset: int, byte_size: int, where: str) -> int:
        """The object must still hold the bytes (a client may have shrunk it); returns their position."""
        position = self.offset + offset
        current = os.fstat(self.fd).st_size
        if position + byte_size > current:
            raise self._shrunk(offset, byte_size, where, current)
        return position

    async def read(self, offset: int, byte_size: int, where: str) -> memoryview:
        """``byte_size`` bytes at ``offset``: a view of the mapping, or a copy in a buffer of the server."""
        self.check(offset, byte_size, where)
        if self.mapping is not None:
            position = self._check_object(offset, byte_size, where)
            return memoryview(self.mapping)[position : position + byte_size]
        buffer = memoryview(np.empty(byte_size, dtype=np.uint8))  # type: ignore[arg-type]
        position = self.offset + offset
        try:
            if byte_size < OFF_LOOP_BYTES:
                short = _pread(self.fd, buffer, position)
            else:
                short = await _off_loop(self.fd, _pread, buffer, position)
        except OSError as exc:
            raise InvalidArgumentError(
                f"{where}: reading shared memory region '{self.name}': {exc}"
            ) from None
        if short is not None:  # the object ends before the region does now
            raise self._shrunk(offset, byte_size, where, short)
        return buffer

    def output_view(self, offset: int, byte_size: int, where: str) -> memoryview | None:
        """Where a backend may write an output directly: a view of the mapping; None when copied."""
        self.check(offset, byte_size, where)
        if self.mapping is None:
            return None
        position = self._check_object(offset, byte_size, where)
        return memoryview(self.mapping)[position : position + byte_size]

    async def write(self, offset: int, capacity: int, data: memoryview, where: str, output: str = "") -> None:
        """Write ``data`` (of the output named ``output``) at ``offset``, into the ``capacity`` bytes the
        request gave it there."""
        self.check(offset, capacity, where)
        if len(data) > capacity:
            named = f" {quote(output)}" if output else ""
            raise InvalidArgumentError(  # Triton's words
                f"{where}: shared memory size specified with the request for output{named} ({capacity} bytes) "
                f"should be at least {len(data)} bytes to hold the results"
            )
        # Copied: a write past the end would grow the object back, not fail, so it is refused; should
        # the client shrink it after this check, the write grows it again, within the registered size.
        position = self._check_object(offset, len(data), where)
        if self.mapping is not None:
            target = np.frombuffer(self.mapping, dtype=np.uint8, count=len(data), offset=position)
            source = np.frombuffer(data, dtype=np.uint8)
            if source.ctypes.data != target.ctypes.data:  # not already written there by the backend
                target[:] = source
            return
        try:
            if len(data) < OFF_LOOP_BYTES:
                _pwrite(self.fd, data, position)
            else:
                await _off_loop(self.fd, _pwrite, data, position)
        except OSError as exc:  # ENOSPC: /dev/shm is full and the object was sparse
            raise InvalidArgumentError(
                f"{where}: writing shared memory region '{self.name}': {exc}"
            ) from None

    def _shrunk(self, offset: int, byte_size: int, where: str, current: int) -> InvalidArgumentError:
        return InvalidArgumentError(
            f"{where}: shared memory region '{self.name}' (key '{self.key}'): {byte_size} bytes at offset "
            f"{offset} need the object to hold {self.offset + offset + byte_size} bytes, it holds {current} "
            "now (truncated after it was registered)"
        )

    def close(self) -> None:
        # Copies off the loop use their own duplicate descriptor, so closing never pulls it from under
        # them; a mapping with views still held by a request goes with the last of them.
        os.close(self.fd)
        if self.mapping is not None:
            with contextlib.suppress(BufferError):
                self.mapping.close()


def _map(name: str, fd: int, offset: int, byte_size: int) -> mmap.mmap:
    """Map a region, its pages given memory first. A write through a mapping into a hole of a sparse
    object (what ``ftruncate`` makes) needs a new page there and then, and when /dev/shm is full,
    which any local user can make it, that is a SIGBUS too; ``posix_fallocate`` fails cleanly instead.
    Pages a client wrote already cost nothing here."""
    try:
        os.posix_fallocate(fd, offset, byte_size)
    except OSError as exc:
        raise ResourceExhaustedError(
            f"shared memory region '{name}': cannot give its {byte_size} bytes memory in /dev/shm: "
            f"{exc.strerror or exc}"
        ) from None
    return mmap.mmap(fd, offset + byte_size)


def _region_limit() -> int:
    """Regions one server holds at most: each keeps up to two descriptors (its object's, and the
    duplicate ``mmap`` keeps of a mapped one), so regions take at most half the process's, the rest
    left for connections and model files."""
    soft, _ = resource.getrlimit(resource.RLIMIT_NOFILE)
    return max(soft // 4, 1) if soft != resource.RLIM_INFINITY else 1 << 20


class SharedMemoryRegistry:
    """Regions by name. Every method is called on the event loop thread."""

    def __init__(
        self, *, allow_other_users: bool = False, copy_always: bool = False, max_regions: int | None = None
    ) -> None:
        """``max_regions``: None for half the process's file descriptor limit."""
        self._regions: dict[str, Region] = {}
        self._namespace = pid_namespace()
        self._allow_other_users = allow_other_users
        self._copy_always = copy_always
        self._limit = _region_limit() if max_regions is None else max_regions

    def reclaim(self) -> list[str]:
        """Forget regions whose object is gone or whose client exited (unlinking the latter's object);
        returns their names. A stat per region: cheap next to the call it precedes."""
        reclaimed = []
        for region in list(self._regions.values()):
            path = shm_path(region.key)
            try:
                found = os.lstat(path)
                same = (found.st_dev, found.st_ino) == region.identity
            except OSError:
                same = False
            exited = owner_exited(region.name, self._namespace)
            if exited or not same:
                self._regions.pop(region.name).close()
                # Only the object the region had, and only if its own name says its client exited: the
                # region's name is the client's choice and must not get any other object unlinked.
                if exited and same and owner_exited(path.name, self._namespace):
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
        if offset < 0 or byte_size < 0:  # HTTP's JSON numbers only: gRPC's are unsigned
            raise InvalidArgumentError(
                f"shared memory region '{name}': offset {offset} and byte size {byte_size} must be >= 0"
            )
        if len(self._regions) >= self._limit:
            raise ResourceExhaustedError(
                f"shared memory region '{name}': this server holds {len(self._regions)} regions, its most "
                "(each keeps file descriptors open); unregister some first"
            )
        opened = open_object(name, key, allow_other_users=self._allow_other_users)
        # Triton's words (the bounds first, then its mmap's refusal of an empty mapping), then ours.
        refused = None
        if offset + byte_size > opened.size_bytes:
            refused = (
                f"invalid args: offset {offset} + byte size {byte_size} exceeds the {opened.size_bytes} "
                f"bytes of shared memory object '{key}'"
            )
        elif byte_size == 0:
            refused = "unable to process address spaceInvalid argument: a region of 0 bytes"
        if refused is not None:
            os.close(opened.fd)
            raise InvalidArgumentError(f"failed to register shared memory region '{name}': {refused}")
        mapping = None
        if opened.private and not self._copy_always:
            try:
                mapping = _map(name, opened.fd, offset, byte_size)
            except BaseException:
                os.close(opened.fd)
                raise
        self._regions[name] = Region(name, key, offset, byte_size, opened.fd, opened.identity, mapping)

    def unregister(self, name: str) -> None:
        """Forget one region, or every region when ``name`` is empty (unknown names are not an error).

        A region a request in flight reads or writes stays (INTERNAL, Triton's words and status: the
        same call succeeds once the request is done); unregistering every region forgets the others.
        """
        if name:
            region = self._regions.get(name)
            if region is not None and region.users:
                raise InternalError(
                    f"Cannot unregister shared memory region '{name}', it is currently in use. "
                    f"({_in_flight(region)})"
                )
            if region is not None:
                self._regions.pop(name).close()
            return
        busy = [region for region in self._regions.values() if region.users]
        for region in [region for region in self._regions.values() if not region.users]:
            self._regions.pop(region.name).close()
        if busy:
            raise InternalError(
                "Failed to unregister the following system shared memory regions: "
                + "".join(f"{region.name} ," for region in busy)
                + " ("
                + "; ".join(f"'{region.name}': {_in_flight(region)}" for region in busy)
                + ")"
            )

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
            raise NotFoundError(f"{where}: Unable to find shared memory region: '{name}'")  # Triton's words
        return region

    def close(self) -> None:
        """Forget every region, in use or not (the server is stopping)."""
        for region in self._regions.values():
            region.close()
        self._regions.clear()


def _in_flight(region: Region) -> str:
    requests = "request" if region.users == 1 else "requests"
    return f"{region.users} {requests} in flight read or write it; unregister it when they are done"


def output_buffer(
    spec: ModelSpec, batch: int, name: str, capacity: int, view: memoryview | None
) -> npt.NDArray[Any] | None:
    """Where a backend may run output ``name`` into, when its shape is known before running: ``view``
    (of a mapped region: no copy at all) or else a buffer of the server, written to the region after
    in one copy. None when the shape is not known or ``capacity`` bytes are too few."""
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
    if count * out.datatype.numpy.itemsize > capacity:
        return None  # too small: reported after running, as for every other backend
    if view is None:
        return np.empty(shape, dtype=out.datatype.numpy)
    return np.frombuffer(view, dtype=out.datatype.numpy, count=count).reshape(shape)


async def write_output(
    region: Region,
    offset: int,
    capacity: int,
    array: npt.NDArray[Any],
    datatype: dtypes.Datatype,
    where: str,
    output: str = "",
) -> int:
    """Write the output named ``output`` into ``capacity`` bytes of a region at ``offset``; returns the
    bytes written."""
    data = dtypes.array_to_bytes(array, datatype)
    view = data if isinstance(data, memoryview) else memoryview(data)
    await region.write(offset, capacity, view, where, output)
    return len(view)
