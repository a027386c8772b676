"""One request's system shared memory, resolved once: inputs read, outputs placed, outputs written.

The data plane calls :func:`resolve` before the model sees the request; the result goes alongside the
request (the wire type :class:`~sonic.protocol.types.InferRequest` is never changed) into
``ModelVersion.prepare``, which decodes the inputs from the bytes read here and hands the output
buffers to the work item. Where each output goes is decided here, once: a view of the client's mapped
region that a backend may run straight into, a buffer of the server copied into the region after, or
nothing (the shape is not known before running, or the response cache keeps the outputs). The region is
written in one place, :meth:`RequestMemory.write`, which copies nothing when the backend ran into the
view already (``Region.write``).

Each region the request names is held from :func:`resolve` until :meth:`RequestMemory.release`, which
the data plane calls in a ``finally`` (answered, refused, failed or cancelled alike): while held, it
cannot be unregistered (Triton 2.51 refuses that too), so the region a request reads is the region it
writes, and a client's unregister does not pull the memory from under a running model.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import numpy.typing as npt

from sonic.protocol import dtypes
from sonic.protocol.errors import quote
from sonic.protocol.model_config import ModelSpec
from sonic.protocol.types import InferRequest, InferResponse, ShmRef
from sonic.server.shm.regions import Region, SharedMemoryRegistry, output_buffer, write_output


@dataclass(frozen=True, slots=True)
class OutputPlace:
    """Where one output goes: a place in a region, named again when written (it may be unregistered
    meanwhile), and the error prefix that names the output."""

    ref: ShmRef
    where: str


class _Held:
    """The regions a request holds (each once per tensor that names it); released once."""

    __slots__ = ("regions",)

    def __init__(self) -> None:
        self.regions: list[Region] = []

    def hold(self, region: Region) -> Region:
        region.users += 1
        self.regions.append(region)
        return region

    def release(self) -> None:
        regions, self.regions = self.regions, []
        for region in regions:
            region.users -= 1


@dataclass(frozen=True, slots=True)
class RequestMemory:
    """A request's shared memory: the bytes of its inputs in shared memory (by their index in the
    request), where its outputs go, the buffers a backend may run them into (None: none), and the
    regions it holds until :meth:`release`."""

    inputs: dict[int, memoryview]
    outputs: dict[str, OutputPlace]
    buffers: dict[str, npt.NDArray[Any]] | None
    held: _Held

    def release(self) -> None:
        """Let the regions go (they may be unregistered again); a second call does nothing."""
        self.held.release()

    async def write(self, shared_memory: SharedMemoryRegistry, response: InferResponse) -> None:
        """Each output with a place into its region; the response then names the bytes written."""
        for output in response.outputs:
            place = self.outputs.get(output.name)
            if place is None:
                continue
            ref = place.ref
            region = shared_memory.get(ref.region, place.where)
            datatype = dtypes.from_name(output.datatype)
            written = await write_output(
                region, ref.offset, ref.byte_size, output.array, datatype, place.where, output.name
            )
            output.shm = ShmRef(ref.region, written, ref.offset)


def names_shared_memory(request: InferRequest) -> bool:
    """Whether ``request`` has an input or an output in shared memory. Most have neither: their callers
    skip :func:`resolve`, a coroutine made and awaited per request for nothing (issue 37 item 4)."""
    return bool(request.output_shm) or any(tensor.shm is not None for tensor in request.inputs)


async def resolve(
    shared_memory: SharedMemoryRegistry, request: InferRequest, spec: ModelSpec, cached: bool
) -> RequestMemory | None:
    """Read the inputs in shared memory (views of mapped regions, or copies checked against the object's
    size) and place the outputs, checked before the model runs so a bad region costs no inference.
    ``cached``: the response cache keeps the outputs past the request, so they get no buffer (they must
    not be views of a client's region). None when the request names no shared memory."""
    if not names_shared_memory(request):
        return None
    held = _Held()
    try:
        return await _resolve(shared_memory, request, spec, cached, held)
    except BaseException:  # refused, or cancelled during a copy: nothing stays held
        held.release()
        raise


async def _resolve(
    shared_memory: SharedMemoryRegistry, request: InferRequest, spec: ModelSpec, cached: bool, held: _Held
) -> RequestMemory:
    inputs: dict[int, memoryview] = {}
    for index, tensor in enumerate(request.inputs):
        if tensor.shm is not None:
            where = f"model {quote(request.model_name)} input {quote(tensor.name)}"
            region = held.hold(shared_memory.get(tensor.shm.region, where))
            inputs[index] = await region.read(tensor.shm.offset, tensor.shm.byte_size, where)
    batch = request.inputs[0].shape[0] if request.inputs and request.inputs[0].shape else 0
    outputs: dict[str, OutputPlace] = {}
    buffers: dict[str, npt.NDArray[Any]] = {}
    for name, wanted in request.output_shm.items():
        where = f"model {quote(request.model_name)} output {quote(name)}"
        region = held.hold(shared_memory.get(wanted.region, where))
        view = region.output_view(wanted.offset, wanted.byte_size, where)
        buffer = None if cached else output_buffer(spec, batch, name, wanted.byte_size, view)
        if buffer is not None:
            buffers[name] = buffer
        outputs[name] = OutputPlace(wanted, where)
    return RequestMemory(inputs, outputs, buffers or None, held)
