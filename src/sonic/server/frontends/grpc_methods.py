"""The gRPC methods of ``inference.GRPCInferenceService``, independent of the gRPC server under them.

Both gRPC frontends (the native HTTP/2 one and the grpcio one) take their handlers from
:class:`GrpcMethods`: unary methods map a protobuf request to a protobuf response; ``ModelInfer`` maps
serialized bytes to serialized pieces, skipping protobuf for tensor bytes (see :mod:`sonic.protocol.wire`).
"""

from __future__ import annotations

import time
from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from typing import Any

from tritonclient.grpc import service_pb2

from sonic.errors import InvalidArgumentError
from sonic.protocol import dtypes
from sonic.protocol.wire import raw_contents_parts, split_raw_contents, wrap_stream_response
from sonic.server.dataplane import DataPlane
from sonic.server.frontends.gate import as_sonic_error
from sonic.server.types import InferRequest, InferResponse, InputTensor, ShmRef

SERVICE = "inference.GRPCInferenceService"
# gRPC's standard health service (grpc-health-probe, Kubernetes gRPC probes), as Triton serves it: only
# Check. Its two messages are one field each, so they are read and written by hand.
HEALTH_CHECK_PATH = "/grpc.health.v1.Health/Check"
_HEALTH_SERVING = b"\x08\x01"  # HealthCheckResponse{status: SERVING}
_HEALTH_NOT_SERVING = b"\x08\x02"


def _parameter_int(parameters: Any, key: str) -> int:
    if key not in parameters:
        return 0
    param = parameters[key]
    which = param.WhichOneof("parameter_choice")
    if which in {"int64_param", "uint64_param"}:
        return int(getattr(param, which))
    raise InvalidArgumentError(f"request parameter '{key}' must be an integer, got {which}")


def _shm_ref(parameters: Any, where: str) -> ShmRef | None:
    """The ``shared_memory_*`` parameters of an input or output, as Triton reads them."""
    if "shared_memory_region" not in parameters:
        return None
    param = parameters["shared_memory_region"]
    if param.WhichOneof("parameter_choice") != "string_param":
        raise InvalidArgumentError(f"{where}: parameter 'shared_memory_region' must be a string")
    if "shared_memory_byte_size" not in parameters:
        raise InvalidArgumentError(
            f"{where}: 'shared_memory_region' is given without 'shared_memory_byte_size'"
        )
    return ShmRef(
        param.string_param,
        _parameter_int(parameters, "shared_memory_byte_size"),
        _parameter_int(parameters, "shared_memory_offset"),
    )


def decode_infer_request(data: bytes | bytearray | memoryview, received_ns: int) -> InferRequest:
    """A serialized ``ModelInferRequest`` as our request type, tensor bytes left in place."""
    rest, raw = split_raw_contents(data)
    try:
        head = service_pb2.ModelInferRequest.FromString(rest if isinstance(rest, bytes) else bytes(rest))
    except Exception as exc:  # noqa: BLE001  (protobuf's DecodeError and friends)
        raise InvalidArgumentError(f"malformed ModelInferRequest: {exc}") from None
    shm = [_shm_ref(t.parameters, f"model '{head.model_name}' input '{t.name}'") for t in head.inputs]
    # As in Triton, inputs in shared memory take no raw_input_contents entry.
    expected_raw = sum(ref is None for ref in shm)
    if raw and len(raw) != expected_raw:
        raise InvalidArgumentError(
            f"model '{head.model_name}': raw_input_contents has {len(raw)} entries for {expected_raw} inputs "
            "not in shared memory; when raw contents are used every such input must have one"
        )
    inputs = []
    raw_index = 0
    for tensor, ref in zip(head.inputs, shm, strict=True):
        shape = tuple(int(d) for d in tensor.shape)
        if ref is not None:
            inputs.append(InputTensor(tensor.name, tensor.datatype, shape, shm=ref))
            continue
        if raw:
            inputs.append(InputTensor(tensor.name, tensor.datatype, shape, raw=raw[raw_index]))
            raw_index += 1
            continue
        where = f"model '{head.model_name}' input '{tensor.name}'"
        datatype = dtypes.from_name(tensor.datatype)
        if not tensor.HasField("contents"):
            raise InvalidArgumentError(f"{where}: no data (neither raw_input_contents nor contents)")
        if datatype.contents_field is None:
            raise InvalidArgumentError(
                f"{where}: {datatype.name} data can only be sent as raw_input_contents, not typed contents"
            )
        values = getattr(tensor.contents, datatype.contents_field)
        array = dtypes.array_from_contents(values, datatype, shape, where)
        inputs.append(InputTensor(tensor.name, tensor.datatype, shape, array=array))
    return InferRequest(
        model_name=head.model_name,
        model_version=head.model_version,
        inputs=inputs,
        request_id=head.id,
        outputs=[o.name for o in head.outputs] or None,
        priority=_parameter_int(head.parameters, "priority"),
        timeout_us=_parameter_int(head.parameters, "timeout"),
        received_ns=received_ns,
        output_shm={
            o.name: ref
            for o in head.outputs
            if (ref := _shm_ref(o.parameters, f"model '{head.model_name}' output '{o.name}'")) is not None
        },
    )


def encode_infer_response(response: InferResponse) -> list[bytes | memoryview]:
    """A serialized ``ModelInferResponse`` as pieces: tensors stay views of the output arrays."""
    head = service_pb2.ModelInferResponse(
        model_name=response.model_name, model_version=response.model_version, id=response.request_id
    )
    contents: list[bytes | memoryview] = []
    for output in response.outputs:
        tensor = head.outputs.add(name=output.name, datatype=output.datatype, shape=output.shape)
        if output.shm is not None:
            tensor.parameters["shared_memory_region"].string_param = output.shm.region
            tensor.parameters["shared_memory_byte_size"].int64_param = output.shm.byte_size
            if output.shm.offset:
                tensor.parameters["shared_memory_offset"].int64_param = output.shm.offset
            # Triton keeps one (empty) raw_output_contents entry per output so indices line up.
            contents.append(b"")
            continue
        contents.append(dtypes.array_to_bytes(output.array, dtypes.from_name(output.datatype)))
    return raw_contents_parts(head.SerializeToString(), contents)


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
            await dp.unload_model(r.model_name)
            return pb.RepositoryModelUnloadResponse()

        async def shm_register(r: Any) -> Any:
            dp.system_shared_memory_register(r.name, r.key, r.offset, r.byte_size)
            return pb.SystemSharedMemoryRegisterResponse()

        async def shm_unregister(r: Any) -> Any:
            dp.system_shared_memory_unregister(r.name)
            return pb.SystemSharedMemoryUnregisterResponse()

        async def shm_status(r: Any) -> Any:
            return dp.system_shared_memory_status(r.name)

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

    async def stream_infer(
        self, data: bytes | bytearray | memoryview, trace_headers: dict[str, str] | None = None
    ) -> list[bytes | memoryview]:
        """One ``ModelStreamInfer`` message, as pieces: errors travel inside the stream, as Triton's do."""
        try:
            return wrap_stream_response(await self.infer(data, trace_headers))
        except Exception as exc:  # noqa: BLE001  (reported in the stream message)
            error = as_sonic_error(exc)
            message = service_pb2.ModelStreamInferResponse(error_message=error.message)
            try:
                head, _ = split_raw_contents(data)
                request = service_pb2.ModelInferRequest.FromString(head)
                message.infer_response.model_name = request.model_name
                message.infer_response.id = request.id
            except Exception:  # noqa: BLE001, S110  (a malformed request has no id to echo)
                pass
            return [message.SerializeToString()]
