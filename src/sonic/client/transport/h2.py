"""KServe v2 gRPC transport on our own HTTP/2 client (the default ``transport = "h2"``).

Why not grpcio: for small requests its per-call machinery (the C core, its completion-queue poller,
several event-loop round trips per call) cost the client more CPU per request than the server spends;
here a call is one stream on a shared connection, a few callbacks and one future (docs/benchmarks.md).
Many concurrent calls share one connection as HTTP/2 streams, so the ModelStreamInfer detour of the
grpcio transport is not needed.

Messages are the grpcio transport's (:func:`~sonic.client.transport.grpc.encode_request`): tensor bytes
go out as views of the caller's arrays, framed without joining them into one message first.
"""

from __future__ import annotations

import asyncio
import dataclasses
import ssl
import time
from collections.abc import Sequence
from typing import Any

from sonic.client.config import Compression, TlsConfig
from sonic.client.errors import (
    ConnectionLostError,
    ResourceExhaustedError,
    error_for_status,
)
from sonic.client.transport.base import RequestTemplate
from sonic.client.transport.control import GrpcCalls, is_loopback
from sonic.client.transport.h2_connection import ClientConnection
from sonic.grpc.call import (
    ACCEPT_ENCODING,
    GrpcError,
    MessageLimits,
    compress,
    decompress,
    format_grpc_timeout,
    grpc_message_prefix,
)
from sonic.h2.headers import encode_headers
from sonic.h2.limits import CLIENT_LIMITS, Http2Limits
from sonic.protocol.errors import GrpcCode
from sonic.protocol.grpc_codec import decode_response, encode_request, split_response
from sonic.protocol.types import WireRequest, WireResponse
from sonic.protocol.wire import (
    MAX_MESSAGE_BYTES,
    SERVICE_PATH,
    encode_varint,
    parts_size,
    raw_input_parts,
)

# Responses inflate to at most this much (a compressed answer is the server's promise about nothing).
MAX_DECOMPRESSED_BYTES = 1 << 30
ID_KEY = b"\x1a"  # ModelInferRequest.id: field 3, length-delimited
JOIN_BELOW_BYTES = 16 << 10  # a request this small goes out as one joined buffer
MAX_CACHED_BLOCKS = 64  # header blocks kept per transport (by method, compression and timeout)


class EncodedHead:
    """A template's request head as this transport sends it (kept in ``RequestTemplate.encoded``)."""

    __slots__ = ("data_bytes", "head")

    def __init__(self, head: bytes, data_bytes: int) -> None:
        self.head = head  # the serialized head without id, then the id field's tag
        self.data_bytes = data_bytes  # the first call's tensor bytes: whether calls join them


def tls_context(tls: TlsConfig) -> ssl.SSLContext:
    """Verify the server against the given roots (the system's when none) and offer HTTP/2 by ALPN."""
    context = ssl.create_default_context(cafile=tls.root_certificates)
    if tls.certificate_chain is not None:
        context.load_cert_chain(tls.certificate_chain, tls.private_key)
    context.set_alpn_protocols(["h2"])
    return context


