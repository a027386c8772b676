"""Zero-copy shared memory: callers fill inputs in place and read outputs as views of one region.

``AsyncClient.shm_request(shapes)`` borrows a region of a server on this host, laid out for one
request's inputs and outputs, and hands out numpy views of it: ``inputs`` (writable, filled in place)
and, from each ``infer()``, the outputs (read-only). The client copies nothing: the server reads the
inputs from the region and writes the outputs into it.

The views stay valid until ``release()`` (or the end of ``async with``), which gives the region back
to the pool for the next request. numpy cannot invalidate a view, so one used after release reads
whatever a later request put there; it never reads unmapped memory (the mapping lives as long as any
view of it). A request is pinned to its region and server: it is not retried or sent elsewhere.
"""

from __future__ import annotations

import functools
from collections.abc import Awaitable, Callable, Mapping, Sequence
from types import TracebackType
from typing import Any, Self

import numpy.typing as npt

from sonic.client import batching
from sonic.client.config import ClientConfig
from sonic.client.errors import ClientError, ClientStateError, InputError, InvalidRequestError, NoServerError
from sonic.client.registry import ServerEntry, ServerRegistry
from sonic.client.shm import Region, RegionPool, layout
from sonic.client.transport.base import ModelInfo
from sonic.client.tries import Tries
from sonic.protocol import dtypes
from sonic.protocol.types import WireInput, WireOutputRequest, WireRequest, WireResponse

Arrays = dict[str, npt.NDArray[Any]]
Tensors = Mapping[str, tuple[str, tuple[int, ...]]]  # name -> (datatype, shape)
Send = Callable[[WireRequest], Awaitable[WireResponse]]


def byte_sizes(tensors: Tensors) -> dict[str, int]:
    return {
        name: dtypes.element_count(shape) * dtypes.from_name(datatype).numpy.itemsize
        for name, (datatype, shape) in tensors.items()
    }


def plan(
    info: ModelInfo, shapes: Mapping[str, Sequence[int]], outputs: Sequence[str] | None
) -> tuple[Tensors, Tensors]:
    """Datatype and shape of each input and output, checked: all must have a size known now."""
    specs = batching.input_specs(info, shapes)
    inputs: dict[str, tuple[str, tuple[int, ...]]] = {}
    batch_sizes: dict[str, int] = {}
    for name, given in shapes.items():
        spec = specs[name]
        shape = tuple(int(d) for d in given)
        if spec.datatype == "BYTES":
            raise InputError(
                f"model '{info.name}' input '{name}': BYTES elements have no fixed size, so they cannot be "
                "filled in place in shared memory; use infer()"
            )
        batching.check_shape(info, spec, shape, batch_sizes)
        inputs[name] = (spec.datatype, shape)
    batch = batching.common_batch(info, batch_sizes)
    if info.max_batch_size > 0 and not 1 <= batch <= info.max_batch_size:
        raise InputError(
            f"model '{info.name}': batch size {batch} given, a shared-memory request takes 1 to "
            f"{info.max_batch_size} (the model's max_batch_size; infer() splits larger batches)"
        )
    names = batching.output_names(info, outputs)
    out_specs = {t.name: t for t in info.outputs}
    out: dict[str, tuple[str, tuple[int, ...]]] = {}
    for name, shape_or_none in batching.output_shapes(info, names, batch).items():
        spec = out_specs[name]
        if shape_or_none is None or spec.datatype == "BYTES":
            raise InputError(
                f"model '{info.name}' output '{name}': {spec.datatype} {list(spec.dims)} has no size known "
                "before the call, so it cannot have a place in shared memory; leave it out of `outputs` "
                "or use infer()"
            )
        out[name] = (spec.datatype, shape_or_none)
    return inputs, out


def no_local_server(model: str, entries: Sequence[ServerEntry]) -> NoServerError:
    def state(entry: ServerEntry) -> str:
        if not entry.healthy:
            return "down"
        if model not in entry.models:
            return "does not serve it"
        if not entry.transport.is_local:
            return "not on this host"
        return "refused shared memory" if entry.shm_refused else "usable"

    servers = ", ".join(f"{e.address} ({state(e)})" for e in entries) or "none"
    return NoServerError(
        f"model '{model}': no server on this host takes shared memory for it (servers: {servers})"
    )


