"""Transport-neutral inference request and response, shared by the gRPC and HTTP adapters."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

import numpy.typing as npt


@dataclass(frozen=True, slots=True)
class ShmRef:
    """A place in a registered system shared-memory region (request parameters ``shared_memory_*``)."""

    region: str
    byte_size: int
    offset: int = 0


@dataclass(slots=True)
class InputTensor:
    """An input as received: raw bytes (zero-copy view), an already decoded array, or a region."""

    name: str
    datatype: str
    shape: tuple[int, ...]
    raw: bytes | memoryview | None = None
    array: npt.NDArray[Any] | None = None
    shm: ShmRef | None = None


@dataclass(slots=True)
class InferRequest:
    model_name: str
    model_version: str
    inputs: list[InputTensor]
    request_id: str = ""
    outputs: list[str] | None = None  # None: every output of the model
    priority: int = 0
    timeout_us: int = 0
    received_ns: int = 0  # perf_counter_ns when the frontend got it
    parameters: dict[str, object] = field(default_factory=dict)
    output_shm: dict[str, ShmRef] = field(default_factory=dict)  # outputs to write into shared memory
    # Views of those regions, shaped as the outputs will be, that a backend may write into directly.
    output_buffers: dict[str, npt.NDArray[Any]] = field(default_factory=dict)
    trace_headers: dict[str, str] | None = None  # W3C traceparent/tracestate, read only when tracing


@dataclass(slots=True)
class OutputTensor:
    name: str
    datatype: str
    shape: tuple[int, ...]
    array: npt.NDArray[Any]
    shm: ShmRef | None = None  # set once written into shared memory: the body then carries no bytes


@dataclass(slots=True)
class InferResponse:
    model_name: str
    model_version: str
    request_id: str
    outputs: list[OutputTensor]
