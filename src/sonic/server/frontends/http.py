"""KServe v2 HTTP/REST frontend on aiohttp's low-level server, sharing the event loop with the gRPC front end.

A thin adapter like the gRPC one: route, call the data plane, render JSON, map errors through the one
status table (bodies are ``{"error": "..."}``). aiohttp's low-level ``web.Server`` is used without
its router or middlewares: the path is split once and looked up in our route table (``_ROUTES``,
:mod:`.http_routes`), which keeps the per-request cost to parsing (llhttp, in C) plus our own work.
Request bodies grow chunk by chunk as they arrive, charged to the server's request-buffer budget
(:mod:`sonic.server.budget`) until the request is answered, and binary tensors are sliced out of them
without copies. Every body is bounded: a Content-Length over ``max_message_bytes`` is answered 413
before a byte is read, gzip/deflate bodies are inflated (off the loop when large) up to
``max_decompressed_bytes``, and large JSON is parsed in a thread; JSON that cannot be parsed, however
it fails (nesting included), is a 400 that says why.
"""

from __future__ import annotations

import asyncio
import functools
import json
import logging
import time
from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from http import HTTPStatus
from typing import Any, TypeGuard
from urllib.parse import unquote

from aiohttp import web

from sonic.protocol import http_json, http_raw
from sonic.protocol.errors import (
    InvalidArgumentError,
    MethodNotAllowedError,
    NotFoundError,
    RequestBufferBusyError,
    ResourceExhaustedError,
    UnimplementedError,
    http_status,
    quote,
)
from sonic.server.budget import BudgetHold, RequestBudget
from sonic.server.dataplane import Arrival, DataPlane
from sonic.server.frontends.aiohttp_listener import AiohttpListener
from sonic.server.frontends.base import Frontend, FrontendSettings
from sonic.server.frontends.gate import CallGate, as_sonic_error
from sonic.server.frontends.http_body import PayloadTooLargeError, read_body, refuse_body
from sonic.server.frontends.http_connections import ClientCountingServer
from sonic.server.frontends.http_payload import PartsPayload
from sonic.server.frontends.http_routes import Route, RouteTable, with_versions
from sonic.server.frontends.traced import http_traced
from sonic.server.guard import CallKind
from sonic.server.log_settings import changes_from_json
from sonic.server.tls import http_ssl_context
from sonic.server.trace.requests import RequestTrace
from sonic.server.trace.settings import changes_from_json as trace_changes_from_json

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
    response = _json_response({"error": error.message}, int(http_status(error)))
    if isinstance(error, MethodNotAllowedError):
        response.headers["Allow"] = ", ".join(error.allowed)  # a 405 names them (RFC 9110)
    return response


def _health(ok: bool) -> web.Response:
    # Server liveness and readiness: Triton answers 200 or 400 with an empty body.
    return web.Response(status=200 if ok else 400)


def _is_int(value: object) -> TypeGuard[int]:
    return isinstance(value, int) and not isinstance(value, bool)


@dataclass(slots=True)  # not frozen: made per request, where a frozen one costs ~1 µs more
class _Call:
    """One request's route: its captured path segments and what the handler may need of it."""

    request: web.BaseRequest
    params: dict[str, str]
    received_ns: int
    hold: BudgetHold

    @property
    def name(self) -> str:
        return self.params.get("name", "")

    @property
    def version(self) -> str:
        return self.params.get("version", "")


Handler = Callable[[Any, _Call], Awaitable[web.StreamResponse]]  # an HttpFrontend method


def _shm_routes(kind: str, status: Handler, register: Handler, unregister: Handler) -> list[Route[Handler]]:
    """The five routes of ``/v2/<kind>`` (system or CUDA shared memory), as Triton's."""
    region = (kind, "region")
    return [
        Route("GET", (kind, "status"), CallKind.CONTROL, status),
        Route("GET", (*region, "{name}", "status"), CallKind.CONTROL, status),
        Route("POST", (*region, "{name+}", "register"), CallKind.CONTROL, register),
        Route("POST", (kind, "unregister"), CallKind.CONTROL, unregister),
        Route("POST", (*region, "{name}", "unregister"), CallKind.CONTROL, unregister),
    ]


