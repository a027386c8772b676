"""KServe v2 gRPC frontend on our own HTTP/2 connection code (the default ``--grpc-server native``).

Why not grpcio's server: for small requests its per-call machinery (completion queues, a poller thread,
several event-loop round trips per call) cost more than half of the server's CPU. Here a call is a few
callbacks from the connection's HTTP/2 core and one task: see docs/benchmarks.md.

gRPC over HTTP/2 as its spec says: ``application/grpc`` POSTs to ``/inference.GRPCInferenceService/M``,
length-prefixed messages (gzip/deflate accepted, inflated with a bound on the decompressed size and off
the event loop when large), ``grpc-timeout`` deadlines, status and message in trailers (or trailers-only
answers for calls that fail before any response). The parts shared with our client are
:mod:`sonic.grpc.call`; the HTTP/2 connection is a :class:`sonic.h2.server.ServerRole` core on the
:class:`sonic.h2.aio.H2Protocol` adapter, with the limits of :class:`sonic.h2.limits.Http2Limits`, its
request DATA charged to the server's budget by :mod:`sonic.server.frontends.request_windows`. Reads go
through :class:`sonic.h2.aio.BufferedReads`: a large request message is read from the socket straight into
the one buffer its length prefix sized, and its tensors reach the model as views of it (no copy between).
"""

from __future__ import annotations

import asyncio
import dataclasses
import logging
import math
from contextlib import aclosing
from typing import Any

from sonic.grpc.call import (
    GRPC_MESSAGE_PREFIX_BYTES,
    GrpcError,
    MessageLimits,
    check_encoding,
    decompress,
    grpc_message_prefix,
    parse_grpc_timeout,
    status_block,
)
from sonic.h2.aio import BufferedReads, H2Protocol, receive_buffer
from sonic.h2.headers import Headers, encode_headers
from sonic.h2.limits import SERVER_LIMITS, Http2Limits, MemoBudget
from sonic.h2.server import ServerRole
from sonic.h2.stream import Stream
from sonic.protocol.errors import GrpcCode, SonicError
from sonic.protocol.wire import SERVICE, parts_size
from sonic.server.budget import RequestBudget
from sonic.server.dataplane import DataPlane
from sonic.server.frontends.base import FrontendSettings, host_port
from sonic.server.frontends.gate import CallGate, as_sonic_error
from sonic.server.frontends.grpc_h2_call import (
    RESPONSE_HEADERS,
    TRAILERS_OK,
    Call,
    CallError,
    header_text,
)
from sonic.server.frontends.grpc_infer import model_infer
from sonic.server.frontends.grpc_methods import HEALTH_CHECK_PATH, GrpcMethods, UnaryMethod
from sonic.server.frontends.request_windows import RequestWindows
from sonic.server.tls import grpc_ssl_context

log = logging.getLogger(__name__)

MEMO_BUDGET_BYTES = 32 << 20  # all connections' header-block memos together
# A stream's responses queued and not yet sent (the client reads slower than a decoupled model sends)
# past which the next response waits for that queue to empty: with the model's sender bounded too
# (sonic.server.responses), a model that sends forever holds at most about this much here.
MAX_QUEUED_STREAM_BYTES = 4 << 20
# A stream of this front end: its Call once its headers were accepted, None before (or when refused).
CallStream = Stream[Call | None]


class ReceivedBytes:
    """How the request messages' bytes of one connection arrived: read straight into their message's
    buffer (``placed_bytes``) or copied there from the adapter's read buffer (``copied_bytes``, counted
    when the request stream ends). A test's count of the copies; nothing reads it on the hot path."""

    __slots__ = ("copied_bytes", "placed_bytes")

    def __init__(self) -> None:
        self.copied_bytes = 0
        self.placed_bytes = 0


