"""KServe v2 gRPC frontend (``inference.GRPCInferenceService``) on grpc aio.

A thin adapter: messages in, data-plane call, messages out, errors through the one status table.
``ModelInfer`` and ``ModelStreamInfer`` skip protobuf for tensor bytes (see :mod:`sonic.protocol.wire`).
"""

from __future__ import annotations

import asyncio
import logging
import time
from collections.abc import AsyncIterator, Awaitable, Callable
from typing import Any
from urllib.parse import unquote

import grpc
from grpc import aio
from tritonclient.grpc import service_pb2

from sonic.errors import InternalError, InvalidArgumentError, SonicError, grpc_status
from sonic.protocol import dtypes
from sonic.protocol.wire import append_raw_contents, split_raw_contents, wrap_stream_response
from sonic.server.dataplane import DataPlane
from sonic.server.guard import CallKind, Guard
from sonic.server.observe import TRACE_HEADERS
from sonic.server.types import InferRequest, InferResponse, InputTensor, ShmRef

log = logging.getLogger(__name__)

SERVICE = "inference.GRPCInferenceService"


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


def decode_infer_request(data: bytes, received_ns: int) -> InferRequest:
    """A serialized ``ModelInferRequest`` as our request type, tensor bytes left in place."""
    rest, raw = split_raw_contents(data)
    try:
        head = service_pb2.ModelInferRequest.FromString(rest)
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


def encode_infer_response(response: InferResponse) -> bytes:
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
    return append_raw_contents(head.SerializeToString(), contents)


def _as_sonic_error(exc: Exception) -> SonicError:
    if isinstance(exc, SonicError):
        return exc
    log.exception("unexpected error", exc_info=exc)
    return InternalError(f"internal error: {exc!r}")


_HEALTH_METHODS = frozenset({"ServerLive", "ServerReady", "ModelReady"})


def _call_kind(method: str) -> CallKind:
    if method in _HEALTH_METHODS:
        return CallKind.HEALTH
    if method == "RepositoryIndex":
        return CallKind.INDEX
    if method in {"ModelInfer", "ModelStreamInfer"}:
        return CallKind.INFER
    return CallKind.CONTROL


def peer_host(peer: str) -> str:
    """The host of a gRPC peer (``ipv4:1.2.3.4:5``, ``ipv6:%5B::1%5D:5``) as HTTP's peername spells it."""
    scheme, _, rest = peer.partition(":")
    if scheme not in {"ipv4", "ipv6"}:
        return peer
    return unquote(rest).rsplit(":", 1)[0].strip("[]")


