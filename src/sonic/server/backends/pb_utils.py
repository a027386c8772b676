"""The ``triton_python_backend_utils`` API that Triton Python-backend models use, in-process.

Models import it as ``import triton_python_backend_utils as pb_utils`` (a top-level module of our
wheel that re-exports this one). Tensors wrap the server's numpy arrays without copying, where
Triton's stub copies them through shared memory into another process.

The config half (``ModelConfig`` for ``auto_complete_config`` and the config readers) is
:mod:`sonic.server.backends.pb_config`; the top-level module re-exports both.

Not offered: DLPack GPU tensors other than through numpy, response senders of non-decoupled models.
Custom metrics (``MetricFamily``) are :mod:`sonic.server.backends.pb_metrics`. Decoupled models get a response sender (:mod:`.pb_decoupled`).
BLS (``InferenceRequest(...).exec()``, or ``await ....async_exec()`` in ``async def execute``) calls
the server's other models from the model's own thread; ``decoupled=True`` iterates over the
responses of a decoupled model.
"""

from __future__ import annotations

import asyncio
import contextvars
import json
import struct
from collections.abc import Iterator, Mapping, Sequence
from typing import Any

import ml_dtypes
import numpy as np
import numpy.typing as npt

from sonic.protocol import dtypes
from sonic.server.backends.base import ModelCall, ModelCaller
from sonic.server.trace.requests import RequestTrace

# The server's model caller for BLS, bound by the Python backend in each instance's own thread.
current_caller: contextvars.ContextVar[ModelCaller | None] = contextvars.ContextVar(
    "sonic_pb_utils_caller", default=None
)

TRITON_STRING_TO_NUMPY: dict[str, Any] = {
    "TYPE_BOOL": bool,
    "TYPE_UINT8": np.uint8,
    "TYPE_UINT16": np.uint16,
    "TYPE_UINT32": np.uint32,
    "TYPE_UINT64": np.uint64,
    "TYPE_INT8": np.int8,
    "TYPE_INT16": np.int16,
    "TYPE_INT32": np.int32,
    "TYPE_INT64": np.int64,
    "TYPE_FP16": np.float16,
    "TYPE_FP32": np.float32,
    "TYPE_FP64": np.float64,
    "TYPE_STRING": np.object_,
    "TYPE_BF16": ml_dtypes.bfloat16,
}

# Triton's DataType enum numbers (model_config.proto), as Tensor.triton_dtype() returns them.
_ENUM_TO_NUMPY: dict[int, Any] = {
    1: np.bool_,
    2: np.uint8,
    3: np.uint16,
    4: np.uint32,
    5: np.uint64,
    6: np.int8,
    7: np.int16,
    8: np.int32,
    9: np.int64,
    10: np.float16,
    11: np.float32,
    12: np.float64,
    13: np.object_,
    14: ml_dtypes.bfloat16,
}

TRITONSERVER_REQUEST_FLAG_SEQUENCE_START = 1
TRITONSERVER_REQUEST_FLAG_SEQUENCE_END = 2
TRITONSERVER_RESPONSE_COMPLETE_FINAL = 1
TRITONSERVER_REQUEST_RELEASE_ALL = 1
TRITONSERVER_REQUEST_RELEASE_RESCHEDULE = 2


def triton_string_to_numpy(triton_type_string: str) -> Any:
    return TRITON_STRING_TO_NUMPY[triton_type_string]


def triton_to_numpy_type(data_type: int) -> Any:
    return _ENUM_TO_NUMPY.get(data_type)


def numpy_to_triton_type(data_type: Any) -> int | None:
    dtype = np.dtype(data_type)
    if dtype.kind in "OSU":
        return 13
    for value, numpy_type in _ENUM_TO_NUMPY.items():
        if value != 13 and np.dtype(numpy_type) == dtype:
            return value
    return None


def serialize_byte_tensor(input_tensor: npt.NDArray[Any]) -> npt.NDArray[np.uint8] | None:
    """Length-prefixed BYTES encoding of an object/bytes array, as a flat uint8 array."""
    if input_tensor.size == 0:
        return None
    parts = []
    for item in input_tensor.reshape(-1):
        data = dtypes.element_bytes(item)
        parts += [struct.pack("<I", len(data)), data]
    return np.frombuffer(b"".join(parts), dtype=np.uint8)


def deserialize_bytes_tensor(encoded_tensor: bytes) -> npt.NDArray[np.object_]:
    items = []
    offset = 0
    while offset < len(encoded_tensor):
        (length,) = struct.unpack_from("<I", encoded_tensor, offset)
        offset += 4
        items.append(bytes(encoded_tensor[offset : offset + length]))
        offset += length
    return np.array(items, dtype=np.object_)


class TritonModelException(Exception):
    def __init__(self, msg: str) -> None:
        super().__init__(msg)
        self._msg = msg

    def message(self) -> str:
        return self._msg


