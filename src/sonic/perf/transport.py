"""How the load generator reaches a server: a thin adapter over :mod:`sonic.client`'s transports.

Requests are encoded once, before the load starts (:meth:`Transport.encode`), and sent many times as
bytes with the client transport's ``raw_call``, so the generator spends its CPU on timing, not on
protobuf. ``native`` (the default, lighter) is the client's own HTTP/2 code, ``grpcio`` is grpc.aio;
both come from :func:`sonic.client.transport.factory.open_transport`, so a new client transport is
a new ``--transport`` here with no change to this module.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any, Self

import numpy.typing as npt
from tritonclient.grpc import service_pb2

from sonic.client.config import ClientConfig, TransportKind
from sonic.client.errors import ClientError
from sonic.client.transport.factory import open_transport
from sonic.protocol.grpc_codec import encode_infer_request
from sonic.protocol.types import ParameterValue

TRANSPORTS = tuple(sorted(kind.value for kind in TransportKind))


def transport_name(value: str) -> str:
    """A transport's name as :data:`TRANSPORTS` spells it: ``native``, the old name of ``h2``, becomes ``h2``
    (the log notes it once, here, rather than once per connection)."""
    return TransportKind(value).value


class PerfError(RuntimeError):
    """A measurement cannot proceed: unreachable server, unknown model, bad input specification."""


class RequestFailed(Exception):
    """One inference request failed; the load goes on and the failure is counted."""


class Transport:
    """Metadata, config, statistics and inference calls for one model on one server.

    ``kind`` is one of :data:`TRANSPORTS` (checked by :class:`~sonic.perf.engine.PerfConfig`).
    """

    def __init__(
        self, address: str, model: str, version: str = "", *, kind: str = "h2", timeout_s: float = 600.0
    ) -> None:
        self.address = address
        self.model = model
        self.version = version
        self.timeout_s = timeout_s
        config = ClientConfig(transport=TransportKind(kind), timeout_s=timeout_s, control_timeout_s=timeout_s)
        self._client = open_transport(address, config)

    async def close(self) -> None:
        await self._client.close()

    async def infer(self, payload: bytes) -> bytes | memoryview:
        """Send one encoded request; return the serialized response. Raises :class:`RequestFailed`."""
        try:
            return await self._client.raw_call("ModelInfer", payload, self.timeout_s)
        except ClientError as exc:
            raise RequestFailed(str(exc)) from None

    def encode(
        self,
        arrays: Mapping[str, npt.NDArray[Any]],
        datatypes: Mapping[str, str],
        parameters: Mapping[str, ParameterValue] | None = None,
    ) -> bytes:
        """One request's bytes, built before the load starts and sent many times."""
        return encode_infer_request(self.model, self.version, arrays, datatypes, parameters)

    async def _unary(self, method: str, request: Any, response_type: Any) -> Any:
        try:
            return await self._client.call(method, request, response_type)
        except ClientError as exc:
            raise PerfError(f"{method} for model '{self.model}' at {self.address} failed: {exc}") from None

    async def model_metadata(self) -> service_pb2.ModelMetadataResponse:
        request = service_pb2.ModelMetadataRequest(name=self.model, version=self.version)
        result: service_pb2.ModelMetadataResponse = await self._unary(
            "ModelMetadata", request, service_pb2.ModelMetadataResponse
        )
        return result

    async def model_config(self) -> service_pb2.ModelConfigResponse:
        request = service_pb2.ModelConfigRequest(name=self.model, version=self.version)
        result: service_pb2.ModelConfigResponse = await self._unary(
            "ModelConfig", request, service_pb2.ModelConfigResponse
        )
        return result

    async def statistics(self) -> service_pb2.ModelStatisticsResponse:
        request = service_pb2.ModelStatisticsRequest(name=self.model, version=self.version)
        result: service_pb2.ModelStatisticsResponse = await self._unary(
            "ModelStatistics", request, service_pb2.ModelStatisticsResponse
        )
        return result

    async def shm_register(self, name: str, key: str, offset: int, byte_size: int) -> None:
        """Register a system shared-memory region with the server (``sonic perf --shared-memory system``)."""
        try:
            await self._client.shm_register(name, key, offset, byte_size)
        except ClientError as exc:
            raise PerfError(
                f"registering system shared memory region '{name}' ({byte_size} bytes) at {self.address} "
                f"failed: {exc}"
            ) from None

    async def shm_unregister(self, name: str) -> None:
        try:
            await self._client.shm_unregister(name)
        except ClientError as exc:
            raise PerfError(
                f"unregistering system shared memory region '{name}' at {self.address} failed: {exc}"
            ) from None

    async def __aenter__(self) -> Self:
        return self

    async def __aexit__(self, *exc_info: object) -> None:
        await self.close()
