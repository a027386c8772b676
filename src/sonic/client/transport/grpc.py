"""KServe v2 gRPC transport on grpc aio; messages through :mod:`sonic.protocol.grpc_codec`.

Tensor bytes skip protobuf both ways: the request is the serialized header followed by hand-written
``raw_input_contents`` fields (one copy of each tensor, into the message), and the response's
``raw_output_contents`` are cut out as views of the received buffer (read with ``np.frombuffer``).
"""

from __future__ import annotations

import time
from typing import Any

import grpc
from grpc import aio

from sonic.client.config import Compression, TlsConfig
from sonic.client.errors import (
    ClientError,
    ConnectionLostError,
    DeadlineExceededError,
    InvalidRequestError,
    error_for_status,
)
from sonic.client.transport.control import GrpcCalls, is_loopback
from sonic.client.transport.stream import InferStream, StreamFailedError
from sonic.protocol.errors import GrpcCode
from sonic.protocol.grpc_codec import code_of, decode_response, encode_request, split_response
from sonic.protocol.types import WireRequest, WireResponse
from sonic.protocol.wire import MAX_MESSAGE_BYTES, SERVICE_PATH, parts_size

# grpc core reports a broken or refused connection as UNAVAILABLE with one of these details; a
# server's own UNAVAILABLE (queue full, model unloading) carries its message instead.
_CONNECTION_MARKERS = (
    "failed to connect",
    "connection refused",
    "connection reset",
    "socket closed",
    "broken pipe",
    "connections to all backends failing",
    "end of tcp stream",
    "goaway",
    "recvmsg",
    "sendmsg",
    "keepalive",  # "keepalive watchdog timeout": the server stopped answering PINGs
)
_COMPRESSION = {
    Compression.NONE: grpc.Compression.NoCompression,
    Compression.GZIP: grpc.Compression.Gzip,
    Compression.DEFLATE: grpc.Compression.Deflate,
}


def convert_error(exc: aio.AioRpcError, address: str) -> ClientError:
    """The one place where grpcio's errors become ours: a broken connection is told from the status."""
    code = exc.code()
    details = exc.details() or ""
    status = code_of(code)
    text = f"{details} {exc.debug_error_string()}".lower()
    broken = any(marker in text for marker in _CONNECTION_MARKERS)
    if code == grpc.StatusCode.UNAVAILABLE and broken:
        return ConnectionLostError(details, status=status, server=address)
    if code == grpc.StatusCode.CANCELLED and "channel closed" in details.lower():
        return InvalidRequestError(details, status=status, server=address)
    # grpc's core reports a peer that vanished mid-call as INTERNAL "Internal error from Core":
    # that is the connection, not the server's answer, so it is retried elsewhere.
    if code in {grpc.StatusCode.INTERNAL, grpc.StatusCode.UNKNOWN} and (
        details == "Internal error from Core" or broken
    ):
        return ConnectionLostError(details, status=status, server=address)
    return error_for_status(status, details, address)


