"""Transport-neutral inference request and response, shared by the gRPC and HTTP adapters."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

import numpy.typing as npt


@dataclass(slots=True)
class InputTensor:
    """An input as received: either raw bytes (zero-copy view) or an already decoded array."""

    name: str
    datatype: str
    shape: tuple[int, ...]
    raw: bytes | memoryview | None = None
    array: npt.NDArray[Any] | None = None


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
    trace_headers: dict[str, str] | None = None  # W3C traceparent/tracestate, read only when tracing


@dataclass(slots=True)
class OutputTensor:
    name: str
    datatype: str
    shape: tuple[int, ...]
    array: npt.NDArray[Any]


@dataclass(slots=True)
class InferResponse:
    model_name: str
    model_version: str
    request_id: str
    outputs: list[OutputTensor]
