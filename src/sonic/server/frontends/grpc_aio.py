"""KServe v2 gRPC frontend on grpcio's asyncio server (``--grpc-server grpcio``).

The native frontend (:mod:`sonic.server.frontends.grpc_h2`) is the default; this one stays for
deployments that want grpcio's HTTP/2 stack. Both take their handlers from :class:`GrpcMethods`.
"""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator, Awaitable, Callable
from contextlib import aclosing
from typing import Any

import grpc
from grpc import aio

from sonic.protocol.grpc_codec import grpc_status
from sonic.protocol.wire import SERVICE
from sonic.server.dataplane import DataPlane
from sonic.server.frontends.base import Frontend, FrontendSettings
from sonic.server.frontends.gate import CallGate, as_sonic_error
from sonic.server.frontends.grpc_methods import HEALTH_CHECK_PATH, GrpcMethods, UnaryMethod
from sonic.server.header_forward import Forwarded
from sonic.server.tls import grpc_server_credentials

Context = aio.ServicerContext[Any, Any]

# Responses of one stream waiting for grpcio to write them: past this, the requests' producers (a
# decoupled model's sender among them) wait, so a slow client holds back its model, not the memory.
MAX_QUEUED_STREAM_RESPONSES = 64


def _metadata(context: Context, key: str) -> str | None:
    """One text metadata value of the call (``-bin`` values are bytes and never asked for here)."""
    for name, value in context.invocation_metadata() or ():
        if name == key:
            return value if isinstance(value, str) else None
    return None


class GrpcAioFrontend(Frontend):
    name = "grpc"
    carries_requests = True

    def __init__(self, dataplane: DataPlane, gate: CallGate, port: int, settings: FrontendSettings) -> None:
        self._methods = GrpcMethods(dataplane)
        self._gate = gate
        self.host = settings.host
        self._header_forward = settings.grpc_header_forward
        self.port = port
        tls = settings.tls
        self._credentials = grpc_server_credentials(tls) if tls is not None else None
        options: list[tuple[str, Any]] = [
            ("grpc.max_send_message_length", settings.max_message_bytes),
            ("grpc.max_receive_message_length", settings.max_message_bytes),
            ("grpc.so_reuseport", 0),
        ]
        if settings.max_concurrent_streams is not None:
            options.append(("grpc.max_concurrent_streams", settings.max_concurrent_streams))
        self._server = aio.server(options=options)
        self._server.add_generic_rpc_handlers((self._handlers(), self._health_handlers()))

    async def _admit(self, method: str, context: Context) -> None:
        """The gate's checks; a refused call is aborted with its status."""
        if self._gate.guard is None:
            return
        try:
            # context.peer() is "ipv4:127.0.0.1:50512": one client connection
            self._gate.admit_grpc(method, _metadata(context, "authorization"), context.peer())
        except Exception as exc:  # noqa: BLE001  (mapped to a status)
            await self._abort(exc, context)

    @staticmethod
    async def _abort(exc: Exception, context: Context) -> None:
        error = as_sonic_error(exc)
        await context.abort(grpc_status(error), error.message)

    # --- lifecycle ------------------------------------------------------------------------------------

    async def start(self) -> None:
        address = self.address
        if self._credentials is not None:
            self.port = self._server.add_secure_port(address, self._credentials)
        else:
            self.port = self._server.add_insecure_port(address)
        if self.port == 0:
            raise OSError(f"cannot bind gRPC to {address}")
        await self._server.start()

    async def stop(self, grace_s: float) -> None:
        await self._server.stop(grace_s)

    # --- handlers ---------------------------------------------------------------------------------------

    def _unary(
        self, name: str, handler: Callable[[Any, Context], Awaitable[Any]]
    ) -> Callable[[Any, Context], Awaitable[Any]]:
        """``handler`` behind the gate, its failures aborting the call with their status."""

        async def call(request: Any, context: Context) -> Any:
            await self._admit(name, context)
            try:
                return await handler(request, context)
            except Exception as exc:
                await self._abort(exc, context)
                raise  # unreachable: abort raises

        return call

    def _handlers(self) -> grpc.GenericRpcHandler[Any, Any]:
        def unary(name: str, method: UnaryMethod) -> grpc.RpcMethodHandler[Any, Any]:
            return grpc.unary_unary_rpc_method_handler(
                self._unary(name, lambda request, _: method.handler(request)),
                request_deserializer=method.request_type.FromString,
                response_serializer=method.response_type.SerializeToString,
            )

        handlers = {name: unary(name, method) for name, method in self._methods.unary.items()}
        # Tensor bytes bypass protobuf: these handlers take and return serialized messages.
        handlers["ModelInfer"] = grpc.unary_unary_rpc_method_handler(
            self._unary("ModelInfer", self._model_infer)
        )
        handlers["ModelStreamInfer"] = grpc.stream_stream_rpc_method_handler(self._model_stream_infer)
        return grpc.method_handlers_generic_handler(SERVICE, handlers)

    def _health_handlers(self) -> grpc.GenericRpcHandler[Any, Any]:
        async def check(data: bytes, _: Context) -> bytes:
            return self._methods.health_check(data)

        service, method = HEALTH_CHECK_PATH.strip("/").split("/")
        return grpc.method_handlers_generic_handler(
            service, {method: grpc.unary_unary_rpc_method_handler(self._unary("HealthCheck", check))}
        )

    def _trace_headers(self, context: Context) -> dict[str, str] | None:
        return self._gate.trace_context(lambda name: _metadata(context, name))

    def _forwarded(self, context: Context) -> Forwarded:
        if not self._header_forward.enabled:
            return ()
        return self._header_forward.grpc(context.invocation_metadata() or ())

    async def _model_infer(self, data: bytes, context: Context) -> bytes:
        return b"".join(
            await self._methods.infer(data, self._trace_headers(context), self._forwarded(context))
        )

    async def _model_stream_infer(
        self, requests: AsyncIterator[bytes], context: Context
    ) -> AsyncIterator[bytes]:
        """Requests of a stream run concurrently; responses go back as each comes (a decoupled model's
        several responses to one request in the order it sent them)."""
        await self._admit("ModelStreamInfer", context)
        results: asyncio.Queue[bytes | None] = asyncio.Queue(MAX_QUEUED_STREAM_RESPONSES)
        running: set[asyncio.Task[None]] = set()
        trace_headers, forwarded = self._trace_headers(context), self._forwarded(context)

        async def one(data: bytes) -> None:
            async with aclosing(self._methods.stream_responses(data, trace_headers, forwarded)) as messages:
                async for parts in messages:
                    await results.put(b"".join(parts))

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
