"""The gRPC methods of ``inference.GRPCInferenceService``, independent of the gRPC server under them.

Both gRPC frontends (the native HTTP/2 one and the grpcio one) take their handlers from
:class:`GrpcMethods`: unary methods map a protobuf request to a protobuf response; ``ModelInfer`` maps
serialized bytes to serialized pieces through the codec of :mod:`sonic.protocol.grpc_codec`.
"""

from __future__ import annotations

import inspect
import time
from collections.abc import AsyncGenerator, Awaitable, Callable
from dataclasses import dataclass
from typing import Any

from tritonclient.grpc import service_pb2 as pb

from sonic.protocol.errors import InvalidArgumentError
from sonic.protocol.grpc_codec import decode_infer_request, encode_infer_response
from sonic.server.dataplane import Arrival, DataPlane
from sonic.server.frontends.grpc_stream import stream_responses
from sonic.server.frontends.traced import grpc_traced
from sonic.server.header_forward import Forwarded
from sonic.server.log_settings import changes_from_grpc, settings_to_grpc
from sonic.server.trace.settings import answer_to_grpc
from sonic.server.trace.settings import changes_from_grpc as trace_changes_from_grpc

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


def _parameters(request: Any) -> dict[str, object]:
    """A repository call's parameters: each value's set field (None when none is set)."""
    parameters: dict[str, object] = {}
    for key, param in request.parameters.items():
        which = param.WhichOneof("parameter_choice")
        parameters[key] = getattr(param, which) if which else None
    return parameters


async def _repository_load(dp: DataPlane, r: Any) -> Any:
    await dp.load_model(r.model_name, _parameters(r))
    return pb.RepositoryModelLoadResponse()


async def _repository_unload(dp: DataPlane, r: Any) -> Any:
    await dp.unload_model(r.model_name, _parameters(r))
    return pb.RepositoryModelUnloadResponse()


async def _log_settings(dp: DataPlane, r: Any) -> Any:
    settings = await dp.log_settings.update(changes_from_grpc(r))
    return settings_to_grpc(settings, pb.LogSettingsResponse())


def _trace_setting(dp: DataPlane, r: Any) -> Any:
    # As Triton: an empty map reads the settings; the model is checked before the changes are read.
    changes = (lambda: trace_changes_from_grpc(r.settings)) if r.settings else None
    return answer_to_grpc(dp.trace_setting(r.model_name, changes), pb.TraceSettingResponse())


def _shm_register(dp: DataPlane, r: Any) -> Any:
    dp.system_shared_memory_register(r.name, r.key, r.offset, r.byte_size)
    return pb.SystemSharedMemoryRegisterResponse()


def _shm_unregister(dp: DataPlane, r: Any) -> Any:
    dp.system_shared_memory_unregister(r.name)
    return pb.SystemSharedMemoryUnregisterResponse()


def _cuda_shm_register(dp: DataPlane, r: Any) -> Any:
    dp.cuda_shared_memory_register(r.name)  # refuses (UNIMPLEMENTED): no CUDA regions here
    return pb.CudaSharedMemoryRegisterResponse()


def _cuda_shm_unregister(dp: DataPlane, r: Any) -> Any:
    dp.cuda_shared_memory_unregister(r.name)
    return pb.CudaSharedMemoryUnregisterResponse()


# Method name -> what answers it from the data plane and the request message: the answer itself, or
# (the three that wait on the data plane) an awaitable of it. Request and response types are the
# service's ``<name>Request``/``<name>Response``.
_ANSWERS: dict[str, Callable[[DataPlane, Any], Any]] = {
    "ServerLive": lambda dp, _: pb.ServerLiveResponse(live=dp.server_live()),
    "ServerReady": lambda dp, _: pb.ServerReadyResponse(ready=dp.server_ready()),
    "ModelReady": lambda dp, r: pb.ModelReadyResponse(ready=dp.model_ready(r.name, r.version)),
    "ServerMetadata": lambda dp, _: dp.server_metadata(),
    "ModelMetadata": lambda dp, r: dp.model_metadata(r.name, r.version),
    "ModelConfig": lambda dp, r: dp.model_config(r.name, r.version),
    "ModelStatistics": lambda dp, r: dp.model_statistics(r.name, r.version),
    "RepositoryIndex": lambda dp, r: dp.repository_index(r.ready),
    "RepositoryModelLoad": _repository_load,
    "RepositoryModelUnload": _repository_unload,
    "SystemSharedMemoryRegister": _shm_register,
    "SystemSharedMemoryUnregister": _shm_unregister,
    "SystemSharedMemoryStatus": lambda dp, r: dp.system_shared_memory_status(r.name),
    "CudaSharedMemoryRegister": _cuda_shm_register,
    "CudaSharedMemoryUnregister": _cuda_shm_unregister,
    "CudaSharedMemoryStatus": lambda dp, r: dp.cuda_shared_memory_status(r.name),
    "LogSettings": _log_settings,
    "TraceSetting": _trace_setting,
}


def _bound(dp: DataPlane, answer: Callable[[DataPlane, Any], Any]) -> Callable[[Any], Awaitable[Any]]:
    async def handler(request: Any) -> Any:
        result = answer(dp, request)
        return await result if inspect.isawaitable(result) else result

    return handler


class GrpcMethods:
    """Every method of the service, bound to one data plane."""

    def __init__(self, dataplane: DataPlane) -> None:
        self.dataplane = dataplane
        self.unary = {
            name: UnaryMethod(
                getattr(pb, f"{name}Request"), getattr(pb, f"{name}Response"), _bound(dataplane, answer)
            )
            for name, answer in _ANSWERS.items()
        }

    def health_check(self, data: bytes | bytearray | memoryview) -> bytes:
        """``grpc.health.v1.Health/Check``: SERVING while the server is ready, for any service name."""
        if data and data[0] != 0x0A:  # HealthCheckRequest has one field: 1, ``service``, a string
            msg = "malformed HealthCheckRequest: expected only field 1 (service)"
            raise InvalidArgumentError(msg)
        return _HEALTH_SERVING if self.dataplane.server_ready() else _HEALTH_NOT_SERVING

    async def infer(
        self,
        data: bytes | bytearray | memoryview,
        trace_headers: dict[str, str] | None = None,
        forwarded: Forwarded = (),
    ) -> list[bytes | memoryview]:
        """``ModelInfer``: a serialized request in, the serialized response's pieces out (``forwarded``:
        the call's headers that become request parameters)."""
        arrival = Arrival(time.perf_counter_ns(), trace_headers, forwarded=forwarded)
        request = decode_infer_request(data)
        if self.dataplane.traces.active:  # Triton's trace extension: this one check while it is off
            return await grpc_traced(self.dataplane, request, arrival, encode_infer_response)
        return encode_infer_response(await self.dataplane.infer(request, arrival))

    def stream_responses(
        self,
        data: bytes | bytearray | memoryview,
        trace_headers: dict[str, str] | None = None,
        forwarded: Forwarded = (),
    ) -> AsyncGenerator[list[bytes | memoryview], None]:
        """One ``ModelStreamInfer`` request's messages, as pieces (:func:`.grpc_stream.stream_responses`:
        async generators live there, as mypyc compiles this module and no async generator)."""
        return stream_responses(self.dataplane, data, trace_headers, forwarded)