class GrpcConnection:
    """One client connection's gRPC calls: the Handler (and DataSink) of its HTTP/2 core, on asyncio as
    ``protocol``, read through ``reads`` (a large message's DATA straight into its buffer)."""

    def __init__(self, frontend: H2GrpcFrontend) -> None:
        self._frontend = frontend
        self._methods = frontend.methods
        self._server: ServerRole[Call] = ServerRole(
            self, limits=frontend.http2_limits, memo_budget=frontend.memo_budget
        )
        self.core = core = self._server.connection
        core.set_sink(self)  # a large message's bytes are read straight into its buffer (stream_sink)
        self.received = ReceivedBytes()
        self.protocol = H2Protocol(
            core,
            deadlines_due=self.deadlines_due,
            on_made=lambda: frontend.connections.add(self),
            on_lost=self._lost,
        )
        self.reads = BufferedReads(self.protocol, frontend.receive_buffer)  # what the transport calls
        self._loop = self.protocol.loop
        self._windows = RequestWindows(core, frontend.budget, self._loop, self.budget_wait_over)

    def _lost(self) -> None:
        self._windows.connection_lost()  # after the core reset every open stream: its calls released
        self._frontend.connections.discard(self)

    def start_shutdown(self) -> None:  # GOAWAY: calls in flight finish, new ones are refused
        self._server.start_shutdown()

    # --- the HTTP/2 events ----------------------------------------------------------------------------

    def headers_received(self, stream: CallStream, headers: Headers, end_stream: bool) -> None:  # noqa: ARG002  (END_STREAM comes as stream_ended)
        try:
            stream.app = self._open_call(stream, headers)
        except CallError as error:
            self._fail(stream, error.code, error.message)
        except SonicError as refused:  # not ``error``: mypyc gives a name one type in a function
            self._fail(stream, refused.code, refused.message)

    def stream_data(self, stream: CallStream, data: memoryview) -> None:
        call = stream.app
        if call is None:  # refused (the core passes nothing more of a stream we ended)
            self._windows.drop(stream, len(data))
            return
        call.held += len(data)
        self._windows.hold(stream, len(data))
        try:
            for compressed, message in call.reader.feed(data):
                self._on_message(stream, call, compressed, message)
        except CallError as error:
            self._fail(stream, error.code, error.message)

    def stream_sink(self, stream: CallStream) -> memoryview | None:
        """The rest of the request message in progress (None between messages, or for a refused call):
        the socket is read into it, where the decoded tensors will be views. None once we ended the stream
        (answered early): the rest of its DATA takes the copied way, ``stream_data``."""
        call = stream.app
        return None if call is None or self.core.ended(stream) else call.reader.room()

    def stream_data_placed(self, stream: CallStream, size: int) -> None:
        call = stream.app
        if call is None:  # stream_sink gave no memory to a refused call: nothing lands for one
            self._windows.drop(stream, size)
            return
        call.held += size
        self._windows.hold(stream, size)
        self.received.placed_bytes += size
        try:
            message = call.reader.placed(size)
            if message is not None:
                self._on_message(stream, call, *message)
        except CallError as error:
            self._fail(stream, error.code, error.message)

    def stream_ended(self, stream: CallStream) -> None:
        call = stream.app
        if call is None:
            return
        self.received.copied_bytes += call.reader.copied_bytes
        call.input_done = True
        if call.reader.partial:
            self._fail(stream, GrpcCode.INTERNAL, "request stream ended inside a message")
        elif call.method == "ModelStreamInfer":
            if not call.tasks:
                self._finish_stream_call(stream, call)
        elif call.message is None:
            self._fail(stream, GrpcCode.INTERNAL, f"{call.method}: the request has no message")
        else:
            self._spawn(stream, call, self._run_unary(stream, call, call.message), call.held)
            call.held = 0

    def goaway_received(self, last_stream_id: int, code: int, unprocessed: list[CallStream]) -> None:
        """The client goes away: the role refuses new streams, calls in flight finish."""

    def stream_reset(self, stream: CallStream) -> None:
        call = stream.app
        if call is None:
            return
        self._release(call)
        call.deadline = math.inf
        for task in list(call.tasks):
            task.cancel()

    # --- calls -----------------------------------------------------------------------------------------

    def _open_call(self, stream: CallStream, headers: Headers) -> Call:
        fields = dict(headers)  # the fields read here appear once in a gRPC request
        path, content_type = fields.get(b":path"), fields.get(b"content-type")
        method_verb, timeout = fields.get(b":method"), fields.get(b"grpc-timeout")
        encoding, authorization = fields.get(b"grpc-encoding"), fields.get(b"authorization")
        gate = self._frontend.gate
        trace = gate.trace_context(lambda name: header_text(fields.get(name.encode())))
        if method_verb != b"POST" or content_type is None or not content_type.startswith(b"application/grpc"):
            # Not a gRPC call at all: answered in HTTP, as the gRPC spec asks.
            self.core.send_headers(stream, encode_headers([(b":status", b"415")]), end_stream=True)
            msg = f"not a gRPC request (method {method_verb!r}, content-type {content_type!r})"
            raise CallError(GrpcCode.INVALID_ARGUMENT, msg)
        method = self._frontend.paths.get(path or b"")
        if method is None:
            raise CallError(
                GrpcCode.UNIMPLEMENTED, f"Method not found: {(path or b'').decode(errors='replace')}"
            )
        call = Call(method, self._frontend.max_message_bytes, self._frontend.budget.capacity_bytes)
        call.trace = trace
        header_forward = self._frontend.header_forward
        if header_forward.enabled and method in {"ModelInfer", "ModelStreamInfer"}:
            call.forwarded = header_forward.grpc(
                (n.decode("latin-1"), v.decode("latin-1")) for n, v in headers
            )
        try:
            call.encoding = check_encoding(encoding)
        except GrpcError as error:
            raise CallError(error.status, error.message) from None
        if gate.guard is not None:
            gate.admit_grpc(method, header_text(authorization), self.core.peer)
        if timeout is not None:
            try:
                seconds = parse_grpc_timeout(timeout)
            except ValueError as exc:
                raise CallError(GrpcCode.INVALID_ARGUMENT, str(exc)) from None
            call.deadline = self._loop.time() + seconds
            self.protocol.watch_deadline(call.deadline)
        return call

    async def _inflated(self, call: Call, message: bytes | memoryview) -> bytes | memoryview:
        """A compressed message inflated, bounded, in a thread when large."""
        try:
            return await decompress(message, call.encoding, self._frontend.message_limits)
        except GrpcError as error:
            raise CallError(error.status, error.message) from None

    def _on_message(
        self, stream: CallStream, call: Call, compressed: bool, message: bytes | memoryview
    ) -> None:
        if compressed and call.encoding is None:
            raise CallError(GrpcCode.INTERNAL, "compressed message without a grpc-encoding header")
        if call.method == "ModelStreamInfer":
            if not call.headers_sent:
                call.headers_sent = True
                self.core.send_headers(stream, RESPONSE_HEADERS)
            held = min(call.held, len(message) + GRPC_MESSAGE_PREFIX_BYTES)  # the task holds its message
            call.held -= held
            self._spawn(stream, call, self._run_stream_message(stream, call, compressed, message), held)
        elif call.message is not None:
            raise CallError(GrpcCode.UNIMPLEMENTED, f"{call.method} takes one request message, got more")
        else:
            call.message = message
            call.compressed = compressed

    def _spawn(self, stream: CallStream, call: Call, coroutine: Any, held: int) -> None:
        """Run ``coroutine`` for the call; the ``held`` bytes of its message are released when it is done
        (in the done callback: a task cancelled before it started runs no ``finally``)."""
        task: asyncio.Task[None] = self._loop.create_task(coroutine)
        call.tasks.add(task)
        task.add_done_callback(lambda done: self._task_done(stream, call, done, held))

    def _task_done(self, stream: CallStream, call: Call, task: asyncio.Task[None], held: int) -> None:
        call.tasks.discard(task)
        self._windows.release(held)
        if (
            call.method == "ModelStreamInfer"
            and call.input_done
            and not call.tasks
            and not self.core.ended(stream)
        ):
            self._finish_stream_call(stream, call)

    async def _run_unary(self, stream: CallStream, call: Call, message: bytes | memoryview) -> None:
        try:
            if call.compressed:  # most calls are not: no coroutine for them on the hot path
                message = await self._inflated(call, message)
            if call.method == "ModelInfer":
                parts = await model_infer(self._methods.dataplane, message, call.trace, call.forwarded)
            elif call.method == "HealthCheck":
                parts = [self._methods.health_check(message)]
            else:
                method: UnaryMethod = self._methods.unary[call.method]
                try:
                    request = method.request_type.FromString(bytes(message))
                except Exception as exc:  # noqa: BLE001  (protobuf's DecodeError and friends)
                    raise CallError(
                        GrpcCode.INTERNAL, f"cannot parse the {call.method} request: {exc}"
                    ) from None
                parts = [(await method.handler(request)).SerializeToString()]
        except CallError as call_error:
            self._fail(stream, call_error.code, call_error.message)
            return
        except Exception as exc:  # noqa: BLE001  (mapped to a status)
            error = as_sonic_error(exc)
            self._fail(stream, error.code, error.message)
            return
        size = parts_size(parts)
        if size > self._frontend.max_message_bytes:
            msg = f"Sent message larger than max ({size} vs. {self._frontend.max_message_bytes})"
            self._fail(stream, GrpcCode.RESOURCE_EXHAUSTED, msg)
            return
        call.deadline = math.inf
        # Nothing is sent on a stream that ended meanwhile (reset by the client, failed): the core drops it.
        self.core.send_headers(stream, RESPONSE_HEADERS)
        self.core.respond(stream, [grpc_message_prefix(size), *parts], TRAILERS_OK)
        self.protocol.message_queued()

    async def _run_stream_message(
        self, stream: CallStream, call: Call, compressed: bool, message: bytes | memoryview
    ) -> None:
        try:
            if compressed:
                message = await self._inflated(call, message)
        except CallError as error:
            self._fail(stream, error.code, error.message)
            return
        async with aclosing(self._methods.stream_responses(message, call.trace, call.forwarded)) as messages:
            async for parts in messages:
                if self.core.ended(stream):
                    return  # closing the responses cancels the request: the model sees is_cancelled()
                self.core.respond(stream, [grpc_message_prefix(parts_size(parts)), *parts])
                if self.core.queued_bytes(stream) > MAX_QUEUED_STREAM_BYTES:
                    if call.send_paused is None:
                        call.send_paused = self._loop.create_future()
                        self.core.on_drained(stream, call.output_drained)
                    await call.send_paused

    def _finish_stream_call(self, stream: CallStream, call: Call) -> None:
        call.deadline = math.inf
        if not call.headers_sent:
            call.headers_sent = True
            self.core.send_headers(stream, RESPONSE_HEADERS)
        self.core.respond(stream, [], TRAILERS_OK)

    def deadlines_due(self, now: float) -> float:
        """Calls past their ``grpc-timeout`` end with DEADLINE_EXCEEDED, their handlers cancelled."""
        following = math.inf
        for stream in self.core.open_streams():
            call = stream.app
            if call is None or self.core.ended(stream):
                continue
            if call.deadline > now:
                following = min(following, call.deadline)
                continue
            call.deadline = math.inf
            for task in list(call.tasks):
                task.cancel()
            self._fail(stream, GrpcCode.DEADLINE_EXCEEDED, "Deadline Exceeded")
        return following

    def _release(self, call: Call) -> None:
        held, call.held = call.held, 0
        self._windows.release(held)

    def budget_wait_over(self) -> None:
        """Calls holding bytes of a request not yet whole end with RESOURCE_EXHAUSTED, releasing them
        (a ModelStreamInfer stream between two messages holds none and goes on)."""
        budget = self._frontend.budget
        for stream in self.core.open_streams():
            call = stream.app
            if call is not None and call.held and not call.input_done and not self.core.ended(stream):
                self._fail(stream, GrpcCode.RESOURCE_EXHAUSTED, budget.busy_error(call.method).message)

    def _fail(self, stream: CallStream, code: GrpcCode, message: str) -> None:
        """End the call with ``code``: trailers-only when nothing was sent yet."""
        if self.core.ended(stream):
            return
        call = stream.app
        if call is not None:
            call.deadline = math.inf
            self._release(call)
        headers_sent = call is not None and call.headers_sent
        self.core.end_now(stream, status_block(code, message, trailers_only=not headers_sent))


