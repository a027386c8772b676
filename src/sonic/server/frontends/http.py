"""KServe v2 HTTP/REST frontend on aiohttp's low-level server, sharing the event loop with grpc.aio.

A thin adapter like the gRPC one: route, call the data plane, render JSON, map errors through the one
status table (bodies are ``{"error": "..."}``). aiohttp's low-level ``web.Server`` is used without
its router or middlewares: the path is split once and matched by hand, which keeps the per-request
cost to parsing (llhttp, in C) plus our own work. Request bodies grow chunk by chunk as they arrive,
charged to the server's request-buffer budget (:mod:`sonic.server.budget`) until the request is answered,
and binary tensors are sliced out of them without copies. Every body is bounded: a Content-Length
over ``max_message_bytes`` is answered 413 before a byte is read, gzip/deflate bodies are inflated
(off the loop when large) up to ``max_decompressed_bytes``, and large JSON is parsed in a thread; JSON
that cannot be parsed, however it fails (nesting included), is a 400 that says why.
"""

from __future__ import annotations

import asyncio
import functools
import json
import logging
import time
from collections.abc import Awaitable, Callable
from typing import Any, TypeGuard
from urllib.parse import unquote

from aiohttp import web

from sonic.protocol import http_json
from sonic.protocol.errors import (
    InvalidArgumentError,
    NotFoundError,
    RequestBufferBusyError,
    ResourceExhaustedError,
    UnimplementedError,
    http_status,
)
from sonic.server.budget import BudgetHold, RequestBudget
from sonic.server.config import MAX_GRPC_DECOMPRESSED_BYTES, TlsConfig
from sonic.server.dataplane import DataPlane
from sonic.server.frontends.aiohttp_listener import AiohttpListener
from sonic.server.frontends.base import Frontend
from sonic.server.frontends.gate import CallGate, as_sonic_error
from sonic.server.frontends.http_body import PayloadTooLargeError, read_body, refuse_body
from sonic.server.guard import CallKind
from sonic.server.log_settings import changes_from_json
from sonic.server.tls import http_ssl_context

log = logging.getLogger(__name__)

JSON = "application/json"
# JSON from this size on is parsed in a thread (inflation moves there by itself), so one
# large request does not stall every other connection; smaller ones stay on the loop, where they cost less
# than a thread hand-off.
OFF_LOOP_BYTES = 1 << 18


def _json_response(payload: Any, status: int = 200) -> web.Response:
    return web.Response(
        body=json.dumps(payload, separators=(",", ":")).encode(), status=status, content_type=JSON
    )


def _error_response(exc: Exception) -> web.Response:
    error = as_sonic_error(exc)
    return _json_response({"error": error.message}, int(http_status(error)))


def _health(ok: bool) -> web.Response:
    # Triton answers 200 or 400 with an empty body; tritonclient only looks at the status.
    return web.Response(status=200 if ok else 400)


async def _cuda_status(dp: DataPlane, name: str) -> web.StreamResponse:
    dp.cuda_shared_memory_status(name)
    return _json_response([])


def _is_int(value: object) -> TypeGuard[int]:
    return isinstance(value, int) and not isinstance(value, bool)


async def _cuda_unregister(dp: DataPlane, name: str) -> web.StreamResponse:
    dp.cuda_shared_memory_unregister(name)
    return web.Response(status=200)


class _Server(web.Server):
    """aiohttp's low-level server, counting open connections per client address, and telling a request
    that waits for room in the request buffer budget that its connection is gone (aiohttp does not
    cancel handlers): at shutdown, or a close seen while reading. A connection paused for lack of room
    is not read, so its client's close is seen only when the wait ends (its bound, or room).

    Connections over ``max_per_client`` are accepted but every request on them is answered 429 and
    the connection closed, so the client learns why instead of seeing a reset.
    """

    def __init__(self, handler: Any, *, max_per_client: int | None, **kwargs: Any) -> None:
        super().__init__(handler, **kwargs)
        self._max_per_client = max_per_client
        self._open: dict[str, int] = {}
        self._hosts: dict[object, str] = {}
        self.refused: set[object] = set()  # transports over the limit
        self.holds: dict[object, BudgetHold] = {}  # by connection (aiohttp's handler), its request's

    def connection_made(self, handler: Any, transport: Any) -> None:
        super().connection_made(handler, transport)
        if self._max_per_client is None:
            return
        peer = transport.get_extra_info("peername")
        host = str(peer[0]) if peer else "unknown"
        self._hosts[transport] = host
        self._open[host] = self._open.get(host, 0) + 1
        if self._open[host] > self._max_per_client:
            self.refused.add(transport)

    def connection_lost(self, handler: Any, exc: BaseException | None = None) -> None:
        hold = self.holds.pop(handler, None)
        if hold is not None:
            hold.abandon()
        transport = handler.transport
        host = self._hosts.pop(transport, None)
        if host is not None:
            self.refused.discard(transport)
            self._open[host] -= 1
            if not self._open[host]:
                del self._open[host]
        super().connection_lost(handler, exc)


