"""``ModelStreamInfer``'s async generators: one request's messages, and a decoupled model's answers.

Apart from :mod:`.grpc_methods`, which hands them out (``GrpcMethods.stream_responses``), because that
module is compiled with mypyc (:mod:`sonic.compiled`) and mypyc compiles no async generators: this
module is not compiled. :func:`infer_decoupled` is the data plane's decoupled inference, here for the
same reason (its only caller is :func:`stream_responses`; Triton's HTTP/REST has no decoupled inference).
"""

from __future__ import annotations

import time
from collections.abc import AsyncGenerator, AsyncIterator
from contextlib import aclosing
from dataclasses import replace

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
from sonic.server.frontends.traced import grpc_traced
from sonic.server.header_forward import Forwarded, forward
from sonic.server.shm.request import names_shared_memory, resolve
from sonic.server.trace.requests import RequestTrace


async def stream_responses(
    dataplane: DataPlane,
    data: bytes | bytearray | memoryview,
    trace_headers: dict[str, str] | None = None,
    forwarded: Forwarded = (),
) -> AsyncGenerator[list[bytes | memoryview], None]:
    """One ``ModelStreamInfer`` request's messages, as pieces: one for most models, zero or more for a
    decoupled one. Errors travel inside the stream, as Triton's do."""
    try:
        arrival = Arrival(time.perf_counter_ns(), trace_headers, forwarded=forwarded)
        request = decode_infer_request(data)
        if not dataplane.is_decoupled(request.model_name, request.model_version):
            if dataplane.traces.active:
                yield await grpc_traced(dataplane, request, arrival, _final_stream_response)
                return
            response = await dataplane.infer(request, arrival)
            yield wrap_stream_response(encode_infer_response(response, final=True))
            return
    except Exception as exc:  # noqa: BLE001  (reported in the stream message)
        yield [encode_stream_error(data, as_sonic_error(exc).message)]
        return
    trace = dataplane.traces.begin(request.model_name, trace_headers) if dataplane.traces.active else None
    if trace is not None:
        trace.stamp("GRPC_WAITREAD_END", arrival.received_ns)
        arrival = replace(arrival, trace=trace)
    answers = infer_decoupled(dataplane, request, arrival)
    try:
        async with aclosing(answers):
            try:
                # The request is validated and queued here: its errors are answered as other models' are.
                first = await anext(answers)
            except Exception as exc:  # noqa: BLE001  (reported in the stream message)
                yield [encode_stream_error(data, as_sonic_error(exc).message)]
                return
            async for message in _decoupled_messages(request, _chain(first, answers), trace):
                yield message
    finally:
        if trace is not None:  # as Triton's: one request, its compute, a send per response
            trace.stamp("REQUEST_END")
            trace.finish()


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
