"""One request to a decoupled model: its responses as the model sends them, each final or not.

A decoupled model's request goes through the model's scheduler like any other (validation, queues,
dynamic batching, an instance thread); the scheduler's answer only says that ``execute`` returned and
the instance is free again. The responses come through the request's
:class:`~sonic.server.responses.ResponseChannel`, during ``execute`` or later, from the model's
own threads, until the final flag. Used by ``ModelStreamInfer`` (:mod:`.frontends.grpc_methods`) and by
BLS ``exec(decoupled=True)`` (:mod:`.calls.decoupled`).
"""

from __future__ import annotations

import asyncio
import time
from dataclasses import dataclass, field

from sonic.protocol.errors import InternalError, SonicError
from sonic.protocol.types import InferRequest, InferResponse
from sonic.server.metrics.stats import RequestTiming
from sonic.server.models.version import ModelVersion, failure_reason
from sonic.server.responses import DEFAULT_MAX_QUEUED_RESPONSES, ResponseChannel, Streamed
from sonic.server.shm.request import RequestMemory
from sonic.server.trace.requests import RequestTrace
from sonic.server.traffic.rows import TrafficRecorder, array_bytes, request_row
from sonic.server.work import ItemState, WorkItem


@dataclass(frozen=True, slots=True)
class StreamAnswer:
    """One message of a stream: a response, an error, or neither (the final flag alone)."""

    response: InferResponse | None
    error: SonicError | None
    final: bool


class DecoupledCall:
    """Create with :meth:`start` on the event loop; read with :meth:`next`; always :meth:`close`."""

    def __init__(
        self,
        model: ModelVersion,
        request: InferRequest,
        item: WorkItem,
        channel: ResponseChannel,
        received_ns: int = 0,
        trace: RequestTrace | None = None,
    ) -> None:
        self._model = model
        self._trace = trace
        self._request = request
        self._item = item
        self._channel = channel
        self._done = False
        self._received_ns = received_ns or time.perf_counter_ns()
        traffic = model.traffic
        self._record = _Record(traffic) if traffic is not None and traffic.enabled else None
        self._task = asyncio.get_running_loop().create_task(self._execute())
        # Kept by the model version until done: an execution outlives a reader that went away.
        model.background.add(self._task)
        self._task.add_done_callback(model.background.discard)
        if self._record is not None:
            self._task.add_done_callback(lambda _: self._recorded("executed"))

    @classmethod
    def start(
        cls,
        model: ModelVersion,
        request: InferRequest,
        max_queued: int = DEFAULT_MAX_QUEUED_RESPONSES,
        *,
        received_ns: int = 0,
        memory: RequestMemory | None = None,
        trace: RequestTrace | None = None,
    ) -> DecoupledCall:
        """Validate ``request`` (raises InvalidArgumentError) and queue it for the model.

        ``received_ns``: when it arrived (0: now); ``memory``: its inputs read from shared memory;
        ``trace``: its trace record, when Triton's trace extension samples it (queued and computed are
        stamped here, its responses by the front end).
        """
        item = model.prepare(request, memory)
        channel = ResponseChannel(max_queued)
        item.responses = channel
        if trace is not None:
            trace.queued(item.inputs, {name: spec.datatype.name for name, spec in model.spec.inputs.items()})
            item.trace = trace
        return cls(model, request, item, channel, received_ns, trace)

    async def _execute(self) -> None:
        stats = self._model.stats
        stats.pending_requests += 1
        try:
            _, timing = await self._model.scheduler.submit(self._item)
            if self._record is not None:
                self._record.timing = timing
            if self._trace is not None:  # its outputs are its responses', written as they are read
                self._trace.executed(self._item.enqueued_ns, timing, [])
        except asyncio.CancelledError:
            stats.record_failure(time.perf_counter_ns() - self._received_ns, "CANCELED")
            raise
        except Exception as exc:  # noqa: BLE001  (ends the request's stream with the error)
            stats.record_failure(time.perf_counter_ns() - self._received_ns, failure_reason(exc))
            self._channel.end_with(exc if isinstance(exc, SonicError) else InternalError(str(exc)))
            return
        finally:
            stats.pending_requests -= 1
        stats.record_success(time.perf_counter_ns() - self._received_ns, timing, self._item.batch_size)

    async def ended(self) -> None:
        """Wait until the model's ``execute`` has returned (its outcome is the stream's, not raised here)."""
        await asyncio.wait([self._task])

    async def next(self, most: int | None = None) -> list[StreamAnswer]:
        """The responses sent since the last call (one at least), in order; after a final one, none."""
        if self._done:
            msg = "the stream of this request has ended (its final response was read)"
            raise RuntimeError(msg)
        items = await self._channel.get_all(most)
        self._done = items[-1].final  # nothing is sent after the final flag
        if self._record is not None:
            self._record.count(items)
        answers = [self.answer(item) for item in items]
        if self._trace is not None:  # level TENSORS: each response's outputs, as Triton writes them
            for answer in answers:
                if answer.response is not None:
                    self._trace.responded(answer.response.outputs)
        return answers

    def answer(self, item: Streamed) -> StreamAnswer:
        if item.error is not None or item.outputs is None:
            return StreamAnswer(None, item.error, item.final)
        model, request = self._model, self._request
        names = [n for n in model.spec.outputs if n in item.outputs]  # in config order, as Triton answers
        if request.outputs is not None:
            names = [n for n in names if n in request.outputs]
        tensors = [model.output_tensor(n, item.outputs[n]) for n in names]
        response = InferResponse(model.name, str(model.version), request.request_id, tensors)
        return StreamAnswer(response, None, item.final)

    def close(self) -> None:
        """The reader is done or gone: the model sees ``is_cancelled()`` and its later responses are
        dropped; a request still queued leaves the queue."""
        if not self._done:
            self._channel.cancel()
            if self._record is not None and self._record.error is None:
                self._record.error = asyncio.CancelledError()  # the reader left before the final flag
        if self._item.state is ItemState.QUEUED:
            self._task.cancel()
        if self._record is not None:
            self._recorded("read")

    def _recorded(self, part: str) -> None:
        """One traffic record, once the execution is over and the stream read or left (in either order)."""
        record = self._record
        if record is None or part in record.parts:
            return
        record.parts.add(part)
        if len(record.parts) < 2:
            return
        elapsed = time.perf_counter_ns() - self._received_ns
        request, item = self._request, self._item
        record.traffic.record(
            request_row(
                request,
                self._model.version,
                item.batch_size,
                record.timing,
                elapsed,
                error=record.error,
                keep_contents=record.traffic.wants_contents(),
                signatures=record.traffic.signatures,
                responses=record.responses,
                output_bytes=record.output_bytes,
            )
        )


@dataclass(slots=True)
class _Record:
    """What a decoupled request's traffic record gathers while its stream goes on."""

    traffic: TrafficRecorder
    timing: RequestTiming | None = None
    responses: int = 0
    output_bytes: int = 0
    error: BaseException | None = None
    parts: set[str] = field(default_factory=set)  # "executed", "read": recorded when both are over

    def count(self, items: list[Streamed]) -> None:
        for item in items:
            if item.error is not None:
                self.error = item.error
            elif item.outputs is not None:
                self.responses += 1
                self.output_bytes += sum(array_bytes(array) for array in item.outputs.values())