class H2Transport(GrpcCalls):
    def __init__(
        self,
        address: str,
        *,
        compression: Compression = Compression.NONE,
        tls: TlsConfig | None = None,
        token: str = "",
        default_timeout_s: float | None = None,
        control_timeout_s: float = 10.0,
        keepalive_interval_s: float | None = None,
        keepalive_timeout_s: float = 20.0,
        max_decompressed_bytes: int = MAX_DECOMPRESSED_BYTES,
    ) -> None:
        """``keepalive_interval_s``: PING an otherwise silent connection this often, and drop it when
        the answer takes over ``keepalive_timeout_s`` (a dead peer or path is noticed before a call
        waits on it). Off by default, as in grpcio."""
        self.address = address
        self.is_local = is_loopback(address) and tls is None
        host, _, port = address.rpartition(":")
        self._host, self._port = host.strip("[]"), int(port)
        self._tls = tls
        self._encoding = None if compression is Compression.NONE else compression.value
        self._limits = dataclasses.replace(
            CLIENT_LIMITS, keepalive_interval_s=keepalive_interval_s, ping_timeout_s=keepalive_timeout_s
        )
        self._message_limits = MessageLimits(MAX_MESSAGE_BYTES, max_decompressed_bytes)
        self._timeout_s = default_timeout_s
        self._control_timeout_s = control_timeout_s
        headers = [
            (b":method", b"POST"),
            (b":scheme", b"https" if tls is not None else b"http"),
            (b":path", b""),  # filled per method below
            (b":authority", address.encode()),
            (b"content-type", b"application/grpc"),
            (b"te", b"trailers"),
            (b"user-agent", b"sonic-client"),
            (b"grpc-accept-encoding", ACCEPT_ENCODING),
        ]
        if token:
            headers.append((b"authorization", f"Bearer {token}".encode()))
        self._headers = headers
        self._blocks: dict[tuple[str, bool, float | None], bytes] = {}
        self._compression_header = (b"grpc-encoding", compression.value.encode())
        self._connection: ClientConnection | None = None
        self._connect_lock: asyncio.Lock | None = None

    # --- connection ---------------------------------------------------------------------------------

    async def _connect(self) -> ClientConnection:
        """The live connection, or a new one (the first call, after a GOAWAY or a lost connection)."""
        if self._connect_lock is None:
            self._connect_lock = asyncio.Lock()
        async with self._connect_lock:
            connection = self._connection
            if connection is not None and not connection.closing:
                return connection
            loop = asyncio.get_running_loop()
            context = tls_context(self._tls) if self._tls is not None else None
            connection = ClientConnection(self.address, self._limits)
            try:
                async with asyncio.timeout(self._control_timeout_s):
                    await loop.create_connection(
                        lambda: connection.reads,
                        self._host,
                        self._port,
                        ssl=context,
                        server_hostname=self._host if context is not None else None,
                    )
            except (OSError, TimeoutError) as exc:
                detail = f"failed to connect to {self.address}: {str(exc) or 'timed out'}"
                raise ConnectionLostError(detail, status=GrpcCode.UNAVAILABLE, server=self.address) from exc
            if context is not None:
                protocol = connection.transport_protocol()
                if protocol != "h2":
                    connection.close()
                    detail = f"{self.address} did not agree to HTTP/2 over TLS (ALPN gave {protocol!r})"
                    raise ConnectionLostError(detail, status=GrpcCode.UNAVAILABLE, server=self.address)
            self._connection = connection
            return connection

    def _block(self, method: str, compressed: bool, timeout_s: float | None) -> bytes:
        """The request's header block: built once per method and timeout (every call has the default
        deadline by default), as the server's HPACK memo likes it."""
        key = (method, compressed, timeout_s)
        block = self._blocks.get(key)
        if block is None:
            headers = [
                (n, (SERVICE_PATH + method).encode() if n == b":path" else v) for n, v in self._headers
            ]
            if compressed:
                headers.append(self._compression_header)
            block = encode_headers(headers)
            if timeout_s is not None:
                block += encode_headers([(b"grpc-timeout", format_grpc_timeout(timeout_s))])
            if len(self._blocks) < MAX_CACHED_BLOCKS:  # per-request timeouts may all differ
                self._blocks[key] = block
        return block

    async def _unary(
        self, method: str, message: list[bytes | memoryview], size: int, timeout_s: float | None
    ) -> bytes | bytearray | memoryview:
        self._check_size(method, size)
        compressed = self._encoding is not None and method == "ModelInfer"
        if compressed:
            assert self._encoding is not None
            data = compress(b"".join(message), self._encoding)
            message = [grpc_message_prefix(len(data), compressed=True), data]
        else:
            message.insert(0, grpc_message_prefix(size))
        return await self._exchange(self._block(method, compressed, timeout_s), message, timeout_s)

    def _check_size(self, method: str, size: int) -> None:
        if size > MAX_MESSAGE_BYTES:
            detail = f"{method} request of {size} bytes, larger than the gRPC limit of {MAX_MESSAGE_BYTES}"
            raise ResourceExhaustedError(detail, status=GrpcCode.RESOURCE_EXHAUSTED, server=self.address)

    async def _exchange(
        self, block: bytes, message: list[bytes | memoryview], timeout_s: float | None
    ) -> bytes | bytearray | memoryview:
        """Send one framed request message on a new stream; its one response message."""
        connection = self._connection
        if connection is None or connection.closing:
            connection = await self._connect()
        if connection.full:
            await connection.wait_for_room()
        stream = connection.open_call(block, message, MAX_MESSAGE_BYTES, timeout_s)
        call = stream.app
        try:
            response: bytes | bytearray | memoryview = await call.future
        except asyncio.CancelledError:
            connection.cancel(stream, None)  # the caller gave up: the server stops too
            raise
        if not call.answer.compressed:
            return response
        try:
            return await decompress(response, call.answer.encoding, self._message_limits)
        except GrpcError as exc:
            raise error_for_status(exc.status, exc.message, self.address) from None

    async def raw_call(self, method: str, message: bytes, timeout_s: float | None) -> bytes | memoryview:
        """One call with an already serialized request (``sonic perf`` sends the same bytes many times)."""
        response = await self._unary(method, [message], len(message), timeout_s)
        return response if isinstance(response, bytes | memoryview) else memoryview(response)

    async def _call(self, method: str, request: Any, response_type: Any) -> Any:
        data = request.SerializeToString()
        response = await self._unary(method, [data], len(data), self._control_timeout_s)
        return response_type.FromString(bytes(response))

    # --- Transport ----------------------------------------------------------------------------------

    async def infer(self, request: WireRequest) -> WireResponse:
        start = time.perf_counter_ns()
        head, tail = encode_request(request)
        head_bytes = head.SerializeToString()
        size = len(head_bytes) + parts_size(tail)
        sent = time.perf_counter_ns()
        data = await self._unary(
            "ModelInfer", [head_bytes, *tail], size, request.timeout_s or self._timeout_s
        )
        return decode_response(
            *split_response(data), serialize_ns=sent - start, wait_ns=time.perf_counter_ns() - sent
        )

    async def infer_template(
        self, template: RequestTemplate, request_id: str, data: Sequence[bytes | memoryview]
    ) -> WireResponse:
        """The request head serialized once per template (kept in ``template.encoded``); a call adds
        its id and raw input fields, joined into one buffer when small (one copy of a few hundred bytes
        costs less than handing the writer several pieces), else the caller's memory as pieces."""
        if self._encoding is not None:
            return await super().infer_template(template, request_id, data)  # compressed: one path
        block, message, timeout_s = self.template_call(template, request_id, data)
        response = await self._exchange(block, message, timeout_s)
        return decode_response(*split_response(response))  # untimed: this path's callers want outputs

    def template_call(
        self, template: RequestTemplate, request_id: str, data: Sequence[bytes | memoryview]
    ) -> tuple[bytes, list[bytes | memoryview], float | None]:
        """An uncompressed template call as it goes out: (header block, framed message, timeout).
        Shared with the blocking fast path of :mod:`sonic.client.blocking`."""
        encoded = template.encoded
        if not isinstance(encoded, EncodedHead):
            head, _ = encode_request(template.request("", [b""] * len(data)))
            encoded = template.encoded = EncodedHead(head.SerializeToString() + ID_KEY, parts_size(data))
        request_id_bytes = request_id.encode()
        length = len(request_id_bytes)
        parts = [
            encoded.head,
            bytes((length,)) if length < 0x80 else encode_varint(length),
            request_id_bytes,
            *raw_input_parts(data),
        ]
        message: list[bytes | memoryview]
        if encoded.data_bytes <= JOIN_BELOW_BYTES:  # the first call's size: only a choice of copy
            body = b"".join(parts)
            self._check_size("ModelInfer", len(body))
            message = [grpc_message_prefix(len(body)) + body]
        else:
            size = parts_size(parts)
            self._check_size("ModelInfer", size)
            message = [grpc_message_prefix(size), *parts]
        timeout_s = template.timeout_s or self._timeout_s
        return self._block("ModelInfer", False, timeout_s), message, timeout_s

    @property
    def plain(self) -> bool:
        """No TLS, no compression: the blocking fast path may take this server's calls."""
        return self._tls is None and self._encoding is None

    @property
    def endpoint(self) -> tuple[str, int]:
        return self._host, self._port

    @property
    def limits(self) -> Http2Limits:
        """Its connections' HTTP/2 limits, keepalive included."""
        return self._limits

    async def close(self) -> None:
        connection, self._connection = self._connection, None
        if connection is not None:
            connection.close()
            await connection.closed.wait()
