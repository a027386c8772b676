"""Model-to-model calls inside one server: what ensembles and Python models (BLS) use.

A call goes through the called model's own validation and scheduler, so it is batched with client
requests for that model, but its tensors stay numpy arrays in this process: nothing is serialized.
``parameters`` are request parameters as a client sends them (``sequence_id``, ``sequence_start``,
``sequence_end``, ``priority``, ``timeout`` and custom ones): an ensemble step gets its ensemble
request's, a BLS call those its ``pb_utils.InferenceRequest`` was built with.
"""

from __future__ import annotations

import asyncio
from collections.abc import Callable, Iterator, Mapping, Sequence
from typing import Any

import numpy as np
import numpy.typing as npt

from sonic.protocol import dtypes
from sonic.protocol.errors import FailedPreconditionError
from sonic.protocol.types import InferRequest, InputTensor, check_parameters
from sonic.server.calls_decoupled import stream_blocking
from sonic.server.model import ModelVersion
from sonic.server.responses import Streamed


class ServerModelCaller:
    """The :class:`sonic.server.backends.base.ModelCaller` of a running server."""

    def __init__(self, lookup: Callable[[str, str], ModelVersion], loop: asyncio.AbstractEventLoop) -> None:
        self._lookup = lookup
        self._loop = loop

    async def infer(
        self,
        model_name: str,
        model_version: str,
        inputs: Mapping[str, npt.NDArray[Any]],
        output_names: Sequence[str] | None = None,
        request_id: str = "",
        parameters: Mapping[str, object] | None = None,
    ) -> dict[str, npt.NDArray[Any]]:
        model = self._lookup(model_name, model_version)
        if parameters:
            check_parameters(parameters, f"call of model '{model_name}'")
        tensors = []
        for name, array in inputs.items():
            # BYTES tensors are object arrays inside the server, whatever numpy string type came in.
            value = array.astype(np.object_) if array.dtype.kind in "SU" else array
            datatype = dtypes.from_numpy(value.dtype)
            tensors.append(InputTensor(name, datatype.name, tuple(value.shape), array=value))
        request = InferRequest(
            model_name=model_name,
            model_version=model_version,
            inputs=tensors,
            request_id=request_id,
            outputs=list(output_names) if output_names is not None else None,
            parameters=dict(parameters) if parameters else {},
        )
        response = await model.infer(request)
        return {tensor.name: tensor.array for tensor in response.outputs}

    def infer_blocking(
        self,
        model_name: str,
        model_version: str,
        inputs: Mapping[str, npt.NDArray[Any]],
        output_names: Sequence[str] | None = None,
        request_id: str = "",
        parameters: Mapping[str, object] | None = None,
    ) -> dict[str, npt.NDArray[Any]]:
        try:
            running = asyncio.get_running_loop()
        except RuntimeError:
            running = None
        if running is self._loop:
            # Waiting here would stop the loop that has to do the work.
            msg = f"call of model '{model_name}' from the event loop thread: use the async infer()"
            raise FailedPreconditionError(msg)
        future = asyncio.run_coroutine_threadsafe(
            self.infer(model_name, model_version, inputs, output_names, request_id, parameters), self._loop
        )
        return future.result()

    def infer_stream_blocking(
        self,
        model_name: str,
        model_version: str,
        inputs: Mapping[str, npt.NDArray[Any]],
        output_names: Sequence[str] | None = None,
        request_id: str = "",
        parameters: Mapping[str, object] | None = None,
    ) -> Iterator[Streamed]:
        """BLS ``exec(decoupled=True)``: :mod:`sonic.server.calls_decoupled`."""
        return stream_blocking(
            self._lookup, self._loop, model_name, model_version, inputs, output_names, request_id, parameters
        )
