"""A traced inference call on each front end: the protocol's own activities around the data plane's.

Only reached while :attr:`sonic.server.trace.requests.TraceManager.active`; the untraced call never comes here.
HTTP stamps ``HTTP_RECV_START`` (the request's arrival), ``HTTP_RECV_END`` (its body read, stamped by
the front end), ``HTTP_SEND_START`` and ``HTTP_SEND_END`` (the response written to the connection here,
rather than after the handler returns). gRPC stamps ``GRPC_WAITREAD_END`` (the message read) and
``GRPC_SEND_START`` (the response encoded and handed to the HTTP/2 writer, which does not say when it left:
Triton's ``GRPC_WAITREAD_START`` and ``GRPC_SEND_END`` are not written). The trace is finished (written)
once the answer is on its way, failed or not.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from dataclasses import replace

from aiohttp import web

from sonic.protocol.types import InferRequest, InferResponse
from sonic.server.dataplane import Arrival, DataPlane
from sonic.server.trace.requests import RequestTrace


async def http_traced(
    dataplane: DataPlane,
    request: web.BaseRequest,
    model_name: str,
    received_ns: int,
    answer: Callable[[RequestTrace | None], Awaitable[web.StreamResponse]],
) -> web.StreamResponse:
    """``answer`` the request, traced when its model's setting samples it."""
    headers = {name: value for name in ("traceparent", "tracestate") if (value := request.headers.get(name))}
    trace = dataplane.traces.begin(model_name, headers)
    if trace is None:
        return await answer(None)
    trace.stamp("HTTP_RECV_START", received_ns)
    try:
        response = await answer(trace)
        trace.stamp("HTTP_SEND_START")
        try:
            await response.prepare(request)  # aiohttp's own send after the handler has nothing left to do
            await response.write_eof()
        except ConnectionError:  # the client left: no HTTP_SEND_END; aiohttp drops the connection as always
            return response
        trace.stamp("HTTP_SEND_END")
        return response
    finally:
        trace.finish()


async def grpc_traced(
    dataplane: DataPlane,
    request: InferRequest,
    arrival: Arrival,
    encode: Callable[[InferResponse], list[bytes | memoryview]],
) -> list[bytes | memoryview]:
    """One unary (or non-decoupled stream) inference, traced when its model's setting samples it."""
    trace = dataplane.traces.begin(request.model_name, arrival.trace_headers)
    if trace is None:
        return encode(await dataplane.infer(request, arrival))
    trace.stamp("GRPC_WAITREAD_END", arrival.received_ns)
    try:
        pieces = encode(await dataplane.infer(request, replace(arrival, trace=trace)))
        trace.stamp("GRPC_SEND_START")
        return pieces
    finally:
        trace.finish()
