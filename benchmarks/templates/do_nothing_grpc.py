"""A grpc.aio servicer that answers every ModelInfer with an empty message (run by benchmarks.grpc_frontend).

The ceiling of any server built on grpcio's asyncio server: no decoding, no model, no tensor back.
``python do_nothing_grpc.py PORT`` prints ``ready`` once it listens on 127.0.0.1:PORT.
"""

from __future__ import annotations

import sys

import grpc
import uvloop
from grpc import aio


async def infer(request: bytes, context: aio.ServicerContext[bytes, bytes]) -> bytes:  # noqa: ARG001
    return b""


async def serve(port: str) -> None:
    server = aio.server()
    handler = grpc.unary_unary_rpc_method_handler(infer)
    service = grpc.method_handlers_generic_handler("inference.GRPCInferenceService", {"ModelInfer": handler})
    server.add_generic_rpc_handlers((service,))
    server.add_insecure_port(f"127.0.0.1:{port}")
    await server.start()
    print("ready", flush=True)
    await server.wait_for_termination()


if __name__ == "__main__":
    uvloop.run(serve(sys.argv[1]))
