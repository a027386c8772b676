"""The transport interface and what it reports about servers and models.

A transport knows one server. It takes and returns tensor bytes, never numpy arrays: decoding and
validation live in the client, so every transport behaves the same and tests of retries and failover
can use :class:`~sonic.client.transport.memory.MemoryTransport` without sockets.
"""

from __future__ import annotations

from abc import ABC, abstractmethod
from collections.abc import Sequence
from dataclasses import dataclass

from sonic.protocol.types import WireInput, WireOutputRequest, WireRequest, WireResponse
from sonic.protocol.wire import ModelState


@dataclass(frozen=True)
class TensorInfo:
    name: str
    datatype: str
    dims: tuple[int, ...]  # per-object dims: without the batch dimension; -1 is variable


@dataclass(frozen=True)
class ModelInfo:
    """What the client needs to know about a model: from ModelMetadata and ModelConfig."""

    name: str
    versions: tuple[str, ...]
    inputs: tuple[TensorInfo, ...]
    outputs: tuple[TensorInfo, ...]
    max_batch_size: int  # 0: the model takes no batch dimension


class RequestTemplate:
    """Everything of an inference request but its id and tensor bytes: one per input signature
    (model, version, input names, datatypes and shapes, requested outputs, timeout) of a client.

    A transport may memoise its encoding in ``encoded`` (the native one keeps the serialized request
    head there, and replaces what it does not recognise), so the common call splices only its id and
    raw bytes onto bytes made once.
    """

    __slots__ = ("encoded", "inputs", "model", "outputs", "timeout_s", "version")

    def __init__(
        self,
        model: str,
        version: str,
        inputs: tuple[tuple[str, str, tuple[int, ...]], ...],  # name, datatype, shape
        outputs: tuple[str, ...],
        timeout_s: float | None,
    ) -> None:
        self.model = model
        self.version = version
        self.inputs = inputs
        self.outputs = outputs
        self.timeout_s = timeout_s
        self.encoded: object = None  # the transport's own, see above

    def request(self, request_id: str, data: Sequence[bytes | memoryview]) -> WireRequest:
        """The request this template makes with ``data``, one item per input in order."""
        return WireRequest(
            self.model,
            self.version,
            tuple(WireInput(n, d, s, b) for (n, d, s), b in zip(self.inputs, data, strict=True)),
            tuple(WireOutputRequest(n) for n in self.outputs),
            request_id,
            self.timeout_s,
        )


@dataclass(frozen=True)
class ServerTiming:
    """Cumulative server-side durations of a model (ModelStatistics), in nanoseconds.

    The ``compute_*`` durations are summed over requests (each request of a dynamic batch reports the
    whole batch); ``execution_ns`` is summed over executions (each batch once).
    """

    success_count: int = 0
    queue_ns: int = 0
    compute_input_ns: int = 0
    compute_infer_ns: int = 0
    compute_output_ns: int = 0
    executions: int = 0
    execution_ns: int = 0

    def __sub__(self, other: ServerTiming) -> ServerTiming:
        return ServerTiming(
            self.success_count - other.success_count,
            self.queue_ns - other.queue_ns,
            self.compute_input_ns - other.compute_input_ns,
            self.compute_infer_ns - other.compute_infer_ns,
            self.compute_output_ns - other.compute_output_ns,
            self.executions - other.executions,
            self.execution_ns - other.execution_ns,
        )


@dataclass(frozen=True)
class IndexEntry:
    name: str
    version: str
    state: ModelState


class Transport(ABC):
    """One server. Methods raise :mod:`sonic.client.errors` types only."""

    address: str
    is_local: bool  # same host: system shared memory may be used

    @abstractmethod
    async def server_ready(self) -> bool: ...

    @abstractmethod
    async def repository_index(self) -> list[IndexEntry]: ...

    @abstractmethod
    async def model_info(self, name: str, version: str) -> ModelInfo: ...

    async def model_checksums(self, name: str, version: str) -> dict[str, str]:  # noqa: ARG002
        """The model's ``checksum`` repository agent parameters (``MD5:<path>`` -> digest); none here."""
        return {}

    @abstractmethod
    async def model_statistics(self, name: str, version: str) -> ServerTiming: ...

    @abstractmethod
    async def infer(self, request: WireRequest) -> WireResponse: ...

    async def infer_template(
        self, template: RequestTemplate, request_id: str, data: Sequence[bytes | memoryview]
    ) -> WireResponse:
        """The request ``template`` makes with ``data`` (no shared memory, no parameters): transports
        override it to skip building and encoding a :class:`WireRequest` on every call (and may leave
        the response's timing at zero: this path's callers return outputs only)."""
        return await self.infer(template.request(request_id, data))

    @abstractmethod
    async def shm_register(self, name: str, key: str, offset: int, byte_size: int) -> None: ...

    @abstractmethod
    async def shm_unregister(self, name: str) -> None: ...

    @abstractmethod
    async def close(self) -> None: ...
