"""``sonic perf --shared-memory system``: request tensors in POSIX shared memory, as perf_analyzer 2.51 does.

Before the load starts, the inputs of each distinct request are written once into a region of their own
(:class:`sonic.client.shm.Region`: a /dev/shm object of this user, named by
:func:`sonic.protocol.shm_names.region_prefix` so that a server reclaims it if this process dies), and one
more region holds a slot per model output. Every region is registered with the server, and each
pre-encoded request names its inputs and outputs by ``shared_memory_region``/``byte_size``/``offset``:
neither the requests nor the responses carry tensor bytes, so the load measures the server without the
socket copies of the tensors.

Output slots are sized as perf_analyzer sizes them: an output whose dims are all fixed (and not BYTES)
gets its own size, any other ``--output-shared-memory-size`` bytes; either times the batch size. As in
perf_analyzer, one slot per output serves every request, concurrent ones included: they overwrite each
other's results, which a load generator never reads. An output larger than its slot is the server's
error, counted as a failed request.

After the run (normal end, failure, cancellation alike) every region is unregistered and unlinked; the
client's exit hook (:mod:`sonic.client.cleanup`) unlinks what a killed run could not.
"""

from __future__ import annotations

import logging
import math
import time
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from enum import StrEnum
from typing import Any, Protocol, Self

import numpy as np
import numpy.typing as npt

from sonic.client.shm import ALIGN_BYTES, Region, layout
from sonic.perf.inputs import InputSpec, ModelInfo
from sonic.perf.transport import PerfError
from sonic.protocol import dtypes
from sonic.protocol.grpc_codec import encode_request
from sonic.protocol.shm_names import region_prefix
from sonic.protocol.types import ShmRef, WireInput, WireOutputRequest, WireRequest

log = logging.getLogger(__name__)

DEFAULT_OUTPUT_BYTES = 102_400  # perf_analyzer 2.51's --output-shared-memory-size default (100 KB)


class SharedMemoryKind(StrEnum):
    """perf_analyzer's ``--shared-memory`` values."""

    NONE = "none"
    SYSTEM = "system"
    CUDA = "cuda"


@dataclass(frozen=True)
class SharedMemoryConfig:
    """How request tensors travel: in the request (``none``) or in system shared memory."""

    kind: SharedMemoryKind = SharedMemoryKind.NONE
    # Per output and sample, where the model's metadata does not fix the output's size.
    output_bytes: int = DEFAULT_OUTPUT_BYTES

    def __post_init__(self) -> None:
        if self.kind is SharedMemoryKind.CUDA:
            msg = "--shared-memory cuda: sonic perf has no CUDA support; use 'system' or 'none'"
            raise PerfError(msg)
        if self.output_bytes <= 0:
            raise PerfError(
                f"--output-shared-memory-size must be a positive byte count, got {self.output_bytes}"
            )

    @property
    def used(self) -> bool:
        return self.kind is SharedMemoryKind.SYSTEM


class Registrar(Protocol):
    """What registers regions with a server: :class:`sonic.perf.transport.Transport`."""

    async def shm_register(self, name: str, key: str, offset: int, byte_size: int) -> None: ...

    async def shm_unregister(self, name: str) -> None: ...


def output_slot_bytes(spec: InputSpec, batch_size: int, output_bytes: int) -> int:
    """perf_analyzer's slot of one output: its fixed size per sample, else ``output_bytes``, times the batch."""
    fixed = spec.datatype != "BYTES" and all(d >= 0 for d in spec.dims)
    per_sample = (
        math.prod(spec.dims) * dtypes.from_name(spec.datatype).numpy.itemsize if fixed else output_bytes
    )
    return per_sample * batch_size