class GrpcFrontend:
    def __init__(
        self,
        dataplane: DataPlane,
        *,
        max_message_bytes: int,
        guard: Guard | None = None,
        credentials: grpc.ServerCredentials | None = None,
        max_concurrent_streams: int | None = None,
    ) -> None:
        self._dataplane = dataplane
        self._guard = guard
        self._credentials = credentials
        options: list[tuple[str, Any]] = [
            ("grpc.max_send_message_length", max_message_bytes),
            ("grpc.max_receive_message_length", max_message_bytes),
            ("grpc.so_reuseport", 0),
        ]
        if max_concurrent_streams is not None:
            options.append(("grpc.max_concurrent_streams", max_concurrent_streams))
        self._server = aio.server(options=options)
        self._server.add_generic_rpc_handlers((self._handlers(),))
        self.port = 0

    def _check(self, method: str, context: aio.ServicerContext[Any, Any]) -> None:
        """Token, rate and admission checks; only called when a guard is configured."""
        assert self._guard is not None
        authorization = None
        for key, value in context.invocation_metadata() or ():
            if key == "authorization":
                authorization = value if isinstance(value, str) else value.decode()
                break
        peer = context.peer()  # "ipv4:127.0.0.1:50512": one client connection
        self._guard.check(_call_kind(method), authorization, peer, peer_host(peer))

    # --- lifecycle ------------------------------------------------------------------------------------

    async def start(self, host: str, port: int) -> int:
        address = f"[{host}]:{port}" if ":" in host else f"{host}:{port}"
        if self._credentials is not None:
            self.port = self._server.add_secure_port(address, self._credentials)
        else:
            self.port = self._server.add_insecure_port(address)
        if self.port == 0:
            raise OSError(f"cannot bind gRPC to {address}")
        await self._server.start()
        return self.port

    async def stop(self, grace_s: float) -> None:
        """Refuse new calls at once; let calls in flight finish for up to ``grace_s``."""
        await self._server.stop(grace_s)

    # --- handlers ---------------------------------------------------------------------------------------

    def _handlers(self) -> grpc.GenericRpcHandler[Any, Any]:
        pb = service_pb2

        guarded = self._guard is not None

        def unary(
            method: Callable[[Any], Awaitable[Any]], request_type: Any, response_type: Any
        ) -> grpc.RpcMethodHandler[Any, Any]:
            name = method.__name__.title().replace("_", "")

            async def handler(request: Any, context: aio.ServicerContext[Any, Any]) -> Any:
                try:
                    if guarded:
                        self._check(name, context)
                    return await method(request)
                except Exception as exc:  # noqa: BLE001  (mapped to a status below)
                    error = _as_sonic_error(exc)
                    await context.abort(grpc_status(error), error.message)

            return grpc.unary_unary_rpc_method_handler(
                handler,
                request_deserializer=request_type.FromString,
                response_serializer=response_type.SerializeToString,
            )

        dp = self._dataplane

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

        async def shm_register(r: Any) -> Any:
            dp.system_shared_memory_register(r.name, r.key, r.offset, r.byte_size)
            return pb.SystemSharedMemoryRegisterResponse()

        async def shm_unregister(r: Any) -> Any:
            dp.system_shared_memory_unregister(r.name)
            return pb.SystemSharedMemoryUnregisterResponse()

        async def shm_status(r: Any) -> Any:
            return dp.system_shared_memory_status(r.name)

        async def repository_unload(r: Any) -> Any:
            await dp.unload_model(r.model_name)
            return pb.RepositoryModelUnloadResponse()

        handlers = {
            "ServerLive": unary(server_live, pb.ServerLiveRequest, pb.ServerLiveResponse),
            "ServerReady": unary(server_ready, pb.ServerReadyRequest, pb.ServerReadyResponse),
            "ModelReady": unary(model_ready, pb.ModelReadyRequest, pb.ModelReadyResponse),
            "ServerMetadata": unary(server_metadata, pb.ServerMetadataRequest, pb.ServerMetadataResponse),
            "ModelMetadata": unary(model_metadata, pb.ModelMetadataRequest, pb.ModelMetadataResponse),
            "ModelConfig": unary(model_config, pb.ModelConfigRequest, pb.ModelConfigResponse),
            "ModelStatistics": unary(model_statistics, pb.ModelStatisticsRequest, pb.ModelStatisticsResponse),
            "RepositoryIndex": unary(repository_index, pb.RepositoryIndexRequest, pb.RepositoryIndexResponse),
            "RepositoryModelLoad": unary(
                repository_load, pb.RepositoryModelLoadRequest, pb.RepositoryModelLoadResponse
            ),
            "RepositoryModelUnload": unary(
                repository_unload, pb.RepositoryModelUnloadRequest, pb.RepositoryModelUnloadResponse
            ),
            "SystemSharedMemoryRegister": unary(
                shm_register, pb.SystemSharedMemoryRegisterRequest, pb.SystemSharedMemoryRegisterResponse
            ),
            "SystemSharedMemoryUnregister": unary(
                shm_unregister,
                pb.SystemSharedMemoryUnregisterRequest,
                pb.SystemSharedMemoryUnregisterResponse,
            ),
            "SystemSharedMemoryStatus": unary(
                shm_status, pb.SystemSharedMemoryStatusRequest, pb.SystemSharedMemoryStatusResponse
            ),
            # Tensor bytes bypass protobuf: handlers take and return serialized messages.
            "ModelInfer": grpc.unary_unary_rpc_method_handler(self._model_infer),
            "ModelStreamInfer": grpc.stream_stream_rpc_method_handler(self._model_stream_infer),
        }
        return grpc.method_handlers_generic_handler(SERVICE, handlers)

    def _trace_headers(self, context: aio.ServicerContext[Any, Any]) -> dict[str, str] | None:
        """W3C trace context from the call's metadata, only when spans are being made."""
        if not self._dataplane.wants_trace_context:
            return None
        return {
            key: value
            for key, value in context.invocation_metadata() or ()
            if key in TRACE_HEADERS and isinstance(value, str)
        }

    async def _infer_bytes(self, data: bytes, trace_headers: dict[str, str] | None = None) -> bytes:
        request = decode_infer_request(data, time.perf_counter_ns())
        request.trace_headers = trace_headers
        response = await self._dataplane.infer(request)
        return encode_infer_response(response)

    async def _model_infer(self, data: bytes, context: aio.ServicerContext[Any, Any]) -> bytes:
        try:
            if self._guard is not None:
                self._check("ModelInfer", context)
            return await self._infer_bytes(data, self._trace_headers(context))
        except Exception as exc:
            error = _as_sonic_error(exc)
            await context.abort(grpc_status(error), error.message)
            raise  # unreachable: abort raises

    async def _model_stream_infer(
        self, requests: AsyncIterator[bytes], context: aio.ServicerContext[Any, Any]
    ) -> AsyncIterator[bytes]:
        """Requests of a stream run concurrently; responses go back as each completes."""
        if self._guard is not None:
            try:
                self._check("ModelStreamInfer", context)
            except SonicError as error:
                await context.abort(grpc_status(error), error.message)
        results: asyncio.Queue[bytes | None] = asyncio.Queue()
        running: set[asyncio.Task[None]] = set()

        trace_headers = self._trace_headers(context)

        async def one(data: bytes) -> None:
            try:
                payload = wrap_stream_response(await self._infer_bytes(data, trace_headers))
            except Exception as exc:  # noqa: BLE001  (errors travel inside the stream, as Triton's do)
                error = _as_sonic_error(exc)
                message = service_pb2.ModelStreamInferResponse(error_message=error.message)
                try:
                    head, _ = split_raw_contents(data)
                    request = service_pb2.ModelInferRequest.FromString(head)
                    message.infer_response.model_name = request.model_name
                    message.infer_response.id = request.id
                except Exception:  # noqa: BLE001, S110  (a malformed request has no id to echo)
                    pass
                payload = message.SerializeToString()
            await results.put(payload)

        async def read() -> None:
            async for data in requests:
                task = asyncio.create_task(one(data))
                running.add(task)
                task.add_done_callback(running.discard)
            if running:
                await asyncio.wait(list(running))
            await results.put(None)

        reader = asyncio.create_task(read())
        try:
            while (payload := await results.get()) is not None:
                yield payload
        finally:
            leftovers = [reader, *running]
            for task in leftovers:
                task.cancel()
            await asyncio.gather(*leftovers, return_exceptions=True)
