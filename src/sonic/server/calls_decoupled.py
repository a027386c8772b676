"""BLS calls that stream: ``exec(decoupled=True)`` from a Python model's thread, one response at a time.

The call is a :class:`~sonic.server.decoupled.DecoupledCall` on the server's event loop; the model's
thread takes each response with one round trip to the loop, so the called model's back-pressure holds
(it waits while the caller has not taken ``max_queued`` of its responses). A non-decoupled model
answers with one response, final. Leaving the iteration early cancels the call: the called model sees
``is_cancelled()``.
"""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import Callable, Iterator, Mapping, Sequence
from typing import Any

import numpy as np
import numpy.typing as npt

from sonic.protocol import dtypes
from sonic.protocol.errors import FailedPreconditionError
from sonic.protocol.types import InferRequest, InputTensor, check_parameters
from sonic.server.decoupled import DecoupledCall
from sonic.server.model import ModelVersion
from sonic.server.responses import Streamed


def _request(
    model_name: str,
    model_version: str,
    inputs: Mapping[str, npt.NDArray[Any]],
    output_names: Sequence[str] | None,
    request_id: str,
    parameters: Mapping[str, object] | None,
) -> InferRequest:
    if parameters:
        check_parameters(parameters, f"call of model '{model_name}'")
    tensors = []
    for name, array in inputs.items():
        # BYTES tensors are object arrays inside the server, whatever numpy string type came in.
        value = array.astype(np.object_) if array.dtype.kind in "SU" else array
        datatype = dtypes.from_numpy(value.dtype)
        tensors.append(InputTensor(name, datatype.name, tuple(value.shape), array=value))
    return InferRequest(
        model_name=model_name,
        model_version=model_version,
        inputs=tensors,
        request_id=request_id,
        outputs=list(output_names) if output_names is not None else None,
        parameters=dict(parameters) if parameters else {},
    )


class _Stream:
    """The responses of one call, taken on the loop for a thread that waits."""

    def __init__(self, model: ModelVersion, request: InferRequest) -> None:
        self._model = model
        self._call = DecoupledCall.start(model, request) if model.decoupled else None
        self._request = request

    async def next(self) -> Streamed:
        if self._call is None:  # a model with one response per request
            response = await self._model.infer(self._request)
            return Streamed({tensor.name: tensor.array for tensor in response.outputs}, final=True)
        (answer,) = await self._call.next(most=1)
        if answer.response is None:
            return Streamed(None, answer.error, answer.final)
        outputs = {tensor.name: tensor.array for tensor in answer.response.outputs}
        return Streamed(outputs, None, answer.final)

    def close(self) -> None:
        if self._call is not None:
            self._call.close()


def stream_blocking(
    lookup: Callable[[str, str], ModelVersion],
    loop: asyncio.AbstractEventLoop,
    model_name: str,
    model_version: str,
    inputs: Mapping[str, npt.NDArray[Any]],
    output_names: Sequence[str] | None = None,
    request_id: str = "",
    parameters: Mapping[str, object] | None = None,
) -> Iterator[Streamed]:
    """Each response of ``model_name`` to one request, the last one final; from a thread, never the loop's.

    Errors before the first response (model not found, invalid inputs) raise at the first ``next``.
    """
    try:
        running = asyncio.get_running_loop()
    except RuntimeError:
        running = None
    if running is loop:
        # Waiting here would stop the loop that has to do the work.
        msg = f"call of model '{model_name}' from the event loop thread: use an instance thread"
        raise FailedPreconditionError(msg)

    async def open_stream() -> _Stream:
        model = lookup(model_name, model_version)
        return _Stream(
            model, _request(model_name, model_version, inputs, output_names, request_id, parameters)
        )

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