class HttpFrontend(Frontend):
    name = "http"
    carries_requests = True

    def __init__(
        self,
        dataplane: DataPlane,
        gate: CallGate,
        host: str,
        port: int,
        *,
        max_message_bytes: int,
        tls: TlsConfig | None = None,
        max_connections_per_client: int | None = None,
        max_decompressed_bytes: int = MAX_GRPC_DECOMPRESSED_BYTES,
        budget: RequestBudget,
    ) -> None:
        self._dataplane = dataplane
        self._budget = budget
        self._max_decompressed_bytes = max_decompressed_bytes
        self._gate = gate
        self.host = host
        self.port = port
        self._max_connections_per_client = max_connections_per_client
        self._server: _Server | None = None
        self._max_message_bytes = max_message_bytes
        self._ssl_context = http_ssl_context(tls) if tls is not None else None
        self._listener = AiohttpListener()

    # --- lifecycle ------------------------------------------------------------------------------------

    async def start(self) -> None:
        # auto_decompress off: aiohttp would inflate on the loop with no cap; read_body does it bounded.
        server = self._server = _Server(
            self._handle,
            max_per_client=self._max_connections_per_client,
            access_log=None,
            auto_decompress=False,
        )
        self.port = await self._listener.start(server, self.host, self.port, self._ssl_context)

    async def stop(self, grace_s: float) -> None:
        await self._listener.stop(grace_s)

    # --- dispatch -------------------------------------------------------------------------------------

    async def _handle(self, request: web.BaseRequest) -> web.StreamResponse:
        received_ns = time.perf_counter_ns()
        server = self._server
        assert server is not None  # requests come only once the server started
        if request.transport in server.refused:
            response = _error_response(
                ResourceExhaustedError(
                    f"more than {self._max_connections_per_client} concurrent HTTP connections from this "
                    "client; reuse connections (keep-alive)"
                )
            )
            response.force_close()
            return response
        hold = server.holds[request.protocol] = BudgetHold(self._budget)
        try:
            parts = [unquote(p) for p in request.raw_path.split("?", 1)[0].split("/")[1:]]
            if parts and parts[-1] == "":
                parts.pop()
            kind, handler = self._route(request.method, parts, request, received_ns, hold)
            if self._gate.guard is not None:
                peer = request.transport.get_extra_info("peername") if request.transport else None
                address = str(peer[0]) if peer else "unknown"
                client = f"{address}:{peer[1]}" if peer else "unknown"
                self._gate.admit(kind, request.headers.get("Authorization"), client, address)
            return await handler()
        except (PayloadTooLargeError, RequestBufferBusyError) as exc:
            return await refuse_body(request, exc)
        except Exception as exc:  # noqa: BLE001  (mapped to a status by the one table)
            return _error_response(exc)
        finally:
            hold.release()  # the body (and what was decoded from it as views) is no longer ours
            server.holds.pop(request.protocol, None)

    def _route(
        self, method: str, parts: list[str], request: web.BaseRequest, received_ns: int, hold: BudgetHold
    ) -> tuple[CallKind, Callable[[], Awaitable[web.StreamResponse]]]:
        if not parts or parts[0] != "v2":
            raise NotFoundError(f"no such endpoint: {request.method} {request.path}")
        parts = parts[1:]
        if any(part in {".", ".."} or "/" in part for part in parts):
            raise InvalidArgumentError(
                f"invalid path {request.raw_path!r}: names are one path component, without '.' or '..'"
            )
        dp = self._dataplane

        async def sync(result: Callable[[], web.StreamResponse]) -> web.StreamResponse:
            return result()

        def get(kind: CallKind, make: Callable[[], web.StreamResponse]) -> tuple[CallKind, Any]:
            _expect(method, "GET", request)
            return kind, lambda: sync(make)

        if not parts:
            return get(
                CallKind.CONTROL, lambda: _json_response(http_json.message_to_json(dp.server_metadata()))
            )
        head = parts[0]
        if head == "health" and len(parts) == 2 and parts[1] in {"live", "ready"}:
            check = dp.server_live if parts[1] == "live" else dp.server_ready
            return get(CallKind.HEALTH, lambda: _health(check()))
        if head == "models" and parts[1:] == ["stats"]:
            return get(
                CallKind.CONTROL, lambda: _json_response(http_json.message_to_json(dp.model_statistics()))
            )
        if head == "models" and len(parts) >= 2:
            name, rest = parts[1], parts[2:]
            version = ""
            if len(rest) >= 2 and rest[0] == "versions":
                version, rest = rest[1], rest[2:]
                if not (version.isascii() and version.isdigit()):  # Triton's routes take digits only: 404
                    raise NotFoundError(f"no such endpoint: {request.method} {request.path}")
            action = rest[0] if len(rest) == 1 else ("" if not rest else None)
            if action == "":
                return get(
                    CallKind.CONTROL,
                    lambda: _json_response(http_json.message_to_json(dp.model_metadata(name, version))),
                )
            if action == "ready":
                return get(CallKind.HEALTH, lambda: _health(dp.model_ready(name, version)))
            if action == "config":
                return get(
                    CallKind.CONTROL,
                    lambda: _json_response(http_json.message_to_json(dp.model_config(name, version).config)),
                )
            if action == "stats":
                return get(
                    CallKind.CONTROL,
                    lambda: _json_response(http_json.message_to_json(dp.model_statistics(name, version))),
                )
            if action == "infer":
                _expect(method, "POST", request)
                return CallKind.INFER, lambda: self._infer(request, name, version, received_ns, hold)
        if head == "repository":
            if parts[1:] == ["index"]:
                _expect(method, "POST", request)
                return CallKind.INDEX, lambda: self._repository_index(request, hold)
            if len(parts) == 4 and parts[1] == "models" and parts[3] in {"load", "unload"}:
                _expect(method, "POST", request)
                return CallKind.CONTROL, lambda: self._repository_action(request, parts[2], parts[3], hold)
        if parts == ["logging"]:
            if method == "GET":
                return CallKind.CONTROL, lambda: sync(lambda: _json_response(dp.log_settings.current()))
            _expect(method, "POST", request)
            return CallKind.CONTROL, lambda: self._logging(request, hold)
        if head == "systemsharedmemory":
            return self._route_shm(method, parts[1:], request, hold)
        if head == "cudasharedmemory" and parts[-1] in {
            "status",
            "unregister",
        }:  # as Triton: none, nothing to do
            cuda_name = parts[2] if len(parts) == 4 and parts[1] == "region" else ""
            if parts[-1] == "status":
                return CallKind.CONTROL, lambda: _cuda_status(dp, cuda_name)
            return CallKind.CONTROL, lambda: _cuda_unregister(dp, cuda_name)
        if head == "cudasharedmemory":
            msg = "CUDA shared memory is not supported by this server; use system shared memory"
            raise UnimplementedError(msg)
        raise NotFoundError(f"no such endpoint: {request.method} {request.path}")

    def _route_shm(
        self, method: str, parts: list[str], request: web.BaseRequest, hold: BudgetHold
    ) -> tuple[CallKind, Callable[[], Awaitable[web.StreamResponse]]]:
        """``[region/NAME/](status|register|unregister)`` under ``/v2/systemsharedmemory``."""
        name = ""
        if len(parts) == 3 and parts[0] == "region":
            name, parts = parts[1], parts[2:]
        action = parts[0] if len(parts) == 1 else None
        dp = self._dataplane
        if action == "status":
            _expect(method, "GET", request)

            async def status() -> web.StreamResponse:
                regions = dp.system_shared_memory_status(name).regions
                return _json_response([http_json.message_to_json(regions[key]) for key in sorted(regions)])

            return CallKind.CONTROL, status
        if action == "register" and name:
            _expect(method, "POST", request)

            async def register() -> web.StreamResponse:
                payload = await self._json_body(request, hold)
                key, offset, size = payload.get("key"), payload.get("offset", 0), payload.get("byte_size")
                # bool is an int to Python, never to the protocol ("offset": true is no offset).
                if not isinstance(key, str) or not _is_int(offset) or not _is_int(size):
                    raise InvalidArgumentError(
                        f"register of region '{name}': expected {{'key': str, 'offset': int, 'byte_size': int}}, "
                        f"got {payload}"
                    )
                dp.system_shared_memory_register(name, key, offset, size)
                return web.Response(status=200)

            return CallKind.CONTROL, register
        if action == "unregister":
            _expect(method, "POST", request)

            async def unregister() -> web.StreamResponse:
                dp.system_shared_memory_unregister(name)
                return web.Response(status=200)

            return CallKind.CONTROL, unregister
        raise NotFoundError(f"no such endpoint: {request.method} {request.path}")

    # --- handlers -------------------------------------------------------------------------------------

    async def _json_body(self, request: web.BaseRequest, hold: BudgetHold) -> dict[str, Any]:
        body = await read_body(request, self._max_message_bytes, self._max_decompressed_bytes, hold)
        if not body.strip():
            return {}
        if len(body) < OFF_LOOP_BYTES:
            payload = http_json.parse_json(body, "request JSON")
        else:
            payload = await asyncio.to_thread(http_json.parse_json, body, "request JSON")
        if not isinstance(payload, dict):
            msg = "request JSON must be an object"
            raise InvalidArgumentError(msg)
        return payload

    async def _infer(
        self, request: web.BaseRequest, name: str, version: str, received_ns: int, hold: BudgetHold
    ) -> web.StreamResponse:
        body = await read_body(request, self._max_message_bytes, self._max_decompressed_bytes, hold)
        header_length = request.headers.get(http_json.HEADER_LENGTH)
        # ASCII digits only: int() would also take spaces, "1_0" and other scripts' digits.
        if header_length is not None and not (header_length.isascii() and header_length.isdigit()):
            raise InvalidArgumentError(f"{http_json.HEADER_LENGTH} must be an integer, got {header_length!r}")
        length = int(header_length) if header_length is not None else None
        decode = functools.partial(http_json.decode_infer_request, body, length, name, version, received_ns)
        # The JSON part is what costs (binary tensors stay views): a large one is parsed off the loop.
        if (len(body) if length is None else length) < OFF_LOOP_BYTES:
            infer_request, choice = decode()
        else:
            infer_request, choice = await asyncio.to_thread(decode)
        infer_request.trace_headers = self._gate.trace_context(request.headers.get)
        response = await self._dataplane.infer(infer_request, "HTTP end point")
        payload, json_length = http_json.encode_infer_response(response, choice)
        if json_length is None:
            return web.Response(body=payload, content_type=JSON)
        return web.Response(
            body=payload,
            content_type="application/octet-stream",
            headers={http_json.HEADER_LENGTH: str(json_length)},
        )

    async def _logging(self, request: web.BaseRequest, hold: BudgetHold) -> web.StreamResponse:
        payload = await self._json_body(request, hold)
        return _json_response(await self._dataplane.log_settings.update(changes_from_json(payload)))

    async def _repository_index(self, request: web.BaseRequest, hold: BudgetHold) -> web.StreamResponse:
        payload = await self._json_body(request, hold)
        index = self._dataplane.repository_index(bool(payload.get("ready", False)))
        rows = [http_json.message_to_json(row) for row in index.models]
        for row in rows:  # Triton leaves empty fields out of index rows
            for key in ("version", "state", "reason"):
                if not row.get(key):
                    row.pop(key, None)
        return _json_response(rows)

    async def _repository_action(
        self, request: web.BaseRequest, name: str, action: str, hold: BudgetHold
    ) -> web.StreamResponse:
        payload = await self._json_body(request, hold)
        parameters = payload.get("parameters") or {}
        if not isinstance(parameters, dict):
            raise InvalidArgumentError(f"{action} of '{name}': 'parameters' must be an object")
        if action == "load":
            await self._dataplane.load_model(name, parameters)
        else:
            await self._dataplane.unload_model(name, parameters)
        return web.Response(status=200)


def _expect(method: str, wanted: str, request: web.BaseRequest) -> None:
    if method != wanted:
        raise NotFoundError(f"no such endpoint: {request.method} {request.path} (use {wanted})")
