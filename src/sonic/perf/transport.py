"""How the load generator reaches a server: one small class per transport behind :class:`Transport`.

Both send pre-serialized ``ModelInferRequest`` bytes, so the generator spends its CPU on timing, not on
protobuf: :class:`NativeTransport` through ``sonic.client``'s own HTTP/2 code (the default, lighter),
:class:`GrpcTransport` over grpc.aio. A shared-memory transport would register regions once in
:meth:`Transport.open` and send requests naming them from :meth:`Transport.encode`; nothing else in the
engine needs to change for it.
"""

from __future__ import annotations

import abc
from collections.abc import Mapping
from typing import Any, Self

import numpy as np
import numpy.typing as npt
from grpc import aio
from tritonclient.grpc import service_pb2

from sonic.protocol import dtypes

MAX_MESSAGE_BYTES = 2**31 - 1
SERVICE = "/inference.GRPCInferenceService/"


class PerfError(RuntimeError):
    """A measurement cannot proceed: unreachable server, unknown model, bad input specification."""


class RequestFailed(Exception):
    """One inference request failed; the load goes on and the failure is counted."""


def encode_infer_request(
    model: str, version: str, arrays: Mapping[str, npt.NDArray[Any]], datatypes: Mapping[str, str]
) -> bytes:
    """A serialized ``ModelInferRequest`` carrying every tensor in ``raw_input_contents``."""
    request = service_pb2.ModelInferRequest(model_name=model, model_version=version)
    for name, array in arrays.items():
        datatype = dtypes.from_name(datatypes[name])
        request.inputs.add(name=name, datatype=datatype.name, shape=list(array.shape))
        request.raw_input_contents.append(bytes(dtypes.array_to_bytes(np.ascontiguousarray(array), datatype)))
    payload: bytes = request.SerializeToString()
    return payload


class Transport(abc.ABC):
    """Metadata, config, statistics and inference calls for one model on one server.

    Subclasses move bytes: ``open``, ``close``, ``infer`` and ``_unary`` (one control call).
    """

    def __init__(self, address: str, model: str, version: str = "", *, timeout_s: float = 600.0) -> None:
        self.address = address
        self.model = model
        self.version = version
        self.timeout_s = timeout_s

    @abc.abstractmethod
    async def open(self) -> None: ...

    @abc.abstractmethod
    async def close(self) -> None: ...

    @abc.abstractmethod
    async def infer(self, payload: bytes) -> bytes | memoryview:
        """Send one encoded request; return the serialized response. Raises :class:`RequestFailed`."""

    @abc.abstractmethod
    async def _unary(self, method: str, request: Any, response_type: Any) -> Any:
        """One control call; raises :class:`PerfError` naming the method, model and server."""

    def encode(self, arrays: Mapping[str, npt.NDArray[Any]], datatypes: Mapping[str, str]) -> bytes:
        """One request's bytes, built before the load starts and sent many times."""
        return encode_infer_request(self.model, self.version, arrays, datatypes)

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

    async def __aenter__(self) -> Self:
        await self.open()
        return self

    async def __aexit__(self, *exc_info: object) -> None:
        await self.close()


def _identity(data: bytes) -> bytes:
    return data


class GrpcTransport(Transport):
    """KServe v2 gRPC on grpc.aio: works against ``sonic serve`` and any Triton."""

    _channel: aio.Channel | None = None

    async def open(self) -> None:
        options = [
            ("grpc.max_send_message_length", MAX_MESSAGE_BYTES),
            ("grpc.max_receive_message_length", MAX_MESSAGE_BYTES),
        ]
        self._channel = aio.insecure_channel(self.address, options=options)
        self._infer = self._channel.unary_unary(
            SERVICE + "ModelInfer", request_serializer=_identity, response_deserializer=_identity
        )

    async def close(self) -> None:
        if self._channel is not None:
            await self._channel.close(grace=None)
            self._channel = None

    async def _unary(self, method: str, request: Any, response_type: Any) -> Any:
        if self._channel is None:
            msg = "transport is not open; use it as 'async with'"
            raise PerfError(msg)
        call = self._channel.unary_unary(
            SERVICE + method,
            request_serializer=lambda message: message.SerializeToString(),
            response_deserializer=response_type.FromString,
        )
        try:
            return await call(request, timeout=self.timeout_s)
        except aio.AioRpcError as exc:
            raise PerfError(
                f"{method} for model '{self.model}' at {self.address} failed: "
                f"{exc.code().name}: {exc.details()}"
            ) from None

    async def infer(self, payload: bytes) -> bytes:
        try:
            response: bytes = await self._infer(payload, timeout=self.timeout_s)
        except aio.AioRpcError as exc:
            raise RequestFailed(f"{exc.code().name}: {exc.details()}") from None
        return response


class NativeTransport(Transport):
    """KServe v2 gRPC through ``sonic.client``'s own HTTP/2 transport: a lighter load generator."""

    def __init__(self, address: str, model: str, version: str = "", *, timeout_s: float = 600.0) -> None:
        from sonic.client.transport.h2 import NativeTransport as ClientTransport  # noqa: PLC0415

        super().__init__(address, model, version, timeout_s=timeout_s)
        self._client = ClientTransport(address, control_timeout_s=timeout_s)

    async def open(self) -> None:
        """Connects on the first call."""

    async def close(self) -> None:
        await self._client.close()

    async def infer(self, payload: bytes) -> bytes | memoryview:
        from sonic.client.errors import ClientError  # noqa: PLC0415

        try:
            return await self._client.raw_call("ModelInfer", payload, self.timeout_s)
        except ClientError as exc:
            raise RequestFailed(str(exc)) from None

    async def _unary(self, method: str, request: Any, response_type: Any) -> Any:
        from sonic.client.errors import ClientError  # noqa: PLC0415

        try:
            data = await self._client.raw_call(method, request.SerializeToString(), self.timeout_s)
        except ClientError as exc:
            raise PerfError(f"{method} for model '{self.model}' at {self.address} failed: {exc}") from None
        return response_type.FromString(bytes(data))


TRANSPORTS: dict[str, type[Transport]] = {"grpcio": GrpcTransport, "native": NativeTransport}
