"""What both gRPC transports share: control-plane calls (health, metadata, statistics, shared memory).

A transport provides ``_call`` (one unary call, protobuf message in and out) and ``raw_call`` (one
call with an already serialized request); these methods build the requests and turn Triton's
responses into the client's types. :meth:`GrpcCalls.call` and ``raw_call`` are also what tools
(``sonic perf``) use to send Triton's messages themselves.
"""

from __future__ import annotations

import ipaddress
from abc import abstractmethod
from typing import Any

from tritonclient.grpc import service_pb2

from sonic.client.transport.base import IndexEntry, ModelInfo, ServerTiming, TensorInfo, Transport
from sonic.protocol.wire import ModelState


def is_loopback(address: str) -> bool:
    host = address.rsplit(":", 1)[0].strip("[]")
    if host == "localhost":
        return True
    try:
        return ipaddress.ip_address(host).is_loopback
    except ValueError:
        return False


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
        execution_ns = sum(
            b.compute_input.ns + b.compute_infer.ns + b.compute_output.ns for b in stats.batch_stats
        )
        total = total - ServerTiming(
            -s.success.count,
            -s.queue.ns,
            -s.compute_input.ns,
            -s.compute_infer.ns,
            -s.compute_output.ns,
            -stats.execution_count,
            -execution_ns,
        )
    return total


class GrpcCalls(Transport):
    """The control-plane methods of both gRPC transports, on top of their ``_call``."""

    @abstractmethod
    async def _call(self, method: str, request: Any, response_type: Any) -> Any: ...

    @abstractmethod
    async def raw_call(self, method: str, message: bytes, timeout_s: float | None) -> bytes | memoryview:
        """One call of the service with a serialized request, sent as is (never compressed)."""

    async def call(self, method: str, request: Any, response_type: Any) -> Any:
        """One call of the service, Triton's protobuf messages in and out."""
        return await self._call(method, request, response_type)

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
        return [IndexEntry(m.name, m.version, ModelState.from_wire(m.state)) for m in response.models]

    async def model_info(self, name: str, version: str) -> ModelInfo:
        pb = service_pb2
        metadata = await self._call(
            "ModelMetadata", pb.ModelMetadataRequest(name=name, version=version), pb.ModelMetadataResponse
        )
        config = await self._call(
            "ModelConfig", pb.ModelConfigRequest(name=name, version=version), pb.ModelConfigResponse
        )
        return model_info_from(name, metadata, config)

    async def model_checksums(self, name: str, version: str) -> dict[str, str]:
        pb = service_pb2
        request = pb.ModelConfigRequest(name=name, version=version)
        config = (await self._call("ModelConfig", request, pb.ModelConfigResponse)).config
        return {
            key: value
            for agent in config.model_repository_agents.agents
            if agent.name == "checksum"
            for key, value in agent.parameters.items()
        }

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
