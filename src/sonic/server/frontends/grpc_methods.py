"""The gRPC methods of ``inference.GRPCInferenceService``, independent of the gRPC server under them.

Both gRPC frontends (the native HTTP/2 one and the grpcio one) take their handlers from
:class:`GrpcMethods`: unary methods map a protobuf request to a protobuf response; ``ModelInfer`` maps
serialized bytes to serialized pieces through the codec of :mod:`sonic.protocol.grpc_codec`.
"""

from __future__ import annotations

import inspect
import time
from collections.abc import AsyncGenerator, AsyncIterator, Awaitable, Callable
from contextlib import aclosing
from dataclasses import dataclass, replace
from typing import Any

from tritonclient.grpc import service_pb2 as pb

from sonic.protocol.errors import InvalidArgumentError, UnavailableError, quote
from sonic.protocol.grpc_codec import (
    decode_infer_request,
    encode_decoupled_error,
    encode_infer_response,
    encode_stream_error,
)
from sonic.protocol.types import InferRequest, InferResponse
from sonic.protocol.wire import wrap_stream_response
from sonic.server.classification.top_k import classify_off_loop
from sonic.server.dataplane import Arrival, DataPlane
from sonic.server.decoupled import DecoupledCall, StreamAnswer
from sonic.server.frontends.gate import as_sonic_error
from sonic.server.frontends.grpc_infer import model_infer
from sonic.server.frontends.traced import grpc_traced
from sonic.server.header_forward import Forwarded, forward
from sonic.server.log_settings import changes_from_grpc, settings_to_grpc
from sonic.server.shm.request import names_shared_memory, resolve
from sonic.server.trace.requests import RequestTrace
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
        """``ModelInfer``: :func:`sonic.server.frontends.grpc_infer.model_infer` (the native front end calls
        that directly)."""
        return await model_infer(self.dataplane, data, trace_headers, forwarded)

    async def stream_responses(
        self,
        data: bytes | bytearray | memoryview,
        trace_headers: dict[str, str] | None = None,
        forwarded: Forwarded = (),
    ) -> AsyncGenerator[list[bytes | memoryview], None]:
        """One ``ModelStreamInfer`` request's messages, as pieces: one for most models, zero or more for a
        decoupled one. Errors travel inside the stream, as Triton's do."""
        try:
            arrival = Arrival(time.perf_counter_ns(), trace_headers, forwarded=forwarded)
            request = decode_infer_request(data)
            if not self.dataplane.is_decoupled(request.model_name, request.model_version):
                if self.dataplane.traces.active:
                    yield await grpc_traced(self.dataplane, request, arrival, _final_stream_response)
                    return
                response = await self.dataplane.infer(request, arrival)
                yield wrap_stream_response(encode_infer_response(response, final=True))
                return
        except Exception as exc:  # noqa: BLE001  (reported in the stream message)
            yield [encode_stream_error(data, as_sonic_error(exc).message)]
            return
        trace = (
            self.dataplane.traces.begin(request.model_name, trace_headers)
            if self.dataplane.traces.active
            else None
        )
        if trace is not None:
            trace.stamp("GRPC_WAITREAD_END", arrival.received_ns)
            arrival = replace(arrival, trace=trace)
        answers = infer_decoupled(self.dataplane, request, arrival)
        try:
            async with aclosing(answers):
                try:
                    # The request is validated and queued here: its errors are answered as other models' are.
                    first = await anext(answers)
                except Exception as exc:  # noqa: BLE001  (reported in the stream message)
                    yield [encode_stream_error(data, as_sonic_error(exc).message)]
                    return
                async for message in self._decoupled_messages(request, _chain(first, answers), trace):
                    yield message
        finally:
            if trace is not None:  # as Triton's: one request, its compute, a send per response
                trace.stamp("REQUEST_END")
                trace.finish()

    @staticmethod
    async def _decoupled_messages(
        request: InferRequest, answers: AsyncIterator[StreamAnswer], trace: RequestTrace | None = None
    ) -> AsyncIterator[list[bytes | memoryview]]:
        """Each response with its ``triton_final_response``; the final flag sent alone becomes an empty
        response only when the request asked for it (``triton_enable_empty_final_response``), as Triton.
        Traced: ``INFER_RESPONSE_COMPLETE`` at the first message (once, as Triton's), ``GRPC_SEND_START``
        as each is handed to the writer."""
        empty_final = request.parameters.get("triton_enable_empty_final_response") is True
        async for message in _decoupled_pieces(request, answers, empty_final):
            if trace is not None:
                if not trace.stamped("INFER_RESPONSE_COMPLETE"):
                    trace.stamp("INFER_RESPONSE_COMPLETE")
                trace.stamp("GRPC_SEND_START")
            yield message


async def _decoupled_pieces(
    request: InferRequest, answers: AsyncIterator[StreamAnswer], empty_final: bool
) -> AsyncIterator[list[bytes | memoryview]]:
    """The messages of a decoupled request's answers (errors in the stream, as Triton's)."""
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


def _final_stream_response(response: InferResponse) -> list[bytes | memoryview]:
    return wrap_stream_response(encode_infer_response(response, final=True))


async def _chain(first: StreamAnswer, rest: AsyncIterator[StreamAnswer]) -> AsyncIterator[StreamAnswer]:
    yield first
    if not first.final:
        async for answer in rest:
            yield answer


async def infer_decoupled(
    plane: DataPlane, request: InferRequest, arrival: Arrival
) -> AsyncGenerator[StreamAnswer, None]:
    """The data plane's decoupled inference: a decoupled model's responses to one request, as it sends
    them; the last one is final. Inputs may be in shared memory; outputs may not (each response has its
    own). Here, not a method of :class:`DataPlane`: that module is compiled with mypyc, which compiles no
    async generators (this module is not compiled), and the gRPC front end is its only caller (Triton's
    HTTP/REST has no decoupled inference)."""
    if not plane.accepting:
        msg = "server is not accepting requests (starting up or shutting down)"
        raise UnavailableError(msg)
    model = plane.models.get(request.model_name, request.model_version)
    if arrival.forwarded:
        forward(request.parameters, arrival.forwarded)
    if request.output_shm:
        raise InvalidArgumentError(
            f"model {quote(request.model_name)} is decoupled: its outputs cannot go to shared memory "
            "(each of its responses would overwrite the region)"
        )
    memory = (
        await resolve(plane.shared_memory, request, model.spec, cached=False)
        if names_shared_memory(request)
        else None
    )
    trace = arrival.trace
    if trace is not None:
        trace.started(model.name, model.version, request.request_id)
    try:
        call = DecoupledCall.start(
            model, request, received_ns=arrival.received_ns, memory=memory, trace=trace
        )
    except BaseException:
        if memory is not None:
            memory.release()
        raise
    plane.in_flight += 1
    try:
        while True:
            for answer in await call.next():
                if request.output_classes and answer.response is not None:
                    answer = StreamAnswer(  # noqa: PLW2901  (the same answer, classified)
                        await classify_off_loop(
                            answer.response, request.output_classes, model.spec.batched, model.labels
                        ),
                        answer.error,
                        answer.final,
                    )
                yield answer
                if answer.final:
                    if trace is not None:  # written after its compute, as Triton's (REQUEST_END last)
                        await call.ended()
                    return
    finally:
        plane.in_flight -= 1
        call.close()
        if memory is not None:
            memory.release()