class TritonError:
    """An error a model puts in a response; the code picks the status the client sees."""

    UNKNOWN = 0
    INTERNAL = 1
    NOT_FOUND = 2
    INVALID_ARG = 3
    UNAVAILABLE = 4
    UNSUPPORTED = 5
    ALREADY_EXISTS = 6
    CANCELLED = 7

    def __init__(self, message: str, code: int = INTERNAL) -> None:
        self._message = message
        self._code = code

    def message(self) -> str:
        return self._message

    def code(self) -> int:
        return self._code

    def __str__(self) -> str:
        return self._message


class Tensor:
    """A named numpy array (never copied here)."""

    def __init__(self, name: str, numpy_array: npt.NDArray[Any], triton_dtype: int | None = None) -> None:
        if not isinstance(numpy_array, np.ndarray):
            raise TritonModelException(
                f"Tensor '{name}': expected a numpy array, got {type(numpy_array).__name__}"
            )
        if numpy_array.dtype.kind == "U":
            raise TritonModelException(
                f"NumPy dtype is not supported: Tensor '{name}' has numpy dtype {numpy_array.dtype}; use "
                "np.object_ for strings"
            )
        if triton_dtype is not None:
            wanted = np.dtype(_ENUM_TO_NUMPY[triton_dtype])
            if numpy_array.dtype != wanted:
                numpy_array = numpy_array.view(wanted)
            dtype_value: int | None = triton_dtype
        else:
            dtype_value = numpy_to_triton_type(numpy_array.dtype)
        if dtype_value is None:
            raise TritonModelException(f"Tensor '{name}': numpy dtype {numpy_array.dtype} has no Triton type")
        self._name = name
        self._array = numpy_array
        self._triton_dtype = dtype_value

    def name(self) -> str:
        return self._name

    def as_numpy(self) -> npt.NDArray[Any]:
        return self._array

    def triton_dtype(self) -> int:
        return self._triton_dtype

    def shape(self) -> list[int]:
        return list(self._array.shape)

    def is_cpu(self) -> bool:
        return True

    def to_dlpack(self) -> Any:
        return self._array.__dlpack__()

    @staticmethod
    def from_dlpack(name: str, capsule: Any) -> Tensor:
        """From any object with ``__dlpack__`` (a torch tensor, say); it must live in CPU memory."""
        return Tensor(name, np.from_dlpack(capsule))


class InferenceResponse:
    def __init__(
        self,
        output_tensors: Sequence[Tensor] = (),
        error: TritonError | None = None,
        parameters: Mapping[str, object] | str | None = None,
    ) -> None:
        if not isinstance(output_tensors, list | tuple):
            msg = '"output_tensors" must be a list.'
            raise TritonModelException(msg)
        self._outputs = list(output_tensors)
        self._error = error
        self._parameters = parameters if isinstance(parameters, str) else json.dumps(dict(parameters or {}))

    def output_tensors(self) -> list[Tensor]:
        return self._outputs

    def has_error(self) -> bool:
        return self._error is not None

    def error(self) -> TritonError | None:
        return self._error

    def parameters(self) -> str:
        return self._parameters


class InferenceTrace:
    """A request's trace as its model sees it (``request.trace()``). Given to a BLS call
    (``InferenceRequest(..., trace=request.trace())``), the call is traced as the request's child (its own
    id, ``parent_id``), as Triton's; without it, or for a request not sampled, the call is not traced."""

    def __init__(self, record: RequestTrace | None = None) -> None:
        self._record = record

    def child(self) -> RequestTrace | None:
        """The trace of a call made with this one (None: not traced)."""
        return self._record.child() if self._record is not None else None