class HttpFrontend(Frontend):
    name = "http"
    carries_requests = True

    def __init__(
        self,
        dataplane: DataPlane,
        gate: CallGate,
        port: int,
        settings: FrontendSettings,
        *,
        budget: RequestBudget,
    ) -> None:
        self._dataplane = dataplane
        self._budget = budget
        self._max_decompressed_bytes = settings.max_decompressed_bytes
        self._gate = gate
        self.host = settings.host
        self._header_forward = settings.http_header_forward
        self.port = port
        self._max_connections_per_client = settings.max_connections_per_client
        self._server: ClientCountingServer | None = None
        self._max_message_bytes = settings.max_message_bytes
        self._ssl_context = http_ssl_context(settings.tls) if settings.tls is not None else None
        self._listener = AiohttpListener()

    # --- lifecycle ------------------------------------------------------------------------------------

    async def start(self) -> None:
        # auto_decompress off: aiohttp would inflate on the loop with no cap; read_body does it bounded.
        server = self._server = ClientCountingServer(
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
            raise NotFoundError(
                f"no such endpoint: {request.method} {request.path} (every endpoint is under /v2)"
            )
        parts = parts[1:]
        if any(part in {".", ".."} or "/" in part for part in parts):
            raise InvalidArgumentError(
                f"invalid path {request.raw_path!r}: names are one path component, without '.' or '..'"
            )
        route, params = self._ROUTES.match(method, parts, lambda: f"{request.method} {request.path}")
        call = _Call(request, params, received_ns, hold)
        return route.kind, lambda: route.handler(self, call)

    # --- handlers -------------------------------------------------------------------------------------

    async def _json_value(self, request: web.BaseRequest, hold: BudgetHold) -> object:
        """The body's JSON value; an empty body is an empty object."""
        body = await read_body(request, self._max_message_bytes, self._max_decompressed_bytes, hold)
        if not body.strip():
            return {}
        if len(body) < OFF_LOOP_BYTES:
            return http_json.parse_json(body, "request JSON")
        return await asyncio.to_thread(http_json.parse_json, body, "request JSON")

    async def _json_body(self, request: web.BaseRequest, hold: BudgetHold) -> dict[str, Any]:
        payload = await self._json_value(request, hold)
        if not isinstance(payload, dict):
            msg = "request JSON must be an object"
            raise InvalidArgumentError(msg)
        return payload

    async def _server_metadata(self, _: _Call) -> web.StreamResponse:
        return _json_response(http_json.message_to_json(self._dataplane.server_metadata()))

    async def _server_live(self, _: _Call) -> web.StreamResponse:
        return _health(self._dataplane.server_live())

    async def _server_ready(self, _: _Call) -> web.StreamResponse:
        return _health(self._dataplane.server_ready())

    async def _model_ready(self, call: _Call) -> web.StreamResponse:
        if self._dataplane.model_ready(call.name, call.version):
            return web.Response(status=200)
        return _json_response({"error": "Model version not ready"}, HTTPStatus.BAD_REQUEST)  # as Triton

    async def _model_metadata(self, call: _Call) -> web.StreamResponse:
        return _json_response(
            http_json.message_to_json(self._dataplane.model_metadata(call.name, call.version))
        )

    async def _model_config(self, call: _Call) -> web.StreamResponse:
        config = self._dataplane.model_config(call.name, call.version).config
        return _json_response(http_json.message_to_json(config))

    async def _model_statistics(self, call: _Call) -> web.StreamResponse:
        statistics = self._dataplane.model_statistics(call.name, call.version)
        return _json_response(http_json.message_to_json(statistics))

    async def _infer(self, call: _Call) -> web.StreamResponse:
        if self._dataplane.traces.active:  # Triton's trace extension: this one check while it is off
            return await http_traced(
                self._dataplane,
                call.request,
                call.name,
                call.received_ns,
                lambda t: self._answer_infer(call, t),
            )
        return await self._answer_infer(call, None)

    async def _answer_infer(self, call: _Call, trace: RequestTrace | None) -> web.StreamResponse:
        request, name, version, received_ns = call.request, call.name, call.version, call.received_ns
        body = await read_body(request, self._max_message_bytes, self._max_decompressed_bytes, call.hold)
        if trace is not None:
            trace.stamp("HTTP_RECV_END")
        header_length = request.headers.get(http_json.HEADER_LENGTH)
        # ASCII digits only: int() would also take spaces, "1_0" and other scripts' digits.
        if header_length is not None and not (header_length.isascii() and header_length.isdigit()):
            raise InvalidArgumentError(f"{http_json.HEADER_LENGTH} must be an integer, got {header_length!r}")
        length = int(header_length) if header_length is not None else None
        # Triton's raw binary request: no JSON, the body is the one input's data (an empty body without
        # the header too: Triton takes the JSON's length to be the body's, and a length of 0 means raw).
        if length == 0 or (length is None and not body):
            spec, number = self._dataplane.raw_request_target(name, version, "HTTP end point")
            where = f"model {quote(name)} version {number}"
            infer_request, choice = http_raw.decode_raw_request(body, spec, name, version, where)
        elif (len(body) if length is None else length) < OFF_LOOP_BYTES:
            # The JSON part is what costs (binary tensors stay views): a large one is parsed off the loop.
            infer_request, choice = http_json.decode_infer_request(body, length, name, version)
        else:
            decode = functools.partial(http_json.decode_infer_request, body, length, name, version)
            infer_request, choice = await asyncio.to_thread(decode)
        arrival = Arrival(
            received_ns,
            self._gate.trace_context(request.headers.get),
            trace,
            forwarded=self._header_forward.http(request.raw_headers),
        )
        response = await self._dataplane.infer(infer_request, arrival, "HTTP end point")
        parts, json_length = http_json.encode_infer_response_parts(response, choice)
        if json_length is None:
            return web.Response(body=parts[0], content_type=JSON)
        # The output arrays go out as they are, after the JSON header: not joined into one more copy.
        return web.Response(
            body=PartsPayload(parts, "application/octet-stream"),
            headers={http_json.HEADER_LENGTH: str(json_length)},
        )

    async def _log_settings(self, _: _Call) -> web.StreamResponse:
        return _json_response(self._dataplane.log_settings.current())

    async def _update_log_settings(self, call: _Call) -> web.StreamResponse:
        # As Triton: a JSON value other than an object (an array, a string, null) changes nothing.
        payload = await self._json_value(call.request, call.hold)
        changes = changes_from_json(payload) if isinstance(payload, dict) else {}
        return _json_response(await self._dataplane.log_settings.update(changes))

    async def _trace_setting(self, call: _Call) -> web.StreamResponse:
        return _json_response(self._dataplane.trace_setting(call.name, None))

    async def _update_trace_setting(self, call: _Call) -> web.StreamResponse:
        # As Triton: a JSON value other than an object changes nothing (and answers the settings).
        payload = await self._json_value(call.request, call.hold)
        changes = payload if isinstance(payload, dict) else {}
        return _json_response(
            self._dataplane.trace_setting(call.name, lambda: trace_changes_from_json(changes))
        )

    async def _shm_status(self, call: _Call) -> web.StreamResponse:
        regions = self._dataplane.system_shared_memory_status(call.name).regions
        return _json_response([http_json.message_to_json(regions[key]) for key in sorted(regions)])

    async def _shm_register(self, call: _Call) -> web.StreamResponse:
        payload = await self._json_value(call.request, call.hold)
        if not isinstance(payload, dict):  # Triton's words (it finds no key in what is no object)
            raise InvalidArgumentError(
                f"Shared memory register request has no 'key' field (region '{call.name}': the request "
                f"JSON is {type(payload).__name__}, not an object)"
            )
        key, offset, size = payload.get("key"), payload.get("offset", 0), payload.get("byte_size")
        # bool is an int to Python, never to the protocol ("offset": true is no offset).
        if not isinstance(key, str) or not _is_int(offset) or not _is_int(size):
            raise InvalidArgumentError(
                f"register of region '{call.name}': expected {{'key': str, 'offset': int, 'byte_size': int}}, "
                f"got {payload}"
            )
        self._dataplane.system_shared_memory_register(call.name, key, offset, size)
        return web.Response(status=200)

    async def _shm_unregister(self, call: _Call) -> web.StreamResponse:
        self._dataplane.system_shared_memory_unregister(call.name)
        return web.Response(status=200)

    # /v2/cudasharedmemory: status and unregister answered as Triton's (no region, nothing to do); register 501.
    async def _cuda_status(self, call: _Call) -> web.StreamResponse:
        self._dataplane.cuda_shared_memory_status(call.name)
        return _json_response([])

    async def _cuda_unregister(self, call: _Call) -> web.StreamResponse:
        self._dataplane.cuda_shared_memory_unregister(call.name)
        return web.Response(status=200)

    async def _cuda_register(self, _: _Call) -> web.StreamResponse:
        msg = "CUDA shared memory is not supported by this server; use system shared memory"
        raise UnimplementedError(msg)

    async def _repository_index(self, call: _Call) -> web.StreamResponse:
        payload = await self._json_body(call.request, call.hold)
        index = self._dataplane.repository_index(bool(payload.get("ready", False)))
        rows = [http_json.message_to_json(row) for row in index.models]
        for row in rows:  # Triton leaves empty fields out of index rows
            for key in ("version", "state", "reason"):
                if not row.get(key):
                    row.pop(key, None)
        return _json_response(rows)

    async def _repository_load(self, call: _Call) -> web.StreamResponse:
        return await self._repository_action(call, "load")

    async def _repository_unload(self, call: _Call) -> web.StreamResponse:
        return await self._repository_action(call, "unload")

    async def _repository_action(self, call: _Call, action: str) -> web.StreamResponse:
        name = call.name
        payload = await self._json_body(call.request, call.hold)
        parameters = payload.get("parameters", {})  # [] is no object, not "no parameters"
        if not isinstance(parameters, dict):
            raise InvalidArgumentError(f"{action} of '{name}': 'parameters' must be an object")
        if action == "load":
            await self._dataplane.load_model(name, parameters)
        else:
            await self._dataplane.unload_model(name, parameters)
        return web.Response(status=200)

    _G, _P = "GET", "POST"
    # (method, pattern) -> handler, first match wins (http_routes); each models/{name} route also under
    # models/{name}/versions/{version}.
    _ROUTES: RouteTable[Handler] = RouteTable(
        with_versions(
            (
                Route(_G, (), CallKind.CONTROL, _server_metadata),
                Route(_G, ("health", "live"), CallKind.HEALTH, _server_live),
                Route(_G, ("health", "ready"), CallKind.HEALTH, _server_ready),
                Route(_G, ("models", "stats"), CallKind.CONTROL, _model_statistics),
                Route(_G, ("models", "{name}"), CallKind.CONTROL, _model_metadata),
                Route(_G, ("models", "{name}", "ready"), CallKind.HEALTH, _model_ready),
                Route(_G, ("models", "{name}", "config"), CallKind.CONTROL, _model_config),
                Route(_G, ("models", "{name}", "stats"), CallKind.CONTROL, _model_statistics),
                Route(_P, ("models", "{name}", "infer"), CallKind.INFER, _infer),
                Route(_P, ("repository", "index"), CallKind.INDEX, _repository_index),
                Route(_P, ("repository", "models", "{name}", "load"), CallKind.CONTROL, _repository_load),
                Route(_P, ("repository", "models", "{name}", "unload"), CallKind.CONTROL, _repository_unload),
                Route(_G, ("logging",), CallKind.CONTROL, _log_settings),
                Route(_P, ("logging",), CallKind.CONTROL, _update_log_settings),
                *_shm_routes("systemsharedmemory", _shm_status, _shm_register, _shm_unregister),
                *_shm_routes("cudasharedmemory", _cuda_status, _cuda_register, _cuda_unregister),
            )
        )
    )
    # A model's trace settings have no version (Triton: "there is no specification on versioning").
    _ROUTES = RouteTable(
        [
            *_ROUTES.routes,
            Route(_G, ("trace", "setting"), CallKind.CONTROL, _trace_setting),
            Route(_P, ("trace", "setting"), CallKind.CONTROL, _update_trace_setting),
            Route(_G, ("models", "{name}", "trace", "setting"), CallKind.CONTROL, _trace_setting),
            Route(_P, ("models", "{name}", "trace", "setting"), CallKind.CONTROL, _update_trace_setting),
        ]
    )
