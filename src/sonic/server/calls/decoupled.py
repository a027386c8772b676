"""BLS calls that stream: ``exec(decoupled=True)`` from a Python model's thread, one response at a time.

The call is a :class:`~sonic.server.decoupled.DecoupledCall` on the server's event loop; the model's
thread takes each response with one round trip to the loop, so the called model's back-pressure holds
(it waits while the caller has not taken ``max_queued`` of its responses). A non-decoupled model
answers with one response, final. Leaving the iteration early cancels the call: the called model sees
``is_cancelled()``. A call given the request's trace is traced as its child, as Triton traces it.
"""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import Callable, Iterator

from sonic.protocol.errors import FailedPreconditionError
from sonic.protocol.types import InferRequest
from sonic.server.backends.base import ModelCall
from sonic.server.decoupled import DecoupledCall
from sonic.server.models.version import ModelVersion
from sonic.server.responses import Streamed
from sonic.server.trace.requests import RequestTrace


class _Stream:
    """The responses of one call, taken on the loop for a thread that waits."""

    def __init__(self, model: ModelVersion, request: InferRequest, trace: RequestTrace | None) -> None:
        self._model = model
        self._request = request
        # A call made with the request's trace (``trace=request.trace()``): its child, as Triton's, from
        # REQUEST_START to REQUEST_END after the final response (or the call's end, whichever comes first).
        self._trace = trace
        if trace is not None:
            trace.started(model.name, model.version, request.request_id)
        try:
            self._call = DecoupledCall.start(model, request, trace=trace) if model.decoupled else None
        except BaseException:
            self._ended()
            raise

    async def next(self) -> Streamed:
        try:
            item = await self._next()
        except BaseException:
            self._ended()
            raise
        if item.final:
            self._ended()
        return item

    async def _next(self) -> Streamed:
        if self._call is None:  # a model with one response per request
            response = await self._model.infer(self._request, trace=self._trace)
            return Streamed({tensor.name: tensor.array for tensor in response.outputs}, final=True)
        (answer,) = await self._call.next(most=1)
        if answer.response is None:
            return Streamed(None, answer.error, answer.final)
        outputs = {tensor.name: tensor.array for tensor in answer.response.outputs}
        return Streamed(outputs, None, answer.final)

    def _ended(self) -> None:
        if self._trace is not None:
            self._trace.stamp("REQUEST_END")
            self._trace = None

    def close(self) -> None:
        self._ended()
        if self._call is not None:
            self._call.close()


def stream_blocking(
    lookup: Callable[[str, str], ModelVersion], loop: asyncio.AbstractEventLoop, call: ModelCall
) -> Iterator[Streamed]:
    """Each response of the called model to one request, the last one final; from a thread, never the loop's.

    Errors before the first response (model not found, invalid inputs) raise at the first ``next``.
    """
    try:
        running = asyncio.get_running_loop()
    except RuntimeError:
        running = None
    if running is loop:
        # Waiting here would stop the loop that has to do the work.
        msg = f"call of model '{call.model_name}' from the event loop thread: use an instance thread"
        raise FailedPreconditionError(msg)

    async def open_stream() -> _Stream:
        return _Stream(lookup(call.model_name, call.model_version), call.request(), call.trace)

    stream = asyncio.run_coroutine_threadsafe(open_stream(), loop).result()
    try:
        while True:
            item = asyncio.run_coroutine_threadsafe(stream.next(), loop).result()
            yield item
            if item.final:
                return
    finally:
        # Not waited for: an iterator dropped unfinished may be collected on any thread, the loop's too.
        with contextlib.suppress(RuntimeError):  # a closed loop: nothing left to cancel
            loop.call_soon_threadsafe(stream.close)
