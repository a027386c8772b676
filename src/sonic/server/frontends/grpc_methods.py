"""The gRPC methods of ``inference.GRPCInferenceService``, independent of the gRPC server under them.

Both gRPC frontends (the native HTTP/2 one and the grpcio one) take their handlers from
:class:`GrpcMethods`: unary methods map a protobuf request to a protobuf response; ``ModelInfer`` maps
serialized bytes to serialized pieces through the codec of :mod:`sonic.protocol.grpc_codec`.
"""

from __future__ import annotations

import time
from collections.abc import AsyncGenerator, AsyncIterator, Awaitable, Callable
from contextlib import aclosing
from dataclasses import dataclass
from typing import Any

from tritonclient.grpc import service_pb2

from sonic.protocol.errors import InvalidArgumentError
from sonic.protocol.grpc_codec import (
    decode_infer_request,
    encode_decoupled_error,
    encode_infer_response,
    encode_stream_error,
)
from sonic.protocol.types import InferRequest, InferResponse
from sonic.protocol.wire import wrap_stream_response
from sonic.server.dataplane import DataPlane
from sonic.server.decoupled import StreamAnswer
from sonic.server.frontends.gate import as_sonic_error
from sonic.server.log_settings import changes_from_grpc, settings_to_grpc

# gRPC's standard health service (grpc-health-probe, Kubernetes gRPC probes), as Triton serves it: only
# Check. Its two messages are one field each, so they are read and written by hand.
HEALTH_CHECK_PATH = "/grpc.health.v1.Health/Check"
_HEALTH_SERVING = b"\x08\x01"  # HealthCheckResponse{status: SERVING}
_HEALTH_NOT_SERVING = b"\x08\x02"


@dataclass(frozen=True)
class UnaryMethod:
    request_type: Any  # the protobuf message class
    response_type: Any
    handler: Callable[[Any], Awaitable[Any]]


