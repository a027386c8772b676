"""KServe v2 gRPC frontend on grpcio's asyncio server (``--grpc-server grpcio``).

The native frontend (:mod:`sonic.server.frontends.grpc_native`) is the default; this one stays for
deployments that want grpcio's HTTP/2 stack. Both take their handlers from :class:`GrpcMethods`.
"""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator
from typing import Any

import grpc
from grpc import aio

from sonic.protocol.errors import SonicError
from sonic.protocol.grpc_codec import grpc_status
from sonic.protocol.wire import SERVICE
from sonic.server.dataplane import DataPlane
from sonic.server.frontends.grpc_methods import (
    HEALTH_CHECK_PATH,
    GrpcMethods,
    UnaryMethod,
    as_sonic_error,
    call_kind,
    peer_host,
)
from sonic.server.guard import Guard
from sonic.server.observe import TRACE_HEADERS


class GrpcAioFrontend:
    def __init__(
        self,
        dataplane: DataPlane,
        *,
        max_message_bytes: int,
        guard: Guard | None = None,
        credentials: grpc.ServerCredentials | None = None,
        max_concurrent_streams: int | None = None,
    ) -> None:
        self._methods = GrpcMethods(dataplane)
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
        self._server.add_generic_rpc_handlers((self._handlers(), self._health_handlers()))
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
        self._guard.check(call_kind(method), authorization, peer, peer_host(peer))

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
        def unary(name: str, method: UnaryMethod) -> grpc.RpcMethodHandler[Any, Any]:
            async def handler(request: Any, context: aio.ServicerContext[Any, Any]) -> Any:
                try:
                    if self._guard is not None:
                        self._check(name, context)
                    return await method.handler(request)
                except Exception as exc:  # noqa: BLE001  (mapped to a status below)
                    error = as_sonic_error(exc)
                    await context.abort(grpc_status(error), error.message)

            return grpc.unary_unary_rpc_method_handler(
                handler,
                request_deserializer=method.request_type.FromString,
                response_serializer=method.response_type.SerializeToString,
            )

        handlers = {name: unary(name, method) for name, method in self._methods.unary.items()}
        # Tensor bytes bypass protobuf: these handlers take and return serialized messages.
        handlers["ModelInfer"] = grpc.unary_unary_rpc_method_handler(self._model_infer)
        handlers["ModelStreamInfer"] = grpc.stream_stream_rpc_method_handler(self._model_stream_infer)
        return grpc.method_handlers_generic_handler(SERVICE, handlers)

    def _health_handlers(self) -> grpc.GenericRpcHandler[Any, Any]:
        async def check(data: bytes, context: aio.ServicerContext[Any, Any]) -> bytes:
            try:
                if self._guard is not None:
                    self._check("HealthCheck", context)
                return self._methods.health_check(data)
            except Exception as exc:
                error = as_sonic_error(exc)
                await context.abort(grpc_status(error), error.message)
                raise  # unreachable: abort raises

        service, method = HEALTH_CHECK_PATH.strip("/").split("/")
        return grpc.method_handlers_generic_handler(
            service, {method: grpc.unary_unary_rpc_method_handler(check)}
        )

    def _trace_headers(self, context: aio.ServicerContext[Any, Any]) -> dict[str, str] | None:
        """W3C trace context from the call's metadata, only when spans are being made."""
        if not self._dataplane.wants_trace_context:
            return None
        return {
            key: value
            for key, value in context.invocation_metadata() or ()
            if key in TRACE_HEADERS and isinstance(value, str)
        }

    async def _model_infer(self, data: bytes, context: aio.ServicerContext[Any, Any]) -> bytes:
        try:
            if self._guard is not None:
                self._check("ModelInfer", context)
            return b"".join(await self._methods.infer(data, self._trace_headers(context)))
        except Exception as exc:
            error = as_sonic_error(exc)
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
            await results.put(b"".join(await self._methods.stream_infer(data, trace_headers)))

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
