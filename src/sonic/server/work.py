"""A request on its way through a scheduler, and the interface every scheduler offers a model version.

This module sits below both the runtime and the backends (it imports only the response channel and the
statistics' timing), so a backend's ``create_scheduler``, the batcher and the model version can all
use it without importing each other.
"""

from __future__ import annotations

import asyncio
import enum
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any, Protocol

import numpy.typing as npt

from sonic.server.metrics.stats import RequestTiming
from sonic.server.responses import ResponseChannel
from sonic.server.trace.requests import RequestTrace

ItemOutputs = dict[str, npt.NDArray[Any]]


class ItemState(enum.Enum):
    QUEUED = 1
    TAKEN = 2  # in a batch (executing, or done and not yet delivered)
    DROPPED = 3  # left the queue without running: cancelled, timed out or unloaded


@dataclass(eq=False, slots=True)
class WorkItem:
    """One request waiting for, or taking part in, an execution."""

    inputs: dict[str, npt.NDArray[Any]]
    batch_size: int
    shape_key: tuple[object, ...]  # requests merge only with requests of the same key
    future: asyncio.Future[tuple[ItemOutputs, RequestTiming]]
    priority: int = 0
    timeout_us: int = 0
    request_id: str = ""
    output_names: tuple[str, ...] | None = None  # None: every output
    # Where outputs may be run into, as server.shm.request placed them (None: nowhere, never empty);
    # handed to the backend only when the request runs alone.
    output_buffers: dict[str, npt.NDArray[Any]] | None = None
    parameters: Mapping[str, object] = field(default_factory=dict)  # the request's parameters, as sent
    # A decoupled model's request: its responses go here; the future only says that execute returned.
    responses: ResponseChannel | None = None
    enqueued_ns: int = 0
    level: int = 0  # priority queue index
    state: ItemState = ItemState.QUEUED
    timer: asyncio.TimerHandle | None = None  # the queue timeout, when there is one
    trace: RequestTrace | None = None  # Triton's trace of it, when sampled (an ensemble traces its steps)

    def __init__(  # written out: compiled (sonic.protocol.types.InputTensor says why)
        self,
        inputs: dict[str, npt.NDArray[Any]],
        batch_size: int,
        shape_key: tuple[object, ...],
        future: asyncio.Future[tuple[ItemOutputs, RequestTiming]],
        priority: int = 0,
        timeout_us: int = 0,
        request_id: str = "",
        output_names: tuple[str, ...] | None = None,
        output_buffers: dict[str, npt.NDArray[Any]] | None = None,
        parameters: Mapping[str, object] | None = None,
        responses: ResponseChannel | None = None,
        enqueued_ns: int = 0,
        level: int = 0,
        state: ItemState = ItemState.QUEUED,
        timer: asyncio.TimerHandle | None = None,
        trace: RequestTrace | None = None,
    ) -> None:
        self.inputs = inputs
        self.batch_size = batch_size
        self.shape_key = shape_key
        self.future = future
        self.priority = priority
        self.timeout_us = timeout_us
        self.request_id = request_id
        self.output_names = output_names
        self.output_buffers = output_buffers
        self.parameters = {} if parameters is None else parameters
        self.responses = responses
        self.enqueued_ns = enqueued_ns
        self.level = level
        self.state = state
        self.timer = timer
        self.trace = trace


class RequestScheduler(Protocol):
    """What a model version needs from its scheduler (the batcher's and the ensemble's)."""

    @property
    def queued(self) -> int: ...

    def start(self) -> None: ...

    async def submit(self, item: WorkItem) -> tuple[ItemOutputs, RequestTiming]: ...

    async def close(self, timeout_s: float) -> None: ...