class H2GrpcFrontend:
    """Listens, accepts connections, and shuts them down in order (GOAWAY, drain, then close).

    A :class:`~sonic.server.frontends.base.Frontend` by its shape, not by deriving from it: this module is
    compiled with mypyc, whose classes derive from no interpreted class (the protocol's ``address`` is
    written out here)."""

    name = "grpc"
    carries_requests = True

    def __init__(
        self,
        dataplane: DataPlane,
        gate: CallGate,
        port: int,
        settings: FrontendSettings,
        *,
        http2_limits: Http2Limits = SERVER_LIMITS,
        budget: RequestBudget,
    ) -> None:
        self.methods = GrpcMethods(dataplane)
        self.budget = budget
        self.gate = gate
        self.host = settings.host
        self.port = port
        self.header_forward = settings.grpc_header_forward
        max_message_bytes = self.max_message_bytes = settings.max_message_bytes
        # gRPC's message limit holds for the inflated message too (as grpcio checks it).
        self.message_limits = MessageLimits(
            max_message_bytes, min(settings.max_decompressed_bytes, max_message_bytes)
        )
        if settings.max_concurrent_streams is not None:
            http2_limits = dataclasses.replace(
                http2_limits, max_concurrent_streams=settings.max_concurrent_streams
            )
        self.http2_limits = http2_limits
        self.memo_budget = MemoBudget(MEMO_BUDGET_BYTES)
        self.receive_buffer = receive_buffer()  # every connection's reads outside DATA payloads, in turn
        self._ssl_context = grpc_ssl_context(settings.tls) if settings.tls is not None else None
        names = [*self.methods.unary, "ModelInfer", "ModelStreamInfer"]
        self.paths = {f"/{SERVICE}/{name}".encode(): name for name in names}
        self.paths[HEALTH_CHECK_PATH.encode()] = "HealthCheck"
        self.connections: set[GrpcConnection] = set()
        self._server: asyncio.Server | None = None

    async def start(self) -> None:
        loop = asyncio.get_running_loop()
        self._server = await loop.create_server(
            lambda: GrpcConnection(self).reads,
            self.host,
            self.port,
            ssl=self._ssl_context,
            reuse_address=True,
        )
        # Read as Any: this module is compiled (mypyc checks declared types at run time), and uvloop's
        # Server.sockets is a list where typeshed says tuple.
        server: Any = self._server
        self.port = int(server.sockets[0].getsockname()[1])

    @property
    def address(self) -> str:
        return host_port(self.host, self.port)

    async def stop(self, grace_s: float) -> None:
        """Refuse new connections and streams at once; calls in flight get up to ``grace_s``."""
        if self._server is not None:
            self._server.close()
        connections = list(self.connections)
        for connection in connections:
            connection.start_shutdown()
        if connections:
            _, late = await asyncio.wait(
                [asyncio.ensure_future(c.protocol.closed.wait()) for c in connections], timeout=grace_s
            )
            for waiter in late:
                waiter.cancel()
        for connection in list(self.connections):
            connection.core.transport_lost()  # dropped now: its calls fail before stop() returns
            connection.protocol.abort()
        if self._server is not None:
            await self._server.wait_closed()
