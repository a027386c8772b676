"""KServe v2 gRPC transport on grpc aio, with Triton's generated messages from ``tritonclient.grpc``.

Tensor bytes skip protobuf both ways: the request is the serialized header followed by hand-written
``raw_input_contents`` fields (one copy of each tensor, into the message), and the response's
``raw_output_contents`` are cut out as views of the received buffer (read with ``np.frombuffer``).
"""

from __future__ import annotations

import ipaddress
import time
from collections.abc import Sequence
from typing import Any

import grpc
from grpc import aio
from tritonclient.grpc import service_pb2

from sonic.client.config import Compression, TlsConfig
from sonic.client.errors import (
    ClientError,
    ConnectionLostError,
    DeadlineExceededError,
    InvalidRequestError,
    error_for_status,
)
from sonic.client.transport.base import (
    IndexEntry,
    ModelInfo,
    ServerTiming,
    ShmPlacement,
    TensorInfo,
    Transport,
    WireOutput,
    WireRequest,
    WireResponse,
)
from sonic.client.transport.stream import SPLIT_ABOVE_BYTES, InferStream, StreamFailedError
from sonic.protocol.wire import encode_varint, parts_size, split_raw_contents

SERVICE = "/inference.GRPCInferenceService/"
# Triton's clients and server use INT32_MAX: requests that fit one fit the other.
MAX_MESSAGE_BYTES = 2**31 - 1
RAW_INPUT_CONTENTS_TAG = bytes([(7 << 3) | 2])
RAW_OUTPUT_CONTENTS_TAG = (6 << 3) | 2
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
    status = str(code.name)
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


def is_loopback(address: str) -> bool:
    host = address.rsplit(":", 1)[0].strip("[]")
    if host == "localhost":
        return True
    try:
        return ipaddress.ip_address(host).is_loopback
    except ValueError:
        return False


def encode_request(request: WireRequest) -> tuple[Any, list[bytes | memoryview]]:
    """The request head (a ModelInferRequest without tensor bytes) and its raw_input_contents fields."""
    head = service_pb2.ModelInferRequest(model_name=request.model, model_version=request.version)
    if request.request_id:
        head.id = request.request_id
    parts: list[bytes | memoryview] = []
    for tensor in request.inputs:
        message = head.inputs.add(name=tensor.name, datatype=tensor.datatype, shape=tensor.shape)
        if tensor.shm is not None:
            _set_shm(message.parameters, tensor.shm)
            continue
        assert tensor.data is not None
        size = tensor.data.nbytes if isinstance(tensor.data, memoryview) else len(tensor.data)
        parts += (RAW_INPUT_CONTENTS_TAG, encode_varint(size), tensor.data)
    for output in request.outputs:
        message = head.outputs.add(name=output.name)
        if output.shm is not None:
            _set_shm(message.parameters, output.shm)
    return head, parts


def _set_shm(parameters: Any, placement: ShmPlacement) -> None:
    parameters["shared_memory_region"].string_param = placement.region
    parameters["shared_memory_byte_size"].int64_param = placement.byte_size
    if placement.offset:
        parameters["shared_memory_offset"].int64_param = placement.offset


def decode_response(
    head: Any, raw: list[memoryview], *, serialize_ns: int = 0, wait_ns: int = 0
) -> WireResponse:
    outputs = []
    for index, tensor in enumerate(head.outputs):
        payload: bytes | memoryview = raw[index] if index < len(raw) else b""
        outputs.append(WireOutput(tensor.name, tensor.datatype, tuple(int(d) for d in tensor.shape), payload))
    return WireResponse(head.model_name, head.model_version, tuple(outputs), serialize_ns, wait_ns)


def split_response(data: bytes | bytearray | memoryview) -> tuple[Any, list[memoryview]]:
    if len(data) < SPLIT_ABOVE_BYTES:
        head = service_pb2.ModelInferResponse.FromString(data)
        return head, [memoryview(r) for r in head.raw_output_contents]
    rest, raw = split_raw_contents(data, RAW_OUTPUT_CONTENTS_TAG)
    return service_pb2.ModelInferResponse.FromString(rest), raw


