"""An in-memory server and transport, like httpx's MockTransport: retries, selection and failover
are tested against it without sockets or subprocesses.

A :class:`MemoryServer` runs numpy functions as models and checks requests the way a KServe v2
server does (names, datatypes, batch sizes). Tests steer it: :meth:`MemoryServer.fail_next` answers
the next calls with an error status, :meth:`MemoryServer.hold` keeps calls in flight until
:meth:`MemoryServer.release` or :meth:`MemoryServer.kill` (and :meth:`MemoryServer.revive`).
"""

from __future__ import annotations

import asyncio
import enum
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

import numpy.typing as npt

from sonic.client.errors import ClientError, ConnectionLostError, InvalidRequestError, error_for_status
from sonic.client.transport.base import IndexEntry, ModelInfo, ServerTiming, Transport
from sonic.protocol import dtypes
from sonic.protocol.errors import GrpcCode
from sonic.protocol.types import WireOutput, WireRequest, WireResponse
from sonic.protocol.wire import ModelState

ModelFunction = Callable[[dict[str, npt.NDArray[Any]]], dict[str, npt.NDArray[Any]]]


class Failure(enum.Enum):
    """For fail_next(), besides a status: the connection breaks instead."""

    CONNECTION_LOST = "connection lost"


CONNECTION_LOST = Failure.CONNECTION_LOST


@dataclass(frozen=True)
class MemoryModel:
    info: ModelInfo
    function: ModelFunction


@dataclass(eq=False)
class MemoryServer:
    address: str
    models: dict[str, MemoryModel]
    dead: bool = False
    failures: list[GrpcCode | Failure] = field(default_factory=list)  # statuses for the next calls, in order
    batch_sizes: list[int] = field(default_factory=list)  # of each request that ran
    request_ids: list[str] = field(default_factory=list)
    parameters: list[dict[str, object]] = field(default_factory=list)  # of each request that ran
    in_flight: int = 0
    _open: asyncio.Event = field(default_factory=asyncio.Event)
    _arrived: asyncio.Event = field(default_factory=asyncio.Event)  # set by each call that arrives

    def __post_init__(self) -> None:
        self._open.set()

    def fail_next(self, count: int, status: GrpcCode | Failure = GrpcCode.UNAVAILABLE) -> None:
        self.failures += [status] * count

    def hold(self) -> None:
        """Calls from now on wait (stay in flight) until release() or kill()."""
        self._open.clear()

    def release(self) -> None:
        self._open.set()

    async def until_in_flight(self, count: int) -> None:
        """Return once ``count`` calls are in flight here (held ones stay in flight)."""
        while self.in_flight < count:
            self._arrived.clear()
            await self._arrived.wait()

    def kill(self) -> None:
        self.dead = True
        self._open.set()

    def revive(self) -> None:
        """Back after a kill: as a server restarted on the same address."""
        self.dead = False

    def _error(self, status: GrpcCode | Failure, message: str) -> ClientError:
        if status is Failure.CONNECTION_LOST:
            return ConnectionLostError(message, status=GrpcCode.UNAVAILABLE, server=self.address)
        return error_for_status(status, message, self.address)

    def _check_alive(self) -> None:
        if self.dead:
            raise self._error(CONNECTION_LOST, "failed to connect to all addresses")

    def _model(self, name: str) -> MemoryModel:
        model = self.models.get(name)
        if model is None:
            raise InvalidRequestError(
                f"Request for unknown model: '{name}'", status=GrpcCode.NOT_FOUND, server=self.address
            )
        return model

    async def infer(self, request: WireRequest) -> WireResponse:
        self._check_alive()
        self.in_flight += 1
        self._arrived.set()
        try:
            await self._open.wait()
            self._check_alive()
            if self.failures:
                raise self._error(self.failures.pop(0), "injected failure")
            return self._run(request)
        finally:
            self.in_flight -= 1

    def _run(self, request: WireRequest) -> WireResponse:
        model = self._model(request.model)
        specs = {t.name: t for t in model.info.inputs}
        arrays: dict[str, npt.NDArray[Any]] = {}
        for tensor in request.inputs:
            spec = specs.get(tensor.name)
            if spec is None or spec.datatype != tensor.datatype or tensor.data is None:
                raise InvalidRequestError(
                    f"bad input '{tensor.name}' {tensor.datatype}",
                    status=GrpcCode.INVALID_ARGUMENT,
                    server=self.address,
                )
            datatype = dtypes.from_name(tensor.datatype)
            arrays[tensor.name] = dtypes.array_from_bytes(tensor.data, datatype, tensor.shape, tensor.name)
        batch = next(iter(arrays.values())).shape[0] if model.info.max_batch_size else 1
        if model.info.max_batch_size and not 1 <= batch <= model.info.max_batch_size:
            raise InvalidRequestError(
                f"inference request batch-size must be in 1..{model.info.max_batch_size}, got {batch}",
                status=GrpcCode.INVALID_ARGUMENT,
                server=self.address,
            )
        if any(o.class_count for o in request.outputs):
            msg = "the in-memory transport has no classification extension (class_counts)"
            raise InvalidRequestError(msg, status=GrpcCode.UNIMPLEMENTED, server=self.address)
        self.batch_sizes.append(batch)
        self.request_ids.append(request.request_id)
        self.parameters.append(dict(request.parameters))
        results = model.function(arrays)
        wanted = [o.name for o in request.outputs] or [o.name for o in model.info.outputs]
        outputs = []
        for name in wanted:
            array = results[name]
            datatype = dtypes.from_numpy(array.dtype)
            outputs.append(
                WireOutput(name, datatype.name, array.shape, dtypes.array_to_bytes(array, datatype))
            )
        return WireResponse(request.model, request.version or "1", tuple(outputs))


class MemoryTransport(Transport):
    def __init__(self, server: MemoryServer) -> None:
        self.server = server
        self.address = server.address
        self.is_local = False

    async def server_ready(self) -> bool:
        self.server._check_alive()
        return True

    async def repository_index(self) -> list[IndexEntry]:
        self.server._check_alive()
        return [IndexEntry(name, "1", ModelState.READY) for name in self.server.models]

    async def model_info(self, name: str, version: str) -> ModelInfo:  # noqa: ARG002  (one version)
        self.server._check_alive()
        return self.server._model(name).info

    async def model_statistics(self, name: str, version: str) -> ServerTiming:  # noqa: ARG002
        self.server._check_alive()
        return ServerTiming(success_count=len(self.server.batch_sizes))

    async def infer(self, request: WireRequest) -> WireResponse:
        return await self.server.infer(request)

    async def shm_register(self, name: str, key: str, offset: int, byte_size: int) -> None:  # noqa: ARG002
        msg = "the in-memory server has no shared memory"
        raise InvalidRequestError(msg, status=GrpcCode.UNIMPLEMENTED, server=self.address)

    async def shm_unregister(self, name: str) -> None:  # noqa: ARG002
        self.server._check_alive()

    async def close(self) -> None:
        return None
