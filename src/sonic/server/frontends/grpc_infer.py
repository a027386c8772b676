"""``ModelInfer``, the unary inference call of both gRPC front ends: a serialized request in, the serialized
response's pieces out.

Its own module so that it is compiled (``sonic.compiled.COMPILED_MODULES``) while
:mod:`sonic.server.frontends.grpc_methods`, with ``ModelStreamInfer``'s async generators, is not: the native
front end awaits it from compiled code, with no interpreted coroutine between the call and the data plane
(docs/benchmarks.md, "issue 37: identity rate").
"""

from __future__ import annotations

import time

from sonic.protocol.grpc_codec import decode_infer_request, encode_infer_response
from sonic.server.dataplane import Arrival, DataPlane
from sonic.server.frontends.traced import grpc_traced
from sonic.server.header_forward import Forwarded


async def model_infer(
    dataplane: DataPlane,
    data: bytes | bytearray | memoryview,
    trace_headers: dict[str, str] | None = None,
    forwarded: Forwarded = (),
) -> list[bytes | memoryview]:
    """One ``ModelInfer`` call (``forwarded``: the call's headers that become request parameters)."""
    arrival = Arrival(time.perf_counter_ns(), trace_headers, forwarded=forwarded)
    request = decode_infer_request(data)
    if dataplane.traces.active:  # Triton's trace extension: this one check while it is off
        return await grpc_traced(dataplane, request, arrival, encode_infer_response)
    return encode_infer_response(await dataplane.infer(request, arrival))