def _tensor_infos(tensors: Any, batched: bool) -> tuple[TensorInfo, ...]:
    return tuple(
        TensorInfo(t.name, t.datatype, tuple(int(d) for d in (t.shape[1:] if batched else t.shape)))
        for t in tensors
    )


def model_info_from(name: str, metadata: Any, config: Any) -> ModelInfo:
    """A ModelMetadataResponse and a ModelConfigResponse as the client needs them."""
    max_batch_size = int(config.config.max_batch_size)
    batched = max_batch_size > 0
    return ModelInfo(
        name=name,
        versions=tuple(metadata.versions),
        inputs=_tensor_infos(metadata.inputs, batched),
        outputs=_tensor_infos(metadata.outputs, batched),
        max_batch_size=max_batch_size,
    )


def server_timing_from(response: Any) -> ServerTiming:
    """A ModelStatisticsResponse summed over its models (versions)."""
    total = ServerTiming()
    for stats in response.model_stats:
        s = stats.inference_stats
        total = total - ServerTiming(
            -s.success.count, -s.queue.ns, -s.compute_input.ns, -s.compute_infer.ns, -s.compute_output.ns
        )
    return total


class ControlCalls(Transport):
    """The control-plane methods of both gRPC transports, on top of their ``_call``."""

    async def _call(self, method: str, request: Any, response_type: Any) -> Any:
        raise NotImplementedError

    async def server_ready(self) -> bool:
        pb = service_pb2
        response = await self._call("ServerReady", pb.ServerReadyRequest(), pb.ServerReadyResponse)
        return bool(response.ready)

    async def model_ready(self, name: str, version: str = "") -> bool:
        pb = service_pb2
        request = pb.ModelReadyRequest(name=name, version=version)
        response = await self._call("ModelReady", request, pb.ModelReadyResponse)
        return bool(response.ready)

    async def repository_index(self) -> list[IndexEntry]:
        pb = service_pb2
        response = await self._call(
            "RepositoryIndex", pb.RepositoryIndexRequest(ready=True), pb.RepositoryIndexResponse
        )
        return [IndexEntry(m.name, m.version, m.state) for m in response.models]

    async def model_info(self, name: str, version: str) -> ModelInfo:
        pb = service_pb2
        metadata = await self._call(
            "ModelMetadata", pb.ModelMetadataRequest(name=name, version=version), pb.ModelMetadataResponse
        )
        config = await self._call(
            "ModelConfig", pb.ModelConfigRequest(name=name, version=version), pb.ModelConfigResponse
        )
        return model_info_from(name, metadata, config)

    async def model_statistics(self, name: str, version: str) -> ServerTiming:
        pb = service_pb2
        request = pb.ModelStatisticsRequest(name=name, version=version)
        return server_timing_from(await self._call("ModelStatistics", request, pb.ModelStatisticsResponse))

    async def shm_register(self, name: str, key: str, offset: int, byte_size: int) -> None:
        pb = service_pb2
        request = pb.SystemSharedMemoryRegisterRequest(name=name, key=key, offset=offset, byte_size=byte_size)
        await self._call("SystemSharedMemoryRegister", request, pb.SystemSharedMemoryRegisterResponse)

    async def shm_unregister(self, name: str) -> None:
        pb = service_pb2
        request = pb.SystemSharedMemoryUnregisterRequest(name=name)
        await self._call("SystemSharedMemoryUnregister", request, pb.SystemSharedMemoryUnregisterResponse)


class GrpcTransport(ControlCalls):
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
    ) -> None:
        """``stream_max_bytes``: requests up to this size go on a ModelStreamInfer stream (0: never)."""
        self.address = address
        self.is_local = is_loopback(address) and tls is None
        options: Sequence[tuple[str, Any]] = [
            ("grpc.max_send_message_length", MAX_MESSAGE_BYTES),
            ("grpc.max_receive_message_length", MAX_MESSAGE_BYTES),
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
        self._infer = self._channel.unary_unary(SERVICE + "ModelInfer", None, None)

    async def _call(
        self, method: str, request: Any, response_type: Any, timeout_s: float | None = None
    ) -> Any:
        call = self._channel.unary_unary(
            SERVICE + method,
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
                raise DeadlineExceededError(msg, status="DEADLINE_EXCEEDED", server=self.address) from None
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