class GrpcMethods:
    """Every method of the service, bound to one data plane."""

    def __init__(self, dataplane: DataPlane) -> None:
        self.dataplane = dataplane
        self.unary = self._unary_methods(dataplane)

    def _unary_methods(self, dp: DataPlane) -> dict[str, UnaryMethod]:
        pb = service_pb2

        async def server_live(_: Any) -> Any:
            return pb.ServerLiveResponse(live=dp.server_live())

        async def server_ready(_: Any) -> Any:
            return pb.ServerReadyResponse(ready=dp.server_ready())

        async def model_ready(r: Any) -> Any:
            return pb.ModelReadyResponse(ready=dp.model_ready(r.name, r.version))

        async def server_metadata(_: Any) -> Any:
            return dp.server_metadata()

        async def model_metadata(r: Any) -> Any:
            return dp.model_metadata(r.name, r.version)

        async def model_config(r: Any) -> Any:
            return dp.model_config(r.name, r.version)

        async def model_statistics(r: Any) -> Any:
            return dp.model_statistics(r.name, r.version)

        async def repository_index(r: Any) -> Any:
            return dp.repository_index(r.ready)

        async def repository_load(r: Any) -> Any:
            parameters: dict[str, object] = {}
            for key, param in r.parameters.items():
                which = param.WhichOneof("parameter_choice")
                parameters[key] = getattr(param, which) if which else None
            await dp.load_model(r.model_name, parameters)
            return pb.RepositoryModelLoadResponse()

        async def repository_unload(r: Any) -> Any:
            parameters: dict[str, object] = {}
            for key, param in r.parameters.items():
                which = param.WhichOneof("parameter_choice")
                parameters[key] = getattr(param, which) if which else None
            await dp.unload_model(r.model_name, parameters)
            return pb.RepositoryModelUnloadResponse()

        async def shm_register(r: Any) -> Any:
            dp.system_shared_memory_register(r.name, r.key, r.offset, r.byte_size)
            return pb.SystemSharedMemoryRegisterResponse()

        async def shm_unregister(r: Any) -> Any:
            dp.system_shared_memory_unregister(r.name)
            return pb.SystemSharedMemoryUnregisterResponse()

        async def shm_status(r: Any) -> Any:
            return dp.system_shared_memory_status(r.name)

        async def cuda_shm_register(r: Any) -> Any:
            dp.cuda_shared_memory_register(r.name)

        async def cuda_shm_unregister(r: Any) -> Any:
            dp.cuda_shared_memory_unregister(r.name)
            return pb.CudaSharedMemoryUnregisterResponse()

        async def cuda_shm_status(r: Any) -> Any:
            return dp.cuda_shared_memory_status(r.name)

        async def log_settings(r: Any) -> Any:
            settings = await dp.log_settings.update(changes_from_grpc(r))
            return settings_to_grpc(settings, pb.LogSettingsResponse())

        handlers: dict[str, Callable[[Any], Awaitable[Any]]] = {
            "ServerLive": server_live,
            "ServerReady": server_ready,
            "ModelReady": model_ready,
            "ServerMetadata": server_metadata,
            "ModelMetadata": model_metadata,
            "ModelConfig": model_config,
            "ModelStatistics": model_statistics,
            "RepositoryIndex": repository_index,
            "RepositoryModelLoad": repository_load,
            "RepositoryModelUnload": repository_unload,
            "SystemSharedMemoryRegister": shm_register,
            "SystemSharedMemoryUnregister": shm_unregister,
            "SystemSharedMemoryStatus": shm_status,
            "CudaSharedMemoryRegister": cuda_shm_register,
            "CudaSharedMemoryUnregister": cuda_shm_unregister,
            "CudaSharedMemoryStatus": cuda_shm_status,
            "LogSettings": log_settings,
        }
        return {
            name: UnaryMethod(getattr(pb, f"{name}Request"), getattr(pb, f"{name}Response"), handler)
            for name, handler in handlers.items()
        }

    def health_check(self, data: bytes | bytearray | memoryview) -> bytes:
        """``grpc.health.v1.Health/Check``: SERVING while the server is ready, for any service name."""
        if data and data[0] != 0x0A:  # HealthCheckRequest has one field: 1, ``service``, a string
            msg = "malformed HealthCheckRequest: expected only field 1 (service)"
            raise InvalidArgumentError(msg)
        return _HEALTH_SERVING if self.dataplane.server_ready() else _HEALTH_NOT_SERVING

    async def infer(
        self, data: bytes | bytearray | memoryview, trace_headers: dict[str, str] | None = None
    ) -> list[bytes | memoryview]:
        """``ModelInfer``: a serialized request in, the serialized response's pieces out."""
        request = decode_infer_request(data, time.perf_counter_ns())
        request.trace_headers = trace_headers
        response = await self.dataplane.infer(request)
        return encode_infer_response(response)

    async def stream_responses(
        self, data: bytes | bytearray | memoryview, trace_headers: dict[str, str] | None = None
    ) -> AsyncGenerator[list[bytes | memoryview], None]:
        """One ``ModelStreamInfer`` request's messages, as pieces: one for most models, zero or more for a
        decoupled one. Errors travel inside the stream, as Triton's do."""
        try:
            request = decode_infer_request(data, time.perf_counter_ns())
            request.trace_headers = trace_headers
            if not self.dataplane.is_decoupled(request.model_name, request.model_version):
                response = await self.dataplane.infer(request)
                yield wrap_stream_response(encode_infer_response(response, final=True))
                return
        except Exception as exc:  # noqa: BLE001  (reported in the stream message)
            yield [encode_stream_error(data, as_sonic_error(exc).message)]
            return
        answers = self.dataplane.infer_decoupled(request)
        async with aclosing(answers):
            try:
                # The request is validated and queued here: its errors are answered as other models' are.
                first = await anext(answers)
            except Exception as exc:  # noqa: BLE001  (reported in the stream message)
                yield [encode_stream_error(data, as_sonic_error(exc).message)]
                return
            async for message in self._decoupled_messages(request, _chain(first, answers)):
                yield message

    @staticmethod
    async def _decoupled_messages(
        request: InferRequest, answers: AsyncIterator[StreamAnswer]
    ) -> AsyncIterator[list[bytes | memoryview]]:
        """Each response with its ``triton_final_response``; the final flag sent alone becomes an empty
        response only when the request asked for it (``triton_enable_empty_final_response``), as Triton."""
        empty_final = request.parameters.get("triton_enable_empty_final_response") is True
        async for answer in answers:
            if answer.error is not None:
                yield [
                    encode_decoupled_error(
                        request.model_name, request.request_id, answer.error.message, final=answer.final
                    )
                ]
            elif answer.response is not None:
                yield wrap_stream_response(encode_infer_response(answer.response, final=answer.final))
            elif empty_final:
                # Triton's empty final response names the model but no version.
                empty = InferResponse(request.model_name, "", request.request_id, [])
                yield wrap_stream_response(encode_infer_response(empty, final=True))


async def _chain(first: StreamAnswer, rest: AsyncIterator[StreamAnswer]) -> AsyncIterator[StreamAnswer]:
    yield first
    if not first.final:
        async for answer in rest:
            yield answer