def encode_shm_request(
    model: str,
    version: str,
    inputs: Sequence[tuple[str, str, tuple[int, ...], ShmRef]],
    outputs: Mapping[str, ShmRef],
) -> bytes:
    """A serialized ModelInferRequest whose inputs ``(name, datatype, shape, place)`` and outputs are all in
    shared memory: no raw_input_contents."""
    request = WireRequest(
        model,
        version,
        tuple(WireInput(name, datatype, shape, None, ref) for name, datatype, shape, ref in inputs),
        tuple(WireOutputRequest(name, ref) for name, ref in outputs.items()),
    )
    head, contents = encode_request(request)
    assert not contents  # every input is in a region
    return bytes(head.SerializeToString())


class SystemSharedMemory:
    """The regions of one run: created, written and registered by :meth:`encode`; unregistered and
    unlinked when the ``async with`` block ends, however it ends."""

    def __init__(self, registrar: Registrar) -> None:
        self._registrar = registrar
        self._prefix = region_prefix()
        self._regions: list[Region] = []
        self._registered: list[str] = []

    @property
    def region_names(self) -> tuple[str, ...]:
        return tuple(region.name for region in self._regions)

    async def _region(self, name: str, size: int) -> Region:
        try:
            region = Region(name, max(size, ALIGN_BYTES))
        except OSError as exc:
            raise PerfError(
                f"cannot create system shared memory object /dev/shm/{name} ({size} bytes): {exc}"
            ) from None
        self._regions.append(region)
        await self._registrar.shm_register(region.name, region.key, 0, region.size)
        self._registered.append(region.name)
        return region

    async def encode(
        self,
        info: ModelInfo,
        version: str,
        requests: Sequence[Mapping[str, npt.NDArray[Any]]],
        *,
        batch_size: int,
        output_bytes: int,
    ) -> tuple[list[bytes], float]:
        """Each request's inputs written once into a region of its own, the output slots into one shared by
        every request; the encoded requests that name them, and the time per request spent converting,
        writing and encoding (nanoseconds; creating and registering the regions not counted)."""
        slots = {spec.name: output_slot_bytes(spec, batch_size, output_bytes) for spec in info.outputs}
        out_name = f"{self._prefix}_out"
        places, end = layout(out_name, slots)
        if slots:
            await self._region(out_name, end)
        payloads = []
        spent_ns = 0
        for index, arrays in enumerate(requests):
            started = time.perf_counter_ns()
            data: dict[str, bytes | memoryview] = {}
            for name, array in arrays.items():
                datatype = dtypes.from_name(info.datatypes[name])
                data[name] = dtypes.array_to_bytes(np.ascontiguousarray(array), datatype)
            in_name = f"{self._prefix}_in{index}"
            sizes = {name: _nbytes(chunk) for name, chunk in data.items()}
            inputs, end = layout(in_name, sizes)
            spent_ns += time.perf_counter_ns() - started
            region = await self._region(in_name, end)
            started = time.perf_counter_ns()
            for name, chunk in data.items():
                region.write(inputs[name].offset, chunk)
            described = [
                (name, info.datatypes[name], tuple(int(d) for d in arrays[name].shape), inputs[name])
                for name in arrays
            ]
            payloads.append(encode_shm_request(info.name, version, described, places))
            spent_ns += time.perf_counter_ns() - started
        return payloads, spent_ns / max(len(payloads), 1)

    async def close(self) -> None:
        """Unregister every region (a failure is logged: the server may be gone), then unlink them all."""
        registered, self._registered = self._registered, []
        regions, self._regions = self._regions, []
        try:
            for name in registered:
                try:
                    await self._registrar.shm_unregister(name)
                except PerfError as exc:
                    log.warning("%s", exc)
        finally:
            for region in regions:  # also when cancelled midway through the unregistering
                region.close()

    async def __aenter__(self) -> Self:
        return self

    async def __aexit__(self, *exc_info: object) -> None:
        await self.close()


def _nbytes(chunk: bytes | memoryview) -> int:
    return chunk.nbytes if isinstance(chunk, memoryview) else len(chunk)