class InferenceRequest:
    """A request given to ``execute``, or built by a model to call another model (BLS)."""

    def __init__(
        self,
        model_name: str = "",
        inputs: Sequence[Tensor] = (),
        requested_output_names: Sequence[str] = (),
        *,
        model_version: int = -1,
        request_id: str = "",
        correlation_id: int | str = 0,
        flags: int = 0,
        timeout: int = 0,
        parameters: Mapping[str, object] | str | None = None,
        trace: InferenceTrace | None = None,
        **_ignored: object,  # preferred_memory and other options meaningless in one process
    ) -> None:
        self.model_name = model_name
        self.model_version = model_version
        self._inputs = list(inputs)
        self._requested = list(requested_output_names)
        self._request_id = request_id
        self._correlation_id = correlation_id
        self._flags = flags
        self._timeout = timeout
        self._parameters = parameters if isinstance(parameters, str) else json.dumps(dict(parameters or {}))
        self._trace = trace
        self._response_sender: Any = None  # a decoupled model's request: set by the backend
        # Never read: holding it keeps the handle, whose finalizer ends a dropped request, alive with us.
        self._sender_handle: object = None

    def trace(self) -> InferenceTrace:
        """This request's trace: give it to a BLS call's request (``trace=``) to trace the call as its child."""
        return self._trace if self._trace is not None else InferenceTrace()

    def set_response_sender(self, sender: Any, handle: object) -> None:
        """The backend's: this request is to a decoupled model, answered through ``sender``."""
        self._response_sender = sender
        self._sender_handle = handle

    def inputs(self) -> list[Tensor]:
        return self._inputs

    def requested_output_names(self) -> list[str]:
        return self._requested

    def request_id(self) -> str:
        return self._request_id

    def correlation_id(self) -> int | str:
        return self._correlation_id

    def flags(self) -> int:
        return self._flags

    def timeout(self) -> int:
        return self._timeout

    def parameters(self) -> str:
        return self._parameters

    def is_cancelled(self) -> bool:
        """Whether the client went away (decoupled models; other requests are never seen cancelled)."""
        return self._response_sender is not None and bool(self._response_sender.is_cancelled())

    def _model_call(self) -> ModelCall:
        """The call, traced as a child of the trace it was given (``trace=request.trace()``)."""
        version = "" if self.model_version < 0 else str(self.model_version)
        inputs = {tensor.name(): tensor.as_numpy() for tensor in self._inputs}
        return ModelCall(
            self.model_name,
            version,
            inputs,
            self._requested or None,
            self._request_id,
            self._call_parameters(),
            self._trace.child() if self._trace is not None else None,
        )

    def _call_parameters(self) -> dict[str, object]:
        """The request parameters of a BLS call, as a client would send them: the custom parameters,
        then the correlation id, the sequence flags and the timeout (so a sequence-batched model called
        by BLS sees the sequence the model named)."""
        try:
            custom = json.loads(self._parameters) if self._parameters else {}
        except json.JSONDecodeError as exc:
            raise TritonModelException(
                f"BLS call of model '{self.model_name}': parameters {self._parameters!r} are not JSON ({exc})"
            ) from None
        if not isinstance(custom, dict):
            raise TritonModelException(
                f"BLS call of model '{self.model_name}': parameters must be a JSON object, got {self._parameters!r}"
            )
        parameters: dict[str, object] = dict(custom)
        if self._correlation_id not in (0, ""):
            parameters["sequence_id"] = self._correlation_id
        if self._flags & TRITONSERVER_REQUEST_FLAG_SEQUENCE_START:
            parameters["sequence_start"] = True
        if self._flags & TRITONSERVER_REQUEST_FLAG_SEQUENCE_END:
            parameters["sequence_end"] = True
        if self._timeout:
            parameters["timeout"] = self._timeout
        return parameters

    def get_response_sender(self) -> Any:
        if self._response_sender is None:
            msg = (
                "response senders are given to decoupled models only by sonic's Python backend "
                "(model_transaction_policy { decoupled: true }); return the responses from execute"
            )
            raise TritonModelException(msg)
        return self._response_sender

    def exec(self, decoupled: bool = False) -> Any:
        """Run this request on another model of the server and wait (BLS): its response, or with
        ``decoupled`` an iterator over its responses (the last one empty when it sent the final flag alone)."""
        caller = current_caller.get()
        if caller is None:
            raise TritonModelException(
                f"BLS call of model '{self.model_name}': no server to call (only a model's own thread can call)"
            )
        if decoupled:
            return _responses(caller.infer_stream_blocking(self._model_call()))
        try:
            outputs = caller.infer_blocking(self._model_call())
        except Exception as exc:  # noqa: BLE001  (BLS reports failures in the response, as Triton does)
            return InferenceResponse([], TritonError(str(exc)))
        return InferenceResponse([Tensor(name, array) for name, array in outputs.items()])

    async def async_exec(self, decoupled: bool = False) -> Any:
        """:meth:`exec` for ``async def execute`` models; several can run at once (``asyncio.gather``)."""
        # to_thread copies this thread's context, so the worker sees the model's caller.
        return await asyncio.to_thread(self.exec, decoupled)


def _responses(stream: Iterator[Any]) -> Iterator[InferenceResponse]:
    """BLS ``exec(decoupled=True)``: each response as Triton's iterator gives it (errors inside)."""
    try:
        for item in stream:
            if item.error is not None:
                yield InferenceResponse([], TritonError(item.error.message))
            else:
                yield InferenceResponse([Tensor(name, array) for name, array in (item.outputs or {}).items()])
    except Exception as exc:  # noqa: BLE001  (BLS reports failures in the response, as Triton does)
        yield InferenceResponse([], TritonError(str(exc)))


def get_input_tensor_by_name(inference_request: InferenceRequest, name: str) -> Tensor | None:
    return next((t for t in inference_request.inputs() if t.name() == name), None)


def get_output_tensor_by_name(inference_response: InferenceResponse, name: str) -> Tensor | None:
    return next((t for t in inference_response.output_tensors() if t.name() == name), None)