class GrpcTransport(GrpcCalls):
    def __init__(
        self,
        address: str,
        *,
        compression: Compression = Compression.NONE,
        tls: TlsConfig | None = None,
        token: str = "",
        default_timeout_s: float | None = None,
        control_timeout_s: float = 10.0,
        stream_max_bytes: int = 0,
        keepalive_s: float | None = None,
        keepalive_timeout_s: float = 20.0,
        reconnect_backoff_s: tuple[float, float] | None = None,
    ) -> None:
        """``stream_max_bytes``: requests up to this size go on a ModelStreamInfer stream (0: never).

        ``keepalive_s``: grpc's own keepalive: PING every ``keepalive_s`` while calls are in flight, and
        drop the connection when an answer takes over ``keepalive_timeout_s`` (None: off).
        ``reconnect_backoff_s``: (first, longest) wait of grpc before connecting again after a failure;
        the client's probes pace reconnects, so grpc's own backoff (1 s up to 120 s) would only delay a
        server that is back.
        """
        self.address = address
        self.is_local = is_loopback(address) and tls is None
        options: list[tuple[str, Any]] = [
            ("grpc.max_send_message_length", MAX_MESSAGE_BYTES),
            ("grpc.max_receive_message_length", MAX_MESSAGE_BYTES),
        ]
        if keepalive_s is not None:
            options += [
                ("grpc.keepalive_time_ms", int(keepalive_s * 1000)),
                ("grpc.keepalive_timeout_ms", int(keepalive_timeout_s * 1000)),
                ("grpc.keepalive_permit_without_calls", 0),  # idle connections are not pinged
            ]
        if reconnect_backoff_s is not None:
            first_ms, longest_ms = (int(s * 1000) for s in reconnect_backoff_s)
            options += [
                # Not grpc.min_reconnect_backoff_ms: grpc also takes it as the connect timeout.
                ("grpc.initial_reconnect_backoff_ms", first_ms),
                ("grpc.max_reconnect_backoff_ms", longest_ms),
            ]
        if tls is None:
            self._channel = aio.insecure_channel(address, options=options)
        else:
            credentials = grpc.ssl_channel_credentials(*tls.read())
            self._channel = aio.secure_channel(address, credentials, options=options)
        self._metadata: tuple[tuple[str, str], ...] = (("authorization", f"Bearer {token}"),) if token else ()
        self._compression = _COMPRESSION[compression]
        self._timeout_s = default_timeout_s
        self._control_timeout_s = control_timeout_s
        # Compression is per call; the stream path is only taken without it.
        self._stream_max_bytes = stream_max_bytes if compression is Compression.NONE else 0
        self._stream: InferStream | None = None
        # Bytes in, bytes out: tensor bytes are spliced in and cut out by hand (see module docstring).
        self._infer = self._channel.unary_unary(SERVICE_PATH + "ModelInfer", None, None)
        self._raw_calls = {"ModelInfer": self._infer}

    async def _call(
        self, method: str, request: Any, response_type: Any, timeout_s: float | None = None
    ) -> Any:
        call = self._channel.unary_unary(
            SERVICE_PATH + method,
            request_serializer=type(request).SerializeToString,
            response_deserializer=response_type.FromString,
        )
        try:
            return await call(request, timeout=timeout_s or self._control_timeout_s, metadata=self._metadata)
        except aio.AioRpcError as exc:
            raise convert_error(exc, self.address) from exc

    async def infer(self, request: WireRequest) -> WireResponse:
        start = time.perf_counter_ns()
        head, tail = encode_request(request)
        size = head.ByteSize() + parts_size(tail)
        timeout_s = request.timeout_s or self._timeout_s
        if self._stream_max_bytes and size <= self._stream_max_bytes:
            sent = time.perf_counter_ns()
            try:
                decoded = await self._streamed(head, tail, timeout_s)
            except StreamFailedError:
                # The stream gives no status code: the unary call below gets it (and may succeed).
                decoded = None
            except TimeoutError:
                msg = f"no response within {timeout_s} s"
                raise DeadlineExceededError(
                    msg, status=GrpcCode.DEADLINE_EXCEEDED, server=self.address
                ) from None
            if decoded is not None:
                head_in, raw = decoded
                wait_ns = time.perf_counter_ns() - sent
                return decode_response(head_in, raw, serialize_ns=sent - start, wait_ns=wait_ns)
            head.id = request.request_id
        payload = b"".join([head.SerializeToString(), *tail])
        sent = time.perf_counter_ns()
        try:
            data = await self._infer(
                payload, timeout=timeout_s, metadata=self._metadata, compression=self._compression
            )
        except aio.AioRpcError as exc:
            raise convert_error(exc, self.address) from exc
        return decode_response(
            *split_response(data), serialize_ns=sent - start, wait_ns=time.perf_counter_ns() - sent
        )

    async def raw_call(self, method: str, message: bytes, timeout_s: float | None) -> bytes:
        call = self._raw_calls.get(method)
        if call is None:
            call = self._raw_calls[method] = self._channel.unary_unary(SERVICE_PATH + method, None, None)
        try:
            # No compression argument: grpcio would add a per-call metadata entry even for "none".
            data: bytes = await call(message, timeout=timeout_s, metadata=self._metadata or None)
        except aio.AioRpcError as exc:
            raise convert_error(exc, self.address) from exc
        return data

    async def _streamed(self, head: Any, tail: list[bytes | memoryview], timeout_s: float | None) -> Any:
        stream = self._stream
        if stream is None or stream.broken is not None:
            if stream is not None:
                await stream.close()
            stream = self._stream = InferStream(self._channel, self.address, self._metadata)
        return await stream.infer(head, tail, timeout_s)

    async def close(self) -> None:
        if self._stream is not None:
            await self._stream.close()
            self._stream = None
        await self._channel.close(None)