async def borrow_region(
    model: str,
    version: str,
    config: ClientConfig,
    registry: ServerRegistry,
    tries: Tries,
    tensors: tuple[Tensors, Tensors],
    send: Callable[[ServerEntry, WireRequest], Awaitable[WireResponse]],
) -> ShmRequest:
    """A request laid out in a region of the least busy server on this host that takes shared memory
    for ``model``; ``tensors`` are its inputs and outputs as :func:`plan` gives them."""
    inputs, outputs = tensors
    size = region_bytes(inputs, outputs)
    local = [e for e in registry.candidates(model) if tries.use_shm(e)]
    for entry in sorted(local, key=lambda e: e.outstanding):
        region = await tries.region(entry, size)
        if region is not None and entry.shm is not None:
            pinned = functools.partial(send, entry)
            return ShmRequest(model, version, config.timeout_s, entry.shm, region, inputs, outputs, pinned)
    raise no_local_server(model, registry.entries)


def region_bytes(inputs: Tensors, outputs: Tensors) -> int:
    """Bytes a region needs for these inputs followed by these outputs (each aligned)."""
    _, end = layout("", byte_sizes(inputs))
    _, end = layout("", byte_sizes(outputs), end)
    return end


class ShmRequest:
    """One request's inputs and outputs in a borrowed region (see the module docstring).

    ``inputs`` maps each input name to a writable view of its place in the region. Each ``infer()``
    sends the request as the views hold it now and returns the outputs as read-only views, valid
    until the next ``infer()`` of this request overwrites them or ``release()``. One ``infer()`` at a time.
    """

    def __init__(
        self,
        model: str,
        version: str,
        timeout_s: float | None,
        pool: RegionPool,
        region: Region,
        inputs: Tensors,
        outputs: Tensors,
        send: Send,
    ) -> None:
        self.model = model
        self._pool: RegionPool | None = pool
        self._region: Region | None = region
        self._send = send
        self._busy = False
        placed_in, end = layout(region.name, byte_sizes(inputs))
        self._placed_out, _ = layout(region.name, byte_sizes(outputs), end)
        self._outputs = dict(outputs)
        self.inputs: Arrays = {
            name: region.array(placed_in[name].offset, dtypes.from_name(dt).numpy, shape, writable=True)
            for name, (dt, shape) in inputs.items()
        }
        self._wire = WireRequest(
            model=model,
            version=version,
            inputs=tuple(WireInput(n, dt, shape, None, placed_in[n]) for n, (dt, shape) in inputs.items()),
            outputs=tuple(WireOutputRequest(n, p) for n, p in self._placed_out.items()),
            timeout_s=timeout_s,
        )

    @property
    def released(self) -> bool:
        return self._region is None

    async def infer(self, request_id: str = "") -> Arrays:
        """Run the model on the inputs as they are in the region; outputs as read-only views of it."""
        region = self._region
        if region is None:
            msg = (
                f"shared-memory request for model '{self.model}' was released (or dropped after an error); "
                "borrow a new one with shm_request()"
            )
            raise ClientStateError(msg)
        if self._busy:
            msg = f"shared-memory request for model '{self.model}' has an infer() in flight; await it first"
            raise ClientStateError(msg)
        self._wire.request_id = request_id
        self._busy = True
        try:
            response = await self._send(self._wire)
        except InvalidRequestError:
            raise  # a definite answer: the server is done with the region, which stays usable
        except BaseException:
            # Timeouts, cancellation, lost connections: the server may still write into the region.
            await self._drop()
            raise
        finally:
            self._busy = False
        return self._views(region, response)

    def _views(self, region: Region, response: WireResponse) -> Arrays:
        by_name = {o.name: o for o in response.outputs}
        views: Arrays = {}
        for name, (datatype, expected) in self._outputs.items():
            where = f"model '{self.model}' output '{name}'"
            output = by_name.get(name)
            if output is None:
                raise ClientError(f"{where}: missing from the response of the server")
            dtype = dtypes.from_name(output.datatype).numpy
            size = dtypes.element_count(output.shape) * dtype.itemsize
            if output.datatype != datatype or size > self._placed_out[name].byte_size:
                raise ClientError(
                    f"{where}: the server answered {output.datatype} {list(output.shape)}, "
                    f"expected {datatype} {list(expected)} in shared memory"
                )
            views[name] = region.array(self._placed_out[name].offset, dtype, output.shape, writable=False)
        return views

    def release(self) -> None:
        """Give the region back to the pool; the views must not be used after. Idempotent."""
        if self._busy:
            msg = f"shared-memory request for model '{self.model}' cannot be released during infer()"
            raise ClientStateError(msg)
        region, pool = self._region, self._pool
        self._region = self._pool = None
        if region is not None and pool is not None:
            pool.release(region)

    async def _drop(self) -> None:
        region, pool = self._region, self._pool
        self._region = self._pool = None
        if region is not None and pool is not None:
            await pool.discard(region)

    async def __aenter__(self) -> Self:
        return self

    async def __aexit__(
        self, exc_type: type[BaseException] | None, exc: BaseException | None, tb: TracebackType | None
    ) -> None:
        self.release()
