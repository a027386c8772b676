"""Model-to-model calls inside one server: what ensembles and Python models (BLS) use.

A call goes through the called model's own validation and scheduler, so it is batched with client
requests for that model, but its tensors stay numpy arrays in this process: nothing is serialized.
``parameters`` are request parameters as a client sends them (``sequence_id``, ``sequence_start``,
``sequence_end``, ``priority``, ``timeout`` and custom ones): an ensemble step gets its ensemble
request's, a BLS call those its ``pb_utils.InferenceRequest`` was built with.
"""

from __future__ import annotations

import asyncio
from collections.abc import Callable, Iterator
from typing import Any

import numpy.typing as npt

from sonic.protocol.errors import FailedPreconditionError
from sonic.server.backends.base import ModelCall
from sonic.server.cache import ResponseCache, infer_through_cache
from sonic.server.calls.decoupled import stream_blocking
from sonic.server.models.version import ModelVersion
from sonic.server.responses import Streamed


class ServerModelCaller:
    """The :class:`sonic.server.backends.base.ModelCaller` of a running server."""

    def __init__(
        self,
        lookup: Callable[[str, str], ModelVersion],
        loop: asyncio.AbstractEventLoop,
        cache: ResponseCache | None = None,
    ) -> None:
        self._lookup = lookup
        self._loop = loop
        self._cache = cache  # the server's response cache: a call to a model that enables it goes through it

    async def infer(self, call: ModelCall) -> dict[str, npt.NDArray[Any]]:
        model = self._lookup(call.model_name, call.model_version)
        trace = call.trace
        cached = self._cache is not None and model.config.response_cache.enable
        if trace is not None:  # an ensemble step of a traced request: its own trace, the ensemble's child
            trace.started(model.name, model.version, call.request_id)
        try:
            if self._cache is not None and cached:
                response = await infer_through_cache(self._cache, model, call.request(), trace=trace)
            else:
                response = await model.infer(call.request(), trace=trace)
        finally:
            if trace is not None:
                trace.stamp("REQUEST_END")
        return {tensor.name: tensor.array for tensor in response.outputs}

    def infer_blocking(self, call: ModelCall) -> dict[str, npt.NDArray[Any]]:
        try:
            running = asyncio.get_running_loop()
        except RuntimeError:
            running = None
        if running is self._loop:
            # Waiting here would stop the loop that has to do the work.
            msg = f"call of model '{call.model_name}' from the event loop thread: use the async infer()"
            raise FailedPreconditionError(msg)
        return asyncio.run_coroutine_threadsafe(self.infer(call), self._loop).result()

    def infer_stream_blocking(self, call: ModelCall) -> Iterator[Streamed]:
        """BLS ``exec(decoupled=True)``: :mod:`sonic.server.calls.decoupled`."""
        return stream_blocking(self._lookup, self._loop, call)
